//! Downloads from a hub, against `tests/hub_server.py` (a Hugging Face-style hub on loopback
//! serving the default model, written from the hub's documented HTTP surface) with its faults:
//! connections cut mid-file twice, a node restarted mid-download, a corrupted byte, a cancel;
//! Ollama's `/api/pull` progress lines; and `hearth-node models pull`. Each finished file
//! answers requests under its name without a restart.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::model_hub::ModelHub as Hub;
use common::{client, model_size, sha256_of, wait_for_secs, without_model, TestNode};
use serde_json::{json, Value};

const REPO: &str = "hearth-test/Tiny-GGUF";
const IN_REPO: &str = "quants/Tiny-Q4.gguf";
const SPEC: &str = "hearth-test/Tiny-GGUF/quants/Tiny-Q4.gguf";

/// The loopback hub serving the default model as `REPO/IN_REPO`.
fn start_hub() -> Hub {
    Hub::serving(REPO, &[(IN_REPO, common::model_path())], &[])
}

/// A node with an empty models folder `models` taking models from `hub`.
async fn node(models: &Path, hub: &Hub) -> TestNode {
    let models = models.to_path_buf();
    let url = hub.url.clone();
    TestNode::start_with(move |c| {
        without_model(c, &models);
        c.hub_url = url;
        c.parallel = 1;
        c.ctx = Some(512);
    })
    .await
}

async fn start_download(t: &TestNode) -> Value {
    let r = t
        .post("/api/models/downloads", &json!({"model": SPEC}))
        .await;
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], "Tiny-Q4.gguf", "{body}");
    body
}

