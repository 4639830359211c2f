//! A model fetched by a TealeNet peer over a compatibility connection (plain TCP, frames of a
//! 4-byte big-endian length and JSON, every message in the `_0` envelope, chunks of 1 MiB in
//! base64), written from NOTES.md and protocols/cluster-messages.md: the peer says hello, asks
//! for the model and writes each chunk at its offset until `modelTransferComplete`. Timed
//! from the request to the last byte written, as TealeNet does it (it checks no hash). The
//! peer keeps its buffers from chunk to chunk, so what is timed is the node's serving.

use std::borrow::Cow;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};

/// What the peer reads of a frame: a chunk (borrowed from the frame, `\/` escapes and all),
/// the end of the transfer, or anything else (skipped).
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(rename = "modelTransferChunk", borrow)]
    chunk: Option<Wrapped<'a>>,
    #[serde(rename = "modelTransferComplete")]
    complete: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Wrapped<'a> {
    #[serde(rename = "_0", borrow)]
    inner: ChunkIn<'a>,
}

#[derive(Deserialize)]
struct ChunkIn<'a> {
    offset: u64,
    #[serde(borrow)]
    data: Cow<'a, str>,
}

fn send(sock: &mut TcpStream, name: &str, payload: Value) -> Result<()> {
    let body = serde_json::to_vec(&json!({ name: { "_0": payload } }))?;
    sock.write_all(&(u32::try_from(body.len())?).to_be_bytes())?;
    sock.write_all(&body)?;
    Ok(())
}

/// The next frame's bytes, into `body` (kept from frame to frame).
fn read_frame(sock: &mut TcpStream, body: &mut Vec<u8>) -> Result<()> {
    let mut head = [0u8; 4];
    sock.read_exact(&mut head)?;
    body.resize(u32::from_be_bytes(head) as usize, 0);
    sock.read_exact(body)?;
    Ok(())
}

/// The next message: its name and its payload (out of the `_0` envelope).
fn recv(sock: &mut TcpStream) -> Result<(String, Value)> {
    let mut body = Vec::new();
    read_frame(sock, &mut body)?;
    let Value::Object(m) = serde_json::from_slice(&body)? else {
        bail!("a frame that is not a JSON object");
    };
    let (name, mut payload) = m.into_iter().next().context("an empty message")?;
    let inner = payload.get_mut("_0").map(Value::take).unwrap_or(payload);
    Ok((name, inner))
}

/// Fetch model `name` from the node whose cluster listens on loopback `port` into `to`: the
/// time from the request to the last chunk written.
pub(crate) fn fetch(port: u16, name: &str, to: &Path) -> Result<Duration> {
    let mut sock = TcpStream::connect(("127.0.0.1", port))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let device = json!({
        "id": "6f1c2a8e-2f7e-4b9e-9a55-0d1f6c3b7e21",
        "name": "bench-teale",
        "hardware": {"chipFamily": "someNewChip", "chipName": "Bench", "totalRAMGB": 8.0,
                     "gpuCoreCount": 0, "memoryBandwidthGBs": 10.0},
        "registeredAt": 798134400.0, "lastSeenAt": 798134400.0,
        "isCurrentDevice": true, "loadedModels": [],
    });
    send(
        &mut sock,
        "hello",
        json!({"deviceInfo": device, "protocolVersion": 1, "loadedModels": []}),
    )?;
    loop {
        if recv(&mut sock)?.0 == "helloAck" {
            break;
        }
    }
    let mut out = std::fs::File::create(to)?;
    let tid = "0b7d3c52-9a1e-4f4c-8e2a-5c6d7e8f9a0b";
    let started = Instant::now();
    send(
        &mut sock,
        "modelTransferRequest",
        json!({"transferID": tid, "modelID": name}),
    )?;
    // The frame and the decoded chunk, each in one buffer kept from chunk to chunk.
    let (mut body, mut bytes) = (Vec::new(), Vec::new());
    let mut written = 0u64;
    loop {
        read_frame(&mut sock, &mut body)?;
        let frame: Frame<'_> = serde_json::from_slice(&body)?;
        if frame.complete.is_some() {
            break;
        }
        let Some(Wrapped { inner: chunk }) = frame.chunk else {
            continue;
        };
        bytes.clear();
        base64_simd::STANDARD
            .decode_append(chunk.data.as_bytes(), &mut bytes)
            .context("a chunk that is not base64")?;
        if chunk.offset != written {
            bail!("a chunk at {} where {written} was due", chunk.offset);
        }
        out.write_all(&bytes)?;
        written += bytes.len() as u64;
    }
    out.flush()?;
    if written == 0 {
        bail!("the node sent nothing of {name}");
    }
    Ok(started.elapsed())
}
