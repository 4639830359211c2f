//! Reading a GGUF model file's header from disk. The parser is `hearth_protocol::gguf` (pure,
//! and fuzzed there); this opens the file and names it in errors.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

pub use hearth_protocol::gguf::{GgufError, GgufInfo};

/// The header of the GGUF file at `path`.
pub fn read(path: &Path) -> Result<GgufInfo, GgufError> {
    let file = File::open(path).map_err(|source| GgufError::Io {
        path: path.display().to_string(),
        source,
    })?;
    GgufInfo::parse(BufReader::new(file)).map_err(|e| match e {
        GgufError::Io { source, .. } => GgufError::Io {
            path: path.display().to_string(),
            source,
        },
        other => other,
    })
}
