//! This node's own Ed25519 identity (DESIGN.md §5), and the key storage it shares with the
//! `hearth-node client` commands.
//!
//! ## Where a key lives
//! A key is kept in the OS keyring (service `hearth`, user `node` for the default data dir or
//! `node-<12 hex of SHA-256 of the data dir's path>` for any other, so two nodes on one machine
//! have two identities). Where no keyring answers (a headless box, CI, a container) or
//! `--key-storage file` says so, it is a PKCS#8 PEM file with mode 0600 in the data dir
//! (`identity.pem`). A log line says which.
//!
//! Loading looks at the file first and the keyring second, so once a file exists the identity
//! never flips between two keys when the keyring answers on some starts and not on others.
//! A key written to the keyring is read back through a fresh entry before it is trusted (a
//! keyring that accepts writes and keeps nothing, like the mock store, falls back to the file).
//! Every keyring call is bounded by [`KEYRING_WAIT`]: a keyring that waits for an unlock dialog
//! nobody will answer does not hang the node.
//!
//! ## Ids
//! - [`Identity::device_id`]: the id peers know this node by (`deviceID` in cluster messages,
//!   which TealeNet decodes as a UUID): the first 16 bytes of SHA-256 of the public key's SPKI
//!   DER as an uppercase RFC 9562 version-8 UUID. Derived from the key, so it is stable across
//!   restarts exactly as long as the key is.
//! - [`Identity::key_id`]: the first 20 hex digits of the same hash, as a `clientId` is.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand_core::RngCore;
use sha2::{Digest, Sha256};

/// Keyring service of the node's identity.
pub const NODE_SERVICE: &str = "hearth";
/// Keyring service of client keys made by `hearth-node client keygen`.
pub const CLIENT_SERVICE: &str = "hearth-client";
/// The identity file in the data dir, when no keyring is used.
pub const IDENTITY_FILE: &str = "identity.pem";
/// Longest wait for the OS keyring to answer one call.
pub const KEYRING_WAIT: Duration = Duration::from_secs(5);

/// The SPKI DER header of an Ed25519 public key (RFC 8410): the 32 key bytes follow it.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Where keys may be kept (`--key-storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum KeyStorage {
    /// The OS keyring when it answers, else a 0600 file in the data dir.
    #[default]
    Auto,
    /// Only the 0600 file (tests, containers, or when the keyring must not be touched).
    File,
}

/// Where one key was found or put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLocation {
    Keyring { service: String, user: String },
    File(PathBuf),
}

impl fmt::Display for KeyLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Keyring { service, user } => {
                write!(f, "the OS keyring (service {service}, user {user})")
            }
            Self::File(p) => write!(f, "the file {}", p.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read the key file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("cannot write the key file {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("the key in {0} is not an Ed25519 private key in PKCS#8 PEM form ({1}); move it away to make a new one")]
    BadKey(String, String),
    #[error("a key already exists in {0}; pass --force to replace it")]
    Exists(String),
    #[error("cannot encode the key: {0}")]
    Encode(String),
    #[error("cannot make a random key: {0}")]
    Random(String),
}

/// One key's places: an entry in the keyring and a fallback file.
#[derive(Debug, Clone)]
pub struct KeySlot {
    pub service: String,
    pub user: String,
    pub file: PathBuf,
}

/// A key and where it lives.
#[derive(Clone)]
pub struct StoredKey {
    pub key: SigningKey,
    pub location: KeyLocation,
}

impl fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredKey")
            .field("key_id", &key_id(&self.key.verifying_key()))
            .field("location", &self.location)
            .finish()
    }
}

/// What the keyring said.
pub(crate) enum KeyringAnswer {
    Found(String),
    Empty,
    Unavailable(String),
}

/// Run one keyring call on its own thread, giving up after [`KEYRING_WAIT`].
fn keyring_call<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("hearth-keyring".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(KEYRING_WAIT).ok()
}

