//! The UI's `/api` (docs/API.md) against a real node and the real model: conversations,
//! the streaming chat with its persistence, stop/regenerate/edit, models load and unload with
//! progress, and the live status WebSocket.

use crate::common;

use std::time::{Duration, Instant};

use common::process::NodeProcess;
use common::{client, TestNode};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

async fn post(t: &TestNode, path: &str, body: Value) -> reqwest::Response {
    t.post(path, &body).await
}

async fn get(t: &TestNode, path: &str) -> Value {
    t.get_json(path).await
}

/// Send a chat turn and read the whole SSE answer: the events in order.
async fn chat(t: &TestNode, conv: &str, body: Value) -> Vec<Value> {
    let r = post(t, &format!("/api/conversations/{conv}/chat"), body).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let text = r.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn new_conversation(t: &TestNode, title: &str) -> String {
    let r = post(t, "/api/conversations", json!({"title": title})).await;
    assert_eq!(r.status(), 201);
    r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

const STORY: &str = "Write a long story about a robot learning to paint.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_crud_and_search() {
    let t = TestNode::start(2).await;
    let a = new_conversation(&t, "Groceries").await;
    let b = new_conversation(&t, "Paint  ").await;
    let r = post(&t, "/api/conversations", json!({})).await;
    let c: Value = r.json().await.unwrap();
    assert_eq!(c["title"], "New chat");
    assert_eq!(c["settings"]["temperature"], 0.8);

    let list = get(&t, "/api/conversations").await;
    let ids: Vec<&str> = list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], c["id"].as_str().unwrap(), "newest first");

    let r = client()
        .patch(t.url(&format!("/api/conversations/{b}")))
        .json(&json!({"title": "Painting", "settings": {"system_prompt": "Be brief.", "temperature": 0, "max_tokens": 12}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["title"], "Painting");
    assert_eq!(patched["settings"]["max_tokens"], 12);
    assert_eq!(
        patched["settings"]["top_p"], 0.95,
        "untouched settings stay"
    );

    // Search finds titles and message text, case-insensitively.
    let events = chat(&t, &b, json!({"content": "Tell me about Vermilion paint."})).await;
    assert_eq!(events.last().unwrap()["type"], "done");
    let found = get(&t, "/api/conversations?q=VERMILION").await;
    assert_eq!(found["conversations"].as_array().unwrap().len(), 1);
    assert_eq!(found["conversations"][0]["id"], b.as_str());
    let found = get(&t, "/api/conversations?q=grocer").await;
    assert_eq!(found["conversations"][0]["id"], a.as_str());
    assert_eq!(
        get(&t, "/api/conversations?q=100%25").await["conversations"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    // Bad input gets the /api error shape.
    for (method, path, body) in [
        (
            "PATCH",
            format!("/api/conversations/{a}"),
            json!({"title": "  "}),
        ),
        (
            "PATCH",
            format!("/api/conversations/{a}"),
            json!({"settings": {"top_p": 2}}),
        ),
        (
            "PATCH",
            format!("/api/conversations/{a}"),
            json!({"colour": "red"}),
        ),
        (
            "POST",
            format!("/api/conversations/{a}/chat"),
            json!({"content": ""}),
        ),
        (
            "POST",
            format!("/api/conversations/{a}/chat"),
            json!({"regenerate": true}),
        ),
    ] {
        let r = client()
            .request(method.parse().unwrap(), t.url(&path))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{method} {path} {body}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"].is_string() && v["error"]["code"].is_string(),
            "{v}"
        );
    }
    let r = client()
        .delete(t.url(&format!("/api/conversations/{a}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = client()
        .get(t.url(&format!("/api/conversations/{a}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streams_saves_and_applies_settings() {
    let t = TestNode::start(2).await;
    let conv = new_conversation(&t, "Chat").await;
    client()
        .patch(t.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"temperature": 0, "max_tokens": 20}}))
        .send()
        .await
        .unwrap();
    let events = chat(&t, &conv, json!({"content": STORY})).await;
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types[0], "user");
    assert_eq!(types[1], "start");
    assert_eq!(*types.last().unwrap(), "done");
    assert!(types[2..types.len() - 1].iter().all(|t| *t == "token"));
    assert!(types.len() > 5);
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "token")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    let done = &events.last().unwrap()["message"];
    assert_eq!(done["content"].as_str().unwrap(), streamed);
    assert_eq!(done["status"], "complete");
    assert_eq!(done["stats"]["tokens"], 20, "max_tokens from the settings");
    assert!(done["stats"]["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(done["stats"]["ttft_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(done["model"], common::MODEL_ID);
    assert!(done["node"].as_str().is_some_and(|n| !n.is_empty()));

    // Stored, in order; greedy: regenerate gives the same answer, replacing the old one.
    let stored = get(&t, &format!("/api/conversations/{conv}")).await;
    let messages = stored["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["content"].as_str().unwrap(), streamed);
    let again = chat(&t, &conv, json!({"regenerate": true})).await;
    assert_eq!(again[0]["type"], "start", "no user event on regenerate");
    assert_eq!(
        again.last().unwrap()["message"]["content"]
            .as_str()
            .unwrap(),
        streamed
    );
    let stored = get(&t, &format!("/api/conversations/{conv}")).await;
    assert_eq!(stored["messages"].as_array().unwrap().len(), 2);
    assert_ne!(stored["messages"][1]["id"], messages[1]["id"]);

    // A regenerate the model refuses (the system prompt grew past its context) keeps the
    // answer it would have replaced.
    let kept = stored["messages"][1]["id"].clone();
    let patch = |prompt: String| {
        client()
            .patch(t.url(&format!("/api/conversations/{conv}")))
            .json(&json!({"settings": {"system_prompt": prompt}}))
            .send()
    };
    assert_eq!(patch("word ".repeat(20_000)).await.unwrap().status(), 200);
    let r = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"regenerate": true}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    let stored = get(&t, &format!("/api/conversations/{conv}")).await;
    assert_eq!(
        stored["messages"].as_array().unwrap().len(),
        2,
        "{}",
        stored["messages"]
    );
    assert_eq!(stored["messages"][1]["id"], kept);
    assert_eq!(patch(String::new()).await.unwrap().status(), 200);

    // Edit and resend: the user message changes, later messages go, a new answer comes.
    let user_id = messages[0]["id"].as_str().unwrap();
    let edited = chat(
        &t,
        &conv,
        json!({"edit_message_id": user_id, "content": "Name three colours."}),
    )
    .await;
    assert_eq!(edited[0]["message"]["content"], "Name three colours.");
    assert_eq!(edited[0]["message"]["id"], user_id);
    let stored = get(&t, &format!("/api/conversations/{conv}")).await;
    let messages = stored["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["content"], "Name three colours.");
    assert_ne!(messages[1]["content"].as_str().unwrap(), streamed);

    // A second turn sees the first: the prompt grows.
    let turn2 = chat(&t, &conv, json!({"content": "And three more."})).await;
    assert_eq!(turn2.last().unwrap()["type"], "done");
    assert_eq!(
        get(&t, &format!("/api/conversations/{conv}")).await["messages"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    // An edit the model refuses (its words past the context) changes nothing: the message
    // keeps its words and the later ones stay.
    let r = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"edit_message_id": user_id, "content": "word ".repeat(20_000)}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    let stored = get(&t, &format!("/api/conversations/{conv}")).await;
    let messages = stored["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "the later messages went");
    assert_eq!(messages[0]["content"], "Name three colours.");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_marks_stopped_and_a_vanished_client_marks_interrupted() {
    let t = TestNode::start(2).await;
    let conv = new_conversation(&t, "Stop").await;
    let mut r = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": STORY}),
    )
    .await;
    let mut seen = String::new();
    let message_id = loop {
        seen.push_str(&String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()));
        if let Some(line) = seen.lines().find(|l| l.contains(r#""type":"start""#)) {
            let v: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
            break v["message"]["id"].as_str().unwrap().to_owned();
        }
    };
    // A second answer in the same conversation is refused while this one streams.
    let busy = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": "hi"}),
    )
    .await;
    assert_eq!(busy.status(), 409);
    let s = post(&t, &format!("/api/messages/{message_id}/stop"), json!({})).await;
    assert_eq!(s.status(), 200);
    let rest = r.text().await.unwrap();
    let last: Value = serde_json::from_str(
        rest.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .next_back()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["type"], "done");
    assert_eq!(last["message"]["status"], "stopped");
    let stopped = post(&t, &format!("/api/messages/{message_id}/stop"), json!({})).await;
    assert_eq!(stopped.status(), 404, "it is no longer streaming");

    // The client goes away mid-answer: the answer so far is kept, marked interrupted.
    let mut r = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": STORY}),
    )
    .await;
    let mut tokens = 0;
    while tokens < 5 {
        let chunk = r.chunk().await.unwrap().unwrap();
        tokens += String::from_utf8_lossy(&chunk)
            .matches(r#""type":"token""#)
            .count();
    }
    drop(r);
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let stored = get(&t, &format!("/api/conversations/{conv}")).await;
        let last = stored["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        if last["status"] != "streaming" || Instant::now() > deadline {
            break last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(last["status"], "interrupted", "{last}");
    assert!(!last["content"].as_str().unwrap().is_empty());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_leaves_the_partial_answer_marked_interrupted() {
    // A node process is killed mid-answer; a new one on the same data dir finds the answer.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let spawn = || NodeProcess::start(&data, &["--parallel", "2", "--ctx", "2048"], None);
    let mut node = spawn();
    let url = node.url.clone();
    let conv: Value = client()
        .post(format!("{url}/api/conversations"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let conv = conv["id"].as_str().unwrap().to_owned();
    let mut r = client()
        .post(format!("{url}/api/conversations/{conv}/chat"))
        .json(&json!({"content": STORY}))
        .send()
        .await
        .unwrap();
    let mut streamed = String::new();
    let mut tokens = 0;
    while tokens < 12 {
        let chunk = String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()).into_owned();
        for l in chunk.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "token" {
                tokens += 1;
                streamed.push_str(v["text"].as_str().unwrap());
            }
        }
    }
    // Wait until a save of the running answer is in the database, then kill without warning.
    let saved_so_far = async || {
        let stored = common::get_json_at(format!("{url}/api/conversations/{conv}")).await;
        stored["messages"][1]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
    };
    common::wait_for(saved_so_far, "a save of the running answer").await;
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    drop(r);
    let node2 = spawn();
    let url2 = node2.url.clone();
    let stored = common::get_json_at(format!("{url2}/api/conversations/{conv}")).await;
    let answer = &stored["messages"][1];
    assert_eq!(answer["status"], "interrupted", "{answer}");
    let saved = answer["content"].as_str().unwrap();
    // Saved every 250 ms while generation went on: one is a prefix of the other.
    assert!(!saved.is_empty(), "nothing was saved");
    assert!(
        saved.starts_with(&streamed) || streamed.starts_with(saved),
        "saved {saved:?} vs streamed {streamed:?}"
    );
    drop(node2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_unload_and_load_with_progress_on_the_events_socket() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.min_load_time = Some(Duration::from_millis(1500));
    })
    .await;
    t.node().host().ready().await.unwrap();
    let models = get(&t, "/api/models").await;
    assert_eq!(models["loaded"], common::MODEL_ID);
    assert_eq!(models["models"][0]["quantization"], "Q4_1");
    assert_eq!(models["models"][0]["context_length"], 8192);
    assert_eq!(models["models"][0]["loaded"], true);

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/api/events", t.ws_base))
        .await
        .unwrap();
    let mut next = async || -> Value {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("an event within 10 s")
            {
                Some(Ok(Message::Text(t))) => return serde_json::from_str(t.as_str()).unwrap(),
                Some(Ok(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    };
    let first = next().await;
    assert_eq!(first["type"], "status");
    for key in [
        "thermal",
        "throttle",
        "cpu_percent",
        "memory",
        "tokens_per_s",
        "slots",
        "active",
        "queued",
        "node",
    ] {
        assert!(first.get(key).is_some(), "status lacks {key}: {first}");
    }
    assert!(["sensors", "estimated"].contains(&first["thermal"]["source"].as_str().unwrap()));
    // The model's own message says where it computes too: a client that takes the model from
    // it does not lose the placement until the next status.
    assert!(
        first["model"]["placement"]["backend"].is_string(),
        "{first}"
    );
    let model = next().await;
    assert_eq!(model["type"], "model", "{model}");
    assert_eq!(model["state"], "ready", "{model}");
    assert_eq!(model["placement"], first["model"]["placement"], "{model}");

    // A running answer is told when the model goes away.
    let conv = new_conversation(&t, "Unload").await;
    let mut answer = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": STORY}),
    )
    .await;
    let mut body = String::new();
    while !body.contains(r#""type":"token""#) {
        let chunk = answer.chunk().await.unwrap().expect("ended before a token");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let r = post(&t, "/api/models/unload", json!({})).await;
    assert_eq!(r.status(), 200);
    body.push_str(&answer.text().await.unwrap());
    assert!(body.contains("unloaded"), "{body}");
    let stored = get(&t, &format!("/api/conversations/{conv}")).await;
    assert_eq!(stored["messages"][1]["status"], "error");

    let mut states = Vec::new();
    let empty = loop {
        let e = next().await;
        if e["type"] == "model" {
            states.push(e.clone());
            if e["state"] == "empty" {
                break e;
            }
        }
    };
    assert!(empty["id"].is_null());
    let r = post(
        &t,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status(), 503);
    assert_eq!(get(&t, "/api/models").await["state"], "empty");

    let r = post(&t, "/api/models/load", json!({"id": common::MODEL_ID})).await;
    assert_eq!(r.status(), 202);
    // The listing shows the load's progress on the model's row too.
    let row = get(&t, "/api/models").await["models"][0].clone();
    assert_eq!(row["state"], "loading", "{row}");
    let p = row["load_progress"].as_f64().expect("a load's progress");
    assert!((0.0..=1.0).contains(&p), "{row}");
    let mut progress = Vec::new();
    loop {
        let e = next().await;
        if e["type"] != "model" {
            continue;
        }
        if e["state"] == "loading" {
            progress.push(e["progress"].as_f64().unwrap());
        }
        if e["state"] == "ready" {
            assert!(e["placement"]["backend"].is_string(), "{e}");
            break;
        }
    }
    assert!(progress.len() >= 3, "{progress:?}");
    assert!(progress.windows(2).all(|w| w[0] <= w[1]));
    let row = get(&t, "/api/models").await["models"][0].clone();
    assert!(row.get("load_progress").is_none(), "loaded: {row}");
    assert_eq!(
        t.chat(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
            .await["usage"]["completion_tokens"],
        2
    );
    for bad in [
        json!({"id": "../etc/passwd"}),
        json!({"id": "nope"}),
        json!({}),
    ] {
        let r = post(&t, "/api/models/load", bad.clone()).await;
        assert!(
            r.status() == 400 || r.status() == 404,
            "{bad}: {}",
            r.status()
        );
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_events_follow_a_streaming_answer_and_the_ui_is_served() {
    let t = TestNode::start(2).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/api/events", t.ws_base))
        .await
        .unwrap();
    let conv = new_conversation(&t, "Busy").await;
    let r = post(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        json!({"content": STORY}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut saw_busy = false;
    while Instant::now() < deadline && !saw_busy {
        if let Ok(Some(Ok(Message::Text(m)))) =
            tokio::time::timeout(Duration::from_secs(3), ws.next()).await
        {
            let v: Value = serde_json::from_str(m.as_str()).unwrap();
            saw_busy = v["type"] == "status"
                && v["active"] == 1
                && v["tokens_per_s"].as_f64().unwrap() > 0.0;
        }
    }
    assert!(saw_busy, "no status showed the running answer");
    // The answer has no length limit: leave it (the node cancels it) rather than wait it out.
    drop(r);
    t.wait_idle("the left answer's slot to be freed").await;
    // The UI (or the page saying how to build it) is served at / and at client-side routes.
    for path in ["/", "/c/anything"] {
        let r = client().get(t.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
    }
    let r = client().get(t.url("/api/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    t.stop().await;
}
