//! The batch WebSocket (`/ws` and `/api/ws`, `protocols/batch-ws.md`) against a real node and
//! the real default model: a batch with an invalid entry, event order and array shapes with and
//! without `stream_response`, `only_new_tokens` both ways, continuation by the same ids (by
//! the same API key only), two batches at once on one socket, and bad input answered in the
//! door's error shape while the socket and the node keep serving.

use crate::common;

use std::collections::HashSet;

use common::{similarity, ws_recv, ws_send, ws_send_text, TestNode, Ws};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// Too long to reach end-of-sequence in a few tokens.
/// A raw prompt (no chat template) that goes on: its first token is never the end of text, on
/// whichever CPU variant llama.cpp picks (after "paint." some round the end of text first).
const STORY: &str = "Once upon a time, a robot who had never seen colour learned to paint. One day";
const QUESTION: &str = "The three largest cities of France are";

fn greedy(max_new_tokens: u32) -> Value {
    json!({"do_sample": false, "max_new_tokens": max_new_tokens})
}

/// A message with these (request_id, prompt) pairs plus the top-level fields of `extra`.
fn batch(prompts: &[(&str, &str)], extra: Value) -> Value {
    let list: Vec<Value> = prompts
        .iter()
        .map(|(id, p)| json!({"request_id": id, "prompt": p}))
        .collect();
    let mut v = json!({ "prompts": list });
    if let Value::Object(extra) = extra {
        for (k, val) in extra {
            v[k.as_str()] = val;
        }
    }
    v
}

/// The next server message, which must be a non-empty JSON array.
async fn recv_array(ws: &mut Ws) -> Vec<Value> {
    match ws_recv(ws).await {
        Value::Array(a) => {
            assert!(!a.is_empty(), "an empty array was sent");
            a
        }
        other => panic!("every message must be a JSON array: {other}"),
    }
}

/// Messages until every id in `ids` has a COMPLETE or an ERROR.
async fn until_done(ws: &mut Ws, ids: &[&str]) -> Vec<Vec<Value>> {
    let mut open: HashSet<String> = ids.iter().map(|s| (*s).to_owned()).collect();
    let mut msgs = Vec::new();
    while !open.is_empty() {
        let a = recv_array(ws).await;
        for e in &a {
            if e["type"] == "COMPLETE" || e["type"] == "ERROR" {
                if let Some(id) = e["request_id"].as_str() {
                    open.remove(id);
                }
            }
        }
        msgs.push(a);
    }
    msgs
}

async fn run(ws: &mut Ws, payload: Value, ids: &[&str]) -> Vec<Vec<Value>> {
    ws_send(ws, payload).await;
    until_done(ws, ids).await
}

fn events_for<'a>(msgs: &'a [Vec<Value>], id: &str) -> Vec<&'a Value> {
    msgs.iter()
        .flatten()
        .filter(|e| e["request_id"] == id)
        .collect()
}

fn types_for(msgs: &[Vec<Value>], id: &str) -> Vec<String> {
    events_for(msgs, id)
        .iter()
        .map(|e| e["type"].as_str().expect("type is a string").to_owned())
        .collect()
}

fn one_of<'a>(msgs: &'a [Vec<Value>], id: &str, ty: &str) -> &'a Value {
    let found: Vec<&Value> = events_for(msgs, id)
        .into_iter()
        .filter(|e| e["type"] == ty)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{id} has {} {ty} events: {msgs:?}",
        found.len()
    );
    found[0]
}

fn progress_text(msgs: &[Vec<Value>], id: &str) -> String {
    events_for(msgs, id)
        .iter()
        .filter(|e| e["type"] == "PROGRESS")
        .map(|e| e["text"].as_str().expect("PROGRESS text"))
        .collect()
}

fn text_of(e: &Value) -> String {
    e["text"].as_str().expect("text is a string").to_owned()
}

