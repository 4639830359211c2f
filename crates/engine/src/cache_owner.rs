//! Whose prompt cache a request may read. Every tier of the cache (a sequence's idle KV, the
//! host-memory cache, `--cache-disk` files) keeps its owner beside its tokens, and a request
//! restores only its own owner's entries: one caller's prompts never speed up, nor show in the
//! `cached_tokens` of, another's (a shared prefix cache lets one caller test guesses of
//! another's prompts: vLLM's CVE-2025-46570). The server names the owner from who is asking,
//! never from a field the client sends; `--cache-scope node` gives every request
//! [`CacheOwner::NODE`]. An owner is a digest: files and peers see no key id (though the
//! digest of a name, "owner" or "key <id>", is the same on every node).

use sha2::{Digest, Sha256};

/// A prompt cache's owner: 16 bytes of SHA-256 over what names the caller.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheOwner([u8; 16]);

impl CacheOwner {
    /// The one owner of a node whose cache every caller shares (`--cache-scope node`); also
    /// what requests carry that the node's own tools make (benchmarks, warm-ups).
    pub const NODE: Self = Self([0; 16]);

    fn digest(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        h.update(b"hearth prompt cache owner\0");
        for p in parts {
            // Length-prefixed: ("ab", "c") and ("a", "bc") differ.
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        let mut out = [0; 16];
        out.copy_from_slice(&h.finalize()[..16]);
        Self(out)
    }

    /// A caller of this node, as the server names it (`owner`, `key <id>`, `host <ip>`).
    pub fn caller(name: &str) -> Self {
        Self::digest(&[b"caller", name.as_bytes()])
    }

    /// A caller of another node: `origin` names that node as this one knows it (a LAN peer's
    /// device id, proven by its handshake; a hub's address), and `theirs` is the owner that
    /// node gave its caller, when it sent one. No origin can name another's callers, and no
    /// caller there can reach this node's own.
    pub fn remote(origin: &str, theirs: Option<CacheOwner>) -> Self {
        let theirs = theirs.map_or([0; 16], |o| o.0);
        Self::digest(&[b"remote", origin.as_bytes(), &theirs])
    }

    /// 32 lowercase hex digits, as it travels in a Hearth task.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// An owner written by [`Self::to_hex`]; `None` for anything else.
    pub fn from_hex(s: &str) -> Option<Self> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = [0; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(out))
    }

    /// The bytes a cache file keeps.
    pub(crate) fn bytes(&self) -> &[u8; 16] {
        &self.0
    }

    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Debug for CacheOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheOwner({})", &self.to_hex()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_differ_by_caller_and_origin_and_read_back_from_hex() {
        let (a, b) = (CacheOwner::caller("key a"), CacheOwner::caller("key b"));
        assert_ne!(a, b);
        assert_eq!(a, CacheOwner::caller("key a"));
        assert_ne!(a, CacheOwner::NODE);
        // The same caller's owner sent by two peers, or by none: three owners here.
        let (x, y) = (
            CacheOwner::remote("peer x", Some(a)),
            CacheOwner::remote("peer y", Some(a)),
        );
        assert_ne!(x, y);
        assert_ne!(x, CacheOwner::remote("peer x", None));
        assert_ne!(x, a);
        // Length-prefixed parts: no two namings run together.
        assert_ne!(CacheOwner::caller("ab"), CacheOwner::remote("a", None));
        assert_eq!(CacheOwner::from_hex(&a.to_hex()), Some(a));
        for bad in [
            "",
            "00",
            &"g".repeat(32),
            &"é".repeat(16),
            &format!("+f{}", "0".repeat(30)),
        ] {
            assert_eq!(CacheOwner::from_hex(bad), None, "{bad}");
        }
    }
}
