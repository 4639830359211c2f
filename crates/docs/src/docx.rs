//! A DOCX's text: `word/document.xml` out of the zip (the `zip` crate), read as XML events
//! (`quick-xml`) into paragraphs, Markdown-style headings (`# Title`, from the paragraph's
//! heading style) and table rows (cells apart by ` | `). Written here rather than with a DOCX
//! crate because those read the whole package into memory as they find it: here the part is
//! unpacked only up to the text limit (a zip bomb stops there, whatever its header claims)
//! and the XML's nesting is bounded.

use std::io::{BufReader, Cursor, Read};

use quick_xml::events::Event;
use quick_xml::Reader;

use crate::document::{Document, Kind, Limits, Page};
use crate::error::ReadError;

const BODY: &str = "word/document.xml";

/// Whether a zip's bytes hold a DOCX's main part.
pub(crate) fn is_docx(bytes: &[u8]) -> bool {
    zip::ZipArchive::new(Cursor::new(bytes)).is_ok_and(|z| z.index_for_name(BODY).is_some())
}

pub(crate) fn read(bytes: &[u8], limits: &Limits) -> Result<Document, ReadError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| ReadError::Damaged(format!("not a zip archive a DOCX is: {e}")))?;
    let part = archive
        .by_name(BODY)
        .map_err(|_| ReadError::Damaged(format!("it has no {BODY}")))?;
    // At most the limit (and a byte more, to tell it was passed) is ever unpacked.
    let max = (limits.text_bytes as u64).saturating_mul(4);
    if part.size() > max {
        return Err(ReadError::Bomb { max: max as usize });
    }
    let capped = Capped {
        inner: part.take(max + 1),
        read: 0,
        max,
    };
    let text = paragraphs(BufReader::new(capped), limits)?;
    Ok(Document {
        kind: Kind::Docx,
        pages: vec![Page { number: None, text }],
    })
}

/// A reader that fails once more than `max` bytes came through it.
struct Capped<R> {
    inner: R,
    read: u64,
    max: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.max {
            return Err(std::io::Error::other(BOMB));
        }
        Ok(n)
    }
}

const BOMB: &str = "unpacked past the limit";

/// What the reader is inside of, for the text it meets.
#[derive(Default)]
struct State {
    out: String,
    paragraph: String,
    heading: Option<usize>,
    in_text: bool,
    cells: Vec<String>,
    in_cell: bool,
}

impl State {
    fn end_paragraph(&mut self) {
        let p = std::mem::take(&mut self.paragraph);
        let heading = self.heading.take();
        if self.in_cell {
            if !p.trim().is_empty() {
                let cell = self.cells.last_mut();
                if let Some(c) = cell {
                    if !c.is_empty() {
                        c.push(' ');
                    }
                    c.push_str(p.trim());
                }
            }
            return;
        }
        if p.trim().is_empty() {
            return;
        }
        if !self.out.is_empty() {
            self.out.push('\n');
        }
        if let Some(level) = heading {
            self.out.push_str(&"#".repeat(level.clamp(1, 6)));
            self.out.push(' ');
        }
        self.out.push_str(p.trim_end());
    }

    fn end_row(&mut self) {
        let row: Vec<String> = std::mem::take(&mut self.cells);
        if row.iter().all(|c| c.is_empty()) {
            return;
        }
        if !self.out.is_empty() {
            self.out.push('\n');
        }
        self.out.push_str(&row.join(" | "));
    }
}

/// The heading level a paragraph style names: `Title` 1, `Heading1`..`Heading9` 1..9 (a
/// title's heading is one level above the document's first).
fn heading_level(style: &str) -> Option<usize> {
    if style == "Title" {
        return Some(1);
    }
    style
        .strip_prefix("Heading")
        .and_then(|n| n.parse::<u8>().ok())
        .map(|n| usize::from(n) + 1)
}

fn paragraphs<R: std::io::BufRead>(source: R, limits: &Limits) -> Result<String, ReadError> {
    let mut reader = Reader::from_reader(source);
    let mut buf = Vec::new();
    let mut depth = 0usize;
    let mut s = State::default();
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|e| match e {
            quick_xml::Error::Io(io) if io.to_string().contains(BOMB) => ReadError::Bomb {
                max: limits.text_bytes * 4,
            },
            e => ReadError::Damaged(format!("its text is not well-formed XML: {e}")),
        })?;
        match event {
            Event::Start(e) => {
                depth += 1;
                if depth > limits.depth {
                    return Err(ReadError::TooDeep { max: limits.depth });
                }
                match e.local_name().into_inner() {
                    "t" => s.in_text = true,
                    "tc" => {
                        s.in_cell = true;
                        s.cells.push(String::new());
                    }
                    "pStyle" => style(&e, &mut s),
                    _ => {}
                }
            }
            Event::Empty(e) => match e.local_name().into_inner() {
                "tab" => s.paragraph.push('\t'),
                "br" | "cr" => s.paragraph.push('\n'),
                "pStyle" => style(&e, &mut s),
                _ => {}
            },
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                match e.local_name().into_inner() {
                    "t" => s.in_text = false,
                    "p" => s.end_paragraph(),
                    "tc" => s.in_cell = false,
                    "tr" => s.end_row(),
                    _ => {}
                }
            }
            Event::Text(t) if s.in_text => s.paragraph.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if s.in_text => {
                if let Some(c) = r.resolve_char_ref().ok().flatten() {
                    s.paragraph.push(c);
                } else if let Some(v) = quick_xml::escape::resolve_xml_entity(&r) {
                    s.paragraph.push_str(v);
                }
            }
            Event::Eof => break,
            _ => {}
        }
        if s.out.len() + s.paragraph.len() > limits.text_bytes {
            return Err(ReadError::TooLarge {
                bytes: s.out.len() + s.paragraph.len(),
                max: limits.text_bytes,
            });
        }
        buf.clear();
    }
    Ok(s.out)
}

/// A `w:pStyle` element's `w:val`: the paragraph's heading level, if it is a heading.
fn style(e: &quick_xml::events::BytesStart<'_>, s: &mut State) {
    for a in e.attributes().flatten() {
        if a.key.local_name().into_inner() == "val" {
            s.heading = heading_level(&a.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_that_inflates_past_the_limit_whatever_its_header_says_is_a_bomb() {
        let limits = Limits {
            text_bytes: 1000,
            ..Limits::default()
        };
        // An endless run of spaces inside a text element: only the cap ends it.
        let xml = std::io::Read::chain(
            &b"<w:document><w:body><w:p><w:r><w:t>"[..],
            std::io::repeat(b' '),
        );
        let capped = Capped {
            inner: xml.take(4001),
            read: 0,
            max: 4000,
        };
        assert_eq!(
            paragraphs(BufReader::new(capped), &limits),
            Err(ReadError::Bomb { max: 4000 })
        );
    }

    #[test]
    fn heading_styles_are_levels_and_a_huge_number_is_none() {
        assert_eq!(heading_level("Title"), Some(1));
        assert_eq!(heading_level("Heading2"), Some(3));
        assert_eq!(heading_level("Heading18446744073709551615"), None);
        assert_eq!(heading_level("Normal"), None);
    }
}
