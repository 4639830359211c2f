//! The data dir at start: a second node on the same `--data-dir` refuses to start and names
//! the one that holds it (it used to share the identity and mark the first node's streaming
//! answer interrupted); a database with pages corrupted in the middle is refused with the
//! file's name and how to recover, and never replaced by an empty one.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

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
        c.key_storage = hearth_node::auth::identity::KeyStorage::File;
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
