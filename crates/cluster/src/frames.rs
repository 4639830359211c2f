//! A cluster connection's framing: a 4-byte big-endian length, then one message, small until
//! the peer is admitted (tokio-util's length-delimited codec), and how long a handshake step
//! may take.

use std::time::Duration;

use hearth_base::connections::Held;
use hearth_protocol::limits::MAX_CLUSTER_FRAME_BYTES;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// A connection's frames before its transport is chosen.
pub(crate) type Frames = Framed<Held, LengthDelimitedCodec>;

/// How long a new connection has for its `hello` (and each handshake step).
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Largest frame before a peer is admitted: a `hello` is well under 64 KiB, and the codec
/// sets aside room for a frame as soon as it reads the frame's length.
pub(crate) const MAX_HELLO_FRAME_BYTES: usize = 64 * 1024;

/// The frame codec: a 4-byte big-endian length, then at most [`MAX_HELLO_FRAME_BYTES`] until
/// the peer is admitted, [`MAX_CLUSTER_FRAME_BYTES`] after.
pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_HELLO_FRAME_BYTES)
        .new_codec()
}

/// The limit on an admitted peer's frames.
pub(crate) const ADMITTED_FRAME_BYTES: usize = MAX_CLUSTER_FRAME_BYTES;
