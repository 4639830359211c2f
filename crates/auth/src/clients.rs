//! Clients of the signed-challenge WebSocket (`protocols/auth-ws.md`, NOTES.md "auth-ws"):
//! their public keys, how a key is read and how a signature is checked. Their rows in
//! `hearth.db` are `hearth-store`'s `clients`.
//!
//! ## Decisions
//! - Keys are Ed25519 (Hearth's own clients) or RSA of 2048 to 4096 bits verified as
//!   RSASSA-PKCS1-v1_5 with SHA-256 (what the reference client library generates). A key is
//!   accepted as PEM SPKI (`BEGIN PUBLIC KEY`), as PEM PKCS#1 (`BEGIN RSA PUBLIC KEY`), or as
//!   base64 of either the 32 raw Ed25519 bytes or the SPKI DER.
//! - `clientId` is the first 20 hex digits of SHA-256 of the key's SPKI DER. DER is canonical,
//!   so the same key registered in any of the forms above gets the same id, and registering
//!   it again returns the id it already has.
//! - Ed25519 signatures are checked with `verify_strict` (no small-order keys, no malleable
//!   signatures); small-order keys are refused at registration.
//! - A revoked client stays revoked: registering its key again is refused (403
//!   `client_revoked`); `hearth-node clients remove` deletes the row so the key can register
//!   anew.

use std::fmt;

use base64::Engine;
// pkcs8 0.10's traits: the same ones rsa 0.9 implements for its keys.
use ed25519_dalek::pkcs8::{DecodePublicKey, EncodePublicKey};
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::traits::PublicKeyParts;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// Longest public key text accepted (an RSA-4096 PEM is about 800 bytes).
pub const MAX_KEY_TEXT_BYTES: usize = 16 * 1024;
/// Smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;
/// Hex digits in a client id.
pub const CLIENT_ID_HEX_DIGITS: usize = 20;

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The first 20 hex digits of SHA-256 of a public key's SPKI DER: a client's id, and the
/// node identity's key id.
pub fn client_id(spki_der: &[u8]) -> String {
    let mut h = hex(&Sha256::digest(spki_der));
    h.truncate(CLIENT_ID_HEX_DIGITS);
    h
}

/// Base64 in any of its usual spellings (standard or URL-safe, padded or not).
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let text = text.trim();
    STANDARD
        .decode(text)
        .or_else(|_| STANDARD_NO_PAD.decode(text))
        .or_else(|_| URL_SAFE.decode(text))
        .or_else(|_| URL_SAFE_NO_PAD.decode(text))
        .ok()
}

/// Why a public key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the public key is empty")]
    Empty,
    #[error("the public key is longer than {MAX_KEY_TEXT_BYTES} bytes")]
    TooLong,
    #[error("{0}")]
    Format(String),
    #[error("RSA keys must have at least {MIN_RSA_BITS} bits; this one has {0}")]
    RsaTooSmall(usize),
    #[error("this Ed25519 key is a weak (small-order) point and cannot be used")]
    WeakEd25519,
    #[error("{0} keys are not supported: register an Ed25519 key, or an RSA key (2048 bits or more) that signs with SHA-256 as the reference client's keys do")]
    Unsupported(String),
}

/// SPKI algorithms Hearth takes (Ed25519, RSA): a failure with these is a damaged key.
const KNOWN_OIDS: [&str; 2] = ["1.3.101.112", "1.2.840.113549.1.1.1"];

/// The key types Hearth is asked for that it does not take, by SPKI algorithm OID.
fn algorithm_name(oid: &str) -> String {
    match oid {
        "1.2.840.10045.2.1" => "EC (ECDSA)".into(),
        "1.3.101.110" => "X25519".into(),
        "1.3.101.111" => "X448".into(),
        "1.3.101.113" => "Ed448".into(),
        "1.2.840.10040.4.1" => "DSA".into(),
        "1.2.840.113549.1.1.10" => "RSA-PSS".into(),
        other => format!("algorithm {other}"),
    }
}

/// What kind of key a client has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    Ed25519,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RsaSha256,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ed25519 => "ed25519",
            Self::RsaSha256 => "rsa-sha256",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ed25519" => Some(Self::Ed25519),
            "rsa-sha256" => Some(Self::RsaSha256),
            _ => None,
        }
    }

    /// Whether a registration's `signatureAlgorithm` fits this kind of key. The reference
    /// client sends "SHA256" for its RSA keys; Hearth's clients send "Ed25519".
    pub fn accepts(self, signature_algorithm: &str) -> bool {
        let a = signature_algorithm
            .trim()
            .to_ascii_lowercase()
            .replace(['_', ' '], "-");
        match self {
            Self::Ed25519 => matches!(a.as_str(), "ed25519" | "eddsa" | "sha256" | "sha512" | ""),
            Self::RsaSha256 => matches!(
                a.as_str(),
                "sha256"
                    | "sha-256"
                    | "rsa-sha256"
                    | "sha256withrsa"
                    | "rs256"
                    | "rsassa-pkcs1-v1-5"
                    | ""
            ),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone)]
