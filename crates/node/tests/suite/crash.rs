//! kill -9 in the middle of everything that writes: an answer streaming into a conversation,
//! conversation settings and API keys written as fast as a client can. A node started again
//! on the same data dir opens the database (SQLite's integrity check passes), finds the answer
//! marked interrupted with the text saved so far, and every setting and key in a state one of
//! the writes left it in. And the helper that starts such processes stops them when a test
//! panics.

use crate::common;

use std::time::Duration;

use common::process::NodeProcess;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_answer_and_mid_writes_leaves_sqlite_intact() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["--parallel", "1", "--ctx", "1024"];
    let mut first = NodeProcess::start(&data, &args, None);
    let http = common::client();
    let url = first.url.clone();
    let conv: Value = http
        .post(format!("{url}/api/conversations"))
        .json(&json!({"title": "crash"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let conv = conv["id"].as_str().unwrap().to_owned();
    let mut answer = http
        .post(format!("{url}/api/conversations/{conv}/chat"))
        .json(&json!({"content": "Write a very long story about a lighthouse keeper."}))
        .send()
        .await
        .unwrap();
    let _ = answer.chunk().await.unwrap();

    // Writers that never stop on their own.
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (http, url, conv) = (http.clone(), url.clone(), conv.clone());
            tokio::spawn(async move {
                for i in 0u32.. {
                    let settings = json!({"settings": {"temperature": f64::from(i % 20) / 10.0,
                        "system_prompt": format!("writer {w} pass {i} ").repeat(50)}});
                    let _ = http
                        .patch(format!("{url}/api/conversations/{conv}"))
                        .json(&settings)
                        .send()
                        .await;
                    let _ = http
                        .post(format!("{url}/api/keys"))
                        .json(&json!({"name": format!("key {w} {i}")}))
                        .send()
                        .await;
                }
            })
        })
        .collect();

    // Once the answer has been saved at least once, and the writers have written a while.
    let saved = async || {
        let c = common::get_json_at(format!("{url}/api/conversations/{conv}")).await;
        c["messages"][1]["content"]
            .as_str()
            .is_some_and(|t| t.len() > 20)
    };
    common::wait_for(saved, "a save of the streaming answer").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    for w in writers {
        w.abort();
    }
    drop(answer);
    drop(first);

    // The database as SQLite sees it.
    let db = rusqlite::Connection::open(data.join("hearth.db")).unwrap();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(db);

    let second = NodeProcess::start(&data, &args, None);
    let c = common::get_json_at(format!("{}/api/conversations/{conv}", second.url)).await;
    let answer = &c["messages"][1];
    assert_eq!(answer["status"], "interrupted", "{answer}");
    assert!(!answer["content"].as_str().unwrap().is_empty());
    let settings = &c["conversation"]["settings"];
    let t = settings["temperature"].as_f64().unwrap();
    assert!((0.0..=2.0).contains(&t), "{settings}");
    let prompt = settings["system_prompt"].as_str().unwrap();
    assert!(
        prompt.is_empty() || prompt.starts_with("writer "),
        "a torn system prompt: {prompt:.80}"
    );
    let keys = common::get_json_at(format!("{}/api/keys", second.url)).await;
    let keys = keys["keys"].as_array().unwrap();
    assert!(!keys.is_empty(), "no key was written before the kill");
    assert!(keys
        .iter()
        .all(|k| k["name"].as_str().unwrap().starts_with("key ")));
    // The node goes on writing.
    let r = http
        .patch(format!("{}/api/conversations/{conv}", second.url))
        .json(&json!({"title": "after"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The test helper's own promise: a node process started by a test that then panics is
/// stopped (killed and reaped) while the panic unwinds, not left serving.
#[test]
fn a_test_node_process_stops_when_its_test_panics() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (tx, rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let node = NodeProcess::start(&data, &["--parallel", "1"], None);
        tx.send((node.child.id(), node.addr.clone())).unwrap();
        panic!("a failing test");
    });
    assert!(test.join().is_err(), "the thread panicked");
    let (pid, addr) = rx.recv().unwrap();
    // Reaped: no process (not even a zombie) has the pid, and the port is closed.
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} is still there"
    );
    assert!(std::net::TcpStream::connect(&addr).is_err());
}
