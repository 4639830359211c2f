//! Models fetched from the cluster's peers over real TCP on loopback (`modelQuery`,
//! `modelTransferRequest`, 1 MiB `modelTransferChunk`s): from two peers at once, each sending a
//! range; a receiver killed (`kill -9`) mid-transfer resumes from its partial file when it
//! starts again; a peer whose announced SHA-256 is not its file's is caught, and the partial
//! deleted; names with a path are refused; a transfer the receiver gives up stops being sent;
//! a model's vision projector comes with it.
//! The file is the default model under another name.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::process::NodeProcess;
use common::{get_json_at, model_size, sha256_of, wait_for_secs, without_model, TestNode};
use serde_json::{json, Value};

/// A models folder holding a copy of the default model as `tiny.gguf`.
fn folder_with_tiny() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::model_path(), dir.path().join("tiny.gguf")).unwrap();
    dir
}

/// Writes a vision projector for `tiny.gguf` beside it in `dir`, as `mmproj-tiny.gguf`.
fn projector_beside_tiny(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("mmproj-tiny.gguf");
    let made = std::process::Command::new(common::process::venv_python())
        .arg(common::process::repo_root().join("tests/fixtures/make_projector.py"))
        .arg("--model")
        .arg(dir.join("tiny.gguf"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    out
}

/// Change a byte in the middle of the file at `path`, keeping its size and time: a node that
/// hashed it before goes on announcing the old SHA-256.
fn flip_a_byte(path: &Path) {
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xFF;
    std::fs::write(path, bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
}

/// A node sharing `dir`'s models on the cluster (no model loaded), pausing `pace` after each
/// chunk it serves.
async fn source(name: &str, dir: &Path, pace: Option<Duration>) -> TestNode {
    let dir = dir.to_path_buf();
    let name = name.to_owned();
    TestNode::start_with(move |c| {
        c.name = name;
        without_model(c, &dir);
        c.cluster = common::cluster_config(Vec::new());
        c.transfer_pace = pace;
    })
    .await
}

/// A node named "receiver" with the empty models folder `dir`, joined to the peers at `peers`
/// (their cluster addresses), once it sees them all.
async fn receiver(dir: &Path, peers: Vec<String>) -> TestNode {
    let (dir, count) = (dir.to_path_buf(), peers.len());
    let c = TestNode::start_with(move |c| {
        c.name = "receiver".into();
        without_model(c, &dir);
        c.cluster = common::cluster_config(peers);
        c.parallel = 1;
        c.ctx = Some(512);
    })
    .await;
    wait_for_secs(30, async || peers_seen(&c.base).await == count, "the peers").await;
    c
}

/// `c`'s download of `model`, asked to answer once it is over: its last progress.
async fn fetched(c: &TestNode, model: &str) -> Value {
    let r = c
        .post(
            "/api/models/downloads",
            &json!({"model": model, "wait": true}),
        )
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn cluster_addr(t: &TestNode) -> String {
    t.node().cluster_addr().unwrap().to_string()
}

/// `url`'s download of `tiny.gguf`.
async fn download_at(url: &str) -> Option<Value> {
    let all = get_json_at(format!("{url}/api/models/downloads")).await;
    all["downloads"]
        .as_array()?
        .iter()
        .find(|d| d["id"] == "tiny.gguf")
        .cloned()
}

async fn start_download(url: &str) {
    let r = common::client()
        .post(format!("{url}/api/models/downloads"))
        .json(&json!({"model": "tiny"}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
}

async fn finished(url: &str) -> Value {
    let mut last = Value::Null;
    wait_for_secs(
        120,
        async || {
            last = download_at(url).await.unwrap_or_default();
            last["state"]
                .as_str()
                .is_some_and(|s| ["done", "failed", "cancelled"].contains(&s))
        },
        "the transfer ends",
    )
    .await;
    last
}

/// Wait until `url`'s download of `tiny.gguf` has received at least `bytes`.
async fn arrived(url: &str, bytes: u64) {
    wait_for_secs(
        60,
        async || {
            download_at(url)
                .await
                .and_then(|d| d["received"].as_u64())
                .is_some_and(|r| r >= bytes)
        },
        &format!("{bytes} bytes arrive"),
    )
    .await;
}

async fn peers_seen(url: &str) -> usize {
    get_json_at(format!("{url}/api/cluster")).await["peers"]
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_comes_from_two_peers_at_once_is_verified_and_serves() {
    let (da, db) = (folder_with_tiny(), folder_with_tiny());
    // Peer a has the model's vision projector too: it comes first, from a alone.
    let projector = projector_beside_tiny(da.path());
    let projector_size = std::fs::metadata(&projector).unwrap().len();
    let a = source("peer-a", da.path(), None).await;
    let b = source("peer-b", db.path(), None).await;
    let empty = tempfile::tempdir().unwrap();
    let c = receiver(empty.path(), vec![cluster_addr(&a), cluster_addr(&b)]).await;
    // A path is no model name, here or on any peer.
    let r = c
        .post("/api/models/downloads", &json!({"model": "../tiny"}))
        .await;
    assert_eq!(r.status(), 400);
    // Asked to wait: the answer comes once the transfer is over.
    let end = fetched(&c, "tiny").await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(download_at(&c.base).await.unwrap(), end);
    let mut sources: Vec<&str> = end["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    sources.sort();
    assert_eq!(sources, ["peer-a", "peer-b"], "{end}");
    // Each sent a range: bytes from both, adding up to the file.
    let served_a = a.get_json("/api/cluster").await["model_bytes_served"]
        .as_u64()
        .unwrap();
    let served_b = b.get_json("/api/cluster").await["model_bytes_served"]
        .as_u64()
        .unwrap();
    assert!(served_a > 0 && served_b > 0, "{served_a} and {served_b}");
    assert_eq!(served_a + served_b, model_size() + projector_size);
    assert!(served_a >= projector_size);
    assert_eq!(
        end["total"].as_u64(),
        Some(model_size() + projector_size),
        "{end}"
    );
    let file = empty.path().join("tiny.gguf");
    assert_eq!(sha256_of(&file), sha256_of(&common::model_path()));
    assert_eq!(end["sha256"], sha256_of(&file));
    assert!(!empty.path().join(".downloads/tiny.gguf.part").exists());
    let got = empty.path().join("mmproj-tiny.gguf");
    assert_eq!(sha256_of(&got), sha256_of(&projector));
    // It answers at once under its name, and sees images.
    common::ask(&c, "tiny").await;
    assert_eq!(common::model_row(&c, "tiny").await["vision"], true);
    c.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_killed_mid_transfer_resumes_from_its_partial_file() {
    let da = folder_with_tiny();
    // About 9 s for the whole file: time to kill the receiver part way.
    let a = source("peer-a", da.path(), Some(Duration::from_millis(100))).await;
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let at = cluster_addr(&a);
    let args = ["--cluster-port", "0", "--peer", at.as_str()];
    let mut receiver = NodeProcess::start_without_model(&data, &args);
    wait_for_secs(
        30,
        async || peers_seen(&receiver.url).await == 1,
        "the peer",
    )
    .await;
    start_download(&receiver.url).await;
    arrived(&receiver.url, model_size() / 4 + 1).await;
    receiver.child.kill().unwrap();
    receiver.child.wait().unwrap();
    let partial = data.join("models/.downloads/tiny.gguf.part");
    let note: Value = serde_json::from_slice(
        &std::fs::read(data.join("models/.downloads/tiny.gguf.json")).unwrap(),
    )
    .unwrap();
    let kept: u64 = note["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["done"].as_u64().unwrap())
        .sum();
    assert!(partial.exists() && kept > 0, "{note}");
    // Started again, it finds the peer and goes on from what it kept.
    let receiver = NodeProcess::start_without_model(&data, &args);
    let end = finished(&receiver.url).await;
    assert_eq!(end["state"], "done", "{end}");
    assert!(
        end["resumed_from"].as_u64().unwrap() >= kept,
        "resumed from {} with {kept} kept",
        end["resumed_from"]
    );
    assert_eq!(
        sha256_of(&data.join("models/tiny.gguf")),
        sha256_of(&common::model_path())
    );
    drop(receiver);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_file_is_not_what_it_announces_is_caught() {
    let da = folder_with_tiny();
    let a = source("peer-a", da.path(), None).await;
    // The peer hashes its file once (here for its tag list), then the file changes under it
    // with its size and time kept: it goes on announcing the old SHA-256.
    let tags = a.get_json("/api/tags").await;
    assert_eq!(
        tags["models"][0]["digest"],
        sha256_of(&common::model_path())
    );
    flip_a_byte(&da.path().join("tiny.gguf"));
    let empty = tempfile::tempdir().unwrap();
    let c = receiver(empty.path(), vec![cluster_addr(&a)]).await;
    start_download(&c.base).await;
    let end = finished(&c.base).await;
    assert_eq!(end["state"], "failed", "{end}");
    let error = end["error"].as_str().unwrap();
    assert!(
        error.contains("SHA-256") && error.contains("deleted"),
        "{error}"
    );
    assert!(!empty.path().join("tiny.gguf").exists());
    assert!(!empty.path().join(".downloads/tiny.gguf.part").exists());
    c.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_not_what_its_peer_announces_is_left_out_and_the_model_comes() {
    let da = folder_with_tiny();
    let projector = projector_beside_tiny(da.path());
    let a = source("peer-a", da.path(), None).await;
    // A first receiver makes the peer hash both files; then its projector changes under it.
    let first = tempfile::tempdir().unwrap();
    let c = receiver(first.path(), vec![cluster_addr(&a)]).await;
    assert_eq!(fetched(&c, "tiny").await["state"], "done");
    assert!(first.path().join("mmproj-tiny.gguf").exists());
    c.stop().await;
    flip_a_byte(&projector);
    let second = tempfile::tempdir().unwrap();
    let d = receiver(second.path(), vec![cluster_addr(&a)]).await;
    let end = fetched(&d, "tiny").await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(
        sha256_of(&second.path().join("tiny.gguf")),
        sha256_of(&common::model_path())
    );
    assert!(!second.path().join("mmproj-tiny.gguf").exists());
    assert!(!second
        .path()
        .join(".downloads/mmproj-tiny.gguf.part")
        .exists());
    assert_ne!(common::model_row(&d, "tiny").await["vision"], true);
    d.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_given_up_by_its_receiver_stops_being_sent() {
    let da = folder_with_tiny();
    // About 9 s for the whole file: time to cancel part way.
    let a = source("peer-a", da.path(), Some(Duration::from_millis(100))).await;
    let empty = tempfile::tempdir().unwrap();
    let c = receiver(empty.path(), vec![cluster_addr(&a)]).await;
    start_download(&c.base).await;
    arrived(&c.base, 3 << 20).await;
    let r = common::client()
        .delete(format!("{}/api/models/downloads/tiny.gguf", c.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(finished(&c.base).await["state"], "cancelled");
    // The peer stops within a chunk or two of being told, well before the file's end.
    let served = async || {
        a.get_json("/api/cluster").await["model_bytes_served"]
            .as_u64()
            .unwrap()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped_at = served().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(served().await, stopped_at, "still sending");
    assert!(stopped_at < model_size() / 2, "{stopped_at}");
    c.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_model_comes_shard_by_shard_each_verified_and_loads() {
    let da = tempfile::tempdir().unwrap();
    let shards = common::split_gguf::split_gguf(&common::model_path(), da.path(), "parts", 3);
    // And a split model of one shard (its file's name is not the model's).
    let solo = common::split_gguf::split_gguf(&common::model_path(), da.path(), "solo", 1);
    let sizes: Vec<u64> = shards
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .collect();
    let a = source("peer-a", da.path(), None).await;
    let empty = tempfile::tempdir().unwrap();
    let c = receiver(empty.path(), vec![cluster_addr(&a)]).await;
    let served = async || {
        a.get_json("/api/cluster").await["model_bytes_served"]
            .as_u64()
            .unwrap()
    };
    let end = fetched(&c, "parts").await;
    assert_eq!(end["state"], "done", "{end}");
    let total: u64 = sizes.iter().sum();
    assert_eq!(
        (end["total"].as_u64(), end["received"].as_u64()),
        (Some(total), Some(total))
    );
    assert_eq!(served().await, total);
    for shard in &shards {
        let here = empty.path().join(shard.file_name().unwrap());
        assert_eq!(sha256_of(&here), sha256_of(shard), "{}", here.display());
    }
    let left: Vec<_> = std::fs::read_dir(empty.path().join(".downloads"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Whole, it is not fetched again.
    let r = c
        .post("/api/models/downloads", &json!({"model": "parts"}))
        .await;
    assert_eq!(r.status(), 409);
    // A shard lost: only it comes again, the others are checked and kept.
    let second = empty.path().join(shards[1].file_name().unwrap());
    std::fs::remove_file(&second).unwrap();
    let end = fetched(&c, "parts").await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(served().await, total + sizes[1]);
    assert_eq!(
        end["resumed_from"].as_u64(),
        Some(sizes[0] + sizes[2]),
        "{end}"
    );
    assert_eq!(sha256_of(&second), sha256_of(&shards[1]));
    let solo_size = std::fs::metadata(&solo[0]).unwrap().len();
    let end = fetched(&c, "solo").await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(end["total"].as_u64(), Some(solo_size), "{end}");
    let here = empty.path().join("solo-00001-of-00001.gguf");
    assert_eq!(sha256_of(&here), sha256_of(&solo[0]));
    // llama.cpp loads it from its shards, under the model's name.
    let row = common::model_row(&c, "parts").await;
    assert_eq!(row["shards"], 3, "{row}");
    common::ask(&c, "parts").await;
    c.stop().await;
    a.stop().await;
}
