//! What a document becomes once read (its kind and its pages' text), and the limits a read
//! keeps to.

use serde::{Deserialize, Serialize};

/// What a document was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Text,
    /// Text whose `#` lines are headings.
    Markdown,
    Pdf,
    Docx,
}

impl Kind {
    /// Its name, as it is serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Markdown => "markdown",
            Self::Pdf => "pdf",
            Self::Docx => "docx",
        }
    }
}

/// One page of a PDF, or the whole of any other document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// The page's number (from 1) in a PDF; `None` for a document without pages.
    pub number: Option<u32>,
    pub text: String,
}

/// A document read into text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    pub kind: Kind,
    pub pages: Vec<Page>,
}

impl Document {
    /// Every page's text, pages apart by a blank line.
    pub fn text(&self) -> String {
        self.pages
            .iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// How much one document may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes of the file.
    pub file_bytes: usize,
    /// Pages of a PDF.
    pub pages: usize,
    /// Bytes of text read out of it (a DOCX's XML unpacked, a PDF's text).
    pub text_bytes: usize,
    /// Elements nested in a DOCX's XML.
    pub depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            file_bytes: 50 << 20,
            pages: 2000,
            text_bytes: 20 << 20,
            depth: 256,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinds_name_is_how_it_is_serialized() {
        for kind in [Kind::Text, Kind::Markdown, Kind::Pdf, Kind::Docx] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
