//! A model split across nodes with llama.cpp's RPC backend, in real processes on loopback: a
//! node that shares its memory runs `hearth-node rpc-serve` for a peer's split model through an
//! encrypted tunnel, and the owner a worker process with the model's last layers there. Greedy
//! answers match the whole model's; layers follow what each machine offers; a lost peer ends
//! only the split, whose requests are then answered at once (served whole here when it fits,
//! else a 503 naming the peer), and the split loads again when the peer is back; a model too
//! large for its node is split when a request names it; a split model with a projector sees
//! images as the whole one does. (`rpc-serve` alone: `rpc_serve.rs`.)

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::process::NodeProcess;
use common::{chat_at as chat, dark, greedy_at as greedy, stripes};
use serde_json::{json, Value};

async fn get(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// The port the cluster of the node at `url` listens on.
async fn cluster_port(url: &str) -> u64 {
    get(&format!("{url}/api/status")).await["cluster"]["port"]
        .as_u64()
        .expect("the node's cluster port")
}

/// The split models' placements on the node at `url`, once `model` is in state `want`.
async fn placement(url: &str, model: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let all = get(&format!("{url}/api/models/split")).await;
        let found = all["splits"]
            .as_array()
            .and_then(|s| s.iter().find(|p| p["model"] == model).cloned());
        if let Some(p) = found.filter(|p| p["state"] == want) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{model} never became {want}: {all}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The processes `pid` started (from any of its threads), by their command lines.
fn children(pid: u32) -> Vec<String> {
    child_pids(pid)
        .into_iter()
        .filter_map(|c| std::fs::read(format!("/proc/{c}/cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .collect()
}

/// The processes `pid` started (from any of its threads).
fn child_pids(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|l| {
            l.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every path under `root`, for a failure's message.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        all.push(e.path());
        if e.path().is_dir() {
            all.extend(walk(&e.path()));
        }
    }
    all
}

/// The layout folders of prompt cache `root` that hold a file.
fn cache_folders_written(root: &Path) -> Vec<PathBuf> {
    common::cache_layout_folders(root)
        .into_iter()
        .filter(|layout| std::fs::read_dir(layout).is_ok_and(|mut files| files.next().is_some()))
        .collect()
}

/// What every node of these tests runs with: one slot, one thread, no discovery.
const COMMON: [&str; 5] = ["--parallel", "1", "--threads", "1", "--no-discovery"];

/// A node without a model that shares `mib` MiB with peers' split models (and `extra`), and
/// the address its cluster listens on.
async fn sharer(data: &Path, mib: &str, extra: &[&str]) -> (NodeProcess, String) {
    let mut args = COMMON.to_vec();
    args.extend(["--cluster-port", "0", "--share-memory", mib]);
    args.extend(extra);
    let node = NodeProcess::start_without_model(data, &args);
    let peer = format!("127.0.0.1:{}", cluster_port(&node.url).await);
    (node, peer)
}

/// An owner's arguments: [`COMMON`], a cluster, models here may take `mib` MiB (1024: as much
/// as a sharer offers), then `extra`.
fn owner_args<'a>(mib: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = COMMON.to_vec();
    args.extend(["--cluster-port", "0", "--memory-limit", mib]);
    args.extend(extra);
    args
}

/// The greedy answer at `url` about a picture.
async fn about(url: &str, png: &[u8]) -> String {
    let body = json!({
        "model": common::MODEL_ID,
        "messages": [{"role": "user", "content": [
            common::image_url_part(png),
            {"type": "text", "text": "Describe the picture."},
        ]}],
        "max_tokens": 16, "temperature": 0,
    });
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The default model in folder `dir` as `name` (a link, or a copy where links fail).
fn model_in(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::hard_link(common::model_path(), dir.join(name))
        .or_else(|_| std::fs::copy(common::model_path(), dir.join(name)).map(|_| ()))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_split_across_two_nodes_answers_as_the_whole_model() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (sharing, peer) = sharer(&dirs[0].path().join("data"), "1024", &[]).await;
    let cache = dirs[1].path().join("prompt-cache");
    let cache_arg = cache.to_string_lossy().into_owned();
    let owner_args = owner_args("1024", &["--peer", &peer, "--cache-disk", &cache_arg]);
    // The model with a vision projector beside it (random weights: answers that mean nothing).
    let (_vision, model) = common::model_with_projector("make_projector.py");
    let owner = NodeProcess::start_model(&dirs[1].path().join("data"), &model, &owner_args);
    let prompts = ["Name three colours.", "What is the capital of France?"];
    let mut whole = Vec::new();
    for prompt in prompts {
        whole.push(greedy(&owner.url, prompt).await);
    }
    let seen = [
        about(&owner.url, &stripes()).await,
        about(&owner.url, &dark()).await,
    ];
    assert_ne!(seen[0], seen[1], "the image does not reach the whole model");
    let r = reqwest::Client::new()
        .post(format!("{}/api/models/split", owner.url))
        .json(&json!({"model": common::MODEL_ID}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["local_layers"], 15, "{body}");
    assert_eq!(body["peers"][0]["layers"], 15, "{body}");
    // Half the layers: about half the weights.
    assert_eq!(
        body["peers"][0]["bytes"].as_u64(),
        Some(common::model_size() * 15 / 30),
        "{body}"
    );
    placement(&owner.url, common::MODEL_ID, "ready").await;
    // The peer runs the RPC server for it, and the owner a worker process with the model.
    assert!(
        children(sharing.child.id())
            .iter()
            .any(|c| c.contains("rpc-serve")),
        "{:?}",
        children(sharing.child.id())
    );
    assert!(
        children(owner.child.id())
            .iter()
            .any(|c| c.contains("--split-remote")),
        "{:?}",
        children(owner.child.id())
    );
    // No longer loaded whole on the owner (the peer has no model): its worker answers, with
    // the whole model's text.
    let models = get(&format!("{}/api/models", owner.url)).await;
    assert_eq!(models["loaded_models"], json!([]), "{models}");
    for (prompt, whole) in prompts.iter().zip(&whole) {
        assert_eq!(&greedy(&owner.url, prompt).await, whole, "{prompt}");
    }
    // Its worker loads the projector too: the pictures reach the split model.
    assert_eq!(about(&owner.url, &stripes()).await, seen[0]);
    assert_eq!(about(&owner.url, &dark()).await, seen[1]);
    // The worker keeps its prompt cache on disk as the owner does, in its layout's folder (its
    // KV partly on the peer: a folder beside the one of the model loaded whole, in the model's): its one
    // slot's long conversation is saved when the next prompt takes the slot.
    greedy(
        &owner.url,
        &"Tell me about the sea and its waves. ".repeat(12),
    )
    .await;
    greedy(&owner.url, "Hello.").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while cache_folders_written(&cache).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the split's worker wrote no prompt cache in {}: {:?}",
            cache.display(),
            walk(&cache)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The peer lost while the split is idle: noticed within seconds (its tunnel goes silent
    // or closes), named, and the worker is stopped.
    let mut sharing = sharing;
    let _ = Command::new("kill")
        .args(["-9", &sharing.child.id().to_string()])
        .status();
    let _ = sharing.child.wait();
    let lost = Instant::now();
    let failed = placement(&owner.url, common::MODEL_ID, "failed").await;
    assert!(lost.elapsed() < Duration::from_secs(15), "{failed}");
    assert!(
        failed["error"].as_str().unwrap_or_default().contains(&peer),
        "{failed}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while children(owner.child.id())
        .iter()
        .any(|c| c.contains("--split-remote"))
    {
        assert!(Instant::now() < deadline, "the worker outlived its tunnel");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_peer_ends_only_the_split_which_loads_again_when_it_is_back() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let sharing_data = dirs[0].path().join("data");
    let (mut sharing, peer) = sharer(&sharing_data, "1024", &[]).await;
    let port = peer.rsplit(':').next().unwrap_or_default().to_owned();
    // The owner has a second model, which must keep answering.
    let models = dirs[1].path().join("models");
    model_in(&models, "other.gguf");
    let models_arg = models.to_string_lossy().into_owned();
    let mut owner_args = COMMON.to_vec();
    owner_args.extend([
        "--cluster-port",
        "0",
        "--peer",
        &peer,
        "--models-dir",
        &models_arg,
    ]);
    let owner = NodeProcess::start(&dirs[1].path().join("data"), &owner_args, None);
    let prompt = "What is the capital of France?";
    let whole = greedy(&owner.url, prompt).await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/api/models/split", owner.url))
        .json(&json!({"model": common::MODEL_ID}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    placement(&owner.url, common::MODEL_ID, "ready").await;
    // A long answer, and the peer holding half the layers killed in the middle of it.
    let long = tokio::spawn({
        let (http, url) = (http.clone(), owner.url.clone());
        async move {
            http.post(format!("{url}/v1/chat/completions"))
                .json(&json!({
                    "messages": [{"role": "user", "content": "Tell me a long story."}],
                    // Never over before the kill (a sampled end of text came after 17 tokens
                    // once, 550 ms in).
                    "max_tokens": 2000, "temperature": 0.8, "ignore_eos": true,
                }))
                .timeout(Duration::from_secs(120))
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _ = Command::new("kill")
        .args(["-9", &sharing.child.id().to_string()])
        .status();
    let _ = sharing.child.wait();
    // The client gets a clear error in its protocol's shape (nobody else can continue it).
    let answer = long.await.unwrap().expect("the owner answers");
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        status.is_server_error() && message.contains("lost mid-answer"),
        "{status} {body}"
    );
    // The owner reports which peer was lost, and goes on serving its other model.
    let failed = placement(&owner.url, common::MODEL_ID, "failed").await;
    let why = failed["error"].as_str().unwrap_or_default();
    assert!(why.contains(&peer), "{failed}");
    let other = chat(
        &owner.url,
        json!({"model": "other", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}),
    )
    .await;
    assert_eq!(other["model"], "other", "{other}");
    // A request for the split model now is answered at once (it waited the door's 120 s for a
    // worker that was gone before): it fits here, so it is served whole until the split is
    // set up again.
    let asked = Instant::now();
    let served = http
        .post(format!("{}/v1/chat/completions", owner.url))
        .json(
            &json!({"model": common::MODEL_ID, "temperature": 0, "max_tokens": 40,
            "messages": [{"role": "user", "content": prompt}]}),
        )
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("answered within 30 s, not after the door's load wait");
    let served: Value = served.json().await.unwrap();
    assert_eq!(
        served["choices"][0]["message"]["content"],
        whole.as_str(),
        "{served}"
    );
    assert!(asked.elapsed() < Duration::from_secs(30));
    let models = get(&format!("{}/api/models", owner.url)).await;
    assert!(
        models["loaded_models"]
            .as_array()
            .unwrap()
            .contains(&json!(common::MODEL_ID)),
        "served whole here: {models}"
    );
    // The peer back on its port: the split loads again (the whole model here makes way for
    // its worker) and answers as before.
    let mut back_args = COMMON.to_vec();
    back_args.extend(["--cluster-port", &port, "--share-memory", "1024"]);
    let _back = NodeProcess::start_without_model(&sharing_data, &back_args);
    placement(&owner.url, common::MODEL_ID, "ready").await;
    assert_eq!(greedy(&owner.url, prompt).await, whole);
    let models = get(&format!("{}/api/models", owner.url)).await;
    assert!(
        !models["loaded_models"]
            .as_array()
            .unwrap()
            .contains(&json!(common::MODEL_ID)),
        "the split's worker serves it again, not a whole copy here: {models}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_split_across_three_nodes_answers_as_the_whole_model() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut peers = Vec::new();
    let mut sharers = Vec::new();
    // One peer offers half what the other does.
    for (dir, mib) in dirs[..2].iter().zip(["512", "1024"]) {
        let (node, peer) = sharer(&dir.path().join("data"), mib, &[]).await;
        peers.push(peer);
        sharers.push(node);
    }
    let mut owner_args = owner_args("1024", &[]);
    for p in &peers {
        owner_args.extend(["--peer", p]);
    }
    // llama.cpp's own account of where each layer goes, from the worker (which logs into the
    // owner's log): the proof that the tensor split is followed.
    let owner = NodeProcess::start_with_env(
        &dirs[2].path().join("data"),
        &owner_args,
        &[("RUST_LOG", "info,llama-cpp-2=debug")],
    );
    let prompt = "Name three colours.";
    let whole = greedy(&owner.url, prompt).await;
    // Both peers connected before the split is asked for.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/api/status", owner.url)).await["cluster"]["peers"]
        .as_array()
        .map_or(0, Vec::len)
        < 2
    {
        assert!(Instant::now() < deadline, "the owner never had both peers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = reqwest::Client::new()
        .post(format!("{}/api/models/split", owner.url))
        .json(&json!({"model": common::MODEL_ID}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    // 31 units (30 layers and the output) by the offers, 1024 MiB here, 512 and 1024 MiB
    // there: 12 here, 19 away, 7 to the peer offering 512 MiB and 12 (11 layers and the
    // output) to the one offering 1024, in proportion to the offers within one layer. The peer
    // offering most is listed last and holds the output, whichever connected first.
    assert_eq!(body["local_layers"], 12, "{body}");
    let units = |p: &Value| p["layers"].as_u64().unwrap() + u64::from(p["output"] == true);
    let shares: Vec<(String, u64)> = body["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["addr"].as_str().unwrap().to_owned(), units(p)))
        .collect();
    let of = |addr: &str| shares.iter().find(|(a, _)| a == addr).unwrap().1;
    assert_eq!((of(&peers[0]), of(&peers[1])), (7, 12), "{body}");
    placement(&owner.url, common::MODEL_ID, "ready").await;
    // llama.cpp put exactly those units on each peer's device (RPCi is the i-th peer listed).
    let log = std::fs::read_to_string(&owner.log).unwrap();
    for (i, (_, n)) in shares.iter().enumerate() {
        let on = log
            .lines()
            .filter(|l| l.contains(&format!("assigned to device RPC{i},")))
            .count();
        assert_eq!(on as u64, *n, "RPC{i}: {shares:?}");
    }
    for s in &sharers {
        assert!(
            children(s.child.id())
                .iter()
                .any(|c| c.contains("rpc-serve")),
            "each peer serves a share"
        );
    }
    assert_eq!(greedy(&owner.url, prompt).await, whole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_too_large_for_its_node_is_split_when_a_request_names_it() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // Models on the owner may take 100 MiB; the model needs more (its file and cache).
    let models = dirs[1].path().join("models");
    model_in(&models, "big.gguf");
    let models_arg = models.to_string_lossy().into_owned();
    let owner_args = owner_args("100", &["--models-dir", &models_arg]);
    let owner = NodeProcess::start_unloadable(&dirs[1].path().join("data"), &owner_args);
    let ask = json!({
        "model": "big", "temperature": 0, "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    });
    // No peer yet: too large, and the error says why it cannot be split either.
    let alone = chat(&owner.url, ask.clone()).await;
    let why = alone["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("not enough memory") && why.contains("cannot be split"),
        "{alone}"
    );
    // A peer that shares 512 MiB joins: the next request splits the model over both machines
    // (this one keeps the layers its 100 MiB have room for) and is answered.
    let (sharing, peer) = sharer(&dirs[0].path().join("data"), "512", &["--name", "sharer"]).await;
    let added = reqwest::Client::new()
        .post(format!("{}/api/cluster/peers", owner.url))
        .json(&json!({"address": peer}))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/api/cluster", owner.url)).await["peers"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < deadline, "the owner never met its peer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Named by a /generate config first: the split starts, and the config is answered once
    // its worker is ready (no engine of this node shows that load).
    let ws_url = format!("{}/generate", owner.url.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    common::ws_send(
        &mut ws,
        json!({"type": "config", "model": "big", "prompt": "Hi",
            "parameters": {"max_tokens": 2, "ignore_eos": true}}),
    )
    .await;
    let mut statuses = Vec::new();
    let init = loop {
        let m = common::ws_recv_timeout(&mut ws, Duration::from_secs(90))
            .await
            .expect("init once the split is ready");
        if m["type"] != "status" {
            break m;
        }
        statuses.push(m);
    };
    assert_eq!(init["type"], "init", "{init}");
    assert_eq!(
        statuses.last().map(|s| &s["progress"]),
        Some(&json!(100)),
        "{statuses:?}"
    );
    let (done, _) = common::ws_until(&mut ws, "completion").await;
    assert_eq!(done["usage"]["completion_tokens"], 2, "{done}");
    let answer = chat(&owner.url, ask).await;
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {answer}"));
    assert!(!text.is_empty(), "{answer}");
    let placed = placement(&owner.url, "big", "ready").await;
    let (here, there) = (
        placed["local_layers"].as_u64().unwrap(),
        placed["peers"][0]["layers"].as_u64().unwrap(),
    );
    // In proportion to the offers, 100 MiB here against 512 MiB there: 31 units (the layers
    // and the output) * 512 / 612 = 25.9 away, so 5 layers here, 25 and the output there.
    assert_eq!((here, there), (5, 25), "{placed}");
    assert_eq!(placed["peers"][0]["output"], true, "{placed}");
    assert!(
        placed["local_bytes"].as_u64().unwrap() < 100 << 20,
        "{placed}"
    );
    assert_eq!(placed["peers"][0]["name"], "sharer", "{placed}");
    let loaded = get(&format!("{}/api/models", owner.url)).await;
    assert_eq!(
        loaded["loaded_models"],
        json!([]),
        "never loaded whole: {loaded}"
    );
    // Its peer lost: too large to serve whole here, so a request is refused at once with a
    // 503 that names the lost peer and says when to try again (not after the load wait).
    let mut sharing = sharing;
    let _ = Command::new("kill")
        .args(["-9", &sharing.child.id().to_string()])
        .status();
    let _ = sharing.child.wait();
    placement(&owner.url, "big", "failed").await;
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", owner.url))
        .json(&json!({"model": "big", "max_tokens": 2,
            "messages": [{"role": "user", "content": "Hi"}]}))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("refused at once, not after the door's load wait");
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(body["error"]["code"], "model_unavailable", "{body}");
    assert!(
        message.contains(&peer) && message.contains("cannot be served whole here"),
        "{body}"
    );
    // Ollama's door says the same in its own shape.
    let ollama = reqwest::Client::new()
        .post(format!("{}/api/chat", owner.url))
        .json(&json!({"model": "big", "stream": false,
            "messages": [{"role": "user", "content": "Hi"}]}))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    assert_eq!(ollama.status(), 503);
    assert!(ollama.headers().contains_key("retry-after"));
    let body: Value = ollama.json().await.unwrap();
    assert!(
        body["error"].as_str().is_some_and(|m| m.contains(&peer)),
        "{body}"
    );
}

/// Whether any process `pid` started has `what` in its command line.
fn runs(pid: u32, what: &str) -> bool {
    children(pid).iter().any(|c| c.contains(what))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_ended_as_it_starts_leaves_nothing_and_its_worker_inherits_no_setting() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (sharing, peer) = sharer(&dirs[0].path().join("data"), "1024", &[]).await;
    let cache = dirs[1].path().join("prompt-cache");
    let cache_arg = cache.to_string_lossy().into_owned();
    let owner_args = owner_args("1024", &["--peer", &peer, "--cache-disk", &cache_arg]);
    // A setting of the owner's own, from its environment.
    let owner = NodeProcess::start_with_env(
        &dirs[1].path().join("data"),
        &owner_args,
        &[("HEARTH_ALLOW_HOST", "owner.example")],
    );
    let http = reqwest::Client::new();
    let split_url = format!("{}/api/models/split", owner.url);
    let model_url = format!("{split_url}/{}", common::MODEL_ID);
    // Split and ended at once, a few times: whichever comes first, nothing is left running
    // and the model answers whole again.
    for round in 0..3 {
        let post = http
            .post(&split_url)
            .json(&json!({"model": common::MODEL_ID}))
            .send();
        let delete = async {
            tokio::time::sleep(Duration::from_millis(5 * round)).await;
            http.delete(&model_url).send().await
        };
        let (posted, deleted) = tokio::join!(post, delete);
        let (posted, deleted) = (posted.unwrap().status(), deleted.unwrap().status());
        if posted == 202 && deleted == 404 {
            // The DELETE came before the split existed: end it now.
            assert_eq!(http.delete(&model_url).send().await.unwrap().status(), 200);
        } else {
            assert!(
                [202, 409].contains(&posted.as_u16()) && deleted == 200,
                "{posted} {deleted}"
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while runs(owner.child.id(), "--split-remote") || runs(sharing.child.id(), "rpc-serve") {
            assert!(
                Instant::now() < deadline,
                "round {round}: a split process outlived its end"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(get(&split_url).await["splits"], json!([]), "round {round}");
        let answer = greedy(&owner.url, "Hi").await;
        assert!(!answer.is_empty());
    }
    // Split for good: its worker gets none of the owner's HEARTH_* settings, only its token.
    let r = http
        .post(&split_url)
        .json(&json!({"model": common::MODEL_ID}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    placement(&owner.url, common::MODEL_ID, "ready").await;
    let worker = child_pids(owner.child.id())
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--split-remote"))
        })
        .expect("the worker process");
    let environ = std::fs::read(format!("/proc/{worker}/environ")).unwrap();
    let hearth: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with("HEARTH_"))
        .map(|v| v.split('=').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(hearth, ["HEARTH_JOIN_TOKEN"], "{hearth:?}");

    // The owner stopping stops its worker as a node stops, while the peer's tunnel is still
    // open: the worker's idle sequence (its one slot's prompt, never taken by another) goes
    // to --cache-disk rather than dying with a killed process.
    let before = walk(&cache).into_iter().filter(|p| p.is_file()).count();
    greedy(
        &owner.url,
        &"Tell me about the sea and its waves. ".repeat(12),
    )
    .await;
    let mut owner = owner;
    let _ = Command::new("kill")
        .args(["-TERM", &owner.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while owner.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the owner did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = walk(&cache).into_iter().filter(|p| p.is_file()).count();
    assert!(
        after > before,
        "the worker saved nothing as its node stopped: {:?}",
        walk(&cache)
    );
    assert!(
        !owner.stderr().contains("did not stop in time"),
        "{}",
        owner.stderr()
    );
    drop(sharing);
}
