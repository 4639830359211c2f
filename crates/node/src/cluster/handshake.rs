//! Admitting a peer, on either side of a new connection. The connecting side sends `hello`,
//! the listener answers `helloAck`; nothing else may come first (NOTES.md).
//! - Between Hearth nodes both carry the `hearth` field (no passcode hash) and the connection
//!   goes on in the Noise transport of [`super::secure`] the listener chose from the hello's
//!   offer: a different passcode fails it, and each side's device id must be the one its
//!   device key gives.
//! - A plain `hello` (a TealeNet peer) is taken only with `--tealenet-compat`, with the same
//!   passcode hash as ours (or both none), and never from a device that has proved to be a
//!   Hearth node: a Hearth node never talks plain text with another one.
//!
//! This node opens connections as a Hearth node only and takes nothing but a Hearth answer
//! (the TealeNet passcode hash is no secret on a LAN with TealeNet peers, so a plain answer
//! could be anyone's): it uses TealeNet peers that connect to it. The plain-text hello and
//! helloAck are bound into the Noise handshake (its prologue), so nobody on the path can alter
//! them, and carry no models (those come in the first heartbeat, encrypted). The connecting
//! side is admitted only once the listener's first encrypted message, which needs the
//! passcode, has arrived.

use std::sync::Arc;

use futures_util::{SinkExt as _, StreamExt as _};
use hearth_protocol::cluster::{self as cm, HearthHello, Hello, Message, PeerUuid, Shape};

use tokio_util::bytes::Bytes;

use super::link::{Incoming, Link};
use super::secure::{self, Proven};
use super::{Frames, Me, Rules, HELLO_WAIT};

/// A peer past the handshake.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(crate) link: Link,
    /// What it said about itself (its `hello` or `helloAck`).
    pub(crate) hello: Hello,
    /// A Hearth peer's proof: its verified device id and its slots.
    pub(crate) proven: Option<Proven>,
    /// The rules it was admitted by (a change since closes it: see `connection::run`).
    pub(crate) rules: Arc<Rules>,
}

/// The peer's first frame, which must be `want` (hello or helloAck), and its bytes.
async fn first(frames: &mut Frames, want: &str) -> Result<(Hello, Shape, Bytes), String> {
    let frame = match tokio::time::timeout(HELLO_WAIT, frames.next()).await {
        Err(_) => return Err(format!("no {want} within {} s", HELLO_WAIT.as_secs())),
        Ok(None) => return Err(format!("it closed before its {want}")),
        Ok(Some(Err(e))) => return Err(format!("its first frame failed: {e}")),
        Ok(Some(Ok(f))) => f.freeze(),
    };
    match cm::decode(&frame) {
        Ok((Message::Hello(h), shape)) if want == "hello" => Ok((h, shape, frame)),
        Ok((Message::HelloAck(h), shape)) if want == "helloAck" => Ok((h, shape, frame)),
        Ok((other, _)) => Err(format!("it sent {} before {want}", other.name())),
        Err(e) => Err(format!("its first frame is not a {want}: {e}")),
    }
}

/// Send `m`; the bytes sent.
async fn send(frames: &mut Frames, m: &Message, shape: Shape) -> Result<Bytes, String> {
    let bytes = Bytes::from(cm::encode(m, shape));
    frames
        .send(bytes.clone())
        .await
        .map_err(|e| format!("writing failed: {e}"))?;
    Ok(bytes)
}

/// What both sides mix into the handshake: the hello and helloAck exactly as sent.
fn prologue(hello: &[u8], ack: &[u8]) -> Vec<u8> {
    let mut p = b"hearth cluster v1".to_vec();
    for part in [hello, ack] {
        p.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        p.extend_from_slice(part);
    }
    p
}

/// The transport a Hearth hello (or helloAck) is about, when it is a Hearth one.
fn hearth_offer(hello: &Hello) -> Result<Option<&HearthHello>, String> {
    let Some(h) = &hello.hearth else {
        return Ok(None);
    };
    if hello.cluster_passcode_hash.is_some() {
        return Err("a Hearth node that sends its passcode hash in the clear".into());
    }
    Ok(Some(h))
}

/// The proven device must be the one the hello named, and not this node.
fn check_proof(me: &Me, hello: &Hello, proven: &Proven) -> Result<(), String> {
    if PeerUuid::parse(&proven.device_id).as_ref() != Some(&hello.device_info.id) {
        return Err(format!(
            "its hello names device {} but its key is device {}",
            hello.device_info.id, proven.device_id
        ));
    }
    if hello.device_info.id == me.id {
        return Err("it is this node itself".into());
    }
    Ok(())
}

/// A plain (TealeNet) peer: compatibility on, not a known Hearth node, the same passcode.
fn check_plain(me: &Me, rules: &Rules, hello: &Hello) -> Result<(), String> {
    if !rules.compat {
        return Err("it is a TealeNet peer (plain text) and TealeNet compatibility is off".into());
    }
    if me.is_known_hearth(&hello.device_info.id) {
        return Err(
            "it proved to be a Hearth node before; Hearth nodes never talk plain text".into(),
        );
    }
    if hello.device_info.id == me.id {
        return Err("it is this node itself".into());
    }
    if !passcodes_match(
        rules.passcode_hash.as_deref(),
        hello.cluster_passcode_hash.as_deref(),
    ) {
        return Err("its cluster passcode does not match".into());
    }
    Ok(())
}

