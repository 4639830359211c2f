//! The binary data frames a worker sends: a 4-byte big-endian task id, then UTF-8 text
//! ([`encode_data`]), or the id alone to end the task ([`encode_end`]); how a hub splits them
//! ([`decode_binary`]), and how a worker cuts text into frames on character boundaries.

use super::{FrameError, TaskId, ID_LEN};

/// A data frame: the task id and text (possibly empty only for the end frame).
pub fn encode_data(id: TaskId, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(ID_LEN + text.len());
    out.extend_from_slice(&id.0.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// The frame that ends a task: the id alone.
pub fn encode_end(id: TaskId) -> Vec<u8> {
    id.0.to_be_bytes().to_vec()
}

/// A binary frame from a worker, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFrame<'a> {
    pub id: TaskId,
    /// UTF-8 text; empty for the end frame.
    pub payload: &'a [u8],
}

impl DataFrame<'_> {
    /// Whether this frame ends its task.
    pub fn is_end(&self) -> bool {
        self.payload.is_empty()
    }
}

/// Split a binary frame into its id and payload.
pub fn decode_binary(frame: &[u8]) -> Result<DataFrame<'_>, FrameError> {
    if frame.len() < ID_LEN {
        return Err(FrameError::ShortFrame(frame.len()));
    }
    let (id, payload) = frame.split_at(ID_LEN);
    let id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
    Ok(DataFrame {
        id: TaskId(id),
        payload,
    })
}

/// Pieces of `text` of at most `max` bytes each (at least 4, the longest character), never
/// splitting a character. An empty text yields nothing.
pub fn split_utf8(text: &str, max: usize) -> Utf8Pieces<'_> {
    Utf8Pieces {
        rest: text,
        max: max.max(4),
    }
}

/// Iterator returned by [`split_utf8`].
#[derive(Debug, Clone)]
pub struct Utf8Pieces<'a> {
    rest: &'a str,
    max: usize,
}

impl<'a> Iterator for Utf8Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let mut end = self.rest.len().min(self.max);
        while !self.rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_frames_round_trip() {
        let f = encode_data(TaskId(0x0102_0304), "héllo");
        assert_eq!(&f[..4], &[1, 2, 3, 4]);
        let d = decode_binary(&f).unwrap();
        assert_eq!(d.id, TaskId(0x0102_0304));
        assert_eq!(d.payload, "héllo".as_bytes());
        assert!(!d.is_end());
        let end = encode_end(TaskId(u32::MAX));
        assert_eq!(end, vec![0xff; 4]);
        let d = decode_binary(&end).unwrap();
        assert!(d.is_end());
        assert_eq!(d.id, TaskId(u32::MAX));
        assert_eq!(decode_binary(&[1, 2]), Err(FrameError::ShortFrame(2)));
        assert_eq!(decode_binary(&[]), Err(FrameError::ShortFrame(0)));
    }

    #[test]
    fn split_never_cuts_a_character() {
        let text = "aé€😀b€é😀😀x";
        for max in 0..=text.len() + 1 {
            let pieces: Vec<&str> = split_utf8(text, max).collect();
            assert_eq!(pieces.concat(), text, "max {max}");
            for p in &pieces {
                assert!(!p.is_empty());
                assert!(p.len() <= max.max(4), "max {max}: {p:?}");
                // Each piece is a &str, so each is valid UTF-8 on its own; check the frame too.
                let frame = encode_data(TaskId(1), p);
                assert!(std::str::from_utf8(decode_binary(&frame).unwrap().payload).is_ok());
            }
        }
        assert_eq!(split_utf8("", 10).count(), 0);
    }
}
