//! A document cut into passages of a few hundred words along its structure, to be indexed and
//! retrieved when the whole does not fit beside the conversation: a passage never crosses a
//! page (its page is what a source cites) or a heading (a heading starts the next passage and
//! names it); paragraphs are joined up to the target size; a paragraph longer than that is cut
//! at line ends, then at sentence ends, then at words (and text without spaces, such as
//! Chinese or minified JSON, at [`PASSAGE_BYTES`]); a fenced code block stays whole when it
//! fits. Headings are a DOCX's and Markdown's (`# Title`); a `#` line of other text, a code
//! comment, is text.

use serde::Serialize;

use crate::document::{Document, Kind};

/// A passage: where it is (its page, the heading it falls under) and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Passage {
    pub page: Option<u32>,
    pub heading: Option<String>,
    pub text: String,
}

/// Words in a passage, about: a few hundred tokens of most tokenizers.
pub const PASSAGE_WORDS: usize = 200;

/// Bytes in a passage at the most, whatever its words.
pub const PASSAGE_BYTES: usize = 2000;

/// Characters of a heading kept: every passage under it carries it, so a heading of megabytes
/// would be copied into thousands of passages.
pub(crate) const HEADING_CHARS: usize = 200;

/// `doc`'s passages of about `words` words each, in order.
pub fn passages(doc: &Document, words: usize) -> Vec<Passage> {
    let words = words.max(20);
    let mut out = Vec::new();
    let mut heading: Option<String> = None;
    let headings = matches!(doc.kind, Kind::Markdown | Kind::Docx);
    for page in &doc.pages {
        let mut current = Builder::default();
        for block in blocks(&page.text, headings) {
            if let Some(title) = heading_of(&block).filter(|_| headings) {
                current.flush(&mut out, page.number, &heading);
                heading = Some(title.chars().take(HEADING_CHARS).collect());
                continue;
            }
            for piece in fit(&block, words) {
                if current.words + count(&piece) > words
                    || current.text.len() + piece.len() + 2 > PASSAGE_BYTES
                {
                    current.flush(&mut out, page.number, &heading);
                }
                current.push(&piece);
            }
        }
        current.flush(&mut out, page.number, &heading);
    }
    out
}

/// The passage being filled.
#[derive(Default)]
struct Builder {
    text: String,
    words: usize,
}

impl Builder {
    fn push(&mut self, piece: &str) {
        if !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
        self.text.push_str(piece);
        self.words += count(piece);
    }

    fn flush(&mut self, out: &mut Vec<Passage>, page: Option<u32>, heading: &Option<String>) {
        if !self.text.trim().is_empty() {
            out.push(Passage {
                page,
                heading: heading.clone(),
                text: std::mem::take(&mut self.text),
            });
        }
        self.text.clear();
        self.words = 0;
    }
}

fn count(text: &str) -> usize {
    text.split_whitespace().count()
}

/// A Markdown heading line's title (`# Title`, up to six `#`).
fn heading_of(block: &str) -> Option<&str> {
    if block.contains('\n') {
        return None;
    }
    let level = block.bytes().take_while(|b| *b == b'#').count();
    (1..=6)
        .contains(&level)
        .then(|| block[level..].strip_prefix(' '))
        .flatten()
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The text's blocks: paragraphs apart by blank lines, each heading line alone, each fenced
/// code block whole.
fn blocks(text: &str, headings: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut block = String::new();
    let mut fenced = false;
    let end = |block: &mut String, out: &mut Vec<String>| {
        if !block.trim().is_empty() {
            out.push(block.trim_end().to_owned());
        }
        block.clear();
    };
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            if !fenced {
                end(&mut block, &mut out);
            }
            block.push_str(line);
            block.push('\n');
            if fenced {
                end(&mut block, &mut out);
            }
            fenced = !fenced;
            continue;
        }
        if fenced {
            block.push_str(line);
            block.push('\n');
            continue;
        }
        if line.trim().is_empty() {
            end(&mut block, &mut out);
        } else if headings && heading_of(line.trim()).is_some() {
            end(&mut block, &mut out);
            out.push(line.trim().to_owned());
        } else {
            block.push_str(line);
            block.push('\n');
        }
    }
    end(&mut block, &mut out);
    out
}

/// A block as pieces of at most `words` words: whole when it fits, else cut at line ends,
/// sentence ends, then words.
fn fit(block: &str, words: usize) -> Vec<String> {
    if count(block) <= words && block.len() <= PASSAGE_BYTES {
        return vec![block.to_owned()];
    }
    for cut in [cut_lines as fn(&str) -> Vec<&str>, cut_sentences] {
        let parts = cut(block);
        if parts.len() > 1 {
            return join(parts.into_iter().flat_map(|p| fit(p, words)), words);
        }
    }
    block
        .split_whitespace()
        .collect::<Vec<_>>()
        .chunks(words)
        .flat_map(|c| bytes_apart(&c.join(" ")))
        .collect()
}

