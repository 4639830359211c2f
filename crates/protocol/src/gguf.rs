//! The GGUF header parser: the metadata of a model file (architecture, quantization, context
//! length, parameter count, chat template) from its first bytes, without loading the model.
//! Files are untrusted: every length is checked against a limit before anything is allocated
//! from it. Pure (it reads from any `Read`); `hearth_engine::gguf::read` opens the file.

use std::io::Read;

const MAGIC: u32 = 0x4655_4747; // "GGUF" little-endian
/// Metadata strings longer than this are refused (chat templates are a few KiB; 1 MiB is ample).
const MAX_STRING_BYTES: u64 = 1 << 20;
/// More metadata entries than this is not a model file we want to read.
const MAX_KV_COUNT: u64 = 1 << 16;
/// Nested array depth bound: GGUF arrays are not nested in practice.
const MAX_ARRAY_DEPTH: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a GGUF file (bad magic)")]
    BadMagic,
    #[error("unsupported GGUF version {0}")]
    Version(u32),
    #[error("malformed GGUF header: {0}")]
    Malformed(&'static str),
}

/// What the header says about a model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufInfo {
    pub architecture: String,
    pub name: Option<String>,
    pub size_label: Option<String>,
    /// `general.file_type` as llama.cpp names it (`Q4_1`, `Q4_K_M`, ...).
    pub quantization: Option<String>,
    pub context_length: Option<u64>,
    pub block_count: Option<u64>,
    /// The width of the model's hidden state (`{arch}.embedding_length`).
    pub embedding_length: Option<u64>,
    /// Attention heads, and the key/value heads (fewer under grouped-query attention).
    pub head_count: Option<u64>,
    pub head_count_kv: Option<u64>,
    /// The width of one key and one value head (`{arch}.attention.key_length`,
    /// `value_length`), where it is not `embedding_length / head_count`.
    pub key_length: Option<u64>,
    pub value_length: Option<u64>,
    pub chat_template: Option<String>,
    pub tensor_count: u64,
    /// A projector's (`mmproj`): whether it has an image encoder and an audio encoder
    /// (`clip.has_vision_encoder`, `clip.has_audio_encoder`); none where it does not say.
    pub has_vision_encoder: Option<bool>,
    pub has_audio_encoder: Option<bool>,
}

impl GgufInfo {
    pub fn parse(mut r: impl Read) -> Result<Self, GgufError> {
        let mut rd = Reader { r: &mut r };
        if rd.u32()? != MAGIC {
            return Err(GgufError::BadMagic);
        }
        let version = rd.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        let tensor_count = rd.u64()?;
        let kv_count = rd.u64()?;
        if kv_count > MAX_KV_COUNT {
            return Err(GgufError::Malformed("too many metadata entries"));
        }
        let mut info = GgufInfo {
            tensor_count,
            ..Self::default()
        };
        let mut arch_keys: Vec<(String, u64)> = Vec::new();
        for _ in 0..kv_count {
            let key = rd.string()?;
            let ty = rd.u32()?;
            match (key.as_str(), ty) {
                ("general.architecture", 8) => info.architecture = rd.string()?,
                ("general.name", 8) => info.name = Some(rd.string()?),
                ("general.size_label", 8) => info.size_label = Some(rd.string()?),
                ("tokenizer.chat_template", 8) => info.chat_template = Some(rd.string()?),
                ("clip.has_vision_encoder", 7) => {
                    info.has_vision_encoder = Some(rd.bytes::<1>()?[0] != 0)
                }
                ("clip.has_audio_encoder", 7) => {
                    info.has_audio_encoder = Some(rd.bytes::<1>()?[0] != 0)
                }
                ("general.file_type", _) => {
                    let v = rd.scalar_u64(ty)?;
                    info.quantization = v.map(|v| file_type_name(v).to_owned());
                }
                (k, _)
                    if [
                        ".context_length",
                        ".block_count",
                        ".embedding_length",
                        ".attention.head_count",
                        ".attention.head_count_kv",
                        ".attention.key_length",
                        ".attention.value_length",
                    ]
                    .iter()
                    .any(|s| k.ends_with(s)) =>
                {
                    if let Some(v) = rd.scalar_u64(ty)? {
                        arch_keys.push((key, v));
                    }
                }
                _ => rd.skip_value(ty, 0)?,
            }
        }
        let prefix = format!("{}.", info.architecture);
        for (k, v) in arch_keys {
            if let Some(rest) = k.strip_prefix(&prefix) {
                match rest {
                    "context_length" => info.context_length = Some(v),
                    "block_count" => info.block_count = Some(v),
                    "embedding_length" => info.embedding_length = Some(v),
                    "attention.head_count" => info.head_count = Some(v),
                    "attention.head_count_kv" => info.head_count_kv = Some(v),
                    "attention.key_length" => info.key_length = Some(v),
                    "attention.value_length" => info.value_length = Some(v),
                    _ => {}
                }
            }
        }
        if info.architecture.is_empty() {
            return Err(GgufError::Malformed("no general.architecture"));
        }
        Ok(info)
    }
}

