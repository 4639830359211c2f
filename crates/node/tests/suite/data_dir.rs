//! The data dir at start and stop: a second node on the same `--data-dir` refuses to start
//! and names the one that holds it (it used to share the identity and mark the first node's
//! streaming answer interrupted); a database with pages corrupted in the middle is refused
//! with the file's name and how to recover, and never replaced by an empty one; after a clean
//! stop `hearth.db` alone holds everything (it held an empty schema, the rest in its log), and
//! a node dropped in a program closes its database.

use crate::common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::process::NodeProcess;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_on_the_same_data_dir_refuses_and_names_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = NodeProcess::start(&data, &["--parallel", "1", "--ctx", "1024"], None);
    let http = common::client();
    // An answer streaming into a conversation of the first node.
    let conv: Value = http
        .post(format!("{}/api/conversations", first.url))
        .json(&json!({"title": "long"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = conv["id"].as_str().unwrap().to_owned();
    let mut answer = http
        .post(format!("{}/api/conversations/{id}/chat", first.url))
        .json(&json!({"content": "Write a very long story about a dragon who bakes."}))
        .send()
        .await
        .unwrap();
    let _ = answer.chunk().await.unwrap();

    let model = common::model_path();
    let (refused, err) = NodeProcess::refused(&[
        "--data-dir".as_ref(),
        data.as_os_str(),
        "--model".as_ref(),
        model.as_os_str(),
    ]);
    assert!(refused, "the second node started: {err}");
    let port = first.addr.rsplit(':').next().unwrap();
    assert!(
        err.contains(&format!("pid {}, port {port}", first.child.id())),
        "{err}"
    );
    assert!(err.contains("--data-dir"), "{err}");

    // The first node's answer was not touched: it is still streaming or complete.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c: Value = http
        .get(format!("{}/api/conversations/{id}", first.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let status = c["messages"][1]["status"].as_str().unwrap_or_default();
    assert!(
        status == "streaming" || status == "complete",
        "the first node's answer is {status}: {c}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_damaged_in_the_middle_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let model = common::model_path();
    let config = || {
        let mut c = hearth_node::NodeConfig::new(&data);
        c.models_dir = model.parent().unwrap().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.port = 0;
        c.key_storage = hearth_auth::identity::KeyStorage::File;
        c
    };
    // A node makes its database; many conversations fill many pages.
    let node = hearth_node::Node::start(config()).await.unwrap();
    for i in 0..300 {
        node.store()
            .create_conversation(format!("conversation {i} {}", "x".repeat(200)))
            .await
            .unwrap();
    }
    node.shutdown().await;
    drop(node);

    let db = data.join("hearth.db");
    let pages = std::fs::metadata(&db).unwrap().len() / 4096;
    assert!(pages > 10, "only {pages} pages");
    {
        let mut f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        f.seek(SeekFrom::Start(pages / 2 * 4096)).unwrap();
        f.write_all(&[0xA5; 4096]).unwrap();
    }
    let size = std::fs::metadata(&db).unwrap().len();

    let e = hearth_node::Node::start(config())
        .await
        .expect_err("a damaged database must not be opened");
    let text = e.to_string();
    assert!(text.contains("is damaged"), "{text}");
    assert!(text.contains(&db.display().to_string()), "{text}");
    assert!(text.contains(".recover"), "{text}");
    assert_eq!(
        std::fs::metadata(&db).unwrap().len(),
        size,
        "the file was kept"
    );
}

/// The conversations in `db` copied alone, without its log, as a user backing it up would.
async fn conversations_in_copy_of(db: &Path) -> usize {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(db, dir.path().join("hearth.db")).unwrap();
    let store = hearth_store::Store::open(dir.path()).unwrap();
    store.list_conversations(None).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_clean_stop_hearth_db_alone_holds_everything() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut node = NodeProcess::start_without_model(&data, &[]);
    let http = common::client();
    for i in 0..20 {
        let r = http
            .post(format!("{}/api/conversations", node.url))
            .json(&json!({"title": format!("conversation {i}")}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    let ok = Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert_eq!(conversations_in_copy_of(&data.join("hearth.db")).await, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_dropped_in_a_program_closes_its_database() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mut c = hearth_node::NodeConfig::new(&data);
    c.models_dir = models;
    c.port = 0;
    c.key_storage = hearth_auth::identity::KeyStorage::File;
    // The cluster's dialer reaches the node's state: it must not keep it alive.
    c.cluster = Some(hearth_cluster::ClusterConfig {
        port: Some(0),
        passcode: None,
        tealenet_compat: false,
        peers: Vec::new(),
        discovery: false,
    });
    let node = hearth_node::Node::start(c).await.unwrap();
    node.store()
        .create_conversation("kept".into())
        .await
        .unwrap();
    node.shutdown().await;
    drop(node);
    // SQLite removes the log when its last connection closes, that is when the store is freed.
    let wal = data.join("hearth.db-wal");
    let deadline = Instant::now() + Duration::from_secs(10);
    while wal.exists() {
        assert!(
            Instant::now() < deadline,
            "the database is still open 10 s after the node was dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(conversations_in_copy_of(&data.join("hearth.db")).await, 1);
}
