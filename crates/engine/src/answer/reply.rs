//! The generic tool format's plain answer, `{"response": "..."}`, streamed as the model writes
//! it: the JSON string decoded as far as it is whole (an escape, or a surrogate pair, cut in two
//! waits for its rest), so a reply reads as it grows instead of arriving at its end.

/// Whether held text opens a generic reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    /// Not enough text to say.
    NotYet,
    /// It does: the reply's string starts at this byte.
    At(usize),
    /// It does not (a call, or other JSON).
    No,
}

/// `{`, `"response"`, `:` and the string's opening quote, with any whitespace between.
pub(super) fn opening(held: &str) -> Opening {
    let mut at = 0;
    for step in ["{", "\"response\"", ":", "\""] {
        let rest = &held[at..];
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if trimmed.len() < step.len() {
            return if step.starts_with(trimmed) {
                Opening::NotYet
            } else {
                Opening::No
            };
        }
        if !trimmed.starts_with(step) {
            return Opening::No;
        }
        at += step.len();
    }
    Opening::At(at)
}

/// A reply's string, decoded as it arrives.
#[derive(Debug)]
pub(super) struct Reply {
    /// The next byte of the held text to decode.
    at: usize,
    /// Everything decoded so far.
    pub(super) emitted: String,
    /// The string ended (or could not be read on): nothing more comes from it.
    closed: bool,
}

impl Reply {
    pub(super) fn new(at: usize) -> Self {
        Self {
            at,
            emitted: String::new(),
            closed: false,
        }
    }

    /// The part of the string in `held` (the whole text so far) that is newly whole.
    pub(super) fn take(&mut self, held: &str) -> String {
        let mut out = String::new();
        if self.closed {
            return out;
        }
        let b = &held[self.at..];
        let bytes = b.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match bytes[i] {
                b'"' => {
                    self.closed = true;
                    i += 1;
                    break;
                }
                b'\\' => {
                    let Some(len) = escape_len(&b[i..]) else {
                        break;
                    };
                    match serde_json::from_str::<String>(&format!("\"{}\"", &b[i..i + len])) {
                        Ok(s) => out.push_str(&s),
                        Err(_) => {
                            // Not JSON: the end reads the whole text instead.
                            self.closed = true;
                            break;
                        }
                    }
                    i += len;
                }
                _ => {
                    let Some(c) = b[i..].chars().next() else {
                        break;
                    };
                    out.push(c);
                    i += c.len_utf8();
                }
            }
        }
        self.at += i;
        self.emitted.push_str(&out);
        out
    }
}

/// The length of the escape `s` starts with, once it is whole (`None` while it is not): two
/// bytes, six for `\uXXXX`, twelve for a surrogate pair.
fn escape_len(s: &str) -> Option<usize> {
    let kind = *s.as_bytes().get(1)?;
    if kind != b'u' {
        return Some(2);
    }
    let unit = u16::from_str_radix(s.get(2..6)?, 16).unwrap_or(0);
    if (0xD800..0xDC00).contains(&unit) {
        // A high surrogate: its low half must come too (anything else fails to read later).
        s.get(6..12)?;
        return Some(12);
    }
    Some(6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opening_is_told_from_part_of_it_and_from_other_json() {
        assert_eq!(opening("  {\"res"), Opening::NotYet);
        assert_eq!(opening("{ \"response\" :  \"Hi"), Opening::At(17));
        assert_eq!(opening("{\"tool_call\": {"), Opening::No);
        assert_eq!(opening("{\"response\": 3"), Opening::No);
    }

    #[test]
    fn the_string_is_decoded_however_it_is_cut() {
        let text = r#"{"response": "Tab\there, \"quoted\", caf\u00e9, \ud83d\ude00 and €."}"#;
        let want = "Tab\there, \"quoted\", café, 😀 and €.";
        let Opening::At(at) = opening(text) else {
            panic!("no opening");
        };
        for cut in (at..text.len()).filter(|c| text.is_char_boundary(*c)) {
            let mut r = Reply::new(at);
            let mut got = r.take(&text[..cut]);
            got.push_str(&r.take(text));
            assert_eq!(got, want, "cut at {cut}");
            assert_eq!(r.emitted, want);
        }
    }
}
