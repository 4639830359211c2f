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

    /// A file per name, named by the name's hex (a name may hold any character).
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(crate::clients::hex(name.as_bytes()))
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
        std::fs::create_dir_all(&self.dir).map_err(|e| SecretError::Write(file.clone(), e))?;
        write_private(&file, value).map_err(|e| SecretError::Write(file.clone(), e))?;
        Ok(SecretPlace::File)
    }

    /// The value kept under `name`, wherever it is.
    pub fn get(&self, name: &str) -> Result<Option<String>, SecretError> {
        let file = self.file(name);
        match std::fs::read_to_string(&file) {
            Ok(v) => return Ok(Some(v)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SecretError::Read(file, e)),
        }
        if self.storage == KeyStorage::Auto {
            if let KeyringAnswer::Found(v) = keyring_get(SECRETS_SERVICE, &self.user(name)) {
                return Ok(Some(v));
            }
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
        }
        secrets.put("mcp/a/env/TOKEN", "new").unwrap();
        assert_eq!(
            secrets.get("mcp/a/env/TOKEN").unwrap().as_deref(),
            Some("new")
        );
        secrets.delete("mcp/a/env/TOKEN");
        assert_eq!(secrets.get("mcp/a/env/TOKEN").unwrap(), None);
    }
}
