//! The `/generate` streaming WebSocket against a real node and the real default model: the
//! full flow with every option, stop, pause/resume, modify, regenerate, feedback in SQLite,
//! status during model loading.

use crate::common;

use std::time::{Duration, Instant};

use common::{ws_recv, ws_recv_timeout, ws_send, ws_until, TestNode, MODEL_ID};
use serde_json::json;

const PROMPT: &str = "Write a short story about a robot learning to paint.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_flow_with_every_option() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    ws_send(
        &mut ws,
        json!({"type": "config", "model": MODEL_ID, "prompt": PROMPT,
            "parameters": {"max_tokens": 20, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
                "repetition_penalty": 1.1, "seed": 7, "stop": ["THE END"]},
            "options": {"stream": true, "echo_prompt": true, "include_token_ids": true,
                "include_logprobs": true, "include_timing": true}}),
    )
    .await;
    let init = ws_recv(&mut ws).await;
    assert_eq!(init["type"], "init", "{init}");
    assert_eq!(init["model"], MODEL_ID);
    let request_id = init["request_id"].as_str().unwrap().to_owned();
    assert!(request_id.starts_with("gen_"));
    assert_eq!(init["model_info"]["quantization"], "Q4_1");
    assert_eq!(init["model_info"]["max_tokens"], 1024);

    let (completion, tokens) = ws_until(&mut ws, "completion").await;
    assert!(!tokens.is_empty());
    let mut text = PROMPT.to_owned();
    let mut last_total = 0.0;
    for tok in &tokens {
        assert_eq!(tok["type"], "token", "{tok}");
        text.push_str(tok["token"].as_str().unwrap());
        assert_eq!(
            tok["generated_text"].as_str().unwrap(),
            text,
            "generated_text is cumulative with the prompt echoed"
        );
        assert!(tok["token_id"].is_i64(), "{tok}");
        let lps = tok["logprobs"].as_array().unwrap();
        assert_eq!(lps.len(), 6, "the token plus 5 alternatives: {tok}");
        assert!(lps.iter().all(|l| l["logprob"].as_f64().unwrap() <= 0.0));
        let total = tok["timing"]["total_ms"].as_f64().unwrap();
        assert!(tok["timing"]["token_ms"].as_f64().unwrap() >= 0.0);
        assert!(total >= last_total);
        last_total = total;
        assert_eq!(tok["finished"], false);
        assert!(tok["finish_reason"].is_null());
    }
    assert_eq!(completion["generated_text"].as_str().unwrap(), text);
    assert_eq!(completion["finish_reason"], "length");
    assert_eq!(completion["request_id"], request_id.as_str());
    let usage = &completion["usage"];
    assert_eq!(usage["completion_tokens"], 20);
    assert_eq!(
        tokens.len(),
        20,
        "one token message per sampled token when ids are asked for"
    );
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + 20
    );
    assert!(completion["timing"]["first_token_ms"].as_f64().unwrap() > 0.0);
    assert!(
        completion["timing"]["total_ms"].as_f64().unwrap()
            >= completion["timing"]["first_token_ms"].as_f64().unwrap()
    );

    // A second config on the same socket runs another generation; stream:false sends only
    // init and completion; defaults leave ids, logprobs and timing out.
    ws_send(&mut ws, json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": 5}, "options": {"stream": false}})).await;
    let init2 = ws_recv(&mut ws).await;
    assert_eq!(init2["type"], "init");
    assert_ne!(init2["request_id"], request_id.as_str());
    let done = ws_recv(&mut ws).await;
    assert_eq!(done["type"], "completion", "{done}");
    assert!(done.get("timing").is_none());

    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": 3}}),
    )
    .await;
    let (_, toks) = ws_until(&mut ws, "completion").await;
    for tok in toks.iter().filter(|m| m["type"] == "token") {
        assert!(
            tok.get("token_id").is_none()
                && tok.get("logprobs").is_none()
                && tok.get("timing").is_none()
        );
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_the_stream_with_a_completion_within_two_seconds() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    ws_send(&mut ws, json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 1000, "temperature": 0}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    // Let a few tokens through first.
    for _ in 0..3 {
        assert_eq!(ws_recv(&mut ws).await["type"], "token");
    }
    let sent = Instant::now();
    ws_send(&mut ws, json!({"type": "control", "action": "stop"})).await;
    let (completion, _) = ws_until(&mut ws, "completion").await;
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        sent.elapsed()
    );
    assert_eq!(completion["finish_reason"], "cancelled");
    let n = completion["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((3..1000).contains(&n), "{completion}");
    // The slot is free again.
    t.wait_idle("the stopped slot to be freed").await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_gives_silence_until_resume() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    ws_send(&mut ws, json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 40, "temperature": 0}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    let mut text = String::new();
    for _ in 0..3 {
        let m = ws_recv(&mut ws).await;
        text = m["generated_text"].as_str().unwrap().to_owned();
    }
    ws_send(&mut ws, json!({"type": "control", "action": "pause"})).await;
    // Tokens already in flight may still arrive; then the status acknowledging the pause.
    let (ack, _) = ws_until(&mut ws, "status").await;
    assert_eq!(ack["operation"], "pause");
    let quiet = ws_recv_timeout(&mut ws, Duration::from_millis(1500)).await;
    assert!(quiet.is_none(), "message while paused: {quiet:?}");
    ws_send(&mut ws, json!({"type": "control", "action": "resume"})).await;
    let ack = ws_recv(&mut ws).await;
    assert_eq!(ack["operation"], "resume", "{ack}");
    let (completion, after) = ws_until(&mut ws, "completion").await;
    assert!(!after.is_empty(), "no tokens after resume");
    assert!(completion["generated_text"]
        .as_str()
        .unwrap()
        .starts_with(&text));
    assert_eq!(completion["usage"]["completion_tokens"], 40);

    // The paused text equals an uninterrupted greedy run.
    ws_send(&mut ws, json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 40, "temperature": 0}})).await;
    let (straight, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(straight["generated_text"], completion["generated_text"]);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_changes_a_running_generation() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    let greedy = json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 60, "temperature": 0}});
    ws_send(&mut ws, greedy.clone()).await;
    let (reference, _) = ws_until(&mut ws, "completion").await;
    let reference = reference["generated_text"].as_str().unwrap().to_owned();

    // max_tokens lowered mid-stream ends the generation there.
    ws_send(&mut ws, greedy.clone()).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    ws_send(&mut ws, json!({"type": "control", "action": "pause"})).await;
    let (ack, _) = ws_until(&mut ws, "status").await;
    assert_eq!(ack["operation"], "pause");
    ws_send(
        &mut ws,
        json!({"type": "control", "action": "modify", "parameters": {"max_tokens": 12}}),
    )
    .await;
    let (ack, _) = ws_until(&mut ws, "status").await;
    assert_eq!(ack["operation"], "modify");
    assert!(ack["message"].as_str().unwrap().contains("max_tokens"));
    ws_send(&mut ws, json!({"type": "control", "action": "resume"})).await;
    let (done, _) = ws_until(&mut ws, "completion").await;
    let n = done["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n <= 12, "modify(max_tokens) ignored: {n} tokens");
    assert_eq!(done["finish_reason"], "length");

    // A high temperature set mid-stream makes the text leave the greedy path.
    ws_send(&mut ws, greedy.clone()).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    ws_send(&mut ws, json!({"type": "control", "action": "modify", "parameters": {"temperature": 2.0, "top_k": 0, "top_p": 1.0, "seed": 99}})).await;
    let (ack, _) = ws_until(&mut ws, "status").await;
    assert_eq!(ack["operation"], "modify");
    let (done, _) = ws_until(&mut ws, "completion").await;
    assert_ne!(
        done["generated_text"].as_str().unwrap(),
        reference,
        "modify(temperature) ignored"
    );

    // Invalid modifications are refused and the generation keeps its parameters.
    ws_send(&mut ws, greedy.clone()).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    ws_send(
        &mut ws,
        json!({"type": "control", "action": "modify", "parameters": {"temperature": -1}}),
    )
    .await;
    ws_send(
        &mut ws,
        json!({"type": "control", "action": "modify", "parameters": {}}),
    )
    .await;
    // Set at the start only: refused by name, never ignored.
    ws_send(
        &mut ws,
        json!({"type": "control", "action": "modify", "parameters": {"speculative": "none"}}),
    )
    .await;
    let (done, before) = ws_until(&mut ws, "completion").await;
    let errors: Vec<_> = before.iter().filter(|m| m["type"] == "error").collect();
    assert_eq!(errors.len(), 3, "{before:?}");
    assert!(errors[0]["message"]
        .as_str()
        .unwrap()
        .contains("temperature"));
    assert!(
        errors[2]["message"]
            .as_str()
            .unwrap()
            .contains("parameters.speculative is set when a generation starts"),
        "{:?}",
        errors[2]
    );
    assert_eq!(done["generated_text"].as_str().unwrap(), reference);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerate_restarts_from_the_prompt() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    let greedy = json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 30, "temperature": 0}});
    ws_send(&mut ws, greedy.clone()).await;
    let (reference, _) = ws_until(&mut ws, "completion").await;

    ws_send(&mut ws, greedy.clone()).await;
    let init = ws_recv(&mut ws).await;
    let mut longest = 0;
    for _ in 0..5 {
        let m = ws_recv(&mut ws).await;
        longest = m["generated_text"].as_str().unwrap().len();
    }
    ws_send(&mut ws, json!({"type": "control", "action": "regenerate"})).await;
    let (ack, _) = ws_until(&mut ws, "status").await;
    assert_eq!(ack["operation"], "regenerate");
    let first_after = ws_recv(&mut ws).await;
    assert_eq!(first_after["type"], "token");
    assert!(
        first_after["generated_text"].as_str().unwrap().len() < longest,
        "generated_text did not start over"
    );
    let (done, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(done["request_id"], init["request_id"]);
    assert_eq!(
        done["generated_text"], reference["generated_text"],
        "greedy regeneration differs"
    );
    assert_eq!(done["usage"]["completion_tokens"], 30);

    // After a completion, regenerate runs the last config again as a new request.
    ws_send(&mut ws, json!({"type": "control", "action": "regenerate"})).await;
    let init2 = ws_recv(&mut ws).await;
    assert_eq!(init2["type"], "init");
    assert_ne!(init2["request_id"], init["request_id"]);
    let (done2, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(done2["generated_text"], reference["generated_text"]);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_is_stored_with_its_request_id() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    ws_send(&mut ws, json!({"type": "feedback", "rating": 1})).await;
    let e = ws_recv(&mut ws).await;
    assert_eq!(e["type"], "error", "feedback before any generation: {e}");
    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": 4}}),
    )
    .await;
    let init = ws_recv(&mut ws).await;
    let request_id = init["request_id"].as_str().unwrap().to_owned();
    ws_until(&mut ws, "completion").await;
    ws_send(
        &mut ws,
        json!({"type": "feedback", "rating": 1, "text": "Great response!", "position": 120}),
    )
    .await;
    let ack = ws_recv(&mut ws).await;
    assert_eq!(ack["type"], "status");
    assert_eq!(ack["operation"], "feedback");
    ws_send(&mut ws, json!({"type": "feedback", "rating": 2})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "error");
    let rows = t.node().store().feedback_for(&request_id).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].rating, 1.0);
    assert_eq!(rows[0].text.as_deref(), Some("Great response!"));
    assert_eq!(rows[0].position, Some(120));
    // It is in hearth.db on disk, in WAL mode.
    let db = t.dir.path().join("data/hearth.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM feedback WHERE request_id = ?1",
            [&request_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_messages_flow_while_the_model_loads() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.min_load_time = Some(Duration::from_millis(2500));
    })
    .await;
    let mut ws = t.ws("/generate").await;
    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": 3, "ignore_eos": true}}),
    )
    .await;
    let mut statuses = Vec::new();
    let init = loop {
        let m = ws_recv(&mut ws).await;
        match m["type"].as_str().unwrap() {
            "status" => statuses.push(m),
            "init" => break m,
            other => panic!("unexpected {other}: {m}"),
        }
    };
    assert!(statuses.len() >= 3, "too few status messages: {statuses:?}");
    assert!(statuses.iter().all(|s| s["operation"] == "model_loading"));
    let progress: Vec<u64> = statuses
        .iter()
        .map(|s| s["progress"].as_u64().unwrap())
        .collect();
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert_eq!(*progress.last().unwrap(), 100);
    assert!(statuses.iter().any(|s| s["eta_seconds"].is_number()));
    assert_eq!(init["model"], MODEL_ID);
    let (done, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(done["usage"]["completion_tokens"], 3);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_naming_another_model_waits_for_its_load_and_hears_its_failure() {
    // The node's model is loaded first; `beta` (a second name for it) and `broken` (a header
    // with no tensors after it) are loaded by the configs that name them, never the focus.
    let dir = tempfile::tempdir().unwrap();
    let model = common::model_path();
    std::fs::copy(&model, dir.path().join("alpha.gguf")).unwrap();
    std::fs::copy(&model, dir.path().join("beta.gguf")).unwrap();
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(dir.path().join("broken.gguf"), &bytes[..16 << 20]).unwrap();
    let models = dir.path().to_path_buf();
    let t = TestNode::start_with(move |c| {
        c.parallel = 2;
        c.models_dir = models.clone();
        c.model = Some(models.join("alpha.gguf").to_string_lossy().into_owned());
        c.min_load_time = Some(Duration::from_millis(1500));
    })
    .await;
    let mut ws = t.ws("/generate").await;
    ws_send(
        &mut ws,
        json!({"type": "config", "model": "beta", "prompt": "Hi",
            "parameters": {"max_tokens": 3, "ignore_eos": true}}),
    )
    .await;
    let init = loop {
        let m = ws_recv_timeout(&mut ws, Duration::from_secs(30))
            .await
            .expect("init once beta is loaded");
        match m["type"].as_str().unwrap() {
            "status" => assert_eq!(m["operation"], "model_loading", "{m}"),
            "init" => break m,
            other => panic!("unexpected {other}: {m}"),
        }
    };
    assert_eq!(init["model"], "beta", "{init}");
    let (done, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(done["usage"]["completion_tokens"], 3);
    ws_send(
        &mut ws,
        json!({"type": "config", "model": "broken", "prompt": "Hi", "parameters": {"max_tokens": 3}}),
    )
    .await;
    let failed = loop {
        let m = ws_recv_timeout(&mut ws, Duration::from_secs(30))
            .await
            .expect("an answer once broken fails to load");
        if m["type"] != "status" {
            break m;
        }
    };
    assert_eq!(failed["type"], "error", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or_default()
            .contains("broken"),
        "{failed}"
    );
    t.stop().await;
}
