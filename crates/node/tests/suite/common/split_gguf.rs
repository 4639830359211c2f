//! A real split model made from a GGUF file, laid out as llama.cpp's `gguf-split` lays one
//! out: the first shard has every key of the model, each other only the `split.*` keys
//! (`split.no` and `split.count` as u16, `split.tensors.count` as i32), and each shard holds a
//! run of the tensors with offsets in its own data section. Written from the GGUF format's
//! description, for tests that need a split model llama.cpp loads.

use std::path::{Path, PathBuf};

/// The bytes of a GGUF file, read from the front.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        s
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }

    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }

    /// Read past one value of GGUF type `ty`.
    fn pass_value(&mut self, ty: u32) {
        match ty {
            0 | 1 | 7 => drop(self.take(1)),
            2 | 3 => drop(self.take(2)),
            4..=6 => drop(self.take(4)),
            10..=12 => drop(self.take(8)),
            8 => drop(self.string()),
            9 => {
                let (item, n) = (self.u32(), self.u64());
                for _ in 0..n {
                    self.pass_value(item);
                }
            }
            other => panic!("GGUF value type {other} is not in the format"),
        }
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Split the GGUF at `src` into `count` shards `NAME-0000i-of-0000N.gguf` in `dir`; their paths.
pub fn split_gguf(src: &Path, dir: &Path, name: &str, count: u16) -> Vec<PathBuf> {
    const ALIGN: usize = 32;
    let bytes = std::fs::read(src).unwrap();
    let mut r = Reader { b: &bytes, at: 0 };
    assert_eq!(r.take(4), b"GGUF");
    let version = r.u32();
    assert!(version >= 2, "GGUF version {version}");
    let (n_tensors, n_kv) = (r.u64() as usize, r.u64());
    let kv_start = r.at;
    for _ in 0..n_kv {
        let key = r.string();
        let ty = r.u32();
        assert!(
            key != "general.alignment",
            "a model with its own alignment is not split here"
        );
        r.pass_value(ty);
    }
    let kvs = bytes[kv_start..r.at].to_vec();
    // Each tensor's description without its offset, and its offset.
    let mut tensors = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let start = r.at;
        let _name = r.string();
        let dims = r.u32() as usize;
        r.take(dims * 8 + 4);
        let described = bytes[start..r.at].to_vec();
        tensors.push((described, r.u64() as usize));
    }
    let data = r.at.next_multiple_of(ALIGN);
    tensors.sort_by_key(|t| t.1);
    // A tensor's bytes run to the next one's (its padding included), the last to the end.
    let ends: Vec<usize> = tensors
        .iter()
        .skip(1)
        .map(|t| t.1)
        .chain([bytes.len() - data])
        .collect();
    let per = n_tensors.div_ceil(count as usize);
    let mut paths = Vec::new();
    for (i, group) in (0..n_tensors).collect::<Vec<_>>().chunks(per).enumerate() {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(group.len() as u64).to_le_bytes());
        let keys = if i == 0 { n_kv + 3 } else { 3 };
        out.extend_from_slice(&keys.to_le_bytes());
        if i == 0 {
            out.extend_from_slice(&kvs);
        }
        for (key, ty, value) in [
            ("split.no", 2u32, (i as u16).to_le_bytes().to_vec()),
            ("split.count", 2, count.to_le_bytes().to_vec()),
            (
                "split.tensors.count",
                5,
                (n_tensors as i32).to_le_bytes().to_vec(),
            ),
        ] {
            put_string(&mut out, key);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&value);
        }
        let mut at = 0u64;
        for &t in group {
            out.extend_from_slice(&tensors[t].0);
            out.extend_from_slice(&at.to_le_bytes());
            at += (ends[t] - tensors[t].1) as u64;
        }
        out.resize(out.len().next_multiple_of(ALIGN), 0);
        for &t in group {
            out.extend_from_slice(&bytes[data + tensors[t].1..data + ends[t]]);
        }
        let path = dir.join(format!("{name}-{:05}-of-{count:05}.gguf", i + 1));
        std::fs::write(&path, out).unwrap();
        paths.push(path);
    }
    assert_eq!(
        paths.len(),
        count as usize,
        "{n_tensors} tensors in {count} shards"
    );
    paths
}
