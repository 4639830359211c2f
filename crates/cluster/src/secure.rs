//! The encrypted transport between Hearth nodes: Noise XXpsk3 (`snow`, its ciphers from
//! `ring`) over the cluster's length-delimited frames, one Noise message per frame. The cipher
//! is ChaCha20-Poly1305, or AES-256-GCM when both machines have AES instructions ([`choose`]).
//! The pre-shared key is the passcode through Argon2id, so neither the passcode nor its hash crosses the LAN and a wrong one
//! fails the handshake; each side's Noise static key is signed by its Ed25519 device identity,
//! whose key also gives its device id, so a peer cannot claim another's id.
//!
//! After the handshake a cluster message travels as one or more Noise messages, each holding a
//! flag byte (1: more follows, 0: last) and up to [`PIECE_BYTES`] of the message's JSON; an
//! empty message is the one-second liveness ping.

use std::sync::Arc;

use ed25519_dalek::{Signature, Verifier as _, VerifyingKey};
use futures_util::{SinkExt as _, StreamExt as _};
use hearth_protocol::cluster::{HearthHello, HEARTH_NOISE, HEARTH_NOISE_AES};
use serde::{Deserialize, Serialize};
use tokio_util::bytes::{BufMut as _, Bytes, BytesMut};

use super::frames::Frames;
use hearth_auth::identity::{device_id, Identity};

/// The longest Noise message (the specification's limit) and so the frame limit once the
/// transport runs.
pub(crate) const NOISE_FRAME_BYTES: usize = 65535;
/// Bytes of a cluster message in one Noise message: the limit less the tag and the flag.
pub(crate) const PIECE_BYTES: usize = NOISE_FRAME_BYTES - 16 - 1;
/// The room made for a message of several pieces: a model chunk (1 MiB) and its header.
const LONG_MESSAGE_ROOM: usize = (1 << 20) + 4096;
/// What a signature covers besides the static key (so it can serve no other purpose).
const SIGNING_CONTEXT: &[u8] = b"hearth cluster static key v1:";
/// Argon2id's salt: fixed, since both sides must derive the same key before they have spoken.
const PSK_SALT: &[u8] = b"hearth-cluster-passcode-v1";

/// The passcode's pre-shared key: Argon2id (19 MiB, two passes: OWASP's minimum), slow enough
/// that guessing a passcode from a recorded handshake costs real time per guess. No passcode
/// derives from the empty one (the nodes of a loopback-only cluster).
pub(crate) fn derive_psk(passcode: Option<&str>) -> [u8; 32] {
    let params = argon2::Params::new(19 * 1024, 2, 1, Some(32)).expect("valid Argon2 parameters");
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = [0u8; 32];
    argon
        .hash_password_into(passcode.unwrap_or("").as_bytes(), PSK_SALT, &mut out)
        .expect("a 32-byte output and a long enough salt");
    out
}

/// What each side proves inside the handshake (encrypted): its device key, a signature of its
/// Noise static key by that key, and how many requests it takes at once.
#[derive(Debug, Serialize, Deserialize)]
struct Proof {
    key: String,
    signature: String,
    slots: usize,
}

/// The keys one node uses for every Hearth connection.
pub(crate) struct Keys {
    psk: [u8; 32],
    identity: Arc<Identity>,
    static_private: Vec<u8>,
    static_public: Vec<u8>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").finish_non_exhaustive()
    }
}

impl Keys {
    /// A fresh Noise static key for this run, and the passcode's key (slow: call it once).
    pub(crate) fn new(passcode: Option<&str>, identity: Arc<Identity>) -> Self {
        let kp = snow::Builder::new(params(HEARTH_NOISE))
            .generate_keypair()
            .expect("the default resolver makes X25519 keys");
        Self {
            psk: derive_psk(passcode),
            identity,
            static_private: kp.private,
            static_public: kp.public,
        }
    }

    /// A handshake of protocol `noise` with this node's static key and the passcode's key,
    /// `prologue` bound in.
    fn handshake(
        &self,
        noise: &str,
        prologue: &[u8],
        initiator: bool,
    ) -> Result<snow::HandshakeState, String> {
        let builder = snow::Builder::new(params(noise))
            .local_private_key(&self.static_private)
            .prologue(prologue)
            .psk(3, &self.psk);
        if initiator {
            builder.build_initiator()
        } else {
            builder.build_responder()
        }
        .map_err(noise_err)
    }