struct Reader<'a, R: Read> {
    r: &'a mut R,
}

impl<R: Read> Reader<'_, R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(io)?;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> Result<String, GgufError> {
        let len = self.u64()?;
        if len > MAX_STRING_BYTES {
            return Err(GgufError::Malformed("string longer than 1 MiB"));
        }
        let mut buf = vec![0u8; len as usize];
        self.r.read_exact(&mut buf).map_err(io)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        let copied =
            std::io::copy(&mut self.r.by_ref().take(n), &mut std::io::sink()).map_err(io)?;
        if copied != n {
            return Err(GgufError::Malformed("truncated"));
        }
        Ok(())
    }
    /// Integer scalars of any width; `None` for other types (skipped).
    fn scalar_u64(&mut self, ty: u32) -> Result<Option<u64>, GgufError> {
        Ok(Some(match ty {
            0 => u64::from(self.bytes::<1>()?[0]),
            1 => self.bytes::<1>()?[0] as i8 as u64,
            2 => u64::from(u16::from_le_bytes(self.bytes()?)),
            3 => i16::from_le_bytes(self.bytes()?) as u64,
            4 => u64::from(self.u32()?),
            5 => i32::from_le_bytes(self.bytes()?) as u64,
            10 | 11 => self.u64()?,
            other => {
                self.skip_value(other, 0)?;
                return Ok(None);
            }
        }))
    }
    fn skip_value(&mut self, ty: u32, depth: u32) -> Result<(), GgufError> {
        match ty {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            10..=12 => self.skip(8),
            8 => {
                let len = self.u64()?;
                self.skip(len)
            }
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::Malformed("arrays nested too deep"));
                }
                let elem = self.u32()?;
                let n = self.u64()?;
                match elem {
                    0 | 1 | 7 => self.skip(n),
                    2 | 3 => self.skip(
                        n.checked_mul(2)
                            .ok_or(GgufError::Malformed("array too long"))?,
                    ),
                    4..=6 => self.skip(
                        n.checked_mul(4)
                            .ok_or(GgufError::Malformed("array too long"))?,
                    ),
                    10..=12 => self.skip(
                        n.checked_mul(8)
                            .ok_or(GgufError::Malformed("array too long"))?,
                    ),
                    _ => {
                        for _ in 0..n {
                            self.skip_value(elem, depth + 1)?;
                        }
                        Ok(())
                    }
                }
            }
            _ => Err(GgufError::Malformed("unknown value type")),
        }
    }
}

fn io(e: std::io::Error) -> GgufError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        GgufError::Malformed("truncated")
    } else {
        GgufError::Io {
            path: String::new(),
            source: e,
        }
    }
}

/// The quantisation a GGUF file's name says (`…-Q4_K_M.gguf`, `….IQ2_XXS.gguf`), as llama.cpp
/// names its file types; the longest name that stands alone in it wins (`Q4_K_M`, not `Q4_K`).
pub fn quant_in_name(file: &str) -> Option<&'static str> {
    let upper = file.to_ascii_uppercase();
    let stands_alone = |at: usize, len: usize| {
        let before = upper[..at].chars().next_back();
        let after = upper[at + len..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    (0..64)
        .map(file_type_name)
        .filter(|n| *n != "unknown")
        .filter(|n| {
            upper
                .match_indices(n)
                .any(|(at, m)| stands_alone(at, m.len()))
        })
        .max_by_key(|n| n.len())
}

/// llama.cpp's `llama_ftype` names.
fn file_type_name(v: u64) -> &'static str {
    match v {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4",
        _ => "unknown",
    }
}

