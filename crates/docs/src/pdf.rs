//! A PDF's text layer, page by page, with `pdf-extract` (maintained, pure Rust, on `lopdf`:
//! fonts, encodings and ToUnicode maps, the parts a text layer needs). Its pages are counted
//! with `lopdf` first, so a PDF over the page limit is refused before its text is read. A PDF
//! whose pages hold no text is a scan, and says so. `pdf-extract` panics on some damaged
//! files: a panic is caught and told as damage.

use crate::document::{Document, Kind, Limits, Page};
use crate::error::ReadError;

pub(crate) fn read(bytes: &[u8], limits: &Limits) -> Result<Document, ReadError> {
    let pages =
        std::panic::catch_unwind(|| lopdf::Document::load_mem(bytes).map(|d| d.get_pages().len()))
            .map_err(|_| ReadError::Damaged("its structure could not be read".into()))?
            .map_err(|e| ReadError::Damaged(e.to_string()))?;
    if pages > limits.pages {
        return Err(ReadError::TooManyPages {
            pages,
            max: limits.pages,
        });
    }
    let texts = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem_by_pages(bytes))
        .map_err(|_| ReadError::Damaged("its pages could not be read".into()))?
        .map_err(|e| ReadError::Damaged(e.to_string()))?;
    // pdf-extract stops at the first page it cannot read and returns those before it.
    if texts.len() < pages {
        return Err(ReadError::Damaged(format!(
            "page {} of {pages} could not be read",
            texts.len() + 1
        )));
    }
    let total: usize = texts.iter().map(String::len).sum();
    if total > limits.text_bytes {
        return Err(ReadError::TooLarge {
            bytes: total,
            max: limits.text_bytes,
        });
    }
    if texts.iter().all(|t| t.trim().is_empty()) {
        return Err(ReadError::NoTextLayer { pages: texts.len() });
    }
    Ok(Document {
        kind: Kind::Pdf,
        pages: texts
            .into_iter()
            .enumerate()
            .map(|(i, text)| Page {
                number: u32::try_from(i + 1).ok(),
                text: tidy(&text),
            })
            .collect(),
    })
}

/// A page's text without the blank lines and trailing spaces layout leaves.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines().map(str::trim_end) {
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        out.push_str(line);
        blank = 0;
    }
    out
}
