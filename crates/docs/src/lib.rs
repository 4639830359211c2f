//! Documents a user attaches to a chat, read into text: plain text, Markdown, source code,
//! CSV and JSON as they are; HTML without its tags (`html`); a PDF's text layer page by page
//! (`pdf`); a DOCX's paragraphs, headings and tables (`docx`). Every reader has limits, and a file past them, damaged or
//! built to hurt (a zip bomb, nesting without end) is refused with a reason a user can read.
//! A document read is cut into passages along its structure (`passages`) for retrieval. The
//! node reads each one in a child process with ceilings (`child`).

mod child;
mod document;
mod docx;
mod error;
mod html;
mod passages;
mod pdf;
mod read;
mod text;

pub use child::{run_if_asked, Reader, READ_DOCUMENT};
pub use document::{Document, Kind, Limits, Page};
pub use error::ReadError;
pub use passages::{passages, Passage, PASSAGE_BYTES, PASSAGE_WORDS};
pub use read::read;
