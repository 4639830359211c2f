//! Plain text, Markdown, source code, CSV and JSON: the file as it is, when it is text (UTF-8,
//! or UTF-16 with its byte-order mark), without its byte-order mark.

use crate::document::{Document, Kind, Limits, Page};
use crate::error::ReadError;

pub(crate) fn read(_name: &str, bytes: &[u8], limits: &Limits) -> Result<Document, ReadError> {
    let text = if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        utf8(rest)?
    } else if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        utf16(rest, u16::from_le_bytes)?
    } else if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        utf16(rest, u16::from_be_bytes)?
    } else {
        utf8(bytes)?
    };
    if text.len() > limits.text_bytes {
        return Err(ReadError::TooLarge {
            bytes: text.len(),
            max: limits.text_bytes,
        });
    }
    Ok(Document {
        kind: Kind::Text,
        pages: vec![Page { number: None, text }],
    })
}

fn utf8(bytes: &[u8]) -> Result<String, ReadError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ReadError::NotText)?;
    if text.contains('\0') {
        return Err(ReadError::NotText);
    }
    Ok(text.to_owned())
}

fn utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> Result<String, ReadError> {
    if !bytes.len().is_multiple_of(2) {
        return Err(ReadError::NotText);
    }
    let units = bytes.chunks_exact(2).map(|c| unit([c[0], c[1]]));
    let text = char::decode_utf16(units)
        .collect::<Result<String, _>>()
        .map_err(|_| ReadError::NotText)?;
    if text.contains('\0') {
        return Err(ReadError::NotText);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_in_utf8_and_utf16_reads_and_binary_does_not() {
        let l = Limits::default();
        assert_eq!(read("a.md", b"# Hi\n", &l).unwrap().text(), "# Hi\n");
        assert_eq!(read("a.txt", b"\xEF\xBB\xBFhej", &l).unwrap().text(), "hej");
        assert_eq!(read("a.txt", b"\xFF\xFEh\0i\0", &l).unwrap().text(), "hi");
        assert_eq!(read("a.bin", b"\x00\x01\x02", &l), Err(ReadError::NotText));
        assert_eq!(read("a.bin", b"\xC3\x28", &l), Err(ReadError::NotText));
        assert_eq!(read("a.bin", b"\xFF\xFE\0\0", &l), Err(ReadError::NotText));
    }
}