enum Verifier {
    Ed25519(ed25519_dalek::VerifyingKey),
    Rsa(rsa::RsaPublicKey),
}

/// A client's public key, ready to check signatures.
#[derive(Clone)]
pub struct ClientKey {
    verifier: Verifier,
    /// SPKI DER, what the id is derived from and what the database keeps.
    der: Vec<u8>,
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientKey")
            .field("algorithm", &self.algorithm())
            .field("client_id", &self.client_id())
            .finish()
    }
}

impl ClientKey {
    /// Read a key as clients send it (see the module docs for the forms accepted).
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if text.len() > MAX_KEY_TEXT_BYTES {
            return Err(KeyError::TooLong);
        }
        if text.starts_with("-----BEGIN") {
            let pem = text.replace("\r\n", "\n");
            if pem.starts_with("-----BEGIN RSA PUBLIC KEY-----") {
                let k = rsa::RsaPublicKey::from_pkcs1_pem(&pem).map_err(|e| {
                    KeyError::Format(format!("not a valid PKCS#1 RSA public key: {e}"))
                })?;
                return Self::from_rsa(k);
            }
            if !pem.starts_with("-----BEGIN PUBLIC KEY-----") {
                return Err(KeyError::Format(
                    "expected a PEM public key (-----BEGIN PUBLIC KEY-----); private keys and certificates are not accepted".into(),
                ));
            }
            let (_, der) = pem_rfc7468::decode_vec(pem.as_bytes())
                .map_err(|e| KeyError::Format(format!("not a readable PEM public key: {e}")))?;
            return Self::from_der(&der);
        }
        let bytes = decode_base64(text).ok_or_else(|| {
            KeyError::Format(
                "expected a PEM public key, or base64 of the 32 raw bytes of an Ed25519 key".into(),
            )
        })?;
        if let Ok(raw) = <[u8; 32]>::try_from(bytes.as_slice()) {
            let k = ed25519_dalek::VerifyingKey::from_bytes(&raw).map_err(|_| {
                KeyError::Format("the 32 bytes are not an Ed25519 public key".into())
            })?;
            return Self::from_ed25519(k);
        }
        Self::from_der(&bytes).map_err(|_| {
            KeyError::Format(format!(
                "base64 decoded to {} bytes, which is neither a raw Ed25519 key (32 bytes) nor an SPKI public key",
                bytes.len()
            ))
        })
    }

    /// A key from its SPKI DER.
    pub fn from_der(der: &[u8]) -> Result<Self, KeyError> {
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            return Self::from_ed25519(k);
        }
        if let Ok(k) = rsa::RsaPublicKey::from_public_key_der(der) {
            return Self::from_rsa(k);
        }
        // Say which key it is when it is a well-formed key of another type.
        match spki::SubjectPublicKeyInfoRef::try_from(der) {
            Ok(info) if !KNOWN_OIDS.contains(&info.algorithm.oid.to_string().as_str()) => Err(
                KeyError::Unsupported(algorithm_name(&info.algorithm.oid.to_string())),
            ),
            _ => Err(KeyError::Format(
                "not a valid Ed25519 or RSA public key (SPKI)".into(),
            )),
        }
    }

    pub fn from_ed25519(k: ed25519_dalek::VerifyingKey) -> Result<Self, KeyError> {
        if k.is_weak() {
            return Err(KeyError::WeakEd25519);
        }
        let der = k
            .to_public_key_der()
            .map_err(|e| KeyError::Format(format!("cannot encode the key: {e}")))?
            .as_bytes()
            .to_vec();
        Ok(Self {
            verifier: Verifier::Ed25519(k),
            der,
        })
    }

    pub fn from_rsa(k: rsa::RsaPublicKey) -> Result<Self, KeyError> {
        let bits = k.size() * 8;
        if bits < MIN_RSA_BITS {
            return Err(KeyError::RsaTooSmall(bits));
        }
        let der = k
            .to_public_key_der()
            .map_err(|e| KeyError::Format(format!("cannot encode the key: {e}")))?
            .as_bytes()
            .to_vec();
        Ok(Self {
            verifier: Verifier::Rsa(k),
            der,
        })
    }

    pub fn algorithm(&self) -> Algorithm {
        match self.verifier {
            Verifier::Ed25519(_) => Algorithm::Ed25519,
            Verifier::Rsa(_) => Algorithm::RsaSha256,
        }
    }

    /// SPKI DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    pub fn client_id(&self) -> String {
        client_id(&self.der)
    }

    /// Whether `signature` (raw bytes) signs `message` under this key.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.verifier {
            Verifier::Ed25519(k) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|sig| k.verify_strict(message, &sig).is_ok()),
            Verifier::Rsa(k) => {
                let Ok(sig) = rsa::pkcs1v15::Signature::try_from(signature) else {
                    return false;
                };
                let vk = rsa::pkcs1v15::VerifyingKey::<Sha256>::new(k.clone());
                rsa::signature::Verifier::verify(&vk, message, &sig).is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
    use rand_core::RngCore as _;

    fn ed_key() -> ed25519_dalek::SigningKey {
        let mut seed = [0u8; 32];
        rand_core::OsRng.fill_bytes(&mut seed);
        ed25519_dalek::SigningKey::from_bytes(&seed)
    }

    #[test]
    fn ed25519_pem_raw_and_der_forms_give_one_client_id() {
        let sk = ed_key();
        let vk = sk.verifying_key();
        let pem = vk.to_public_key_pem(LineEnding::LF).unwrap();
        let der = vk.to_public_key_der().unwrap().as_bytes().to_vec();
        let raw = base64::engine::general_purpose::STANDARD.encode(vk.to_bytes());
        let der_b64 = base64::engine::general_purpose::STANDARD.encode(&der);
        let from_pem = ClientKey::parse(&pem).unwrap();
        let from_crlf = ClientKey::parse(&pem.replace('\n', "\r\n")).unwrap();
        let from_raw = ClientKey::parse(&raw).unwrap();
        let from_der = ClientKey::parse(&der_b64).unwrap();
        assert_eq!(from_pem.algorithm(), Algorithm::Ed25519);
        let id = from_pem.client_id();
        assert_eq!(id.len(), 20);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(id, client_id(&der));
        for k in [&from_crlf, &from_raw, &from_der] {
            assert_eq!(k.client_id(), id);
        }
        let sig: ed25519_dalek::Signature = ed25519_dalek::Signer::sign(&sk, b"challenge");
        assert!(from_raw.verify(b"challenge", &sig.to_bytes()));
        assert!(!from_raw.verify(b"challengE", &sig.to_bytes()));
        assert!(!from_raw.verify(b"challenge", &sig.to_bytes()[..63]));
        assert!(!ClientKey::parse(&raw)
            .unwrap()
            .verify(b"challenge", &[0u8; 64]));
    }

    #[test]
    fn rsa_keys_verify_pkcs1v15_sha256_in_both_pem_forms() {
        use rsa::pkcs1::EncodeRsaPublicKey as _;
        let private = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).unwrap();
        let public = rsa::RsaPublicKey::from(&private);
        let spki_pem = public.to_public_key_pem(LineEnding::LF).unwrap();
        let pkcs1_pem = public.to_pkcs1_pem(LineEnding::LF).unwrap();
        let a = ClientKey::parse(&spki_pem).unwrap();
        let b = ClientKey::parse(&pkcs1_pem).unwrap();
        assert_eq!(a.algorithm(), Algorithm::RsaSha256);
        assert_eq!(a.client_id(), b.client_id());
        let signer = rsa::pkcs1v15::SigningKey::<Sha256>::new(private);
        let sig: rsa::pkcs1v15::Signature = rsa::signature::Signer::sign(&signer, b"0123abcd");
        let sig = rsa::signature::SignatureEncoding::to_vec(&sig);
        assert!(a.verify(b"0123abcd", &sig));
        assert!(!a.verify(b"0123abce", &sig));
        assert!(a.algorithm().accepts("SHA256"));
        assert!(!a.algorithm().accepts("SHA512"));
        assert!(Algorithm::Ed25519.accepts("Ed25519"));
    }

    #[test]
    fn bad_keys_are_refused_with_a_reason() {
        assert_eq!(ClientKey::parse("  ").unwrap_err(), KeyError::Empty);
        assert!(matches!(
            ClientKey::parse("not a key!").unwrap_err(),
            KeyError::Format(_)
        ));
        assert!(matches!(
            ClientKey::parse("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
                .unwrap_err(),
            KeyError::Format(_)
        ));
        assert!(matches!(
            ClientKey::parse("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
                .unwrap_err(),
            KeyError::Format(_)
        ));
        // 31 bytes: neither raw Ed25519 nor DER.
        let short = base64::engine::general_purpose::STANDARD.encode([7u8; 31]);
        assert!(matches!(
            ClientKey::parse(&short).unwrap_err(),
            KeyError::Format(_)
        ));
        // The identity point is a small-order (weak) key.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let weak = base64::engine::general_purpose::STANDARD.encode(identity);
        assert_eq!(ClientKey::parse(&weak).unwrap_err(), KeyError::WeakEd25519);
        assert_eq!(
            ClientKey::parse(&"A".repeat(MAX_KEY_TEXT_BYTES + 1)).unwrap_err(),
            KeyError::TooLong
        );
        let private = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 1024).unwrap();
        let pem = rsa::RsaPublicKey::from(&private)
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        assert_eq!(
            ClientKey::parse(&pem).unwrap_err(),
            KeyError::RsaTooSmall(1024)
        );
    }
}
