//! An admitted connection's frames, whichever transport it speaks: plain JSON frames in the
//! envelope shape the TealeNet peer used, or (between Hearth nodes) the Noise transport of
//! [`super::secure`], where an empty message is a liveness ping. Reading is cancel-safe (a
//! half-received message waits in the link), so it can sit in a `select!`.

use futures_util::{SinkExt, StreamExt as _};
use hearth_protocol::cluster::{self as cm, Message, Shape};
use std::time::Instant;

use tokio_util::bytes::Bytes;

use super::frames::{Frames, ADMITTED_FRAME_BYTES};
use super::peers::Kind;
use super::secure::{self, Opener};

/// What arrived.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A whole cluster message (its JSON, or a Hearth peer's binary chunk).
    Message(Vec<u8>),
    /// A Hearth peer's liveness ping.
    Ping,
}

pub(crate) struct Link {
    frames: Frames,
    /// The plain shape to write in (TealeNet peers).
    shape: Shape,
    noise: Option<(Box<snow::TransportState>, Opener)>,
    /// When the peer's last frame (of any kind, a piece of a message included) arrived.
    heard: Instant,
    /// Where the bytes are counted.
    traffic: super::Peers,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("encrypted", &self.noise.is_some())
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A TealeNet peer's plain frames, up to the cluster's frame limit.
    pub(crate) fn plain(mut frames: Frames, shape: Shape, traffic: super::Peers) -> Self {
        frames
            .codec_mut()
            .set_max_frame_length(ADMITTED_FRAME_BYTES);
        Self {
            frames,
            shape,
            noise: None,
            heard: Instant::now(),
            traffic,
        }
    }

    /// A Hearth peer's encrypted transport.
    pub(crate) fn encrypted(
        mut frames: Frames,
        transport: snow::TransportState,
        traffic: super::Peers,
    ) -> Self {
        frames
            .codec_mut()
            .set_max_frame_length(secure::NOISE_FRAME_BYTES);
        Self {
            frames,
            shape: Shape::Wrapped,
            noise: Some((Box::new(transport), Opener::default())),
            heard: Instant::now(),
            traffic,
        }
    }

    /// When the peer's last frame arrived.
    pub(crate) fn heard(&self) -> Instant {
        self.heard
    }

    pub(crate) fn kind(&self) -> Kind {
        if self.noise.is_some() {
            Kind::Hearth
        } else {
            Kind::TealeNet
        }
    }

    /// Write one message. The stream fails a write the peer takes nothing of for the node's
    /// write timeout.
    pub(crate) async fn send(&mut self, m: &Message) -> Result<(), String> {
        self.write(cm::encode(m, self.shape)).await
    }

    /// [`Self::send`], taking the message: a binary model chunk goes out without a copy.
    pub(crate) async fn send_owned(&mut self, m: Message) -> Result<(), String> {
        self.write(cm::encode_owned(m, self.shape)).await
    }

    /// A liveness ping (Hearth peers only; a TealeNet peer gets nothing).
    pub(crate) async fn ping(&mut self) -> Result<(), String> {
        if self.noise.is_some() {
            self.write(Vec::new()).await
        } else {
            Ok(())
        }
    }

    /// A tunnel's bytes as one encrypted message (a Hearth peer's link only; empty is a ping).
    pub(crate) async fn send_bytes(&mut self, bytes: Vec<u8>) -> Result<(), String> {
        if self.noise.is_none() {
            return Err("a tunnel needs the encrypted transport".into());
        }
        self.write(bytes).await
    }

    /// One message's JSON (empty: a ping): a plain frame as it is (no copy), or sealed.
    async fn write(&mut self, plain: Vec<u8>) -> Result<(), String> {
        let failed = |e: std::io::Error| format!("writing failed: {e}");
        match &mut self.noise {
            None => {
                self.traffic.count_sent(plain.len() + 4);
                self.frames.send(Bytes::from(plain)).await.map_err(failed)
            }
            Some((t, _)) => {
                // Sealed straight into the codec's write buffer (every write flushes it whole
                // before the next, so it holds this message's frames only).
                let sent = secure::seal_into(t, &plain, self.frames.write_buffer_mut())?;
                self.traffic.count_sent(sent);
                SinkExt::<Bytes>::flush(&mut self.frames)
                    .await
                    .map_err(failed)
            }
        }
    }

    /// The next message or ping; `None` when the peer closed the connection. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Result<Incoming, String>> {
        loop {
            let frame = match self.frames.next().await? {
                Ok(f) => f,
                Err(e) => return Some(Err(format!("reading failed: {e}"))),
            };
            self.heard = Instant::now();
            self.traffic.count_received(frame.len() + 4);
            let Some((t, opener)) = &mut self.noise else {
                return Some(Ok(Incoming::Message(frame.to_vec())));
            };
            match opener.open(t, &frame, ADMITTED_FRAME_BYTES) {
                Err(e) => return Some(Err(e)),
                // A piece of a longer message: read on.
                Ok(None) => {}
                Ok(Some(m)) if m.is_empty() => return Some(Ok(Incoming::Ping)),
                Ok(Some(m)) => return Some(Ok(Incoming::Message(m))),
            }
        }
    }
}