/// The one event type of a message (every array holds one type).
fn message_type(a: &[Value]) -> String {
    let ty = a[0]["type"].as_str().unwrap().to_owned();
    assert!(
        a.iter().all(|e| e["type"] == ty.as_str()),
        "mixed array: {a:?}"
    );
    ty
}

/// ACCEPTED, STARTED, INITIALIZED, PROGRESS..., COMPLETE (streaming) or ACCEPTED, STARTED,
/// COMPLETE (not streaming).
fn assert_lifecycle(msgs: &[Vec<Value>], id: &str, stream: bool) {
    let types = types_for(msgs, id);
    if stream {
        assert!(types.len() >= 4, "{id}: {types:?}");
        assert_eq!(
            types[..3],
            ["ACCEPTED", "STARTED", "INITIALIZED"],
            "{id}: {types:?}"
        );
        assert_eq!(types.last().unwrap(), "COMPLETE", "{id}: {types:?}");
        assert!(
            types[3..types.len() - 1].iter().all(|t| t == "PROGRESS"),
            "{id}: {types:?}"
        );
    } else {
        assert_eq!(types, ["ACCEPTED", "STARTED", "COMPLETE"], "{id}");
    }
}

fn assert_complete_shape(c: &Value, max_new_tokens: u64) {
    assert!(c["text"].is_string(), "{c}");
    let eos = c["is_eos"].as_bool().expect("is_eos is a bool");
    let n = c["new_tokens_count"]
        .as_u64()
        .expect("new_tokens_count is an integer");
    assert!((1..=max_new_tokens).contains(&n), "{c}");
    if !eos {
        assert_eq!(
            n, max_new_tokens,
            "stopped before EOS only at max_new_tokens: {c}"
        );
    }
    let secs = c["execution_time"]
        .as_f64()
        .expect("execution_time is a number");
    assert!(secs > 0.0 && secs < 120.0, "{c}");
}

/// Arrays are in prompt order, hold each prompt at most once, and PROGRESS arrays never carry
/// a prompt that already finished.
fn assert_array_shapes(msgs: &[Vec<Value>], order: &[&str]) {
    let mut finished: HashSet<String> = HashSet::new();
    for a in msgs {
        let ty = message_type(a);
        let ids: Vec<&str> = a
            .iter()
            .map(|e| e["request_id"].as_str().unwrap())
            .collect();
        let unique: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "a prompt twice in one array: {a:?}"
        );
        let positions: Vec<usize> = ids
            .iter()
            .map(|id| order.iter().position(|o| o == id).expect("known id"))
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "not in prompt order: {a:?}"
        );
        if ty == "PROGRESS" {
            assert!(
                ids.iter().all(|id| !finished.contains(*id)),
                "PROGRESS after COMPLETE: {a:?}"
            );
        }
        if ty == "COMPLETE" || ty == "ERROR" {
            finished.extend(ids.iter().map(|s| (*s).to_owned()));
        }
    }
}

