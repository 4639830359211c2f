//! Why a document was not read, in words a user can act on.

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ReadError {
    #[error("the file is {bytes} bytes; at most {max} are read")]
    TooLarge { bytes: usize, max: usize },
    #[error("the PDF has {pages} pages; at most {max} are read")]
    TooManyPages { pages: usize, max: usize },
    #[error("the PDF's {pages} page(s) hold no text, only pictures (a scan?): run it through OCR first, or attach the pictures")]
    NoTextLayer { pages: usize },
    #[error("the document unpacks to more than {max} bytes (a zip bomb?)")]
    Bomb { max: usize },
    #[error("the document nests more than {max} elements deep")]
    TooDeep { max: usize },
    #[error("the document is damaged: {0}")]
    Damaged(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("the file is not text (it holds binary data): attach a PDF, a DOCX or a text file")]
    NotText,
    #[error("reading it took more than {secs} s, and was stopped (a file built to loop?)")]
    TimedOut { secs: u64 },
    #[error("the reader stopped on it ({0}): the file may be damaged or built to hurt")]
    Crashed(String),
    /// The node's own failure, not the file's: the reader could not be run.
    #[error("the document reader could not run: {0}")]
    Reader(String),
}
