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
//! This node opens connections as a Hearth node. The plain-text hello and helloAck are bound
//! into the Noise handshake (its prologue), so nobody on the path can alter them, and carry no
//! models (those come in the first heartbeat, encrypted). The connecting side is admitted only
//! once the listener's first encrypted message, which needs the passcode, has arrived.
//!
//! A TealeNet peer answers any hello with its plain helloAck (NOTES.md). With
//! `--tealenet-compat` such an answer makes it a TealeNet peer, as if it had dialled, unless
//! the answer is a downgrade: a device that proved to be a Hearth node, or an address or
//! device advertised as one (mDNS `app=hearth`), is never taken in plain text. A TealeNet
//! listener with a passcode closes a hello without its hash (the Swift app does), so the
//! dialler may greet such an address the TealeNet way instead ([`Greeting::TealeNet`]: the
//! hash in the clear, as that protocol has it); see `dial`'s keeper for when.

use std::sync::Arc;

use futures_util::{SinkExt as _, StreamExt as _};
use hearth_protocol::cluster::{self as cm, HearthHello, Hello, Message, PeerUuid, Shape};

use tokio_util::bytes::Bytes;

use super::frames::{Frames, HELLO_WAIT};
use super::link::{Incoming, Link};
use super::rules::Rules;
use super::secure::{self, Proven};
use crate::me::Me;

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
/// A connection closed or reset before it is [`DialFailure::Unanswered`].
async fn first(frames: &mut Frames, want: &str) -> Result<(Hello, Shape, Bytes), DialFailure> {
    let frame = match tokio::time::timeout(HELLO_WAIT, frames.next()).await {
        Err(_) => {
            return Err(DialFailure::Refused(format!(
                "no {want} within {} s",
                HELLO_WAIT.as_secs()
            )))
        }
        Ok(None) => {
            return Err(DialFailure::Unanswered(format!(
                "it closed before its {want}"
            )))
        }
        Ok(Some(Err(e))) => {
            return Err(DialFailure::Unanswered(format!(
                "it broke the connection before its {want}: {e}"
            )))
        }
        Ok(Some(Ok(f))) => f.freeze(),
    };
    match cm::decode(&frame) {
        Ok((Message::Hello(h), shape)) if want == "hello" => Ok((h, shape, frame)),
        Ok((Message::HelloAck(h), shape)) if want == "helloAck" => Ok((h, shape, frame)),
        Ok((other, _)) => Err(format!("it sent {} before {want}", other.name()).into()),
        Err(e) => Err(format!("its first frame is not a {want}: {e}").into()),
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
/// The same rules whichever side dialled.
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
    let (hello, shape, hello_bytes) = first(&mut frames, "hello")
        .await
        .map_err(|e| e.to_string())?;
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
        let mut link = Link::encrypted(frames, transport, me.state.peers.clone());
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
        link: Link::plain(frames, shape, me.state.peers.clone()),
        hello,
        proven: None,
        rules,
    })
}

/// How this node greets a peer it dials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Greeting {
    /// As a Hearth node: the transport offered, no passcode hash. A plain answer is taken as a
    /// TealeNet peer's when the rules allow it.
    Hearth,
    /// As a TealeNet peer: a plain hello with the passcode hash (for a TealeNet listener with a
    /// passcode, which closes a hello without it).
    TealeNet,
}

/// Why a dialled peer was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DialFailure {
    /// It closed the connection after our hello without answering it.
    Unanswered(String),
    /// Anything else.
    Refused(String),
}

impl std::fmt::Display for DialFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unanswered(why) | Self::Refused(why) => f.write_str(why),
        }
    }
}

impl From<String> for DialFailure {
    fn from(why: String) -> Self {
        Self::Refused(why)
    }
}