#[cfg(test)]
mod quant_tests {
    use super::quant_in_name;

    #[test]
    fn quantisations_are_read_from_file_names() {
        for (file, q) in [
            ("SmolLM2-135M-Instruct-Q4_K_M.gguf", Some("Q4_K_M")),
            ("smollm2-135m-instruct.q8_0.gguf", Some("Q8_0")),
            ("Llama-3.2-1B-Instruct-IQ2_XXS.gguf", Some("IQ2_XXS")),
            ("model-BF16-00001-of-00002.gguf", Some("BF16")),
            ("model-f16.gguf", Some("F16")),
            ("SmolLM2-135M-Instruct.Q4_1.gguf", Some("Q4_1")),
            ("plain.gguf", None),
            ("Q4_K_Mx.gguf", None),
        ] {
            assert_eq!(quant_in_name(file), q, "{file}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv_str(out: &mut Vec<u8>, k: &str, v: &str) {
        out.extend((k.len() as u64).to_le_bytes());
        out.extend(k.as_bytes());
        out.extend(8u32.to_le_bytes());
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.as_bytes());
    }

    fn kv_u32(out: &mut Vec<u8>, k: &str, v: u32) {
        out.extend((k.len() as u64).to_le_bytes());
        out.extend(k.as_bytes());
        out.extend(4u32.to_le_bytes());
        out.extend(v.to_le_bytes());
    }

    fn header(n_kv: u64) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend(MAGIC.to_le_bytes());
        h.extend(3u32.to_le_bytes());
        h.extend(0u64.to_le_bytes());
        h.extend(n_kv.to_le_bytes());
        h
    }

    fn sample() -> Vec<u8> {
        let mut h = header(9);
        kv_str(&mut h, "general.architecture", "llama");
        kv_u32(&mut h, "general.file_type", 3);
        kv_u32(&mut h, "llama.context_length", 8192);
        kv_u32(&mut h, "llama.embedding_length", 576);
        kv_u32(&mut h, "llama.attention.head_count", 9);
        kv_u32(&mut h, "llama.attention.head_count_kv", 3);
        kv_u32(&mut h, "llama.attention.key_length", 64);
        // an array of strings, skipped
        let k = "tokenizer.ggml.tokens";
        h.extend((k.len() as u64).to_le_bytes());
        h.extend(k.as_bytes());
        h.extend(9u32.to_le_bytes());
        h.extend(8u32.to_le_bytes());
        h.extend(2u64.to_le_bytes());
        for t in ["<s>", "a"] {
            h.extend((t.len() as u64).to_le_bytes());
            h.extend(t.as_bytes());
        }
        kv_str(&mut h, "tokenizer.chat_template", "{{ x }}");
        h
    }

    #[test]
    fn reads_the_fields_we_use() {
        let info = GgufInfo::parse(&sample()[..]).unwrap();
        assert_eq!(info.architecture, "llama");
        assert_eq!(info.quantization.as_deref(), Some("Q4_1"));
        assert_eq!(info.context_length, Some(8192));
        assert_eq!(info.embedding_length, Some(576));
        assert_eq!((info.key_length, info.value_length), (Some(64), None));
        assert_eq!((info.head_count, info.head_count_kv), (Some(9), Some(3)));
        assert_eq!(info.chat_template.as_deref(), Some("{{ x }}"));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let full = sample();
        for cut in 0..full.len() {
            assert!(GgufInfo::parse(&full[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn huge_lengths_are_refused_before_allocating() {
        let mut h = header(1);
        h.extend(u64::MAX.to_le_bytes());
        assert!(matches!(
            GgufInfo::parse(&h[..]),
            Err(GgufError::Malformed(_))
        ));
        let mut h = header(u64::MAX);
        h.extend([0u8; 8]);
        assert!(matches!(
            GgufInfo::parse(&h[..]),
            Err(GgufError::Malformed(_))
        ));
        assert!(matches!(
            GgufInfo::parse(&b"GGML0000"[..]),
            Err(GgufError::BadMagic)
        ));
    }
}
