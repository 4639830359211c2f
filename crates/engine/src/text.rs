//! Turning token bytes into text a client may see: an incremental UTF-8 assembler (token
//! pieces can split a character) and a stop-string matcher that holds back any tail that could
//! still become a stop string, so a stop string never reaches the client. Pure and allocation-light.

/// Assembles UTF-8 text from byte pieces that may split characters between them.
#[derive(Debug, Default)]
pub(crate) struct Utf8Assembler {
    pending: Vec<u8>,
}

impl Utf8Assembler {
    /// Feed the bytes of one token; returns the text that is now complete. Invalid bytes
    /// become U+FFFD; an incomplete character at the end waits for the next piece.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut String) {
        let owned;
        let mut input: &[u8] = if self.pending.is_empty() {
            bytes
        } else {
            self.pending.extend_from_slice(bytes);
            owned = std::mem::take(&mut self.pending);
            &owned
        };
        loop {
            match std::str::from_utf8(input) {
                Ok(s) => {
                    out.push_str(s);
                    return;
                }
                Err(e) => {
                    let (valid, rest) = input.split_at(e.valid_up_to());
                    // `valid_up_to` guarantees this prefix is valid UTF-8.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        None => {
                            self.pending.extend_from_slice(rest);
                            return;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            input = &rest[n..];
                        }
                    }
                }
            }
        }
    }

    /// End of stream: whatever is still pending can never complete.
    pub(crate) fn finish(&mut self, out: &mut String) {
        if !self.pending.is_empty() {
            out.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
    }

    pub(crate) fn reset(&mut self) {
        self.pending.clear();
    }
}

/// What the matcher decided for a piece of text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StopScan {
    /// No stop string matched; this much text may be released now.
    Release(String),
    /// A stop string matched; this is the text before it. Generation must end.
    Stopped(String),
}

/// Holds back text that could be the start of a stop string.
#[derive(Debug, Default)]
pub(crate) struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    pub(crate) fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            held: String::new(),
        }
    }

    /// Replace the stop strings (a `modify`), re-examining the text held so far.
    pub(crate) fn set_stops(&mut self, stops: Vec<String>) -> StopScan {
        self.stops = stops;
        let held = std::mem::take(&mut self.held);
        self.push(held)
    }

    /// Take the next piece of text; without stop strings it passes through without a copy.
    pub(crate) fn push(&mut self, text: String) -> StopScan {
        if self.stops.is_empty() {
            if self.held.is_empty() {
                return StopScan::Release(text);
            }
            let mut out = std::mem::take(&mut self.held);
            out.push_str(&text);
            return StopScan::Release(out);
        }
        self.held.push_str(&text);
        // Earliest match wins; among matches at the same place, the longest.
        let mut best: Option<usize> = None;
        for stop in &self.stops {
            if let Some(at) = self.held.find(stop.as_str()) {
                best = Some(best.map_or(at, |b| b.min(at)));
            }
        }
        if let Some(at) = best {
            let mut before = std::mem::take(&mut self.held);
            before.truncate(at);
            return StopScan::Stopped(before);
        }
        let keep_from = self.hold_point();
        let released: String = self.held[..keep_from].to_owned();
        self.held.replace_range(..keep_from, "");
        StopScan::Release(released)
    }

    /// The earliest char boundary from which the held text is a prefix of some stop string.
    fn hold_point(&self) -> usize {
        let held = self.held.as_str();
        for (i, _) in held.char_indices() {
            let tail = &held[i..];
            if self.stops.iter().any(|s| s.starts_with(tail)) {
                return i;
            }
        }
        held.len()
    }

    /// End of generation without a stop match: release everything held.
    pub(crate) fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    pub(crate) fn reset(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(pieces: &[&[u8]]) -> Vec<String> {
        let mut a = Utf8Assembler::default();
        let mut outs = Vec::new();
        for p in pieces {
            let mut s = String::new();
            a.push(p, &mut s);
            outs.push(s);
        }
        let mut s = String::new();
        a.finish(&mut s);
        outs.push(s);
        outs
    }

    #[test]
    fn utf8_split_characters_wait_for_their_tail() {
        let euro = "€".as_bytes(); // 3 bytes
        let crab = "🦀".as_bytes(); // 4 bytes
        let outs = assemble(&[
            b"a",
            &euro[..1],
            &euro[1..2],
            &euro[2..],
            &crab[..3],
            &[crab[3], b'b'],
        ]);
        assert_eq!(outs, vec!["a", "", "", "€", "", "🦀b", ""]);
    }

    #[test]
    fn utf8_invalid_bytes_become_replacement_and_pending_is_flushed() {
        let outs = assemble(&[b"x\xffy", &"é".as_bytes()[..1]]);
        assert_eq!(outs[0], "x\u{fffd}y");
        assert_eq!(outs[1], "");
        assert_eq!(outs[2], "\u{fffd}");
    }

    #[test]
    fn utf8_every_split_of_mixed_text_reassembles_exactly() {
        let text = "héllo wörld 🦀 ∑ done";
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let mut a = Utf8Assembler::default();
            let mut out = String::new();
            a.push(&bytes[..cut], &mut out);
            a.push(&bytes[cut..], &mut out);
            a.finish(&mut out);
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn stop_string_never_leaks_and_prefix_is_held() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("hello E".into()), StopScan::Release("hello ".into()));
        assert_eq!(m.push("N".into()), StopScan::Release(String::new()));
        assert_eq!(m.push("Dgame".into()), StopScan::Stopped("".into()));
    }

    #[test]
    fn false_start_is_released_once_it_cannot_match() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("EN".into()), StopScan::Release(String::new()));
        assert_eq!(m.push("x".into()), StopScan::Release("ENx".into()));
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn stop_inside_a_piece_cuts_just_before_it() {
        let mut m = StopMatcher::new(vec!["\n\n".into(), "THE END".into()]);
        assert_eq!(
            m.push("once upon".into()),
            StopScan::Release("once upon".into())
        );
        assert_eq!(
            m.push(" a time\n\nmore".into()),
            StopScan::Stopped(" a time".into())
        );
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let mut m = StopMatcher::new(vec!["bc".into(), "ab".into()]);
        assert_eq!(m.push("xabc".into()), StopScan::Stopped("x".into()));
    }

    #[test]
    fn held_text_is_flushed_at_the_end() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("go ST".into()), StopScan::Release("go ".into()));
        assert_eq!(m.flush(), "ST");
    }

    #[test]
    fn multibyte_stop_strings_hold_on_char_boundaries() {
        let mut m = StopMatcher::new(vec!["€€".into()]);
        assert_eq!(m.push("a€".into()), StopScan::Release("a".into()));
        assert_eq!(m.push("b".into()), StopScan::Release("€b".into()));
        assert_eq!(m.push("€€".into()), StopScan::Stopped(String::new()));
    }

    #[test]
    fn no_stops_releases_immediately() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("abc".into()), StopScan::Release("abc".into()));
    }

    #[test]
    fn changing_stops_rescans_held_text() {
        let mut m = StopMatcher::new(vec!["xyz".into()]);
        assert_eq!(m.push("ab xy".into()), StopScan::Release("ab ".into()));
        assert_eq!(
            m.set_stops(vec!["q".into()]),
            StopScan::Release("xy".into())
        );
        let mut m = StopMatcher::new(vec!["xyz".into()]);
        m.push("ab xy".into());
        assert_eq!(m.set_stops(vec!["y".into()]), StopScan::Stopped("x".into()));
    }
}