async fn download(t: &TestNode) -> Value {
    let all = t.get_json("/api/models/downloads").await;
    all["downloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "Tiny-Q4.gguf")
        .cloned()
        .unwrap_or_else(|| panic!("no download: {all}"))
}

/// Wait until the download is over; its last progress.
async fn finished(t: &TestNode) -> Value {
    let mut last = Value::Null;
    wait_for_secs(
        120,
        async || {
            last = download(t).await;
            ["done", "failed", "cancelled"].contains(&last["state"].as_str().unwrap())
        },
        "the download ends",
    )
    .await;
    last
}

fn partials(models: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(models.join(".downloads"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// A short answer from the downloaded model, named as the folder names it.
async fn answers(t: &TestNode) {
    common::ask(t, "Tiny-Q4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_cut_twice_resumes_is_verified_and_serves() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    // Before: no model here, and the door says so.
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": "Tiny-Q4", "max_tokens": 3, "messages": common::user("Hi")}),
        )
        .await;
    assert_eq!(r.status(), 404);
    let third = model_size() / 3;
    hub.control(json!({"drops": 2, "drop_after": third})).await;
    let started = start_download(&t).await;
    assert_eq!(started["model"], SPEC, "{started}");
    let end = finished(&t).await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(end["retries"], 2, "{end}");
    assert_eq!(end["received"], model_size(), "{end}");
    // Resumed where each cut left it, never from the start.
    assert_eq!(
        hub.ranges().await,
        [
            None,
            Some(format!("bytes={third}-")),
            Some(format!("bytes={}-", 2 * third))
        ]
    );
    let file = models.path().join("Tiny-Q4.gguf");
    assert_eq!(sha256_of(&file), sha256_of(&common::model_path()));
    assert_eq!(end["sha256"], sha256_of(&file));
    assert!(
        partials(models.path()).is_empty(),
        "{:?}",
        partials(models.path())
    );
    // It answers at once, and the listings have it.
    answers(&t).await;
    let tags = t.get_json("/api/tags").await;
    assert!(
        tags["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "Tiny-Q4"),
        "{tags}"
    );
    // Asked again, the file is there: a clear refusal, not a second copy.
    let r = t
        .post("/api/models/downloads", &json!({"model": SPEC}))
        .await;
    assert_eq!(r.status(), 409);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_byte_is_caught_and_the_partial_deleted() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    hub.control(json!({"corrupt_at": model_size() / 2})).await;
    start_download(&t).await;
    let end = finished(&t).await;
    assert_eq!(end["state"], "failed", "{end}");
    let error = end["error"].as_str().unwrap();
    assert!(
        error.contains("SHA-256") && error.contains("deleted"),
        "{error}"
    );
    assert!(!models.path().join("Tiny-Q4.gguf").exists());
    assert!(
        partials(models.path()).is_empty(),
        "{:?}",
        partials(models.path())
    );
    // A bad name and a file the hub does not have: clear errors.
    let r = t
        .post("/api/models/downloads", &json!({"model": "../etc/passwd"}))
        .await;
    assert_eq!(r.status(), 400);
    let r = t
        .post(
            "/api/models/downloads",
            &json!({"model": "hearth-test/Tiny-GGUF/quants/Other.gguf"}),
        )
        .await;
    assert_eq!(r.status(), 202);
    wait_for_secs(
        30,
        async || {
            let all = t.get_json("/api/models/downloads").await;
            all["downloads"].as_array().unwrap().iter().any(|d| {
                d["id"] == "Other.gguf"
                    && d["state"] == "failed"
                    && d["error"].as_str().is_some_and(|e| e.contains("no file"))
            })
        },
        "a missing file fails with the reason",
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_larger_than_the_free_disk_fails_at_once_and_writes_nothing() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    // An exbibyte: no disk here has that much free.
    hub.control(json!({"announce_size": 1u64 << 60})).await;
    start_download(&t).await;
    let end = finished(&t).await;
    assert_eq!(end["state"], "failed", "{end}");
    let error = end["error"].as_str().unwrap();
    assert!(
        error.contains("not enough disk space") && error.contains("MiB free"),
        "{error}"
    );
    // No folder of this machine in it (the list goes to clients on the LAN too).
    let folder = models.path().to_string_lossy().into_owned();
    assert!(!error.contains(&folder), "{error}");
    assert!(hub.ranges().await.is_empty(), "no byte was asked for");
    assert!(!models.path().join("Tiny-Q4.gguf").exists());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_half_written_when_the_node_stopped_is_cleared_at_start() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let partials_dir = models.path().join(".downloads");
    std::fs::create_dir_all(&partials_dir).unwrap();
    let half = partials_dir.join("Tiny-Q4.gguf.json.tmp");
    std::fs::write(&half, b"{\"model\": \"hearth-te").unwrap();
    let t = node(models.path(), &hub).await;
    assert!(!half.exists(), "{:?}", partials(models.path()));
    assert_eq!(
        t.get_json("/api/models/downloads").await["downloads"],
        json!([]),
        "nothing resumed from it"
    );
    t.stop().await;
}

/// A node downloading the model from a hub that sends it in about `seconds`, once its first
/// bytes have arrived.
async fn under_way(seconds: u64) -> (Hub, tempfile::TempDir, TestNode) {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    hub.control(json!({"rate": model_size() / seconds})).await;
    start_download(&t).await;
    wait_for_secs(
        60,
        async || download(&t).await["received"].as_u64().unwrap() > 0,
        "bytes arrive",
    )
    .await;
    (hub, models, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_download_leaves_nothing() {
    // Slow enough to be cancelled part way (about 30 s for the whole file).
    let (_hub, models, t) = under_way(30).await;
    let r = client()
        .delete(t.url("/api/models/downloads/Tiny-Q4.gguf"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let end = finished(&t).await;
    assert_eq!(end["state"], "cancelled", "{end}");
    assert!(
        partials(models.path()).is_empty(),
        "{:?}",
        partials(models.path())
    );
    assert!(!models.path().join("Tiny-Q4.gguf").exists());
    let r = client()
        .delete(t.url("/api/models/downloads/Tiny-Q4.gguf"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "nothing under way any more");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_mid_download_resumes_it() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    hub.control(json!({"rate": model_size() / 20})).await;
    start_download(&t).await;
    let quarter = model_size() / 4;
    wait_for_secs(
        60,
        async || download(&t).await["received"].as_u64().unwrap() > quarter,
        "a quarter arrives",
    )
    .await;
    t.stop().await;
    let kept = std::fs::metadata(models.path().join(".downloads/Tiny-Q4.gguf.part"))
        .unwrap()
        .len();
    assert!(kept > quarter, "the partial file stays: {kept} bytes");
    hub.control(json!({"rate": null})).await;
    // Started again, the node goes on from the partial file by itself.
    let t = node(models.path(), &hub).await;
    let end = finished(&t).await;
    assert_eq!(end["state"], "done", "{end}");
    let ranges = hub.ranges().await;
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[1], Some(format!("bytes={kept}-")));
    assert_eq!(
        sha256_of(&models.path().join("Tiny-Q4.gguf")),
        sha256_of(&common::model_path())
    );
    answers(&t).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollamas_pull_streams_progress_lines() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    hub.control(json!({"drops": 1, "drop_after": model_size() / 2}))
        .await;
    let r = client()
        .post(t.url("/api/pull"))
        .json(&json!({"model": format!("hf.co/{SPEC}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["status"], "pulling manifest", "{text}");
    let digest = format!("sha256:{}", sha256_of(&common::model_path()));
    let progress: Vec<&Value> = lines.iter().filter(|l| l["digest"] == digest).collect();
    assert!(!progress.is_empty(), "{text}");
    assert!(
        progress.iter().all(|l| l["total"] == model_size()),
        "{text}"
    );
    let completed: Vec<u64> = progress
        .iter()
        .map(|l| l["completed"].as_u64().unwrap())
        .collect();
    assert!(completed.windows(2).all(|w| w[0] <= w[1]), "{completed:?}");
    let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(
        statuses[statuses.len() - 3..],
        ["verifying sha256 digest", "writing manifest", "success"],
        "{text}"
    );
    answers(&t).await;
    // The name it was pulled by works with the door, as `ollama run` uses it next.
    let r = client()
        .post(t.url("/api/chat"))
        .json(&json!({"model": format!("hf.co/{SPEC}"), "stream": false,
            "messages": [{"role": "user", "content": "Hi"}], "options": {"num_predict": 2}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Pulled again: the folder has it.
    let r: Value = client()
        .post(t.url("/api/pull"))
        .json(&json!({"model": SPEC, "stream": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r, json!({"status": "success"}));
    // A name that is not a hub file: Ollama's error shape.
    let r = client()
        .post(t.url("/api/pull"))
        .json(&json!({"model": "llama3.2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("OWNER/REPO/FILE.gguf")),
        "{v}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_pulls_with_resume() {
    let hub = start_hub();
    let data = tempfile::tempdir().unwrap();
    hub.control(json!({"drops": 1, "drop_after": model_size() / 2}))
        .await;
    let url = hub.url.clone();
    let dir = data.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .args(["models", "pull", SPEC, "--hub-url", &url, "--data-dir"])
            .arg(&dir)
            .env_remove("HEARTH_MODELS_DIR")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Tiny-Q4.gguf"), "{stdout}");
    let file = data.path().join("models/Tiny-Q4.gguf");
    assert_eq!(sha256_of(&file), sha256_of(&common::model_path()));
    assert_eq!(
        hub.ranges().await,
        [None, Some(format!("bytes={}-", model_size() / 2))],
        "resumed where the cut left it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_leaves_a_download_the_node_is_making_alone() {
    let (hub, models, t) = under_way(10).await;
    // The same file into the same folder from the command line: refused, nothing touched.
    let (url, dir) = (hub.url.clone(), models.path().to_path_buf());
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .args(["models", "pull", SPEC, "--hub-url", &url, "--data-dir"])
            .arg(&data_dir)
            .env("HEARTH_MODELS_DIR", &dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("another Hearth process"), "{stderr}");
    hub.control(json!({"rate": null})).await;
    let end = finished(&t).await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(
        sha256_of(&models.path().join("Tiny-Q4.gguf")),
        sha256_of(&common::model_path())
    );
    t.stop().await;
}

/// The official `ollama` Python client's `pull`, streamed: its own types read every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_ollama_client_pulls() {
    let hub = start_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    let script = r#"
import sys, ollama
client = ollama.Client(host=sys.argv[1])
seen = [p for p in client.pull(sys.argv[2], stream=True)]
assert seen[0].status == "pulling manifest", seen[0]
assert any(p.completed and p.total and p.completed == p.total for p in seen), seen
assert seen[-1].status == "success", seen[-1]
try:
    client.pull("no-such-model")
    raise AssertionError("a name that is not a hub file was accepted")
except ollama.ResponseError as e:
    assert e.status_code == 400 and "OWNER/REPO/FILE.gguf" in e.error, e
print("ollama pull OK", len(seen))
"#;
    let mut cmd = std::process::Command::new(common::process::venv_python());
    cmd.args(["-c", script, &t.base, &format!("hf.co/{SPEC}")]);
    let (stdout, _) = common::process::run_peer(cmd, "the ollama client's pull").await;
    assert!(stdout.contains("ollama pull OK"), "{stdout}");
    answers(&t).await;
    t.stop().await;
}

/// A hub serving the default model split in 3 shards under `split/`: the shards' own files
/// (in the returned folder) and the hub.
fn split_hub() -> (tempfile::TempDir, Vec<PathBuf>, Hub) {
    let made = tempfile::tempdir().unwrap();
    let shards =
        common::split_gguf::split_gguf(&common::model_path(), made.path(), "Tiny-Split", 3);
    let in_repo: Vec<(String, PathBuf)> = shards
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            (format!("split/{name}"), p.clone())
        })
        .collect();
    let files: Vec<(&str, PathBuf)> = in_repo
        .iter()
        .map(|(n, p)| (n.as_str(), p.clone()))
        .collect();
    let hub = Hub::serving(REPO, &files, &[]);
    (made, shards, hub)
}

/// The split model's downloads from the hub, named by its second shard (`wait` as in the API).
async fn start_split(t: &TestNode, wait: bool) -> reqwest::Response {
    t.post(
        "/api/models/downloads",
        &json!({"model": format!("{REPO}/split/Tiny-Split-00002-of-00003.gguf"), "wait": wait}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_model_named_by_any_shard_comes_whole_and_loads() {
    let (_made, shards, hub) = split_hub();
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    // Each shard fits on the disk, the three together do not: it fails before a byte is
    // asked for.
    let free = rustix::fs::statvfs(models.path()).unwrap();
    let free = free.f_bavail * free.f_frsize;
    hub.control(json!({"announce_size": free / 2})).await;
    let end: Value = start_split(&t, true).await.json().await.unwrap();
    assert_eq!(end["state"], "failed", "{end}");
    assert!(
        end["error"].as_str().unwrap().contains("disk space"),
        "{end}"
    );
    assert!(hub.ranges().await.is_empty(), "no byte was asked for");
    // Each shard's first request is cut part way: each resumes.
    hub.control(json!({"announce_size": null, "drops_each": 1, "drop_after": 4 << 20}))
        .await;
    let r = start_split(&t, true).await;
    assert_eq!(r.status(), 200);
    let end: Value = r.json().await.unwrap();
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(end["id"], "Tiny-Split-00001-of-00003.gguf", "{end}");
    let total: u64 = shards
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(end["total"].as_u64(), Some(total), "{end}");
    assert!(end["retries"].as_u64().unwrap() >= 3, "{end}");
    assert_eq!(end["error"], Value::Null, "{end}");
    for shard in &shards {
        let here = models.path().join(shard.file_name().unwrap());
        assert_eq!(sha256_of(&here), sha256_of(shard), "{}", here.display());
    }
    assert!(
        partials(models.path()).is_empty(),
        "{:?}",
        partials(models.path())
    );
    // The first shard came last, so the model was never listed without all of its shards.
    let asked: Vec<Value> = common::get_json_at(format!("{}/_log", hub.url))
        .await
        .as_array()
        .unwrap()
        .clone();
    let last = asked.last().unwrap()["path"].as_str().unwrap().to_owned();
    assert!(last.ends_with("-00001-of-00003.gguf"), "{asked:?}");
    for shard in &shards {
        let name = shard.file_name().unwrap().to_str().unwrap();
        let resumed = asked.iter().any(|a| {
            a["path"].as_str().is_some_and(|p| p.ends_with(name)) && a["range"].is_string()
        });
        assert!(resumed, "{name} was not resumed: {asked:?}");
    }
    // Its first shard lost, Ollama's pull of it by another shard's name fetches that one only.
    let first = models.path().join(shards[0].file_name().unwrap());
    std::fs::remove_file(&first).unwrap();
    let r = t
        .post(
            "/api/pull",
            &json!({"model": format!("{REPO}/split/Tiny-Split-00003-of-00003.gguf"), "stream": false}),
        )
        .await;
    let pulled: Value = r.json().await.unwrap();
    assert_eq!(pulled, json!({"status": "success"}));
    assert_eq!(sha256_of(&first), sha256_of(&shards[0]));
    let again = &hub.ranges().await[asked.len()..];
    assert_eq!(again, [None], "one request, for the first shard");
    common::ask(&t, "Tiny-Split").await;
    t.stop().await;
}

/// The model files (not partials) in `models`.
fn files_in(models: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(models)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Cancel `t`'s split download and wait until it is over.
async fn cancel_split(t: &TestNode) {
    let id = "Tiny-Split-00001-of-00003.gguf";
    let r = client()
        .delete(t.url(&format!("/api/models/downloads/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_for_secs(
        30,
        async || t.get_json("/api/models/downloads").await["downloads"][0]["state"] == "cancelled",
        "the cancel",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_split_download_leaves_no_shard_it_placed() {
    let (_made, shards, hub) = split_hub();
    let name = |i: usize| {
        shards[i]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    // About 2 s a shard.
    hub.control(json!({"rate": 16 << 20})).await;
    let models = tempfile::tempdir().unwrap();
    let placed = |i: usize| {
        let path = models.path().join(name(i));
        async move {
            wait_for_secs(60, async || path.exists(), "a shard in place").await;
        }
    };
    let t = node(models.path(), &hub).await;
    assert_eq!(start_split(&t, false).await.status(), 202);
    // The second shard is in place, the third on its way.
    placed(1).await;
    cancel_split(&t).await;
    assert_eq!(files_in(models.path()), Vec::<String>::new());
    assert!(
        partials(models.path()).is_empty(),
        "{:?}",
        partials(models.path())
    );
    // The user's own third shard stays; one placed before a restart goes.
    std::fs::copy(&shards[2], models.path().join(name(2))).unwrap();
    assert_eq!(start_split(&t, false).await.status(), 202);
    placed(1).await;
    t.stop().await;
    let t = node(models.path(), &hub).await;
    wait_for_secs(
        30,
        async || {
            t.get_json("/api/models/downloads").await["downloads"][0]["state"] == "downloading"
        },
        "the download resumed",
    )
    .await;
    cancel_split(&t).await;
    assert_eq!(files_in(models.path()), [name(2)]);
    assert!(
        partials(models.path()).is_empty(),
        "{:?}",
        partials(models.path())
    );
    t.stop().await;
}

/// A mirror that serves files but no listings (`resolve/` only): the size and SHA-256 come
/// from the file answer's `X-Linked-Size` and `X-Linked-Etag`, as the hub's own client reads
/// them, and the download is checked against them as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_without_listings_is_downloaded_by_its_headers() {
    let hub = start_hub();
    hub.control(json!({"no_tree": true})).await;
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    start_download(&t).await;
    let end = finished(&t).await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(end["sha256"], sha256_of(&common::model_path()), "{end}");
    // A damaged byte from the mirror: the download fails its check against the headers.
    let models = tempfile::tempdir().unwrap();
    let t2 = node(models.path(), &hub).await;
    hub.control(json!({"corrupt_at": 1000})).await;
    start_download(&t2).await;
    let end = finished(&t2).await;
    assert_eq!(end["state"], "failed", "{end}");
    t.stop().await;
    t2.stop().await;
}

/// A projector for the default model from `tests/fixtures/make_projector.py`, into `dir`.
fn projector(dir: &Path, name: &str, seed: u32) -> PathBuf {
    let out = dir.join(name);
    let status = Command::new(common::process::venv_python())
        .arg(common::process::repo_root().join("tests/fixtures/make_projector.py"))
        .arg("--model")
        .arg(common::model_path())
        .arg("--out")
        .arg(&out)
        .args(["--seed", &seed.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// A model whose folder in the repository has projectors comes with the most precise one,
/// verified and named `mmproj-<model file>`, and sees images at once; deleting the model
/// deletes its projector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_comes_with_its_projector_and_goes_with_it() {
    let made = tempfile::tempdir().unwrap();
    let f16 = projector(made.path(), "mmproj-Tiny-f16.gguf", 0);
    let q8 = projector(made.path(), "mmproj-Tiny-Q8_0.gguf", 1);
    let hub = Hub::serving(
        REPO,
        &[
            (IN_REPO, common::model_path()),
            ("quants/mmproj-Tiny-Q8_0.gguf", q8),
            ("quants/mmproj-Tiny-f16.gguf", f16.clone()),
        ],
        &[],
    );
    let models = tempfile::tempdir().unwrap();
    let t = node(models.path(), &hub).await;
    start_download(&t).await;
    let end = finished(&t).await;
    assert_eq!(end["state"], "done", "{end}");
    let both = model_size() + std::fs::metadata(&f16).unwrap().len();
    assert_eq!(end["total"], both, "{end}");
    assert_eq!(end["received"], both, "{end}");
    // The projector comes first: the download's checksum is the model's, shown last.
    assert_eq!(end["sha256"], sha256_of(&common::model_path()), "{end}");
    let asked: Vec<String> = hub
        .log()
        .await
        .iter()
        .filter_map(|e| e["path"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        asked
            .iter()
            .filter(|p| p.ends_with(".gguf"))
            .cloned()
            .collect::<Vec<_>>(),
        ["quants/mmproj-Tiny-f16.gguf", IN_REPO],
        "{asked:?}"
    );
    assert_eq!(
        files_in(models.path()),
        ["Tiny-Q4.gguf", "mmproj-Tiny-Q4.gguf"]
    );
    assert_eq!(
        sha256_of(&models.path().join("mmproj-Tiny-Q4.gguf")),
        sha256_of(&f16)
    );
    // A part of the model, not a model: not listed.
    let tags = t.get_json("/api/tags").await;
    assert_eq!(tags["models"].as_array().unwrap().len(), 1, "{tags}");
    let show: Value = t
        .post("/api/show", &json!({"model": "Tiny-Q4"}))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("vision")),
        "{show}"
    );
    let r = client()
        .delete(t.url("/api/delete"))
        .json(&json!({"model": "Tiny-Q4"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert!(
        files_in(models.path()).is_empty(),
        "{:?}",
        files_in(models.path())
    );
    t.stop().await;
}