/// NOTES.md's rule: both without a passcode, or the same hash (hex of either case).
pub(crate) fn passcodes_match(ours: Option<&str>, theirs: Option<&str>) -> bool {
    match (ours, theirs) {
        (None, None) => true,
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        _ => false,
    }
}

/// The listening side: the peer's hello, then our helloAck and (Hearth) the Noise handshake.
pub(crate) async fn accept(mut frames: Frames, me: &Me) -> Result<Admitted, String> {
    let rules = me.rules();
    let (hello, shape, hello_bytes) = first(&mut frames, "hello").await?;
    if let Some(offer) = hearth_offer(&hello)? {
        let noise = secure::choose(offer, secure::aes_instructions())?;
        let mut ours = me.hello(true);
        if let Some(h) = ours.hearth.as_mut() {
            h.noise = noise.to_owned();
            h.noise_also.clear();
        }
        let ack = send(&mut frames, &Message::HelloAck(ours), shape).await?;
        let prologue = prologue(&hello_bytes, &ack);
        let (transport, proven) =
            secure::respond(&mut frames, &rules.keys, me.slots(), noise, &prologue).await?;
        check_proof(me, &hello, &proven)?;
        let mut link = Link::encrypted(frames, transport, me.state.cluster_peers.clone());
        // The first encrypted message: it tells the connecting side the passcode matched.
        link.ping().await?;
        me.remember_hearth(&hello.device_info.id);
        return Ok(Admitted {
            link,
            hello,
            proven: Some(proven),
            rules,
        });
    }
    check_plain(me, &rules, &hello)?;
    send(&mut frames, &Message::HelloAck(me.hello(false)), shape).await?;
    Ok(Admitted {
        link: Link::plain(frames, shape, me.state.cluster_peers.clone()),
        hello,
        proven: None,
        rules,
    })
}

/// The connecting side: our Hearth hello (in the `_0` shape, as NOTES.md says a connecting
/// side writes), the listener's Hearth helloAck, the Noise handshake, and the listener's
/// first encrypted message.
pub(crate) async fn dial(frames: Frames, me: &Me) -> Result<Admitted, String> {
    dial_for(frames, me, None).await
}

/// [`dial`] for a connection that carries one tunnel of kind `tunnel` (its `hello` says so).
pub(crate) async fn dial_for(
    mut frames: Frames,
    me: &Me,
    tunnel: Option<&str>,
) -> Result<Admitted, String> {
    let rules = me.rules();
    let mut ours = me.hello(true);
    let mut also = Vec::new();
    if let Some(h) = ours.hearth.as_mut() {
        h.tunnel = tunnel.map(str::to_owned);
        also.clone_from(&h.noise_also);
    }
    let hello = send(&mut frames, &Message::Hello(ours), Shape::Wrapped).await?;
    let (ack, _, ack_bytes) = first(&mut frames, "helloAck").await?;
    let Some(answer) = hearth_offer(&ack)? else {
        return Err("it answered in plain text; this node connects to Hearth nodes only".into());
    };
    let noise = secure::taken(answer, &also)?;
    let prologue = prologue(&hello, &ack_bytes);
    let (transport, proven) =
        secure::initiate(&mut frames, &rules.keys, me.slots(), noise, &prologue).await?;
    check_proof(me, &ack, &proven)?;
    let mut link = Link::encrypted(frames, transport, me.state.cluster_peers.clone());
    // The listener's first encrypted message proves it has the passcode too (the pre-shared
    // key enters the handshake only with this side's last message).
    match tokio::time::timeout(HELLO_WAIT, link.next()).await {
        Ok(Some(Ok(Incoming::Ping))) => {}
        Ok(Some(Ok(Incoming::Message(_)))) => {
            return Err("its first encrypted message is not the expected ping".into())
        }
        Ok(Some(Err(e))) => return Err(format!("the handshake failed: {e}")),
        Ok(None) => {
            return Err(
                "it closed the connection after the handshake (a different passcode?)".into(),
            )
        }
        Err(_) => return Err("no confirmation of the handshake in time".into()),
    }
    me.remember_hearth(&ack.device_info.id);
    Ok(Admitted {
        link,
        hello: ack,
        proven: Some(proven),
        rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passcodes_match_when_both_have_none_or_the_same_hash() {
        let h = crate::cluster::passcode_hash("sesame");
        assert!(passcodes_match(None, None));
        assert!(passcodes_match(Some(&h), Some(&h)));
        assert!(passcodes_match(Some(&h), Some(&h.to_uppercase())));
        assert!(!passcodes_match(Some(&h), None));
        assert!(!passcodes_match(None, Some(&h)));
        assert!(!passcodes_match(
            Some(&h),
            Some(&crate::cluster::passcode_hash("other"))
        ));
    }
}
