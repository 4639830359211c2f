//! A model fetched by a TealeNet peer over a compatibility connection (plain TCP, frames of a
//! 4-byte big-endian length and JSON, every message in the `_0` envelope, chunks of 1 MiB in
//! base64), written from NOTES.md and protocols/cluster-messages.md: the peer says hello, asks
//! for the model and writes each chunk at its offset until `modelTransferComplete`. Timed
//! from the request to the last byte written, as TealeNet does it (it checks no hash).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hearth_protocol::cluster::ModelTransferChunk;
use serde_json::{json, Value};

fn send(sock: &mut TcpStream, name: &str, payload: Value) -> Result<()> {
    let body = serde_json::to_vec(&json!({ name: { "_0": payload } }))?;
    sock.write_all(&(u32::try_from(body.len())?).to_be_bytes())?;
    sock.write_all(&body)?;
    Ok(())
}

/// The next message: its name and its payload (out of the `_0` envelope).
fn recv(sock: &mut TcpStream) -> Result<(String, Value)> {
    let mut head = [0u8; 4];
    sock.read_exact(&mut head)?;
    let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
    sock.read_exact(&mut body)?;
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
    let mut written = 0u64;
    loop {
        let (kind, payload) = recv(&mut sock)?;
        match kind.as_str() {
            "modelTransferChunk" => {
                let chunk: ModelTransferChunk = serde_json::from_value(payload)?;
                let bytes = chunk.bytes().context("a chunk that is not base64")?;
                if chunk.offset != written {
                    bail!("a chunk at {} where {written} was due", chunk.offset);
                }
                out.write_all(&bytes)?;
                written += bytes.len() as u64;
            }
            "modelTransferComplete" => break,
            _ => {}
        }
    }
    out.flush()?;
    if written == 0 {
        bail!("the node sent nothing of {name}");
    }
    Ok(started.elapsed())
}