/// The connecting side, greeting the listener `greeting`'s way. With a Hearth greeting: our
/// Hearth hello (in the `_0` shape, as NOTES.md says a connecting side writes), then either
/// the listener's Hearth helloAck, the Noise handshake and its first encrypted message, or a
/// plain helloAck that the rules take as a TealeNet peer's (`advertised`: this address was
/// announced as a Hearth node's, so a plain answer there is refused).
pub(crate) async fn dial(
    mut frames: Frames,
    me: &Me,
    greeting: Greeting,
    advertised: bool,
) -> Result<Admitted, DialFailure> {
    if greeting == Greeting::TealeNet {
        let rules = me.rules();
        send(
            &mut frames,
            &Message::Hello(me.hello(false)),
            Shape::Wrapped,
        )
        .await?;
        let (ack, shape, _) = first(&mut frames, "helloAck").await?;
        if ack.hearth.is_some() {
            return Err("it answered a plain hello as a Hearth node"
                .to_owned()
                .into());
        }
        return plain_peer(frames, me, rules, ack, shape, advertised);
    }
    dial_for(frames, me, None, advertised).await
}

/// A plain helloAck to our hello: a TealeNet peer, when the rules take it.
fn plain_peer(
    frames: Frames,
    me: &Me,
    rules: Arc<Rules>,
    ack: Hello,
    shape: Shape,
    advertised: bool,
) -> Result<Admitted, DialFailure> {
    if advertised {
        return Err(
            "it answered in plain text at an address advertised as a Hearth node's"
                .to_owned()
                .into(),
        );
    }
    check_plain(me, &rules, &ack).map_err(|why| format!("it answered in plain text: {why}"))?;
    Ok(Admitted {
        link: Link::plain(frames, shape, me.state.peers.clone()),
        hello: ack,
        proven: None,
        rules,
    })
}

/// The Hearth greeting, for the cluster's messages (`tunnel` None) or for one tunnel of kind
/// `tunnel` (its `hello` says so; a tunnel is Hearth's own, so a plain answer is refused).
pub(crate) async fn dial_for(
    mut frames: Frames,
    me: &Me,
    tunnel: Option<&str>,
    advertised: bool,
) -> Result<Admitted, DialFailure> {
    let rules = me.rules();
    let mut ours = me.hello(true);
    let mut also = Vec::new();
    if let Some(h) = ours.hearth.as_mut() {
        h.tunnel = tunnel.map(str::to_owned);
        also.clone_from(&h.noise_also);
    }
    let hello = send(&mut frames, &Message::Hello(ours), Shape::Wrapped).await?;
    let (ack, shape, ack_bytes) = first(&mut frames, "helloAck").await?;
    let Some(answer) = hearth_offer(&ack)? else {
        if tunnel.is_some() {
            return Err(
                "it answered in plain text; a tunnel goes to Hearth nodes only"
                    .to_owned()
                    .into(),
            );
        }
        return plain_peer(frames, me, rules, ack, shape, advertised);
    };
    let noise = secure::taken(answer, &also)?;
    let prologue = prologue(&hello, &ack_bytes);
    let (transport, proven) =
        secure::initiate(&mut frames, &rules.keys, me.slots(), noise, &prologue).await?;
    check_proof(me, &ack, &proven)?;
    let mut link = Link::encrypted(frames, transport, me.state.peers.clone());
    // The listener's first encrypted message proves it has the passcode too (the pre-shared
    // key enters the handshake only with this side's last message).
    match tokio::time::timeout(HELLO_WAIT, link.next()).await {
        Ok(Some(Ok(Incoming::Ping))) => {}
        Ok(Some(Ok(Incoming::Message(_)))) => {
            return Err("its first encrypted message is not the expected ping"
                .to_owned()
                .into())
        }
        Ok(Some(Err(e))) => return Err(format!("the handshake failed: {e}").into()),
        Ok(None) => {
            return Err(
                "it closed the connection after the handshake (a different passcode?)"
                    .to_owned()
                    .into(),
            )
        }
        Err(_) => return Err("no confirmation of the handshake in time".to_owned().into()),
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
        let h = crate::config::passcode_hash("sesame");
        assert!(passcodes_match(None, None));
        assert!(passcodes_match(Some(&h), Some(&h)));
        assert!(passcodes_match(Some(&h), Some(&h.to_uppercase())));
        assert!(!passcodes_match(Some(&h), None));
        assert!(!passcodes_match(None, Some(&h)));
        assert!(!passcodes_match(
            Some(&h),
            Some(&crate::config::passcode_hash("other"))
        ));
    }
}
