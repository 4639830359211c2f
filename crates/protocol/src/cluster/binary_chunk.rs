//! Hearth's binary model chunk: what a `modelTransferChunk` carries, without the base64 and the
//! JSON, sent only between Hearth nodes (inside their encrypted transport) when the request
//! asked for this layout's version ([`super::ModelTransferRequest::binary_chunks`]). A TealeNet
//! peer never sees one.
//!
//! Layout (big-endian): `0x00` (no JSON text starts with it), the version (1), flags (bit 0:
//! the file's last chunk), the offset (8 bytes), the transfer id's length (1 byte) and text,
//! the file name's length (2 bytes) and UTF-8, then the chunk's bytes to the end. The message
//! is built and read in place: the file's bytes are read straight into it, and read out of it.

use super::ids::PeerUuid;
use super::ClusterError;

/// The first byte of a binary chunk.
pub const BINARY_CHUNK_MARK: u8 = 0;
/// The layout's version, which a request names to ask for it.
pub const BINARY_CHUNK_VERSION: u32 = 1;
const VERSION: u8 = 1;
/// Flag bit: the last chunk of the file.
const LAST: u8 = 1;
/// The longest file name a chunk carries (as the JSON chunk's names, a plain file name).
const MAX_NAME: usize = 1024;

/// One binary chunk: its header read, its bytes in place in the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HearthChunk {
    pub transfer_id: PeerUuid,
    pub file_name: String,
    pub offset: u64,
    pub is_last_chunk: bool,
    /// The whole message; the chunk's bytes start at `data_at`.
    wire: Vec<u8>,
    data_at: usize,
}

fn invalid(message: impl Into<String>) -> ClusterError {
    ClusterError::Invalid {
        name: "hearthChunk",
        message: message.into(),
    }
}

impl HearthChunk {
    /// A chunk whose bytes `fill` appends to the message (a file read straight into it, with
    /// room made for `len` bytes).
    pub fn build<E>(
        transfer_id: PeerUuid,
        file_name: String,
        offset: u64,
        is_last_chunk: bool,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Self, E> {
        let id = transfer_id.as_str().as_bytes();
        let name = file_name.as_bytes();
        // Both come from this node (a parsed id, a plain file name): within their fields.
        let id_len = u8::try_from(id.len()).unwrap_or(u8::MAX);
        let name_len = u16::try_from(name.len().min(MAX_NAME)).unwrap_or(0);
        let mut wire = Vec::with_capacity(14 + id.len() + name.len() + len);
        wire.extend_from_slice(&[BINARY_CHUNK_MARK, VERSION, u8::from(is_last_chunk) * LAST]);
        wire.extend_from_slice(&offset.to_be_bytes());
        wire.push(id_len);
        wire.extend_from_slice(&id[..usize::from(id_len)]);
        wire.extend_from_slice(&name_len.to_be_bytes());
        wire.extend_from_slice(&name[..usize::from(name_len)]);
        let data_at = wire.len();
        fill(&mut wire)?;
        Ok(Self {
            transfer_id,
            file_name,
            offset,
            is_last_chunk,
            wire,
            data_at,
        })
    }

    /// Read a message that starts with [`BINARY_CHUNK_MARK`]; its bytes stay where they are.
    pub fn decode(wire: Vec<u8>) -> Result<Self, ClusterError> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8], ClusterError> {
            let end = at
                .checked_add(n)
                .filter(|&e| e <= wire.len())
                .ok_or_else(|| invalid("a binary chunk cut short"))?;
            let got = &wire[at..end];
            at = end;
            Ok(got)
        };
        let head = take(3)?;
        if head[0] != BINARY_CHUNK_MARK {
            return Err(invalid("not a binary chunk"));
        }
        if head[1] != VERSION {
            return Err(invalid(format!("a binary chunk of version {}", head[1])));
        }
        let is_last_chunk = head[2] & LAST != 0;
        let offset = u64::from_be_bytes(take(8)?.try_into().unwrap_or_default());
        let id_len = usize::from(take(1)?[0]);
        let id = std::str::from_utf8(take(id_len)?)
            .ok()
            .and_then(PeerUuid::parse)
            .ok_or_else(|| invalid("a binary chunk whose transfer id is not a UUID"))?;
        let name_len = usize::from(u16::from_be_bytes(take(2)?.try_into().unwrap_or_default()));
        if name_len > MAX_NAME {
            return Err(invalid("a binary chunk's file name is too long"));
        }
        let file_name = std::str::from_utf8(take(name_len)?)
            .map_err(|_| invalid("a binary chunk's file name is not UTF-8"))?
            .to_owned();
        let data_at = at;
        Ok(Self {
            transfer_id: id,
            file_name,
            offset,
            is_last_chunk,
            wire,
            data_at,
        })
    }

    /// The chunk's bytes.
    pub fn data(&self) -> &[u8] {
        &self.wire[self.data_at..]
    }

    /// The whole message, as it goes out.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// The whole message and where the chunk's bytes start in it.
    pub fn into_wire(self) -> (Vec<u8>, usize) {
        (self.wire, self.data_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk(name: &str, offset: u64, last: bool, data: &[u8]) -> HearthChunk {
        HearthChunk::build(
            PeerUuid::from_bytes([9; 16]),
            name.into(),
            offset,
            last,
            data.len(),
            |b| {
                b.extend_from_slice(data);
                Ok::<(), ()>(())
            },
        )
        .unwrap()
    }

    proptest! {
        #[test]
        fn a_chunk_reads_back_as_it_was_built(
            name in ".{0,60}",
            offset in any::<u64>(),
            last in any::<bool>(),
            data in proptest::collection::vec(any::<u8>(), 0..2000),
        ) {
            let c = chunk(&name, offset, last, &data);
            let back = HearthChunk::decode(c.wire().to_vec()).unwrap();
            prop_assert_eq!(back.data(), &data[..]);
            prop_assert_eq!(&back, &c);
            prop_assert_eq!(back.transfer_id.as_str(), c.transfer_id.as_str());
        }

        #[test]
        fn any_bytes_are_read_or_refused_without_a_panic(
            wire in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = HearthChunk::decode(wire);
        }
    }

    #[test]
    fn a_damaged_or_foreign_chunk_is_refused() {
        let good = chunk("m.gguf", 7, true, b"abc").wire().to_vec();
        // Cut anywhere inside the header.
        for n in 0..good.len() - 3 {
            assert!(HearthChunk::decode(good[..n].to_vec()).is_err(), "{n}");
        }
        let mut other_version = good.clone();
        other_version[1] = 2;
        assert!(HearthChunk::decode(other_version).is_err());
        let mut json = good.clone();
        json[0] = b'{';
        assert!(HearthChunk::decode(json).is_err());
        let mut bad_id = good.clone();
        bad_id[12] = b'!';
        assert!(HearthChunk::decode(bad_id).is_err());
        let mut long_name = good[..12 + 36].to_vec();
        long_name.extend_from_slice(&2000u16.to_be_bytes());
        long_name.extend(std::iter::repeat_n(b'a', 2000));
        assert!(HearthChunk::decode(long_name).is_err());
        let mut not_utf8 = chunk("ab", 0, false, b"x").wire().to_vec();
        not_utf8[12 + 36 + 2] = 0xff;
        assert!(HearthChunk::decode(not_utf8).is_err());
    }
}
