//! Worker mode end to end, with real nodes and the real default model: a Hearth worker
//! against a Hearth hub; two workers with two slots each take four concurrent requests; a
//! worker killed mid-answer has its task re-dispatched (to another worker, or to the hub's own
//! engine), or failed with a clear error when nothing is left; and the `/generate` door and the
//! UI's chat are answered by workers too. The wire protocol itself: `worker_protocol.rs`.

use crate::common;

use std::time::Duration;

use common::hub::{greedy, hub_status, start_hub, start_worker, wait_workers, workers};
use common::sse::{finish_stream, next_data, read_deltas, stream_chat, stream_sse};
use common::{client, similarity, TestNode, MODEL_ID};
use serde_json::{json, Value};

const STORY: &str = "Write a long story about a robot learning to paint.";

/// The name of the worker running a task now.
async fn busy_worker(hub: &TestNode) -> String {
    let w = workers(hub).await;
    let busy: Vec<&Value> = w
        .iter()
        .filter(|w| w["in_flight"].as_u64() > Some(0))
        .collect();
    assert_eq!(busy.len(), 1, "exactly one worker is busy: {w:?}");
    busy[0]["name"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hearth_worker_serves_a_hearth_hub() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    let listed = wait_workers(&hub, 1).await;
    assert_eq!(listed[0]["name"], "w1");
    assert_eq!(listed[0]["model"], MODEL_ID);
    assert_eq!(listed[0]["max_concurrency"], 2);
    assert_eq!(listed[0]["hearth"], true);

    // Through the hub, then straight from the worker: the same greedy answer and real counts.
    let body = json!({"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Name three fruits."}]});
    let via_hub = hub.chat(body.clone()).await;
    let direct = worker.chat(body.clone()).await;
    assert_eq!(
        via_hub["choices"][0]["message"]["content"], direct["choices"][0]["message"]["content"],
        "the worker renders the same conversation the hub received"
    );
    for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(
            via_hub["usage"][count], direct["usage"][count],
            "usage is the worker's real count"
        );
    }
    // Through the hub again: the worker's prompt cache served it, and the hub says so.
    let prompt = direct["usage"]["prompt_tokens"].as_u64().unwrap();
    let again = hub.chat(body).await;
    assert_eq!(
        again["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt - 1,
        "{again}"
    );
    assert_eq!(
        via_hub["choices"][0]["finish_reason"],
        direct["choices"][0]["finish_reason"]
    );

    // Streaming through the hub.
    let (content, chunks) = hub.chat_stream(greedy("Count to five.", 16)).await;
    assert!(!content.is_empty());
    assert_eq!(
        chunks
            .iter()
            .rev()
            .find_map(|c| c["choices"][0]["finish_reason"].as_str()),
        Some("length")
    );

    // A raw-text completion through the hub (a Hearth worker takes text prompts).
    let completion: Value = hub
        .post(
            "/v1/completions",
            &json!({"prompt": "One, two,", "max_tokens": 4, "temperature": 0}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(completion["usage"]["completion_tokens"], 4, "{completion}");

    // The hub's own engine took nothing (--hub-local false); the worker finished all four.
    let status = hub.status().await;
    assert_eq!(status["requests_finished"], 0, "{status}");
    assert_eq!(workers(&hub).await[0]["completed"], 4);
    let metrics = hub.metrics().await;
    assert!(metrics.contains("hearth_hub_workers 1"), "{metrics}");
    assert!(
        metrics.contains("hearth_hub_worker_slots{name=\"w1\""),
        "{metrics}"
    );

    worker.stop().await;
    wait_workers(&hub, 0).await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_with_two_slots_take_four_concurrent_requests() {
    let hub = start_hub(1, false).await;
    let w1 = start_worker(&hub, "w1", 2).await;
    let w2 = start_worker(&hub, "w2", 2).await;
    wait_workers(&hub, 2).await;

    let prompts = [
        "Name a colour.",
        "Name an animal.",
        "Name a city.",
        "Name a tool.",
    ];
    let requests = prompts.iter().map(|p| hub.chat(greedy(p, 32)));
    let watch = async {
        // While they run, no worker ever holds more than its two slots.
        let mut peak = 0;
        for _ in 0..50 {
            for w in workers(&hub).await {
                let n = w["in_flight"].as_u64().unwrap();
                assert!(n <= 2, "{w}");
                peak = peak.max(n);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        peak
    };
    let (answers, peak) = tokio::join!(futures_util::future::join_all(requests), watch);
    for a in &answers {
        assert_eq!(a["choices"][0]["finish_reason"], "length", "{a}");
        assert_eq!(a["usage"]["completion_tokens"], 32, "{a}");
    }
    assert_eq!(peak, 2, "both slots of a worker were in use at once");
    let done: Vec<u64> = workers(&hub)
        .await
        .iter()
        .map(|w| w["completed"].as_u64().unwrap())
        .collect();
    assert_eq!(
        done,
        [2, 2],
        "four requests spread over two workers with two slots each"
    );
    assert_eq!(hub.status().await["requests_finished"], 0);

    w1.stop().await;
    w2.stop().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_mid_task_redispatches_to_another_worker() {
    let hub = start_hub(1, false).await;
    let mut w1 = Some(start_worker(&hub, "w1", 1).await);
    let mut w2 = Some(start_worker(&hub, "w2", 1).await);
    wait_workers(&hub, 2).await;

    let mut rx = stream_chat(&hub, greedy(STORY, 120));
    let mut content = String::new();
    read_deltas(&mut rx, 5, &mut content).await;
    let before = content.clone();
    // Take the busy worker away mid-answer.
    let victim = if busy_worker(&hub).await == "w1" {
        w1.take()
    } else {
        w2.take()
    };
    victim.expect("worker").stop().await;

    let (finish, error) = finish_stream(&mut rx, &mut content).await;
    assert!(
        error.is_none(),
        "the answer survived the lost worker: {error:?}"
    );
    assert_eq!(finish.as_deref(), Some("length"));
    assert!(content.starts_with(&before) && content.len() > before.len());
    assert!(hub_status(&hub).await["redispatched"].as_u64().unwrap() >= 1);

    // The answer matches what the remaining worker gives from scratch (greedy; continuing
    // from text can tokenize differently, so this is a similarity, not equality).
    let reference = hub.chat(greedy(STORY, 120)).await;
    let reference = reference["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        similarity(&content, &reference) > 0.6,
        "re-dispatched: {content:?}\nfrom scratch: {reference:?}"
    );

    for w in [w1, w2].into_iter().flatten() {
        w.stop().await;
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_falls_back_to_the_hubs_own_engine() {
    // The hub serves too, with one slot: a first request fills it, so the second goes to the
    // worker; when the worker is lost, the second continues on the hub (queued behind the first).
    let hub = start_hub(1, true).await;
    let worker = start_worker(&hub, "w1", 1).await;
    wait_workers(&hub, 1).await;

    // Long answers, so that neither can end before the worker is stopped.
    let mut first = stream_chat(&hub, greedy(STORY, 200));
    let mut first_text = String::new();
    read_deltas(&mut first, 1, &mut first_text).await;
    let mut second = stream_chat(&hub, greedy("Describe the sea in detail.", 200));
    let mut content = String::new();
    read_deltas(&mut second, 3, &mut content).await;
    assert_eq!(busy_worker(&hub).await, "w1");
    worker.stop().await;

    let (finish, error) = finish_stream(&mut second, &mut content).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(finish.as_deref(), Some("length"));
    let (finish, error) = finish_stream(&mut first, &mut first_text).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(finish.as_deref(), Some("length"));
    assert!(hub.status().await["requests_finished"].as_u64().unwrap() >= 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_worker_lost_mid_answer_is_a_clear_error() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 1).await;
    wait_workers(&hub, 1).await;
    let mut rx = stream_chat(&hub, greedy(STORY, 200));
    let mut content = String::new();
    read_deltas(&mut rx, 3, &mut content).await;
    worker.stop().await;
    let (_, error) = finish_stream(&mut rx, &mut content).await;
    let error = error.expect("an error object before [DONE]");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("was lost mid-answer") && message.contains(MODEL_ID),
        "{message}"
    );
    // The hub still answers, with a clear error while no worker serves the model.
    let r = hub.post("/v1/chat/completions", &greedy("Hi", 4)).await;
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("no worker"), "{message}");
    hub.stop().await;
}

/// The streaming door dispatches too: with `--hub-local false` only the worker can answer a
/// `/generate` config; pause, which a remote generation cannot do, is refused in the door's
/// own error shape and the stream still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generate_door_runs_on_a_worker_in_hub_mode() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    wait_workers(&hub, 1).await;
    let mut ws = hub.ws("/generate").await;
    common::ws_send(
        &mut ws,
        json!({"type": "config", "model": MODEL_ID, "prompt": STORY,
               "parameters": {"max_tokens": 48, "temperature": 0}}),
    )
    .await;
    let init = common::ws_recv(&mut ws).await;
    assert_eq!(init["type"], "init", "{init}");
    assert_eq!(init["model"], MODEL_ID);
    common::ws_send(&mut ws, json!({"type": "control", "action": "pause"})).await;
    let (completion, seen) = common::ws_until(&mut ws, "completion").await;
    let refusal = seen
        .iter()
        .find(|m| m["type"] == "error")
        .unwrap_or_else(|| panic!("pause on a worker was not refused: {seen:?}"));
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("worker")
            || refusal.to_string().contains("worker"),
        "{refusal}"
    );
    assert!(seen.iter().any(|m| m["type"] == "token"), "{seen:?}");
    assert!(
        completion["generated_text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{completion}"
    );
    let w = &workers(&hub).await[0];
    assert_eq!(w["completed"], 1, "{w}");
    worker.stop().await;
    hub.stop().await;
}

/// The UI's chat dispatches too: in hub mode with `--hub-local false` the answer comes from
/// the worker, is saved as it streams, and names the worker as the node that answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uis_chat_is_answered_by_a_worker_and_says_which() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    wait_workers(&hub, 1).await;
    let conv = hub.new_conversation("via a worker").await;
    let r = hub
        .post(
            &format!("/api/conversations/{conv}/chat"),
            &json!({"content": "Name three fruits."}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let sse = r.text().await.unwrap();
    assert!(sse.contains("\"type\":\"done\""), "{sse}");
    let c = hub.get_json(&format!("/api/conversations/{conv}")).await;
    let answer = &c["messages"][1];
    assert_eq!(answer["status"], "complete", "{answer}");
    assert!(!answer["content"].as_str().unwrap().is_empty(), "{answer}");
    assert_eq!(answer["node"], "w1", "{answer}");
    assert_eq!(workers(&hub).await[0]["completed"], 1);
    worker.stop().await;
    hub.stop().await;
}

/// A UI answer that moves from a lost worker to the hub's own engine names the hub under it
/// (the node that finished it), not the worker it started on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ui_answer_re_dispatched_from_a_lost_worker_names_the_node_that_finished_it() {
    let hub = start_hub(1, true).await;
    let worker = start_worker(&hub, "w1", 1).await;
    wait_workers(&hub, 1).await;
    let hub_name = hub.status().await["node"].as_str().unwrap().to_owned();
    assert_ne!(hub_name, "w1");

    // Fill the hub's own slot, so the UI's answer goes to the worker.
    let mut first = stream_chat(&hub, greedy(STORY, 200));
    let mut first_text = String::new();
    read_deltas(&mut first, 1, &mut first_text).await;

    let conv = hub.new_conversation("moves").await;
    let r = client()
        .patch(hub.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"temperature": 0, "max_tokens": 200}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut ui = stream_sse(
        hub.url(&format!("/api/conversations/{conv}/chat")),
        json!({"content": STORY}),
    );
    let mut started_on = None;
    let mut tokens = 0;
    while tokens < 3 {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("start") => started_on = v["message"]["node"].as_str().map(str::to_owned),
            Some("token") => tokens += 1,
            Some("user") => {}
            _ => panic!("the answer ended before the worker could be stopped: {v}"),
        }
    }
    assert_eq!(started_on.as_deref(), Some("w1"));
    assert_eq!(busy_worker(&hub).await, "w1");
    worker.stop().await;

    let done = loop {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("done") => break v,
            Some("error") => panic!("the answer did not survive the lost worker: {v}"),
            _ => {}
        }
    };
    assert_eq!(done["message"]["node"], hub_name.as_str(), "{done}");
    assert_eq!(done["message"]["status"], "complete", "{done}");
    let c = hub.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(c["messages"][1]["node"], hub_name.as_str(), "{c}");
    let (_, error) = finish_stream(&mut first, &mut first_text).await;
    assert!(error.is_none(), "{error:?}");
    hub.stop().await;
}