async fn expect_batch_works(ws: &mut Ws) {
    let msgs = run(
        ws,
        batch(&[("ok", "Hello")], json!({"generation_config": greedy(3)})),
        &["ok"],
    )
    .await;
    assert_lifecycle(&msgs, "ok", true);
    assert_complete_shape(one_of(&msgs, "ok", "COMPLETE"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_prompts_with_one_invalid() {
    let t = TestNode::start(4).await;
    let mut ws = t.ws("/ws").await;
    let msgs = run(
        &mut ws,
        json!({"prompts": [
            {"request_id": "one", "prompt": QUESTION},
            {"request_id": "two", "prompt": 42},
            {"request_id": "three", "prompt": STORY}],
            "generation_config": greedy(6)}),
        &["one", "two", "three"],
    )
    .await;
    // ACCEPTED comes first, for the valid prompts only.
    assert_eq!(message_type(&msgs[0]), "ACCEPTED");
    let accepted: Vec<&str> = msgs[0]
        .iter()
        .map(|e| e["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(accepted, ["one", "three"]);
    let err = events_for(&msgs, "two");
    assert_eq!(err.len(), 1, "{err:?}");
    assert_eq!(err[0]["type"], "ERROR");
    assert!(
        err[0]["error"]
            .as_str()
            .unwrap()
            .contains("prompt must be a string"),
        "{}",
        err[0]
    );
    for id in ["one", "three"] {
        assert_lifecycle(&msgs, id, true);
        assert_complete_shape(one_of(&msgs, id, "COMPLETE"), 6);
    }
    assert_eq!(one_of(&msgs, "three", "COMPLETE")["is_eos"], false);
    assert_array_shapes(&msgs, &["one", "two", "three"]);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_order_and_array_shapes_for_both_stream_settings() {
    let t = TestNode::start(4).await;
    let mut ws = t.ws("/ws").await;
    let prompts = [("a", QUESTION), ("b", STORY)];
    let streamed = run(
        &mut ws,
        batch(
            &prompts,
            json!({"stream_response": true, "generation_config": greedy(12)}),
        ),
        &["a", "b"],
    )
    .await;
    assert_eq!(message_type(&streamed[0]), "ACCEPTED");
    assert_eq!(streamed[0].len(), 2);
    assert_array_shapes(&streamed, &["a", "b"]);
    for (id, _) in prompts {
        assert_lifecycle(&streamed, id, true);
        assert_eq!(
            one_of(&streamed, id, "INITIALIZED")["text"],
            "",
            "only_new_tokens defaults to true"
        );
        let c = one_of(&streamed, id, "COMPLETE");
        assert_complete_shape(c, 12);
        assert_eq!(
            text_of(c),
            progress_text(&streamed, id),
            "PROGRESS texts add up to COMPLETE"
        );
    }

    // New ids: the same ids would continue the first batch (the continuation cache).
    let again = [("c", QUESTION), ("d", STORY)];
    let quiet = run(
        &mut ws,
        batch(
            &again,
            json!({"stream_response": false, "generation_config": greedy(12)}),
        ),
        &["c", "d"],
    )
    .await;
    assert_eq!(message_type(&quiet[0]), "ACCEPTED");
    assert_array_shapes(&quiet, &["c", "d"]);
    for ((id, _), (first, _)) in again.into_iter().zip(prompts) {
        assert_lifecycle(&quiet, id, false);
        let c = one_of(&quiet, id, "COMPLETE");
        assert_complete_shape(c, 12);
        // Greedy: the same text whether streamed or not.
        assert_eq!(
            text_of(c),
            text_of(one_of(&streamed, first, "COMPLETE")),
            "{id}"
        );
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_new_tokens_both_ways() {
    let t = TestNode::start(4).await;
    let mut ws = t.ws("/api/ws").await;
    let full = run(
        &mut ws,
        batch(
            &[("f", STORY)],
            json!({"only_new_tokens": false, "generation_config": greedy(10)}),
        ),
        &["f"],
    )
    .await;
    assert_eq!(one_of(&full, "f", "INITIALIZED")["text"], STORY);
    let full_text = text_of(one_of(&full, "f", "COMPLETE"));
    assert!(full_text.starts_with(STORY), "{full_text}");
    assert_eq!(full_text, format!("{STORY}{}", progress_text(&full, "f")));

    let new_only = run(
        &mut ws,
        batch(
            &[("n", STORY)],
            json!({"only_new_tokens": true, "generation_config": greedy(10)}),
        ),
        &["n"],
    )
    .await;
    assert_eq!(one_of(&new_only, "n", "INITIALIZED")["text"], "");
    let new_text = text_of(one_of(&new_only, "n", "COMPLETE"));
    assert!(!new_text.starts_with(STORY));
    assert_eq!(new_text, progress_text(&new_only, "n"));
    assert_eq!(
        full_text,
        format!("{STORY}{new_text}"),
        "greedy: the same generation"
    );

    // Without streaming the prompt is still in COMPLETE.
    let quiet = run(
        &mut ws,
        batch(
            &[("q", STORY)],
            json!({"only_new_tokens": false, "stream_response": false, "generation_config": greedy(10)}),
        ),
        &["q"],
    )
    .await;
    assert_lifecycle(&quiet, "q", false);
    assert_eq!(text_of(one_of(&quiet, "q", "COMPLETE")), full_text);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_by_the_same_ids() {
    let t = TestNode::start(4).await;
    let mut ws = t.ws("/ws").await;
    let first = run(
        &mut ws,
        batch(
            &[("c1", STORY), ("c2", QUESTION)],
            json!({"generation_config": greedy(8)}),
        ),
        &["c1", "c2"],
    )
    .await;
    let c1a = one_of(&first, "c1", "COMPLETE").clone();
    assert_eq!(c1a["is_eos"], false, "{c1a}");
    assert_eq!(c1a["new_tokens_count"], 8);
    let c2a = one_of(&first, "c2", "COMPLETE").clone();

    // The same ids in the same order: prompts are ignored (even missing) and generation goes on.
    let second = run(
        &mut ws,
        json!({"prompts": [{"request_id": "c1", "prompt": "IGNORED"}, {"request_id": "c2"}],
            "only_new_tokens": false, "generation_config": greedy(8)}),
        &["c1", "c2"],
    )
    .await;
    assert_lifecycle(&second, "c1", true);
    let so_far = format!("{STORY}{}", text_of(&c1a));
    assert_eq!(
        one_of(&second, "c1", "INITIALIZED")["text"],
        so_far.as_str()
    );
    let c1b = one_of(&second, "c1", "COMPLETE");
    let c1b_eos = c1b["is_eos"].as_bool();
    let c1b_text = text_of(c1b);
    assert!(c1b_text.starts_with(&so_far), "{c1b_text}");
    let added = &c1b_text[so_far.len()..];
    assert!(!added.is_empty());
    assert!(!c1b_text.contains("IGNORED"));
    if c1b["is_eos"] == false {
        assert_eq!(c1b["new_tokens_count"], 8);
    }
    // It continues rather than restarting: close to one uninterrupted run of 16 tokens.
    let straight = run(
        &mut ws,
        batch(&[("s", STORY)], json!({"generation_config": greedy(16)})),
        &["s"],
    )
    .await;
    let straight = text_of(one_of(&straight, "s", "COMPLETE"));
    let continued = format!("{}{added}", text_of(&c1a));
    assert_ne!(
        added.trim(),
        text_of(&c1a).trim(),
        "the continuation restarted"
    );
    assert!(
        similarity(&continued, &straight) >= 0.6,
        "continued {continued:?} vs straight {straight:?}"
    );
    let c2b = one_of(&second, "c2", "COMPLETE");
    let c2_so_far = format!("{QUESTION}{}", text_of(&c2a));
    assert!(text_of(c2b).starts_with(&c2_so_far), "{c2b}");
    if c2a["is_eos"] == true {
        // Already finished: it completes at once with nothing new.
        assert_eq!(c2b["new_tokens_count"], 0);
        assert_eq!(c2b["is_eos"], true);
        assert_eq!(text_of(c2b), c2_so_far);
    }

    // Another order is another key: a fresh (greedy, so identical) generation.
    let reordered = run(
        &mut ws,
        batch(
            &[("c2", QUESTION), ("c1", STORY)],
            json!({"generation_config": greedy(8)}),
        ),
        &["c1", "c2"],
    )
    .await;
    assert_eq!(text_of(one_of(&reordered, "c1", "COMPLETE")), text_of(&c1a));

    // No cached generation and no prompt: an ERROR for that entry.
    let missing = run(
        &mut ws,
        json!({"prompts": [{"request_id": "nobody"}]}),
        &["nobody"],
    )
    .await;
    let e = one_of(&missing, "nobody", "ERROR");
    assert!(
        e["error"].as_str().unwrap().contains("prompt is required"),
        "{e}"
    );

    // The cache is the node's: another socket continues the same ids.
    if c1b_eos == Some(false) {
        let mut other = t.ws("/api/ws").await;
        let third = run(
            &mut other,
            json!({"prompts": [{"request_id": "c1"}, {"request_id": "c2"}],
                "generation_config": greedy(4)}),
            &["c1", "c2"],
        )
        .await;
        assert_lifecycle(&third, "c1", true);
        assert_complete_shape(one_of(&third, "c1", "COMPLETE"), 4);
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_is_read_only_by_the_api_key_that_made_it() {
    let t = TestNode::start(2).await;
    let store = t.node.as_ref().unwrap().store();
    let mut secrets = Vec::new();
    for name in ["a", "b"] {
        let (_, secret) = store
            .create_key(name.into(), hearth_store::KeyScope::Use)
            .await
            .unwrap();
        secrets.push(secret);
    }
    let first = run(
        &mut t.ws(&format!("/ws?token={}", secrets[0])).await,
        batch(&[("p", STORY)], json!({"generation_config": greedy(8)})),
        &["p"],
    )
    .await;
    let made = text_of(one_of(&first, "p", "COMPLETE"));
    // The same small id from another key, and from this machine without a key, finds nothing.
    let again = json!({"prompts": [{"request_id": "p"}], "only_new_tokens": false,
        "generation_config": greedy(4)});
    for path in [format!("/ws?token={}", secrets[1]), "/ws".to_owned()] {
        expect_prompt_error(&mut t.ws(&path).await, again.clone(), "prompt is required").await;
    }
    // The key that made it continues it, on a new socket.
    let mut ws = t.ws(&format!("/ws?token={}", secrets[0])).await;
    let second = run(&mut ws, again, &["p"]).await;
    assert_eq!(
        one_of(&second, "p", "INITIALIZED")["text"],
        format!("{STORY}{made}").as_str()
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_batches_at_once_on_one_socket() {
    let t = TestNode::start(4).await;
    let mut ws = t.ws("/ws").await;
    ws_send(
        &mut ws,
        batch(
            &[("x1", STORY), ("x2", QUESTION)],
            json!({"generation_config": greedy(24)}),
        ),
    )
    .await;
    ws_send(
        &mut ws,
        batch(&[("y1", STORY)], json!({"generation_config": greedy(24)})),
    )
    .await;
    let msgs = until_done(&mut ws, &["x1", "x2", "y1"]).await;
    let xs = ["x1", "x2"];
    let of_x = |a: &Vec<Value>| {
        a.iter()
            .all(|e| xs.contains(&e["request_id"].as_str().unwrap()))
    };
    let of_y = |a: &Vec<Value>| a.iter().all(|e| e["request_id"] == "y1");
    for a in &msgs {
        assert!(of_x(a) || of_y(a), "an array mixes batches: {a:?}");
    }
    let xs_msgs: Vec<Vec<Value>> = msgs.iter().filter(|a| of_x(a)).cloned().collect();
    let ys_msgs: Vec<Vec<Value>> = msgs.iter().filter(|a| of_y(a)).cloned().collect();
    assert_eq!(message_type(&xs_msgs[0]), "ACCEPTED");
    assert_eq!(message_type(&ys_msgs[0]), "ACCEPTED");
    assert_array_shapes(&xs_msgs, &xs);
    for id in ["x1", "x2"] {
        assert_lifecycle(&xs_msgs, id, true);
    }
    assert_lifecycle(&ys_msgs, "y1", true);
    // They ran at the same time: the second batch was accepted before the first finished,
    // and finished after the first had begun streaming.
    let pos = |pred: &dyn Fn(&Vec<Value>) -> bool| msgs.iter().position(pred).unwrap();
    let y_accepted = pos(&|a| of_y(a) && a[0]["type"] == "ACCEPTED");
    let x_last = msgs.iter().rposition(&of_x).unwrap();
    assert!(y_accepted < x_last, "the second batch waited for the first");
    let x_first_progress = pos(&|a| of_x(a) && a[0]["type"] == "PROGRESS");
    let y_complete = pos(&|a| of_y(a) && a[0]["type"] == "COMPLETE");
    assert!(x_first_progress < y_complete);
    // The same prompt in both batches gives the same greedy text.
    assert_eq!(
        text_of(one_of(&msgs, "x1", "COMPLETE")),
        text_of(one_of(&msgs, "y1", "COMPLETE"))
    );
    t.stop().await;
}

async fn expect_message_error(ws: &mut Ws, needle: &str) {
    let a = recv_array(ws).await;
    assert_eq!(a.len(), 1, "{a:?}");
    let e = &a[0];
    assert_eq!(e["type"], "ERROR", "{e}");
    assert!(e["request_id"].is_null(), "{e}");
    let msg = e["error"].as_str().expect("error is a string");
    assert!(
        msg.contains(needle),
        "error {msg:?} does not mention {needle:?}"
    );
}

async fn expect_prompt_error(ws: &mut Ws, payload: Value, needle: &str) {
    let msgs = run(ws, payload, &["p"]).await;
    assert_eq!(msgs.len(), 1, "only the ERROR: {msgs:?}");
    let e = one_of(&msgs, "p", "ERROR");
    let msg = e["error"].as_str().expect("error is a string");
    assert!(
        msg.contains(needle),
        "error {msg:?} does not mention {needle:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_doors_error_shape_and_the_socket_keeps_serving() {
    let t = TestNode::start(4).await;
    let mut ws = t.ws("/api/ws").await;
    for (text, needle) in [
        ("definitely not json", "Invalid JSON"),
        (
            r#"{"prompts":[{"request_id":"p","prompt":"x"}],"generation_config":{"temperature":NaN}}"#,
            "Invalid JSON",
        ),
        ("[1, 2, 3]", "JSON object"),
        ("{}", "missing `prompts`"),
        (r#"{"prompts": "hello"}"#, "must be an array"),
        (r#"{"prompts": []}"#, "empty"),
    ] {
        ws_send_text(&mut ws, text).await;
        expect_message_error(&mut ws, needle).await;
        expect_batch_works(&mut ws).await;
    }
    let too_many: Vec<Value> = (0..300)
        .map(|i| json!({"request_id": i.to_string(), "prompt": "x"}))
        .collect();
    ws_send(&mut ws, json!({ "prompts": too_many })).await;
    expect_message_error(&mut ws, "at most").await;

    let one = |extra: Value| batch(&[("p", "Hello")], extra);
    let long = "the quick brown fox jumps over the lazy dog ".repeat(400);
    let cases: Vec<(Value, &str)> = vec![
        (one(json!({"stream_response": "yes"})), "stream_response"),
        (one(json!({"only_new_tokens": 0})), "only_new_tokens"),
        (
            one(json!({"generation_config": "greedy"})),
            "generation_config",
        ),
        (
            one(json!({"generation_config": {"temperature": "hot"}})),
            "generation_config.temperature",
        ),
        (
            one(json!({"generation_config": {"num_beams": 3}})),
            "beam search is not supported",
        ),
        (
            one(json!({"generation_config": {"max_new_tokens": 0}})),
            "max_new_tokens",
        ),
        (one(json!({"generation_config": {"top_p": 1.5}})), "top_p"),
        (
            one(json!({"generation_config": {"temperature": -1}})),
            "temperature",
        ),
        (batch(&[("p", long.as_str())], json!({})), "context"),
        (batch(&[("p", "")], json!({})), "empty"),
        (
            json!({"prompts": [{"request_id": "p"}]}),
            "prompt is required",
        ),
        (
            json!({"prompts": [{"request_id": "p", "prompt": ["a"]}]}),
            "must be a string",
        ),
    ];
    for (payload, needle) in cases {
        expect_prompt_error(&mut ws, payload, needle).await;
        expect_batch_works(&mut ws).await;
    }
    // An entry without a usable id: its ERROR has a null request_id.
    ws_send(
        &mut ws,
        json!({"prompts": [{"request_id": 5, "prompt": "x"}]}),
    )
    .await;
    expect_message_error(&mut ws, "request_id must be a string").await;

    // Unknown fields are ignored; length_penalty is accepted.
    let msgs = run(
        &mut ws,
        json!({"prompts": [{"request_id": "u", "prompt": "Hello", "color": "blue"}], "mystery": 1,
            "generation_config": {"do_sample": false, "max_new_tokens": 3, "bogus": true,
                "length_penalty": 0.5, "num_beams": 1}}),
        &["u"],
    )
    .await;
    assert_lifecycle(&msgs, "u", true);

    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    expect_message_error(&mut ws, "binary").await;
    expect_batch_works(&mut ws).await;

    // Over 4 MiB: the error in this door's shape, then the socket closes with 1009.
    let big = "a".repeat(5 << 20);
    let huge = batch(&[("p", big.as_str())], json!({})).to_string();
    ws_send_text(&mut ws, &huge).await;
    expect_message_error(&mut ws, "MiB").await;
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1009),
        other => panic!("expected a close frame, got {other:?}"),
    }
    // The node still serves everyone, on both paths.
    let mut ws2 = t.ws("/ws").await;
    expect_batch_works(&mut ws2).await;
    let mut ws3 = t.ws("/api/ws").await;
    expect_batch_works(&mut ws3).await;
    t.wait_idle("every slot to be freed").await;
    t.stop().await;
}

/// On a node without a model of its own, a batch runs on a LAN peer that has it, in text: its
/// prompts complete, and the same ids continue from the text so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_a_batch_runs_on_a_lan_peer_and_continues() {
    let peer = TestNode::start_with(|c| {
        c.parallel = 2;
        c.cluster = common::cluster_config(Vec::new());
    })
    .await;
    let at = peer.node().cluster_addr().unwrap().to_string();
    let empty = tempfile::tempdir().unwrap();
    let t = TestNode::start_with(|c| {
        common::without_model(c, empty.path());
        c.cluster = common::cluster_config(vec![at]);
    })
    .await;
    common::wait_for(
        async || t.get_json("/v1/models").await["data"][0]["id"] == common::MODEL_ID,
        "the peer's model offered here",
    )
    .await;
    let mut ws = t.ws("/ws").await;
    let first = run(
        &mut ws,
        batch(
            &[("p1", STORY), ("p2", QUESTION)],
            json!({"generation_config": greedy(8)}),
        ),
        &["p1", "p2"],
    )
    .await;
    assert_lifecycle(&first, "p1", true);
    let p1a = one_of(&first, "p1", "COMPLETE").clone();
    assert_eq!(p1a["is_eos"], false, "{p1a}");
    assert!(!text_of(&p1a).is_empty());
    assert_eq!(one_of(&first, "p2", "COMPLETE")["type"], "COMPLETE");
    assert_eq!(peer.status().await["requests_finished"], 2);
    // The same ids continue, from the text so far.
    let second = run(
        &mut ws,
        json!({"prompts": [{"request_id": "p1"}, {"request_id": "p2"}],
            "only_new_tokens": false, "generation_config": greedy(8)}),
        &["p1", "p2"],
    )
    .await;
    let so_far = format!("{STORY}{}", text_of(&p1a));
    let p1b = text_of(one_of(&second, "p1", "COMPLETE"));
    assert!(
        p1b.starts_with(&so_far) && p1b.len() > so_far.len(),
        "{p1b}"
    );
    t.stop().await;
    peer.stop().await;
}