pub(crate) fn keyring_get(service: &str, user: &str) -> KeyringAnswer {
    let (service, user) = (service.to_owned(), user.to_owned());
    let answer = keyring_call(move || match keyring::Entry::new(&service, &user) {
        Err(e) => KeyringAnswer::Unavailable(e.to_string()),
        Ok(entry) => match entry.get_password() {
            Ok(secret) => KeyringAnswer::Found(secret),
            Err(keyring::Error::NoEntry) => KeyringAnswer::Empty,
            Err(e) => KeyringAnswer::Unavailable(e.to_string()),
        },
    });
    answer.unwrap_or_else(|| {
        KeyringAnswer::Unavailable(format!("no answer within {} s", KEYRING_WAIT.as_secs()))
    })
}

/// Store a secret and read it back through a fresh entry.
pub(crate) fn keyring_set(service: &str, user: &str, secret: &str) -> Result<(), String> {
    let (service, user, secret) = (service.to_owned(), user.to_owned(), secret.to_owned());
    keyring_call(move || {
        keyring::Entry::new(&service, &user)
            .and_then(|e| e.set_password(&secret))
            .map_err(|e| e.to_string())?;
        let back = keyring::Entry::new(&service, &user)
            .and_then(|e| e.get_password())
            .map_err(|e| format!("it did not keep the key ({e})"))?;
        if back == secret {
            Ok(())
        } else {
            Err("it returned something else than what was stored".to_owned())
        }
    })
    .unwrap_or_else(|| Err(format!("no answer within {} s", KEYRING_WAIT.as_secs())))
}

pub(crate) fn keyring_delete(service: &str, user: &str) {
    let (service, user) = (service.to_owned(), user.to_owned());
    let _ = keyring_call(move || {
        if let Ok(e) = keyring::Entry::new(&service, &user) {
            let _ = e.delete_credential();
        }
    });
}

