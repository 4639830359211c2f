//! Small secrets the node keeps for others (an MCP server's tokens in its env or headers): in
//! the OS keyring where one answers, else in 0600 files under `<data-dir>/secrets/`, by the
//! identity's rules ([`KeyStorage`]). Each data dir has its own names in the keyring.

use std::path::{Path, PathBuf};

use crate::identity::{
    keyring_delete, keyring_get, keyring_set, node_keyring_user, write_private, KeyStorage,
    KeyringAnswer,
};

/// The keyring service secrets are kept under (the node's key is under `hearth`).
pub const SECRETS_SERVICE: &str = "hearth-secrets";

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot write the secret file {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("cannot read the secret file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("the OS keyring did not answer: {0}")]
    Unavailable(String),
}

/// Where a secret was put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretPlace {
    Keyring,
    File,
}

/// The secrets of one data dir.
#[derive(Debug, Clone)]
pub struct Secrets {
    dir: PathBuf,
    /// The keyring user's prefix: this data dir's (`node_keyring_user`).
    scope: String,
    storage: KeyStorage,
}

impl Secrets {
    pub fn new(data_dir: &Path, storage: KeyStorage) -> Self {
        Self {
            dir: data_dir.join("secrets"),
            scope: node_keyring_user(data_dir),
            storage,
        }
    }

    fn user(&self, name: &str) -> String {
        format!("{}:{name}", self.scope)
    }

    /// A file per name, named by the name's SHA-256 (a name may hold any character, and be
    /// longer than a file name may).
    fn file(&self, name: &str) -> PathBuf {
        use sha2::Digest as _;
        self.dir
            .join(crate::clients::hex(&sha2::Sha256::digest(name.as_bytes())))
    }

    /// Keep `value` under `name` (blocking: the keyring is asked on a thread of its own, for
    /// [`crate::identity::KEYRING_WAIT`] at most). The other place's copy goes.
    pub fn put(&self, name: &str, value: &str) -> Result<SecretPlace, SecretError> {
        if self.storage == KeyStorage::Auto {
            match keyring_set(SECRETS_SERVICE, &self.user(name), value) {
                Ok(()) => {
                    let _ = std::fs::remove_file(self.file(name));
                    return Ok(SecretPlace::Keyring);
                }
                Err(why) => {
                    tracing::debug!(%why, "the OS keyring did not keep a secret; using a 0600 file")
                }
            }
        }
        let file = self.file(name);
        private_dir(&self.dir).map_err(|e| SecretError::Write(file.clone(), e))?;
        write_private(&file, value).map_err(|e| SecretError::Write(file.clone(), e))?;
        Ok(SecretPlace::File)
    }

    /// The value kept under `name`, wherever it is; an error when the keyring, which may hold
    /// it, does not answer (so that nobody takes "none" for the value).
    pub fn get(&self, name: &str) -> Result<Option<String>, SecretError> {
        let file = self.file(name);
        match std::fs::read_to_string(&file) {
            Ok(v) => return Ok(Some(v)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SecretError::Read(file, e)),
        }
        if self.storage == KeyStorage::Auto {
            return match keyring_get(SECRETS_SERVICE, &self.user(name)) {
                KeyringAnswer::Found(v) => Ok(Some(v)),
                KeyringAnswer::Empty => Ok(None),
                KeyringAnswer::Unavailable(why) if keyring_absent(&why) => Ok(None),
                KeyringAnswer::Unavailable(why) => Err(SecretError::Unavailable(why)),
            };
        }
        Ok(None)
    }

    /// Forget `name` in both places.
    pub fn delete(&self, name: &str) {
        let _ = std::fs::remove_file(self.file(name));
        if self.storage == KeyStorage::Auto {
            keyring_delete(SECRETS_SERVICE, &self.user(name));
        }
    }
}

/// Whether the keyring's failure means there is none on this machine (no session bus, no
/// Secret Service): then it holds nothing either, and the files are all there is.
fn keyring_absent(why: &str) -> bool {
    let why = why.to_ascii_lowercase();
    [
        "autolaunch",
        "was not provided by any",
        "no such interface",
        "no such object",
        "not available",
    ]
    .iter()
    .any(|w| why.contains(w))
}

/// The secrets' folder, this user's only (the files' names say which servers have secrets).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_a_file_is_private_read_back_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::new(dir.path(), KeyStorage::File);
        assert_eq!(secrets.get("mcp/a/env/TOKEN").unwrap(), None);
        let place = secrets.put("mcp/a/env/TOKEN", "s3cret").unwrap();
        assert_eq!(place, SecretPlace::File);
        assert_eq!(
            secrets.get("mcp/a/env/TOKEN").unwrap().as_deref(),
            Some("s3cret")
        );
        assert_eq!(secrets.get("mcp/a/env/OTHER").unwrap(), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let file = secrets.file("mcp/a/env/TOKEN");
            let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let mode = std::fs::metadata(&secrets.dir)
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o700);
        }
        // A name longer than a file name may be.
        let long = format!("mcp/a/env/{}", "K".repeat(400));
        secrets.put(&long, "v").unwrap();
        assert_eq!(secrets.get(&long).unwrap().as_deref(), Some("v"));
        secrets.put("mcp/a/env/TOKEN", "new").unwrap();
        assert_eq!(
            secrets.get("mcp/a/env/TOKEN").unwrap().as_deref(),
            Some("new")
        );
        secrets.delete("mcp/a/env/TOKEN");
        assert_eq!(secrets.get("mcp/a/env/TOKEN").unwrap(), None);
    }
}