    fn proof(&self, slots: usize) -> Vec<u8> {
        let mut signed = SIGNING_CONTEXT.to_vec();
        signed.extend_from_slice(&self.static_public);
        let b64 = |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b);
        let proof = Proof {
            key: b64(self.identity.verifying_key().as_bytes()),
            signature: b64(&self.identity.sign(&signed).to_bytes()),
            slots,
        };
        serde_json::to_vec(&proof).expect("a proof serializes")
    }
}

/// `noise`, one of the protocols [`choose`] gives.
fn params(noise: &str) -> snow::params::NoiseParams {
    noise.parse().expect("a valid Noise protocol name")
}

/// Whether this machine has the instructions that make AES-256-GCM fast and constant-time.
pub(crate) fn aes_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// What this node's `hello` offers besides [`HEARTH_NOISE`].
pub(crate) fn also_offered(aes_here: bool) -> Vec<String> {
    if aes_here {
        vec![HEARTH_NOISE_AES.to_owned()]
    } else {
        Vec::new()
    }
}

/// The listener's choice for a peer's `hello`: AES-256-GCM when both machines have AES
/// instructions (the peer offers it only then), else the protocol every Hearth node speaks.
pub(crate) fn choose(offer: &HearthHello, aes_here: bool) -> Result<&'static str, String> {
    if offer.noise != HEARTH_NOISE {
        return Err(format!(
            "it offers {}, this node speaks {HEARTH_NOISE}",
            offer.noise
        ));
    }
    if aes_here && offer.noise_also.iter().any(|n| n == HEARTH_NOISE_AES) {
        Ok(HEARTH_NOISE_AES)
    } else {
        Ok(HEARTH_NOISE)
    }
}

/// The protocol a listener's `helloAck` took, when this node offered it (`also`: the others
/// it offered besides [`HEARTH_NOISE`]).
pub(crate) fn taken(ack: &HearthHello, also: &[String]) -> Result<&'static str, String> {
    match ack.noise.as_str() {
        HEARTH_NOISE => Ok(HEARTH_NOISE),
        HEARTH_NOISE_AES if also.iter().any(|n| n == HEARTH_NOISE_AES) => Ok(HEARTH_NOISE_AES),
        other => Err(format!(
            "it answers with {other}, which this node did not offer"
        )),
    }
}

/// Who the other side proved to be.
#[derive(Debug)]
pub(crate) struct Proven {
    /// Its device id, from its device key.
    pub(crate) device_id: String,
    pub(crate) slots: usize,
}

/// Check a peer's proof against the static key the handshake gave.
fn verify(payload: &[u8], remote_static: Option<&[u8]>) -> Result<Proven, String> {
    let proof: Proof =
        serde_json::from_slice(payload).map_err(|e| format!("its proof is unreadable: {e}"))?;
    let unb64 = |s: &str| {
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s)
            .map_err(|e| format!("its proof is not base64: {e}"))
    };
    let key: [u8; 32] = unb64(&proof.key)?
        .try_into()
        .map_err(|_| "its device key is not 32 bytes".to_owned())?;
    let key = VerifyingKey::from_bytes(&key).map_err(|e| format!("bad device key: {e}"))?;
    if key.is_weak() {
        return Err("its device key is a weak key".into());
    }
    let sig: [u8; 64] = unb64(&proof.signature)?
        .try_into()
        .map_err(|_| "its signature is not 64 bytes".to_owned())?;
    let remote_static = remote_static.ok_or("the handshake gave no static key")?;
    let mut signed = SIGNING_CONTEXT.to_vec();
    signed.extend_from_slice(remote_static);
    key.verify(&signed, &Signature::from_bytes(&sig))
        .map_err(|_| "its static key is not signed by its device key".to_owned())?;
    Ok(Proven {
        device_id: device_id(&key),
        slots: proof.slots.clamp(1, hearth_hub::MAX_WORKER_CONCURRENCY),
    })
}

async fn next_frame(frames: &mut Frames) -> Result<Bytes, String> {
    match tokio::time::timeout(super::frames::HELLO_WAIT, frames.next()).await {
        Err(_) => Err("the handshake stalled".into()),
        Ok(None) => {
            Err("it closed the connection during the handshake (a different passcode?)".into())
        }
        Ok(Some(Err(e))) => Err(format!("reading failed: {e}")),
        Ok(Some(Ok(f))) => Ok(f.freeze()),
    }
}

