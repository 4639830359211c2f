//! Streaming UTF-8 decoding: text from byte pieces that may split a character between them
//! (a token's bytes in the engine, a worker's data frames at the hub). An incomplete character
//! at the end of a piece waits for the next one; bytes that can never be valid become U+FFFD;
//! nothing ever fails. The one decoder both sides use. Kept by hand (a dozen lines over
//! `str::from_utf8`'s error offsets) because it appends to the caller's `String` on the engine's
//! per-token path without allocating, which the `utf-8` crate's callback decoder does not.

/// The decoder; `Default` is empty.
#[derive(Debug, Clone, Default)]
pub struct Utf8Stream {
    /// An incomplete character at the end of the last piece (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Feed one piece; the text that is now complete is appended to `out`.
    pub fn push_into(&mut self, bytes: &[u8], out: &mut String) {
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
                            // An incomplete character at the end: wait for the rest.
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

    /// Feed one piece; the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len());
        self.push_into(bytes, &mut out);
        out
    }

    /// End of the stream: whatever is still pending can never complete (U+FFFD).
    pub fn finish_into(&mut self, out: &mut String) {
        if !self.pending.is_empty() {
            out.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
    }

    /// End of the stream, as a `String`.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        self.finish_into(&mut out);
        out
    }

    /// Whether part of a character is waiting for the next piece.
    pub fn holds_partial(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Forget a partial character (a generation that starts over).
    pub fn reset(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(pieces: &[&[u8]]) -> Vec<String> {
        let mut a = Utf8Stream::default();
        let mut outs: Vec<String> = pieces.iter().map(|p| a.push(p)).collect();
        outs.push(a.finish());
        outs
    }

    #[test]
    fn split_characters_wait_for_their_tail() {
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
    fn invalid_bytes_become_replacement_and_pending_is_flushed() {
        let outs = assemble(&[b"x\xffy", &"é".as_bytes()[..1]]);
        assert_eq!(outs, vec!["x\u{fffd}y", "", "\u{fffd}"]);
        let mut c = Utf8Stream::default();
        assert_eq!(c.push(&[0xe2, 0x82]), "");
        assert!(c.holds_partial());
        c.reset();
        assert!(!c.holds_partial());
        assert_eq!(c.finish(), "");
    }

    #[test]
    fn every_split_of_mixed_text_reassembles_exactly() {
        let text = "héllo wörld 🦀 ∑ a€😀é done";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut a = Utf8Stream::default();
            let mut out = String::new();
            a.push_into(&bytes[..cut], &mut out);
            a.push_into(&bytes[cut..], &mut out);
            a.finish_into(&mut out);
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn any_bytes_in_any_pieces_decode_like_lossy_decoding_of_the_whole() {
        let mut x: u32 = 0x1234_5678;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..200 {
            let len = (next() % 40) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut a = Utf8Stream::default();
            let mut out = String::new();
            let mut at = 0;
            while at < bytes.len() {
                let n = 1 + (next() % 5) as usize;
                let end = (at + n).min(bytes.len());
                a.push_into(&bytes[at..end], &mut out);
                at = end;
            }
            a.finish_into(&mut out);
            assert_eq!(out, String::from_utf8_lossy(&bytes), "{bytes:?}");
        }
    }
}
