//! The LAN cluster's listener against a TealeNet-shaped peer written in Python from the
//! document and NOTES.md (`tests/tealenet_peer.py`), over real TCP on loopback: with
//! `--tealenet-compat` it is greeted, heartbeats are answered with real figures, its inference
//! requests are served by the real model and its cancellation stops one; a wrong passcode,
//! frames before `hello`, malformed and oversized frames close that one connection while the
//! node goes on serving; `/api/status` lists a connected peer with its heartbeat's figures
//! until its connection closes; sharing the node on the LAN or not leaves the cluster serving;
//! without `--tealenet-compat` a TealeNet peer is refused, and on the LAN compatibility needs
//! a passcode. A TealeNet peer fetches a model whole in 1 MiB base64 chunks, and never a file
//! named by a path. Lists of 10^5 entries in any message are refused while the node answers.

use crate::common;

use std::process::Command;

use common::cluster_peer::{
    aes_here, compat_node, compat_node_with, connect, hello, read_frame, until_listed, write_frame,
    PythonPeer, PASSCODE,
};
use common::process::{repo_root, run_peer, venv_python, NodeProcess};
use common::{TestNode, MODEL_ID};
use hearth_cluster::ClusterConfig;
use hearth_protocol::cluster::HEARTH_NOISE_AES;
use serde_json::Value;

