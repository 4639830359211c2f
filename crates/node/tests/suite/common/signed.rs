//! A client of the signed-challenge door as the reference clients are: an Ed25519 or RSA-2048
//! key, registration, the challenge, the signed answer.

use base64::Engine as _;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::EncodePublicKey as _;
use rand_core::RngCore as _;
use serde_json::{json, Value};

use super::{ws_recv, ws_send, TestNode, Ws};

/// A client key of either kind, with the signing the reference clients do.
pub enum Key {
    Ed25519(ed25519_dalek::SigningKey),
    Rsa {
        signer: rsa::pkcs1v15::SigningKey<sha2::Sha256>,
        pem: String,
    },
}

impl Key {
    pub fn ed25519() -> Self {
        let mut seed = [0u8; 32];
        rand_core::OsRng.fill_bytes(&mut seed);
        Self::Ed25519(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    pub fn rsa2048() -> Self {
        let private = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).expect("RSA key");
        let pem = rsa::RsaPublicKey::from(&private)
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        Self::Rsa {
            signer: rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(private),
            pem,
        }
    }

    pub fn public_pem(&self) -> String {
        match self {
            Self::Ed25519(k) => k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap(),
            Self::Rsa { pem, .. } => pem.clone(),
        }
    }

    pub fn algorithm(&self) -> &'static str {
        match self {
            Self::Ed25519(_) => "Ed25519",
            Self::Rsa { .. } => "SHA256",
        }
    }

    /// Base64 of a signature over `message` (the challenge's UTF-8 bytes).
    pub fn sign(&self, message: &[u8]) -> String {
        let bytes = match self {
            Self::Ed25519(k) => {
                let sig: ed25519_dalek::Signature = ed25519_dalek::Signer::sign(k, message);
                sig.to_bytes().to_vec()
            }
            Self::Rsa { signer, .. } => {
                let sig: rsa::pkcs1v15::Signature = rsa::signature::Signer::sign(signer, message);
                rsa::signature::SignatureEncoding::to_vec(&sig)
            }
        };
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

pub async fn register(t: &TestNode, key: &Key) -> String {
    let r = t
        .post(
            "/api/auth/register",
            &json!({"name": "test client", "publicKey": key.public_pem(), "signatureAlgorithm": key.algorithm()}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["success"], true, "{v}");
    assert!(v["message"].is_string(), "{v}");
    let id = v["clientId"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 20);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    id
}

/// A new connection and its challenge.
pub async fn connect(t: &TestNode) -> (Ws, String) {
    let mut ws = t.ws("/").await;
    let c = ws_recv(&mut ws).await;
    assert_eq!(c["type"], "challenge", "the challenge comes first: {c}");
    let challenge = c["challenge"].as_str().unwrap().to_owned();
    assert_eq!(challenge.len(), 64, "{challenge}");
    assert!(challenge
        .chars()
        .all(|ch| ch.is_ascii_digit() || ('a'..='f').contains(&ch)));
    assert!(
        c["timestamp"].as_u64().unwrap() > 1_600_000_000_000,
        "ms: {c}"
    );
    (ws, challenge)
}

pub async fn authenticate(ws: &mut Ws, client_id: &str, signature: &str) -> Value {
    ws_send(
        ws,
        json!({"type": "authenticate", "clientId": client_id, "signature": signature}),
    )
    .await;
    let r = ws_recv(ws).await;
    assert_eq!(r["type"], "auth_result", "{r}");
    assert!(r["timestamp"].is_u64(), "{r}");
    r
}

/// Register (if needed), connect and authenticate.
pub async fn login(t: &TestNode, key: &Key) -> (Ws, String) {
    let id = register(t, key).await;
    let (mut ws, challenge) = connect(t).await;
    let r = authenticate(&mut ws, &id, &key.sign(challenge.as_bytes())).await;
    assert_eq!(r["success"], true, "{r}");
    (ws, id)
}
