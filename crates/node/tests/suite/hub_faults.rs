//! What a hub does when a worker is lost or misbehaves, or a reader does, with scripted
//! workers of our own on the hub door: an answer continued after its Hearth worker is lost
//! counts what that worker counted; a reader that stops reading does not hold back the
//! worker's other tasks; a task that brings more text than any answer could is failed and
//! stopped; a task that brings nothing while its worker stays connected is stopped and placed
//! on another worker, or fails clearly when there is none; tools and images travel in Hearth's
//! task, never to a reference worker, which alone is refused naming what it cannot take.

use crate::common;

use std::time::Duration;

use common::hub::{
    frame, raw_worker, spawn_chat, spawn_chat_status, start_hub_with, wait_workers, workers, TOKEN,
};
use common::{client, user, MODEL_ID};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

/// The next JSON text frame from the hub (keepalives and pings skipped), within 30 s.
async fn next_frame<S>(ws: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("a frame from the hub within 30 s")
        {
            Some(Ok(Message::Text(t))) if !t.is_empty() => {
                return serde_json::from_str(t.as_str()).unwrap()
            }
            Some(Ok(_)) => {}
            other => panic!("the hub's connection ended: {other:?}"),
        }
    }
}

fn task_id(task: &Value) -> u32 {
    u32::try_from(task["id"].as_u64().expect("a task id")).unwrap()
}

/// A Hearth worker's data frame for task `id`, then its count of the tokens behind it.
async fn send_counted(ws: &mut common::Ws, id: u32, text: &[u8], tokens: u32) {
    ws.send(frame(id, text)).await.unwrap();
    ws.send(Message::text(
        json!({"id": id, "tokens": tokens}).to_string(),
    ))
    .await
    .unwrap();
}