/// `text` in pieces of at most [`PASSAGE_BYTES`], whole characters each.
fn bytes_apart(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > PASSAGE_BYTES {
        let mut at = PASSAGE_BYTES;
        while !rest.is_char_boundary(at) {
            at -= 1;
        }
        out.push(rest[..at].to_owned());
        rest = &rest[at..];
    }
    out.push(rest.to_owned());
    out
}

fn cut_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

fn cut_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?') && text[i + 1..].starts_with(char::is_whitespace) {
            out.push(text[start..=i].trim());
            start = i + 1;
        }
    }
    if start < text.len() && !text[start..].trim().is_empty() {
        out.push(text[start..].trim());
    }
    out
}

/// Pieces joined back (a space apart) up to `words` words each.
fn join(pieces: impl Iterator<Item = String>, words: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut n = 0;
    for p in pieces {
        let w = count(&p);
        match out.last_mut() {
            Some(last) if n + w <= words && last.len() + p.len() < PASSAGE_BYTES => {
                last.push(' ');
                last.push_str(&p);
                n += w;
            }
            _ => {
                out.push(p);
                n = w;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{Kind, Page};

    fn doc(pages: &[(Option<u32>, &str)]) -> Document {
        Document {
            kind: Kind::Markdown,
            pages: pages
                .iter()
                .map(|(n, t)| Page {
                    number: *n,
                    text: (*t).to_owned(),
                })
                .collect(),
        }
    }

    #[test]
    fn headings_name_and_start_passages_and_pages_are_never_crossed() {
        let d = doc(&[
            (
                Some(1),
                "# Bread\nKnead it.\n\nLet it rise.\n## Soup\nSimmer.",
            ),
            (Some(2), "More soup."),
        ]);
        let p = passages(&d, 50);
        let got: Vec<(Option<u32>, Option<&str>, &str)> = p
            .iter()
            .map(|p| (p.page, p.heading.as_deref(), p.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(1), Some("Bread"), "Knead it.\n\nLet it rise."),
                (Some(1), Some("Soup"), "Simmer."),
                (Some(2), Some("Soup"), "More soup."),
            ]
        );
    }

    #[test]
    fn long_paragraphs_are_cut_at_sentences_then_words_and_code_stays_whole() {
        let sentence = "one two three four five six seven eight nine ten.";
        let long = [sentence; 10].join(" ");
        let p = passages(&doc(&[(None, &long)]), 30);
        assert!(p.iter().all(|p| count(&p.text) <= 30), "{p:?}");
        assert!(
            p.iter().all(|p| p.text.ends_with('.')),
            "cut at sentence ends: {p:?}"
        );
        assert_eq!(p.iter().map(|p| count(&p.text)).sum::<usize>(), 100);
        let words = ["word"; 70].join(" ");
        let p = passages(&doc(&[(None, &words)]), 30);
        assert_eq!(
            p.iter().map(|p| count(&p.text)).collect::<Vec<_>>(),
            [30, 30, 10]
        );
        let code = "Before.\n\n```rust\nfn main() {}\n\nlet x = 1;\n```\n\nAfter.";
        let p = passages(&doc(&[(None, code)]), 50);
        assert!(
            p[0].text
                .contains("```rust\nfn main() {}\n\nlet x = 1;\n```"),
            "{p:?}"
        );
    }

    #[test]
    fn code_comments_are_no_headings_and_text_without_spaces_is_cut_by_bytes() {
        let mut code = doc(&[(None, "# setup\nx = 1\n# run\nrun(x)")]);
        code.kind = Kind::Text;
        let p = passages(&code, 50);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].heading, None);
        let cjk = "文".repeat(3000);
        let p = passages(&doc(&[(None, &cjk)]), 200);
        assert!(
            p.iter().all(|p| p.text.len() <= PASSAGE_BYTES),
            "{:?}",
            p.iter().map(|p| p.text.len()).collect::<Vec<_>>()
        );
        assert_eq!(
            p.iter().map(|p| p.text.chars().count()).sum::<usize>(),
            3000
        );
    }

    #[test]
    fn a_huge_heading_is_cut_before_every_passage_under_it_carries_it() {
        let text = format!("# {}\n\none\n\ntwo", "h".repeat(5 << 20));
        let p = passages(&doc(&[(None, &text)]), 20);
        assert!(
            p.iter()
                .all(|p| p.heading.as_ref().unwrap().chars().count() == HEADING_CHARS),
            "{:?}",
            p.iter()
                .map(|p| p.heading.as_ref().map(String::len))
                .collect::<Vec<_>>()
        );
    }
}
