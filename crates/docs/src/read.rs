//! Which reader a file goes to: by what its bytes start with, else by its name (an HTML page is
//! read as text, then its tags taken out).

use crate::document::{Document, Limits};
use crate::error::ReadError;
use crate::{docx, pdf, text};

/// Read `bytes`, the file `name`: its kind from what it starts with (`%PDF-`, a zip holding
/// `word/document.xml`), else from its name's extension; text otherwise.
pub fn read(name: &str, bytes: &[u8], limits: &Limits) -> Result<Document, ReadError> {
    if bytes.len() > limits.file_bytes {
        return Err(ReadError::TooLarge {
            bytes: bytes.len(),
            max: limits.file_bytes,
        });
    }
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    if bytes.starts_with(b"%PDF-") || ext == "pdf" {
        return pdf::read(bytes, limits);
    }
    if bytes.starts_with(b"PK\x03\x04") {
        if ext == "docx" || docx::is_docx(bytes) {
            return docx::read(bytes, limits);
        }
        return Err(ReadError::Unsupported(format!(
            "{name} is a zip archive, not a document Hearth reads"
        )));
    }
    if ext == "docx" {
        return Err(ReadError::Damaged(format!(
            "{name} is not a zip archive, as a DOCX is"
        )));
    }
    let mut doc = text::read(name, bytes, limits)?;
    if matches!(ext.as_str(), "md" | "markdown") {
        doc.kind = crate::document::Kind::Markdown;
    }
    if matches!(ext.as_str(), "html" | "htm" | "xhtml") {
        // Its headings become Markdown's.
        doc.kind = crate::document::Kind::Markdown;
        for page in &mut doc.pages {
            page.text = crate::html::text(&page.text);
        }
    }
    Ok(doc)
}