/// A Hearth worker's done report for task `id` (finish reason stop), then its end frame.
async fn send_done(ws: &mut common::Ws, id: u32, completion_tokens: u32) {
    let done = json!({"id": id, "done": {"finish_reason": "stop", "usage": {"prompt_tokens": 30,
        "completion_tokens": completion_tokens, "total_tokens": 30 + completion_tokens}}});
    ws.send(Message::text(done.to_string())).await.unwrap();
    ws.send(frame(id, b"")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_does_not_hold_back_the_workers_other_tasks() {
    // Writes never time out here: only the hub's relaying is under test.
    let hub = start_hub_with(1, false, |c| {
        c.limits.write_timeout = Duration::from_secs(3600);
    })
    .await;
    let (ws, _) = raw_worker(
        &hub,
        &format!("token={TOKEN}&model=scripted&max_concurrency=2&name=fake"),
    )
    .await;
    let (mut sink, mut stream) = ws.split();
    wait_workers(&hub, 1).await;

    // A: a streaming client with a small receive buffer that never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(hub.node().addr()).await.unwrap();
    let body = json!({"model": "scripted", "stream": true, "messages": user("a")}).to_string();
    stuck
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let a = task_id(&next_frame(&mut stream).await);
    // B: an ordinary client.
    let b_answer = {
        let url = hub.url("/v1/chat/completions");
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&json!({"model": "scripted", "messages": user("b")}))
                .timeout(Duration::from_secs(20))
                .send()
                .await?
                .json::<Value>()
                .await
        })
    };
    let b = task_id(&next_frame(&mut stream).await);
    assert_ne!(a, b);
    // Far more for A than the sockets and channels in between hold (900 frames, 14 MiB: under
    // the hub's per-task limit), then B's answer. The worker's own sends may wait when
    // the hub stops reading, so they go from a task of their own.
    let sender = tokio::spawn(async move {
        let chunk = vec![b'a'; 16 << 10];
        for _ in 0..900 {
            sink.send(frame(a, &chunk)).await?;
        }
        sink.send(frame(b, b"hello")).await?;
        sink.send(frame(b, b"")).await?;
        Ok::<_, tokio_tungstenite::tungstenite::Error>(sink)
    });
    let answer = b_answer
        .await
        .unwrap()
        .expect("B is answered while A's reader is stuck");
    assert_eq!(
        answer["choices"][0]["message"]["content"], "hello",
        "{answer}"
    );
    sender.abort();
    drop(stuck);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_brings_more_than_any_answer_could_fails_and_is_stopped() {
    let hub = start_hub_with(1, false, |_| {}).await;
    let (mut ws, _) = raw_worker(
        &hub,
        &format!("token={TOKEN}&model=scripted&max_concurrency=1&name=fake"),
    )
    .await;
    wait_workers(&hub, 1).await;
    let answer = spawn_chat_status(&hub, json!({"model": "scripted", "messages": user("a")}));
    let id = task_id(&next_frame(&mut ws).await);
    // 33 MiB, one MiB a frame: the hub's limit is 32.
    let mib = vec![b'x'; 1 << 20];
    for _ in 0..33 {
        ws.send(frame(id, &mib)).await.unwrap();
    }
    assert_eq!(next_frame(&mut ws).await, json!({"id": id, "stop": true}));
    let (status, body) = answer.await.unwrap();
    assert!(!status.is_success(), "{status} {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("more than 32 MiB")),
        "{body}"
    );
    // Its late frames are dropped quietly, and the worker's slot serves the next request.
    ws.send(frame(id, b"late")).await.unwrap();
    ws.send(frame(id, b"")).await.unwrap();
    let next = spawn_chat(&hub, json!({"model": "scripted", "messages": user("b")}));
    let id = task_id(&next_frame(&mut ws).await);
    ws.send(frame(id, b"fine")).await.unwrap();
    ws.send(frame(id, b"")).await.unwrap();
    let v = next.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "fine", "{v}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_brings_nothing_is_stopped_and_placed_on_another_worker() {
    let hub = start_hub_with(1, false, |c| {
        c.hub.as_mut().unwrap().task_silence = Duration::from_secs(3);
    })
    .await;
    let join = format!("token={TOKEN}&model=scripted&max_concurrency=1");
    let (one, _) = raw_worker(&hub, &format!("{join}&name=one")).await;
    let (two, _) = raw_worker(&hub, &format!("{join}&name=two")).await;
    wait_workers(&hub, 2).await;
    let (mut one, mut two) = (one, two);
    let answer = spawn_chat(&hub, json!({"model": "scripted", "messages": user("a")}));
    // Whichever worker gets the task stays connected (keepalives) but says nothing for it.
    let (mut stuck, mut fresh, task) = tokio::select! {
        t = next_frame(&mut one) => (one, two, t),
        t = next_frame(&mut two) => (two, one, t),
    };
    let first = task_id(&task);
    stuck.send(Message::text("")).await.unwrap();
    // The hub stops it there and places the answer on the other worker, never on this one.
    assert_eq!(
        next_frame(&mut stuck).await,
        json!({"id": first, "stop": true})
    );
    let again = next_frame(&mut fresh).await;
    assert_eq!(again["messages"], json!(user("a")), "{again}");
    let second = task_id(&again);
    fresh.send(frame(second, b"at last")).await.unwrap();
    fresh.send(frame(second, b"")).await.unwrap();
    let v = answer.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "at last", "{v}");
    // The stopped task's slot is free again, and its late frames are dropped: the worker stays
    // connected and can be given another request.
    stuck.send(frame(first, b"late")).await.unwrap();
    stuck.send(frame(first, b"")).await.unwrap();
    assert!(workers(&hub).await.iter().all(|w| w["in_flight"] == 0));
    assert_eq!(wait_workers(&hub, 2).await.len(), 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stuck_on_the_only_worker_fails_with_a_clear_error() {
    let hub = start_hub_with(1, false, |c| {
        c.hub.as_mut().unwrap().task_silence = Duration::from_secs(1);
    })
    .await;
    let (mut only, _) = raw_worker(
        &hub,
        &format!("token={TOKEN}&model=scripted&max_concurrency=1&name=only"),
    )
    .await;
    wait_workers(&hub, 1).await;
    let answer = spawn_chat_status(&hub, json!({"model": "scripted", "messages": user("a")}));
    let id = task_id(&next_frame(&mut only).await);
    assert_eq!(next_frame(&mut only).await, json!({"id": id, "stop": true}));
    let (status, body) = answer.await.unwrap();
    assert!(!status.is_success(), "{status} {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("produced nothing for this answer in 1 s")
            && message.contains("no other node serves scripted"),
        "{body}"
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_continued_after_a_lost_worker_counts_what_that_worker_counted() {
    // The hub holds the model, so it could count the text itself; the lost worker's own count
    // is what the continuation is given and what usage says.
    let hub = start_hub_with(1, false, |_| {}).await;
    let join = format!("token={TOKEN}&model={MODEL_ID}&max_concurrency=1&hearth=1");
    let (mut first, _) = raw_worker(&hub, &format!("{join}&name=first")).await;
    wait_workers(&hub, 1).await;
    let answer = spawn_chat(
        &hub,
        json!({"model": MODEL_ID, "messages": user("Greet."),
                    "max_tokens": 50, "temperature": 0}),
    );
    let task = next_frame(&mut first).await;
    let id = task_id(&task);
    assert_eq!(task["max_new_tokens"], 50, "{task}");
    // "Hello" was 7 tokens where the first worker made it (say, a model that spells it out).
    send_counted(&mut first, id, b"Hello", 7).await;
    let (mut second, _) = raw_worker(&hub, &format!("{join}&name=second")).await;
    wait_workers(&hub, 2).await;
    drop(first);
    let task = next_frame(&mut second).await;
    assert_eq!(task["hearth"]["continue_from"], "Hello", "{task}");
    assert_eq!(
        task["max_new_tokens"], 43,
        "50 less the 7 already made: {task}"
    );
    let id = task_id(&task);
    send_counted(&mut second, id, b" world", 2).await;
    send_done(&mut second, id, 2).await;
    let v = answer.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello world", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 9, "7 + 2: {v}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_across_a_reference_worker_and_two_lost_hearth_workers() {
    // A reference worker's text comes uncounted (the hub counts it with its tokenizer); the
    // Hearth workers after it count theirs; each continuation is given what is left.
    let hub = start_hub_with(1, false, |_| {}).await;
    let base = format!("token={TOKEN}&model={MODEL_ID}&max_concurrency=1");
    let (mut reference, _) = raw_worker(&hub, &format!("{base}&name=ref")).await;
    wait_workers(&hub, 1).await;
    let answer = spawn_chat(
        &hub,
        json!({"model": MODEL_ID, "messages": user("Greet."), "max_tokens": 50, "temperature": 0}),
    );
    let id = task_id(&next_frame(&mut reference).await);
    reference.send(frame(id, b"Hello")).await.unwrap();
    let hearth = format!("{base}&hearth=1");
    let (mut h1, _) = raw_worker(&hub, &format!("{hearth}&name=h1")).await;
    wait_workers(&hub, 2).await;
    drop(reference);
    let task = next_frame(&mut h1).await;
    assert_eq!(task["hearth"]["continue_from"], "Hello", "{task}");
    let left = task["max_new_tokens"].as_u64().unwrap();
    let hello = 50 - left;
    assert!((1..5).contains(&hello), "{task}");
    let id = task_id(&task);
    send_counted(&mut h1, id, b" world", 2).await;
    let (mut h2, _) = raw_worker(&hub, &format!("{hearth}&name=h2")).await;
    wait_workers(&hub, 2).await;
    drop(h1);
    let task = next_frame(&mut h2).await;
    assert_eq!(task["hearth"]["continue_from"], "Hello world", "{task}");
    assert_eq!(task["max_new_tokens"], left - 2, "{task}");
    let id = task_id(&task);
    send_counted(&mut h2, id, b" again", 1).await;
    send_done(&mut h2, id, 1).await;
    let v = answer.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello world again");
    assert_eq!(v["usage"]["completion_tokens"], hello + 3, "{v}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_lost_after_its_last_token_leaves_nothing_to_place() {
    let hub = start_hub_with(1, false, |_| {}).await;
    let join = format!("token={TOKEN}&model={MODEL_ID}&max_concurrency=1&hearth=1");
    let (mut first, _) = raw_worker(&hub, &format!("{join}&name=first")).await;
    wait_workers(&hub, 1).await;
    let answer = spawn_chat(
        &hub,
        json!({"model": MODEL_ID, "messages": user("Greet."), "max_tokens": 5, "temperature": 0}),
    );
    let id = task_id(&next_frame(&mut first).await);
    send_counted(&mut first, id, b"Hello there", 5).await;
    // Lost before its done report: all 5 tokens are there, so the answer ends here.
    let (mut second, _) = raw_worker(&hub, &format!("{join}&name=second")).await;
    wait_workers(&hub, 2).await;
    drop(first);
    let v = answer.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello there", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 5, "{v}");
    // The other worker was given nothing, and its slot is free.
    second.send(Message::text("")).await.unwrap();
    let listed = wait_workers(&hub, 1).await;
    assert_eq!(listed[0]["in_flight"], 0);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_frame(&mut second))
            .await
            .is_err(),
        "the second worker got a task"
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_in_a_required_format_is_not_continued_from_part_of_it() {
    // The grammar travels in Hearth's task; a lost worker's half-made JSON could not be carried
    // on by another (its grammar starts from the top), so the answer fails and says why.
    let hub = start_hub_with(1, false, |_| {}).await;
    let join = format!("token={TOKEN}&model={MODEL_ID}&max_concurrency=1&hearth=1");
    let (mut first, _) = raw_worker(&hub, &format!("{join}&name=first")).await;
    let (mut second, _) = raw_worker(&hub, &format!("{join}&name=second")).await;
    wait_workers(&hub, 2).await;
    let url = hub.url("/api/chat");
    let answer = tokio::spawn(async move {
        let r = client()
            .post(url)
            .json(
                &json!({"model": MODEL_ID, "stream": false, "format": "json",
                "messages": user("Greet in JSON."), "options": {"temperature": 0}}),
            )
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    // Either idle worker may be chosen: the one that gets the task is the one lost.
    let (task, mut chosen, _other) = tokio::select! {
        t = next_frame(&mut first) => (t, first, second),
        t = next_frame(&mut second) => (t, second, first),
    };
    let grammar = task["hearth"]["grammar"].as_str().unwrap_or_default();
    assert!(grammar.contains("root ::="), "{task}");
    send_counted(&mut chosen, task_id(&task), b"{\"greeting\": ", 4).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(chosen);
    let (status, v) = answer.await.unwrap();
    assert!(status >= 500, "{status}: {v}");
    let message = v["error"].as_str().unwrap_or_default();
    assert!(message.contains("cannot be continued"), "{v}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_travel_in_hearths_task_and_never_to_a_reference_worker() {
    // A reference worker cannot render tools: an idle one beside a Hearth worker gets nothing.
    let hub = start_hub_with(1, false, |_| {}).await;
    let join = format!("token={TOKEN}&model={MODEL_ID}&max_concurrency=1");
    let (mut reference, _) = raw_worker(&hub, &format!("{join}&name=reference")).await;
    let (mut hearth, _) = raw_worker(&hub, &format!("{join}&hearth=1&name=hearth")).await;
    wait_workers(&hub, 2).await;
    let answer = spawn_chat(
        &hub,
        json!({"model": MODEL_ID, "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "call_9", "content": "-3 C"},
                {"role": "user", "content": "And in Rome?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": "required"}),
    );
    let task = next_frame(&mut hearth).await;
    let tools = &task["hearth"]["tools"];
    assert_eq!(tools["choice"], "required", "{task}");
    assert_eq!(
        tools["tools"][0]["function"]["name"], "get_weather",
        "{task}"
    );
    // The history keeps its call and the result's id.
    let messages = task["messages"].as_array().unwrap();
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo",
        "{task}"
    );
    assert_eq!(messages[2]["tool_call_id"], "call_9", "{task}");
    let call = br#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Rome"}}}"#;
    send_counted(&mut hearth, task_id(&task), call, 12).await;
    send_done(&mut hearth, task_id(&task), 12).await;
    let v = answer.await.unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Rome\"}",
        "{v}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_frame(&mut reference))
            .await
            .is_err(),
        "the reference worker got a task with tools"
    );
    // With only the reference worker left, what it cannot take is refused, saying why.
    drop(hearth);
    wait_workers(&hub, 1).await;
    let weather = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    for (body, what) in [
        (
            json!({"model": MODEL_ID, "tools": weather,
                "messages": [{"role": "user", "content": "Weather in Rome?"}]}),
            "this request has tools",
        ),
        (
            json!({"model": MODEL_ID, "messages": [{"role": "user", "content": [
                common::image_url_part(&common::dark()),
                {"type": "text", "text": "What is it?"}]}]}),
            "this request has images",
        ),
    ] {
        let (status, v) = spawn_chat_status(&hub, body).await.unwrap();
        assert!(!status.is_success(), "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("take plain chat only") && message.contains(what),
            "{what}: {v}"
        );
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_frame(&mut reference))
            .await
            .is_err(),
        "the reference worker got a task it cannot take"
    );
    hub.stop().await;
}