async fn send_frame(frames: &mut Frames, bytes: &[u8]) -> Result<(), String> {
    frames
        .send(Bytes::copy_from_slice(bytes))
        .await
        .map_err(|e| format!("writing failed: {e}"))
}

fn noise_err(e: snow::Error) -> String {
    match e {
        snow::Error::Decrypt => "the handshake failed: a different passcode".into(),
        other => format!("the handshake failed: {other}"),
    }
}

/// The connecting side: `-> e`, `<- e, ee, s, es` (the listener's proof), `-> s, se, psk` (ours).
/// `prologue` binds what both sides said in plain text before.
pub(crate) async fn initiate(
    frames: &mut Frames,
    keys: &Keys,
    slots: usize,
    noise: &str,
    prologue: &[u8],
) -> Result<(snow::TransportState, Proven), String> {
    let mut hs = keys.handshake(noise, prologue, true)?;
    let mut buf = vec![0u8; NOISE_FRAME_BYTES];
    let n = hs.write_message(&[], &mut buf).map_err(noise_err)?;
    send_frame(frames, &buf[..n]).await?;
    let msg = next_frame(frames).await?;
    let mut payload = vec![0u8; NOISE_FRAME_BYTES];
    let n = hs.read_message(&msg, &mut payload).map_err(noise_err)?;
    let proven = verify(&payload[..n], hs.get_remote_static())?;
    let n = hs
        .write_message(&keys.proof(slots), &mut buf)
        .map_err(noise_err)?;
    send_frame(frames, &buf[..n]).await?;
    Ok((hs.into_transport_mode().map_err(noise_err)?, proven))
}

/// The listening side of [`initiate`].
pub(crate) async fn respond(
    frames: &mut Frames,
    keys: &Keys,
    slots: usize,
    noise: &str,
    prologue: &[u8],
) -> Result<(snow::TransportState, Proven), String> {
    let mut hs = keys.handshake(noise, prologue, false)?;
    let mut payload = vec![0u8; NOISE_FRAME_BYTES];
    let msg = next_frame(frames).await?;
    hs.read_message(&msg, &mut payload).map_err(noise_err)?;
    let mut buf = vec![0u8; NOISE_FRAME_BYTES];
    let n = hs
        .write_message(&keys.proof(slots), &mut buf)
        .map_err(noise_err)?;
    send_frame(frames, &buf[..n]).await?;
    let msg = next_frame(frames).await?;
    let n = hs.read_message(&msg, &mut payload).map_err(noise_err)?;
    let proven = verify(&payload[..n], hs.get_remote_static())?;
    Ok((hs.into_transport_mode().map_err(noise_err)?, proven))
}

/// One cluster message (empty: a ping) as Noise messages, each written into `out` as one
/// frame of the cluster's codec (its 4-byte big-endian length, then the message): sealed
/// straight into the buffer that goes out. The bytes written.
pub(crate) fn seal_into(
    t: &mut snow::TransportState,
    plain: &[u8],
    out: &mut BytesMut,
) -> Result<usize, String> {
    let before = out.len();
    out.reserve(plain.len() + (plain.len() / PIECE_BYTES + 1) * (4 + 16 + 1));
    let mut pieces = plain.chunks(PIECE_BYTES).peekable();
    let mut piece_plain = Vec::with_capacity(PIECE_BYTES.min(plain.len()) + 1);
    loop {
        let piece = pieces.next().unwrap_or(&[]);
        let more = pieces.peek().is_some();
        piece_plain.clear();
        piece_plain.push(u8::from(more));
        piece_plain.extend_from_slice(piece);
        let sealed_len = piece_plain.len() + 16;
        out.put_u32(u32::try_from(sealed_len).expect("a piece is under 64 KiB"));
        let at = out.len();
        out.resize(at + sealed_len, 0);
        let n = match t.write_message(&piece_plain, &mut out[at..]) {
            Ok(n) => n,
            Err(e) => {
                // Nothing of the message stays in the buffer.
                out.truncate(before);
                return Err(format!("encrypting failed: {e}"));
            }
        };
        debug_assert_eq!(n, sealed_len);
        if !more {
            return Ok(out.len() - before);
        }
    }
}

