//! One node per data dir: an exclusive lock on `<data-dir>/hearth.lock`, held for the node's
//! life (the OS releases it when the process ends, however it ends). Two nodes on one data
//! dir would share one identity and each would mark the other's streaming answers interrupted
//! at start. The lock file also says which process holds it and on which port, so the second
//! node can name them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const LOCK_FILE: &str = "hearth.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another Hearth node ({holder}) is using the data dir {dir}: stop it first, or give this node another --data-dir")]
    Held {
        dir: PathBuf,
        holder: String,
        /// The port the holder listens on, once it says (a command can reach it there).
        port: Option<u16>,
    },
    #[error("cannot lock the data dir {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// The held lock; dropping it releases the data dir.
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
}

impl DataDirLock {
    /// Take the data dir, creating it if needed.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let io = |e| LockError::Io(dir.to_path_buf(), e);
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    holder: describe(&text),
                    port: field(&text, "port ").and_then(|p| p.parse().ok()),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let mut lock = Self { file };
        lock.record(None).map_err(io)?;
        Ok(lock)
    }

    /// Write who holds the lock (this process, and its port once it listens).
    pub fn record(&mut self, port: Option<u16>) -> std::io::Result<()> {
        let text = match port {
            Some(p) => format!("pid {}\nport {p}\n", std::process::id()),
            None => format!("pid {}\n", std::process::id()),
        };
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(text.as_bytes())?;
        self.file.flush()
    }
}

/// A number the lock file's text gives after `key`.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
}

/// "pid 1234, port 8420" from the lock file's text.
fn describe(text: &str) -> String {
    match (field(text, "pid "), field(text, "port ")) {
        (Some(pid), Some(port)) => format!("pid {pid}, port {port}"),
        (Some(pid), None) => format!("pid {pid}, still starting"),
        _ => "a process that did not say which".to_owned(),
    }
}

/// The OS data directory + `hearth` (`~/.local/share/hearth` on Linux).
pub fn default_data_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("hearth")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_a_released_dir_can_be_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = DataDirLock::acquire(dir.path()).unwrap();
        first.record(Some(8420)).unwrap();
        let e = DataDirLock::acquire(dir.path()).unwrap_err();
        assert!(
            matches!(
                e,
                LockError::Held {
                    port: Some(8420),
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("pid {}, port 8420", std::process::id())),
            "{text}"
        );
        drop(first);
        let again = DataDirLock::acquire(dir.path());
        assert!(again.is_ok(), "released with the first node");
    }

    #[test]
    fn holders_are_described_from_what_they_wrote() {
        assert_eq!(describe("pid 7\nport 9\n"), "pid 7, port 9");
        assert_eq!(describe("pid 7\n"), "pid 7, still starting");
        assert_eq!(describe(""), "a process that did not say which");
        assert_eq!(
            describe("pid x; rm -rf /\n"),
            "a process that did not say which"
        );
    }
}