async fn peer(t: &TestNode, args: &[&str]) -> Value {
    let port = t.node().cluster_addr().expect("the cluster listens").port();
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/tealenet_peer.py"))
        .arg("127.0.0.1")
        .arg(port.to_string())
        .args(args);
    let (stdout, _) = run_peer(cmd, "the TealeNet peer").await;
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tealenet_peer_is_greeted_heartbeated_and_served() {
    let (t, _zone) = compat_node().await;
    let seen = peer(&t, &["serve", PASSCODE, MODEL_ID]).await;
    assert_eq!(seen["ack_name"], "hearth-under-test", "{seen}");
    // The node sends heartbeats of its own.
    assert!(
        seen["seen_also"]
            .as_array()
            .unwrap()
            .contains(&"heartbeat".into()),
        "{seen}"
    );
    assert_eq!(seen["ack_models"][0], MODEL_ID, "{seen}");
    assert_eq!(
        seen["ack_passcode_hash"],
        hearth_cluster::passcode_hash(PASSCODE)
    );
    assert_eq!(seen["heartbeat_throttle"], 100);
    assert_eq!(seen["tokens_out"], 6, "{seen}");
    assert_eq!(seen["usage"]["completion_tokens"], 6, "{seen}");
    assert_eq!(seen["finish_reason"], "length", "{seen}");
    assert!(!seen["text"].as_str().unwrap().is_empty(), "{seen}");
    assert_eq!(seen["unknown_model_code"], "model_not_loaded", "{seen}");
    // Refused with the protocol's code for a request it cannot serve, saying why.
    assert_eq!(seen["tools_code"], "internal_error", "{seen}");
    assert!(
        seen["tools_error"]
            .as_str()
            .is_some_and(|m| m.contains("tools")),
        "{seen}"
    );
    // The cancelled answer (900 tokens asked) stopped while the connection stayed open.
    assert_eq!(seen["cancel_stopped"], true, "{seen}");
    assert_eq!(seen["cancelled_completed"], false, "{seen}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_peers_and_bad_frames_close_their_connection_only() {
    let (t, _zone) = compat_node().await;
    // A wrong passcode, and none at all, are refused.
    for pass in ["wrong", ""] {
        let seen = peer(&t, &["refused", pass]).await;
        assert_eq!(seen["after_hello"], "closed", "{pass}: {seen}");
    }
    let frame = |json: &str| format!("{:08x}{}", json.len(), hex::encode(json));
    for (what, bytes) in [
        // A heartbeat before hello.
        (
            "a frame before hello",
            frame(r#"{"heartbeat":{"_0":{"deviceID":"9f0c1e2a-3b4c-4d5e-8f60-718293a4b5c6"}}}"#),
        ),
        ("a first frame that is not JSON", frame("not json at all")),
        // Announces 100 MiB and sends nothing more: closed without waiting for (or
        // allocating) the body.
        ("an oversized frame", "06400000".to_owned()),
    ] {
        let seen = peer(&t, &["raw", &bytes]).await;
        assert_eq!(seen["after_raw"], "closed", "{what}: {seen}");
    }
    // The node goes on serving, there and on its doors.
    let seen = peer(&t, &["serve", PASSCODE, MODEL_ID]).await;
    assert_eq!(seen["tokens_out"], 6, "{seen}");
    let v = t
        .chat(serde_json::json!({"messages": common::user("Hi"), "max_tokens": 2}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 2);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_the_node_on_the_lan_or_not_leaves_the_cluster_serving() {
    // The cluster follows the doors on and off the LAN (it has a passcode), and keeps serving.
    let (t, _zone) = compat_node().await;
    let port = t.node().cluster_addr().unwrap().port();
    t.node().set_exposed(true).await.unwrap();
    let on_lan = t.node().cluster_addr().unwrap();
    assert!(
        on_lan.ip().is_unspecified() && on_lan.port() == port,
        "{on_lan}"
    );
    t.node().set_exposed(false).await.unwrap();
    let off = t.node().cluster_addr().unwrap();
    assert!(off.ip().is_loopback() && off.port() == port, "{off}");
    let seen = peer(&t, &["serve", PASSCODE, MODEL_ID]).await;
    assert_eq!(seen["tokens_out"], 6, "{seen}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tealenet_compatibility_a_tealenet_peer_is_refused() {
    // The port is open for Hearth peers; a plain hello, even with no passcode on either side,
    // is closed.
    let t = TestNode::start_with(|c| {
        c.cluster = Some(ClusterConfig {
            port: Some(0),
            passcode: None,
            tealenet_compat: false,
            peers: Vec::new(),
            discovery: false,
        });
    })
    .await;
    let seen = peer(&t, &["refused", ""]).await;
    assert_eq!(seen["after_hello"], "closed", "{seen}");
    assert_eq!(t.status().await["cluster"]["peers"], serde_json::json!([]));
    t.stop().await;
}

#[test]
fn tealenet_compatibility_on_the_lan_needs_a_passcode() {
    let dir = tempfile::tempdir().unwrap();
    let (refused, err) = NodeProcess::refused(&[
        "--lan".as_ref(),
        "--tealenet-compat".as_ref(),
        "--cluster-port".as_ref(),
        "0".as_ref(),
        "--data-dir".as_ref(),
        dir.path().as_os_str(),
    ]);
    assert!(refused, "started: {err}");
    assert!(err.contains("needs a cluster passcode"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_lists_a_connected_peer_with_its_heartbeat_until_it_leaves() {
    let (t, _zone) = compat_node().await;
    let port = t.node().cluster_addr().unwrap().port();
    assert_eq!(t.status().await["cluster"]["peers"], serde_json::json!([]));
    let mut python = PythonPeer::spawn(&["127.0.0.1", &port.to_string(), "linger", PASSCODE]);
    assert_eq!(python.next_line().await, r#"{"lingering": true}"#);
    // Its heartbeatAck was read just before or after its line: wait for its figures.
    common::wait_for(
        async || t.status().await["cluster"]["peers"][0]["throttle"] == 25,
        "the peer's heartbeat in the status",
    )
    .await;
    let status = t.status().await;
    assert_eq!(status["cluster"]["port"], port);
    let peer = &status["cluster"]["peers"][0];
    assert_eq!(peer["name"], "python-teale", "{peer}");
    assert_eq!(peer["kind"], "tealenet");
    assert_eq!(peer["thermal_level"], "serious");
    assert_eq!(peer["queue_depth"], 2);
    assert_eq!(peer["is_generating"], true);
    assert_eq!(peer["loaded_models"], serde_json::json!(["teale/model"]));
    // It leaves, and is gone from the list at once.
    python.bye().await;
    common::wait_for(
        async || t.status().await["cluster"]["peers"] == serde_json::json!([]),
        "the peer to leave the list",
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tealenet_peer_with_a_model_serves_this_nodes_requests_for_it() {
    let (t, _zone) = compat_node().await;
    let port = t.node().cluster_addr().unwrap().port();
    let mut python = PythonPeer::spawn(&[
        "127.0.0.1",
        &port.to_string(),
        "provide",
        PASSCODE,
        "teale/model",
    ]);
    assert_eq!(python.next_line().await, r#"{"providing": "teale/model"}"#);
    until_listed(&t, "teale/model").await;
    // A request for the peer's model goes to the peer, in the OpenAI shape it reads.
    let answer = t
        .chat(serde_json::json!({"model": "teale/model",
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}))
        .await;
    assert_eq!(
        answer["choices"][0]["message"]["content"], "Hello from a TealeNet peer.",
        "{answer}"
    );
    let seen = python.next_json().await;
    assert_eq!(seen["messages"][0]["content"], "Hi", "{seen}");
    assert_eq!(seen["hearth_fields"], serde_json::json!([]), "{seen}");
    let rid = seen["request_id"].as_str().unwrap();
    assert_eq!(rid, rid.to_uppercase(), "Hearth emits uppercase UUIDs");
    // This node's own model is still served here.
    let own = t
        .chat(serde_json::json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}))
        .await;
    assert_eq!(own["model"], MODEL_ID, "{own}");
    python.bye().await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tealenet_peer_fetches_a_model_whole_and_never_a_path() {
    // The models folder inside another, where a GGUF lies next to it: `../secret` names a real
    // model file, one the node must not give.
    let outer = tempfile::tempdir().unwrap();
    let models = outer.path().join("models");
    std::fs::create_dir(&models).unwrap();
    let link = |to: &std::path::Path| {
        if std::fs::hard_link(common::model_path(), to).is_err() {
            std::fs::copy(common::model_path(), to).unwrap();
        }
    };
    link(&models.join(format!("{MODEL_ID}.gguf")));
    let secret = outer.path().join("secret.gguf");
    link(&secret);
    // And a split model, which comes one shard after another.
    let shards = common::split_gguf::split_gguf(&common::model_path(), &models, "parts", 2);
    let (t, _zone) = compat_node_with(|c| c.models_dir = models.clone()).await;
    let absolute = secret.to_string_lossy().into_owned();
    let seen = peer(&t, &["fetch", PASSCODE, MODEL_ID, &absolute, "parts"]).await;
    let size = common::model_size();
    let answers = &seen["answers"];
    assert_eq!(answers[MODEL_ID]["available"], true, "{seen}");
    assert_eq!(answers[MODEL_ID]["size"], size, "{seen}");
    // Names that are paths are never found, whatever file they would reach.
    for path in [
        "../secret".into(),
        "../secret.gguf".into(),
        absolute.clone(),
        "models/../../secret".to_owned(),
        format!("./{MODEL_ID}"),
    ] {
        assert_eq!(answers[&path]["available"], false, "{path}: {seen}");
    }
    // A transfer of a path completes at once with nothing; the model comes whole, in order,
    // under its plain file name, with the file's own SHA-256.
    for path in ["../secret".to_owned(), absolute.clone()] {
        let sent = &seen["transfers"][&path];
        assert_eq!(sent["chunks"], 0, "{path}: {seen}");
        assert_eq!(sent["bytes"], 0, "{path}: {seen}");
    }
    let whole = &seen["transfers"][MODEL_ID];
    assert_eq!(whole["bytes"], size, "{seen}");
    assert_eq!(whole["chunks"], size.div_ceil(1 << 20), "{seen}");
    assert_eq!(
        whole["files"],
        serde_json::json!([format!("{MODEL_ID}.gguf")]),
        "{seen}"
    );
    assert_eq!(
        whole["sha256"],
        common::sha256_of(&common::model_path()),
        "{seen}"
    );
    let each: Vec<Value> = shards
        .iter()
        .map(|p| {
            serde_json::json!({
                "file": p.file_name().unwrap().to_str().unwrap(),
                "bytes": std::fs::metadata(p).unwrap().len(),
                "sha256": common::sha256_of(p),
            })
        })
        .collect();
    let total: u64 = each.iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
    assert_eq!(answers["parts"]["available"], true, "{seen}");
    assert_eq!(answers["parts"]["size"], total, "{seen}");
    assert_eq!(
        seen["transfers"]["parts"]["each"],
        Value::Array(each),
        "{seen}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hearth_hello_gets_no_passcode_hash_and_plain_text_after_it_is_refused() {
    let (t, _zone) = compat_node().await;
    let id = "0F5E4E9A-6C2B-4D59-9E1A-3B8C2D7E6F10";
    // A Hearth hello: the helloAck offers the transport and carries no passcode hash, even
    // though this node has a passcode and TealeNet compatibility is on.
    let mut tcp = connect(&t).await;
    write_frame(&mut tcp, &hello(id, None, true)).await;
    let ack = read_frame(&mut tcp).await.expect("a helloAck");
    let ack = &ack["helloAck"]["_0"];
    assert_eq!(
        ack["hearth"]["noise"],
        hearth_protocol::cluster::HEARTH_NOISE,
        "{ack}"
    );
    assert!(ack.get("clusterPasscodeHash").is_none(), "{ack}");
    assert!(
        ack["hearth"].get("noiseAlso").is_none(),
        "an ack names one: {ack}"
    );
    // Plain text where the handshake must go on: closed.
    write_frame(&mut tcp, &serde_json::json!({"heartbeat": {"_0": {}}})).await;
    assert_eq!(read_frame(&mut tcp).await, None);
    // A hello that also offers AES-256-GCM gets it when this machine has AES instructions.
    let mut tcp = connect(&t).await;
    let mut offer = hello(id, None, true);
    offer["hello"]["_0"]["hearth"]["noiseAlso"] =
        serde_json::json!(["Noise_XX_25519_AESGCM_SHA256", HEARTH_NOISE_AES]);
    write_frame(&mut tcp, &offer).await;
    let ack = read_frame(&mut tcp).await.expect("a helloAck");
    let taken = if aes_here() {
        HEARTH_NOISE_AES
    } else {
        hearth_protocol::cluster::HEARTH_NOISE
    };
    assert_eq!(ack["helloAck"]["_0"]["hearth"]["noise"], taken, "{ack}");
    // A Hearth hello that sends its passcode hash in the clear: closed before any answer.
    let mut tcp = connect(&t).await;
    write_frame(&mut tcp, &hello(id, Some(PASSCODE), true)).await;
    assert_eq!(read_frame(&mut tcp).await, None);
    // The node goes on serving, and lists neither.
    assert_eq!(t.status().await["cluster"]["peers"], serde_json::json!([]));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_proved_to_be_a_hearth_node_is_never_taken_in_plain_text() {
    let (a, _zone) = compat_node().await;
    let at = a.node().cluster_addr().unwrap().to_string();
    let b = TestNode::start_with(|c| {
        c.name = "hearth-b".into();
        c.cluster = Some(ClusterConfig {
            port: Some(0),
            passcode: Some(PASSCODE.into()),
            tealenet_compat: false,
            peers: vec![at],
            discovery: false,
        });
    })
    .await;
    common::wait_for(
        async || a.status().await["cluster"]["peers"][0]["kind"] == "hearth",
        "b joining a, encrypted",
    )
    .await;
    let b_id = b.status().await["cluster"]["device_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A plain hello in b's name, with the right passcode: refused.
    let mut tcp = connect(&a).await;
    write_frame(&mut tcp, &hello(&b_id, Some(PASSCODE), false)).await;
    assert_eq!(read_frame(&mut tcp).await, None);
    // The same from a device never seen as a Hearth node is a TealeNet peer: taken.
    let mut tcp = connect(&a).await;
    let other = "8D2C54A1-1B7E-4F0A-A5C3-77E1D9B0C2F4";
    write_frame(&mut tcp, &hello(other, Some(PASSCODE), false)).await;
    let ack = read_frame(&mut tcp).await.expect("a helloAck");
    assert!(
        ack["helloAck"]["_0"]["clusterPasscodeHash"].is_string(),
        "{ack}"
    );
    b.stop().await;
    a.stop().await;
}

/// `count` copies of `entry`, as a JSON array.
fn many(count: usize, entry: Value) -> Value {
    Value::Array(vec![entry; count])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_of_a_hundred_thousand_entries_are_refused_while_the_node_answers() {
    let (t, _zone) = compat_node().await;
    let id = "6B1D0F3E-2A4C-4E8B-9C7D-5F3A1B2C4D6E";
    let mut tcp = connect(&t).await;
    let mut h = hello(id, Some(PASSCODE), false);
    h["hello"]["_0"]["loadedModels"] = serde_json::json!(["teale/one"]);
    write_frame(&mut tcp, &h).await;
    assert!(read_frame(&mut tcp).await.is_some(), "a helloAck");
    let health = |models: Value| {
        serde_json::json!({"deviceID": id, "thermalLevel": "nominal", "throttleLevel": 100,
            "loadedModels": models, "isGenerating": false, "queueDepth": 0})
    };
    let listed = async || {
        let v = t.get_json("/v1/models").await;
        let ids: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect();
        ids
    };
    common::wait_for(
        async || listed().await.contains(&"teale/one".to_owned()),
        "the peer's model listed",
    )
    .await;
    // Each message that carries a list, with 10^5 entries (2 MB, under the frame limit), and
    // a name of 100 kB: refused as they arrive.
    let names = many(100_000, "teale/flood-model-name".into());
    let file =
        serde_json::json!({"fileName": "f-00001-of-00002.gguf", "sizeBytes": 1, "sha256": "00"});
    for m in [
        serde_json::json!({"heartbeat": {"_0": health(names.clone())}}),
        serde_json::json!({"heartbeatAck": {"_0": health(names.clone())}}),
        serde_json::json!({"heartbeat": {"_0": health(serde_json::json!(["x".repeat(100_000)]))}}),
        serde_json::json!({"modelQueryResponse": {"_0": {"modelID": "m", "available": true,
            "totalSizeBytes": 2, "files": many(100_000, file.clone())}}}),
    ] {
        write_frame(&mut tcp, &m).await;
    }
    // The node answers meanwhile (before the bounds, the first pinned a core for 40 s), and
    // what the peer said before stands.
    let models = tokio::time::timeout(std::time::Duration::from_secs(10), listed())
        .await
        .expect("/v1/models answered while the peer floods the node");
    assert!(models.contains(&"teale/one".to_owned()), "{models:?}");
    assert!(!models.iter().any(|m| m.contains("flood")), "{models:?}");
    // The connection goes on: a heartbeat of the usual size is answered.
    write_frame(
        &mut tcp,
        &serde_json::json!({"heartbeat": {"_0": health(serde_json::json!(["teale/one"]))}}),
    )
    .await;
    loop {
        let m = read_frame(&mut tcp)
            .await
            .expect("the connection stays open");
        if m.get("heartbeatAck").is_some() {
            break;
        }
    }
    // A hello past the bound (at the top or in its deviceInfo) is refused: no helloAck. (One
    // of 10^5 names is past the 64 KiB a hello may have, and closed before it is read.)
    let names = many(300, "teale/flood-model-name".into());
    for at in ["top", "deviceInfo"] {
        let mut tcp = connect(&t).await;
        let mut h = hello(
            "1C2D3E4F-5A6B-4C7D-8E9F-0A1B2C3D4E5F",
            Some(PASSCODE),
            false,
        );
        if at == "top" {
            h["hello"]["_0"]["loadedModels"] = names.clone();
        } else {
            h["hello"]["_0"]["deviceInfo"]["loadedModels"] = names.clone();
        }
        write_frame(&mut tcp, &h).await;
        assert_eq!(read_frame(&mut tcp).await, None, "{at}");
    }
    let v = t
        .chat(serde_json::json!({"messages": common::user("Hi"), "max_tokens": 2}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    t.stop().await;
}