/// A fresh Ed25519 key from the OS's random source.
pub fn generate_key() -> Result<SigningKey, IdentityError> {
    let mut seed = [0u8; 32];
    rand_core::OsRng
        .try_fill_bytes(&mut seed)
        .map_err(|e| IdentityError::Random(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// PKCS#8 PEM of a private key (what files and keyring entries hold).
pub fn private_key_pem(key: &SigningKey) -> Result<String, IdentityError> {
    key.to_pkcs8_pem(LineEnding::LF)
        .map(|pem| pem.as_str().to_owned())
        .map_err(|e| IdentityError::Encode(e.to_string()))
}

fn parse_private_key(pem: &str, place: &KeyLocation) -> Result<SigningKey, IdentityError> {
    SigningKey::from_pkcs8_pem(pem.trim())
        .map_err(|e| IdentityError::BadKey(place.to_string(), e.to_string()))
}

/// SPKI DER of an Ed25519 public key.
pub fn spki_der(key: &VerifyingKey) -> Vec<u8> {
    let mut der = ED25519_SPKI_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    der
}

/// PEM SPKI of an Ed25519 public key, as `POST /api/auth/register` takes it.
pub fn public_key_pem(key: &VerifyingKey) -> String {
    key.to_public_key_pem(LineEnding::LF).unwrap_or_else(|_| {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(spki_der(key));
        format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n")
    })
}

/// First 20 hex digits of SHA-256 of the SPKI DER (the `clientId` of this key).
pub fn key_id(key: &VerifyingKey) -> String {
    crate::clients::client_id(&spki_der(key))
}

/// The UUID a public key stands for (see the module docs).
pub fn device_id(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(spki_der(key));
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8: custom
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    uuid::Uuid::from_bytes(b).to_string().to_uppercase()
}

#[cfg(unix)]
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("pem.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(not(unix))]
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("pem.tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

/// Make a key file private again if someone loosened its mode.
#[cfg(unix)]
fn tighten(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(file = %path.display(), mode = %format!("{mode:o}"), "the key file was readable by others; setting it to 0600");
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
    }
}

#[cfg(not(unix))]
fn tighten(_path: &Path) {}

impl KeySlot {
    /// The key, if one exists in the file or (with [`KeyStorage::Auto`]) the keyring.
    pub fn load(&self, storage: KeyStorage) -> Result<Option<StoredKey>, IdentityError> {
        match std::fs::read_to_string(&self.file) {
            Ok(pem) => {
                let location = KeyLocation::File(self.file.clone());
                tighten(&self.file);
                let key = parse_private_key(&pem, &location)?;
                return Ok(Some(StoredKey { key, location }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(IdentityError::Read(self.file.clone(), e)),
        }
        if storage == KeyStorage::File {
            return Ok(None);
        }
        match keyring_get(&self.service, &self.user) {
            KeyringAnswer::Found(pem) => {
                let location = KeyLocation::Keyring {
                    service: self.service.clone(),
                    user: self.user.clone(),
                };
                let key = parse_private_key(&pem, &location)?;
                Ok(Some(StoredKey { key, location }))
            }
            KeyringAnswer::Empty => Ok(None),
            KeyringAnswer::Unavailable(why) => {
                tracing::debug!(%why, "the OS keyring did not answer");
                Ok(None)
            }
        }
    }

    /// The existing key, or a new one stored in the keyring (where it answers and keeps it)
    /// or in the file.
    pub fn load_or_create(&self, storage: KeyStorage) -> Result<(StoredKey, bool), IdentityError> {
        if let Some(k) = self.load(storage)? {
            return Ok((k, false));
        }
        let key = generate_key()?;
        let location = self.store(&key, storage)?;
        Ok((StoredKey { key, location }, true))
    }

    /// Store `key`, replacing what is there only when `force` is set.
    pub fn create(&self, storage: KeyStorage, force: bool) -> Result<StoredKey, IdentityError> {
        if let Some(existing) = self.load(storage)? {
            if !force {
                return Err(IdentityError::Exists(existing.location.to_string()));
            }
            match &existing.location {
                KeyLocation::File(p) => {
                    std::fs::remove_file(p).map_err(|e| IdentityError::Write(p.clone(), e))?
                }
                KeyLocation::Keyring { service, user } => keyring_delete(service, user),
            }
        }
        let key = generate_key()?;
        let location = self.store(&key, storage)?;
        Ok(StoredKey { key, location })
    }

    fn store(&self, key: &SigningKey, storage: KeyStorage) -> Result<KeyLocation, IdentityError> {
        let pem = private_key_pem(key)?;
        if storage == KeyStorage::Auto {
            match keyring_set(&self.service, &self.user, &pem) {
                Ok(()) => {
                    return Ok(KeyLocation::Keyring {
                        service: self.service.clone(),
                        user: self.user.clone(),
                    })
                }
                Err(why) => {
                    tracing::info!(%why, file = %self.file.display(), "the OS keyring is not usable; keeping the key in a 0600 file")
                }
            }
        }
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| IdentityError::Write(dir.to_path_buf(), e))?;
        }
        write_private(&self.file, &pem).map_err(|e| IdentityError::Write(self.file.clone(), e))?;
        Ok(KeyLocation::File(self.file.clone()))
    }
}

/// The keyring user of the node whose data lives in `data_dir`.
pub fn node_keyring_user(data_dir: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let dir = abs(data_dir);
    if dir == abs(&hearth_base::data_dir::default_data_dir()) {
        return "node".to_owned();
    }
    let digest = Sha256::digest(dir.to_string_lossy().as_bytes());
    let mut h = crate::clients::hex(&digest);
    h.truncate(12);
    format!("node-{h}")
}

/// This node's identity.
#[derive(Clone)]
pub struct Identity {
    key: SigningKey,
    location: KeyLocation,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("device_id", &self.device_id())
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// The keyring entry and file of the node whose data lives in `data_dir`.
    pub fn slot(data_dir: &Path) -> KeySlot {
        KeySlot {
            service: NODE_SERVICE.to_owned(),
            user: node_keyring_user(data_dir),
            file: data_dir.join(IDENTITY_FILE),
        }
    }

    /// Load this node's identity, making one the first time. Blocking (file and keyring
    /// I/O, up to [`KEYRING_WAIT`] per keyring call): call it from `spawn_blocking` in async code.
    pub fn load_or_create(data_dir: &Path, storage: KeyStorage) -> Result<Self, IdentityError> {
        let (stored, created) = Self::slot(data_dir).load_or_create(storage)?;
        let me = Self {
            key: stored.key,
            location: stored.location,
        };
        if created {
            tracing::info!(device_id = %me.device_id(), "created this node's identity in {}", me.location);
        } else {
            tracing::info!(device_id = %me.device_id(), "this node's identity is in {}", me.location);
        }
        Ok(me)
    }

    pub fn device_id(&self) -> String {
        device_id(&self.key.verifying_key())
    }

    pub fn key_id(&self) -> String {
        key_id(&self.key.verifying_key())
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    pub fn public_key_pem(&self) -> String {
        public_key_pem(&self.key.verifying_key())
    }

    pub fn location(&self) -> &KeyLocation {
        &self.location
    }

    pub fn sign(&self, message: &[u8]) -> ed25519_dalek::Signature {
        ed25519_dalek::Signer::sign(&self.key, message)
    }

    /// A fresh identity kept nowhere (for tests).
    pub fn ephemeral() -> Self {
        Self {
            key: generate_key().expect("system randomness"),
            location: KeyLocation::File(PathBuf::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_identity_is_created_private_and_stable_across_loads() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = Identity::load_or_create(&data, KeyStorage::File).unwrap();
        let file = data.join(IDENTITY_FILE);
        assert_eq!(first.location(), &KeyLocation::File(file.clone()));
        let pem = std::fs::read_to_string(&file).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let again = Identity::load_or_create(&data, KeyStorage::File).unwrap();
        assert_eq!(again.device_id(), first.device_id());
        assert_eq!(again.verifying_key(), first.verifying_key());
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            pem,
            "not rewritten"
        );
        let sig = again.sign(b"hello");
        assert!(first.verifying_key().verify_strict(b"hello", &sig).is_ok());

        let other = Identity::load_or_create(&dir.path().join("other"), KeyStorage::File).unwrap();
        assert_ne!(other.device_id(), first.device_id());
    }

    #[test]
    fn device_id_is_an_uppercase_v8_uuid_and_key_id_a_client_id() {
        let key = generate_key().unwrap().verifying_key();
        let id = device_id(&key);
        let parsed = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(parsed.get_version_num(), 8);
        assert_eq!(id, id.to_uppercase());
        assert_eq!(id, device_id(&key), "deterministic");
        assert_eq!(key_id(&key).len(), 20);
        let der = key.to_public_key_der().unwrap();
        assert_eq!(
            spki_der(&key),
            der.as_bytes(),
            "the fixed prefix is RFC 8410's"
        );
        assert_eq!(
            crate::clients::ClientKey::parse(&public_key_pem(&key))
                .unwrap()
                .client_id(),
            key_id(&key)
        );
    }

    #[test]
    fn a_corrupt_key_file_is_an_error_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(IDENTITY_FILE);
        std::fs::write(&file, "garbage").unwrap();
        let err = Identity::load_or_create(dir.path(), KeyStorage::File).unwrap_err();
        assert!(matches!(err, IdentityError::BadKey(..)), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "garbage");
    }

    #[cfg(unix)]
    #[test]
    fn a_loose_key_file_is_tightened_to_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let first = Identity::load_or_create(dir.path(), KeyStorage::File).unwrap();
        let file = dir.path().join(IDENTITY_FILE);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let again = Identity::load_or_create(dir.path(), KeyStorage::File).unwrap();
        assert_eq!(again.device_id(), first.device_id());
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn create_refuses_to_replace_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let slot = KeySlot {
            service: CLIENT_SERVICE.into(),
            user: "test".into(),
            file: dir.path().join("client-keys/test.pem"),
        };
        let a = slot.create(KeyStorage::File, false).unwrap();
        assert!(matches!(
            slot.create(KeyStorage::File, false),
            Err(IdentityError::Exists(_))
        ));
        let b = slot.create(KeyStorage::File, true).unwrap();
        assert_ne!(a.key.verifying_key(), b.key.verifying_key());
        let loaded = slot.load(KeyStorage::File).unwrap().unwrap();
        assert_eq!(loaded.key.verifying_key(), b.key.verifying_key());
    }

    #[test]
    fn keyring_users_differ_per_data_dir() {
        let a = node_keyring_user(Path::new("/tmp/hearth-a"));
        let b = node_keyring_user(Path::new("/tmp/hearth-b"));
        assert!(a.starts_with("node-") && a.len() == 17, "{a}");
        assert_ne!(a, b);
        assert_eq!(
            node_keyring_user(&hearth_base::data_dir::default_data_dir()),
            "node"
        );
    }
}