/// Reassembles cluster messages from Noise messages, at most `limit` bytes each.
#[derive(Debug, Default)]
pub(crate) struct Opener {
    partial: Vec<u8>,
    /// One Noise message's plain text, kept between messages (not zeroed for each).
    buf: Vec<u8>,
}

impl Opener {
    /// Decrypt one Noise message: the whole cluster message when this was its last piece.
    pub(crate) fn open(
        &mut self,
        t: &mut snow::TransportState,
        frame: &[u8],
        limit: usize,
    ) -> Result<Option<Vec<u8>>, String> {
        self.buf.resize(NOISE_FRAME_BYTES, 0);
        let n = t.read_message(frame, &mut self.buf).map_err(|_| {
            "a frame that does not decrypt (plain text from a Hearth peer?)".to_owned()
        })?;
        let (&flag, piece) = self.buf[..n]
            .split_first()
            .ok_or("an encrypted frame without its flag")?;
        if self.partial.len() + piece.len() > limit {
            return Err(format!("a message over {limit} bytes"));
        }
        if self.partial.is_empty() && flag == 1 {
            // A long message (most often a model chunk): its room at once, not grown by doubling.
            self.partial.reserve(limit.min(LONG_MESSAGE_ROOM));
        }
        self.partial.extend_from_slice(piece);
        match flag {
            0 => Ok(Some(std::mem::take(&mut self.partial))),
            1 => Ok(None),
            other => Err(format!("an encrypted frame with flag {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(psk_a: [u8; 32], psk_b: [u8; 32]) -> (snow::HandshakeState, snow::HandshakeState) {
        pair_of(HEARTH_NOISE, psk_a, psk_b)
    }

    fn pair_of(
        noise: &str,
        psk_a: [u8; 32],
        psk_b: [u8; 32],
    ) -> (snow::HandshakeState, snow::HandshakeState) {
        let b = snow::Builder::new(params(noise));
        let (ka, kb) = (b.generate_keypair().unwrap(), b.generate_keypair().unwrap());
        let a = snow::Builder::new(params(noise))
            .local_private_key(&ka.private)
            .psk(3, &psk_a)
            .build_initiator()
            .unwrap();
        let b = snow::Builder::new(params(noise))
            .local_private_key(&kb.private)
            .psk(3, &psk_b)
            .build_responder()
            .unwrap();
        (a, b)
    }

    fn run(
        mut a: snow::HandshakeState,
        mut b: snow::HandshakeState,
    ) -> Result<(snow::TransportState, snow::TransportState), snow::Error> {
        let (mut m, mut p) = (vec![0u8; 65535], vec![0u8; 65535]);
        let n = a.write_message(&[], &mut m)?;
        b.read_message(&m[..n], &mut p)?;
        let n = b.write_message(&[], &mut m)?;
        a.read_message(&m[..n], &mut p)?;
        let n = a.write_message(&[], &mut m)?;
        b.read_message(&m[..n], &mut p)?;
        Ok((a.into_transport_mode()?, b.into_transport_mode()?))
    }

    /// [`seal_into`] an empty buffer, read back as the codec's frames.
    fn seal(t: &mut snow::TransportState, plain: &[u8]) -> Vec<Bytes> {
        use tokio_util::codec::Decoder as _;
        let mut out = BytesMut::from(&b"left"[..]);
        let n = seal_into(t, plain, &mut out).unwrap();
        assert_eq!(&out[..4], b"left", "appended after what was there");
        let mut out = out.split_off(4);
        assert_eq!(n, out.len());
        let mut codec = crate::frames::codec();
        codec.set_max_frame_length(NOISE_FRAME_BYTES);
        let mut frames = Vec::new();
        while let Some(f) = codec.decode(&mut out).unwrap() {
            frames.push(f.freeze());
        }
        assert!(out.is_empty(), "whole frames only");
        frames
    }

    #[test]
    fn the_passcode_key_is_argon2id_and_depends_on_the_passcode() {
        let k = derive_psk(Some("sesame"));
        assert_eq!(k, derive_psk(Some("sesame")));
        assert_ne!(k, derive_psk(Some("Sesame")));
        assert_ne!(derive_psk(None), k);
        assert_eq!(derive_psk(None), derive_psk(Some("")));
    }

    #[test]
    fn a_different_passcode_fails_the_handshake() {
        let (a, b) = pair(derive_psk(Some("one")), derive_psk(Some("two")));
        assert!(matches!(run(a, b), Err(snow::Error::Decrypt)));
    }

    #[test]
    fn large_messages_travel_in_pieces_and_pings_are_empty() {
        for noise in [HEARTH_NOISE, HEARTH_NOISE_AES] {
            pieces_and_pings(noise);
        }
    }

    fn pieces_and_pings(noise: &str) {
        let k = derive_psk(Some("same"));
        let (a, b) = pair_of(noise, k, k);
        let (mut a, mut b) = run(a, b).unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut opener = Opener::default();
        for message in [big.clone(), Vec::new(), b"{}".to_vec()] {
            let frames = seal(&mut a, &message);
            assert_eq!(frames.len(), message.len() / PIECE_BYTES + 1);
            let mut got = None;
            for f in &frames {
                assert!(f.len() <= NOISE_FRAME_BYTES);
                assert!(got.is_none(), "nothing after the last piece");
                got = opener.open(&mut b, f, 1 << 20).unwrap();
            }
            assert_eq!(got.as_deref(), Some(&message[..]));
        }
        // Over the limit: refused while reassembling.
        let frames = seal(&mut a, &big);
        let err = frames
            .iter()
            .map(|f| opener.open(&mut b, f, 100_000))
            .find_map(Result::err);
        assert!(err.is_some_and(|e| e.contains("over 100000")));
        // Plain text in place of an encrypted frame.
        assert!(opener.open(&mut b, br#"{"hello":{}}"#, 1 << 20).is_err());
    }

    #[test]
    fn aes_is_taken_only_when_both_machines_have_it_and_the_answer_must_be_offered() {
        let offer = |also: &[&str]| HearthHello {
            noise: HEARTH_NOISE.into(),
            tunnel: None,
            port: None,
            noise_also: also.iter().map(|s| (*s).to_owned()).collect(),
        };
        let both = offer(&[HEARTH_NOISE_AES]);
        assert_eq!(choose(&both, true), Ok(HEARTH_NOISE_AES));
        assert_eq!(choose(&both, false), Ok(HEARTH_NOISE));
        // A peer without AES instructions, or a node from before the field: ChaCha20-Poly1305.
        assert_eq!(choose(&offer(&[]), true), Ok(HEARTH_NOISE));
        assert_eq!(
            choose(&offer(&["Noise_XX_448_AESGCM_SHA512"]), true),
            Ok(HEARTH_NOISE)
        );
        let mut foreign = offer(&[HEARTH_NOISE_AES]);
        foreign.noise = "Noise_NN_25519_AESGCM_SHA256".into();
        assert!(choose(&foreign, true).is_err());
        // The dialling side takes only what it offered.
        assert_eq!(taken(&offer(&[]), &also_offered(true)), Ok(HEARTH_NOISE));
        let mut aes = offer(&[]);
        aes.noise = HEARTH_NOISE_AES.into();
        assert_eq!(taken(&aes, &also_offered(true)), Ok(HEARTH_NOISE_AES));
        assert!(taken(&aes, &also_offered(false)).is_err());
        assert!(taken(&foreign, &also_offered(true)).is_err());
        assert!(also_offered(false).is_empty());
    }

    #[test]
    fn the_two_protocols_do_not_talk_to_each_other() {
        let k = derive_psk(None);
        let (a, _) = pair_of(HEARTH_NOISE, k, k);
        let (_, b) = pair_of(HEARTH_NOISE_AES, k, k);
        assert!(run(a, b).is_err());
    }

    #[test]
    fn a_proof_is_checked_against_the_static_key() {
        let identity = Arc::new(Identity::ephemeral());
        let keys = Keys::new(None, identity.clone());
        let proof = keys.proof(4);
        let ok = verify(&proof, Some(&keys.static_public)).unwrap();
        assert_eq!(ok.device_id, identity.device_id());
        assert_eq!(ok.slots, 4);
        let other = Keys::new(None, identity);
        let err = verify(&proof, Some(&other.static_public)).unwrap_err();
        assert!(err.contains("not signed"), "{err}");
        assert!(verify(b"{}", Some(&keys.static_public)).is_err());
    }
}
