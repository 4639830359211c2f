//! Room on disk before a model is written: a download or a transfer that cannot fit fails at
//! once, saying how much it needs and how much is free, instead of part way with a full disk
//! (which would leave other programs short too).

use std::path::Path;

use super::DownloadError;

/// Kept free beside a model, for everything else on the disk.
const RESERVE: u64 = 100 << 20;

/// Whether `need` more bytes fit in the filesystem of `dir` (with a small reserve).
pub(super) fn ensure_room(dir: &Path, need: u64) -> Result<(), DownloadError> {
    let Some(free) = free_bytes(dir) else {
        // Unknown here: the write itself says when the disk is full.
        return Ok(());
    };
    if need.saturating_add(RESERVE) > free {
        tracing::warn!(dir = %dir.display(), need, free, "not enough disk space for a model");
        return Err(DownloadError::NoSpace {
            need_mib: need.div_ceil(1 << 20),
            free_mib: free >> 20,
        });
    }
    Ok(())
}

/// Bytes an unprivileged user may still write in `dir`'s filesystem.
#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_larger_than_the_disk_is_refused_with_the_figures() {
        let dir = tempfile::tempdir().unwrap();
        ensure_room(dir.path(), 0).unwrap();
        let e = ensure_room(dir.path(), 1 << 60).unwrap_err().to_string();
        assert!(e.contains("disk space") && e.contains("MiB free"), "{e}");
        assert!(free_bytes(dir.path()).is_some_and(|f| f > 0));
    }
}
