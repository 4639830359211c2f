//! What a hub does when a worker or a reader misbehaves, with a scripted worker of our own on
//! the hub door: a reader that stops reading does not hold back the worker's other tasks, a
//! task that brings more text than any answer could is failed and stopped, and a task that
//! brings nothing while its worker stays connected is stopped and placed again.

mod common;

use std::time::Duration;

use common::hub::{frame, raw_worker, start_hub_with, wait_workers, TOKEN};
use common::{client, user};
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
    // Far more for A than the sockets and channels in between hold (in frames and in bytes,
    // under the hub's per-task limit), then B's answer. The worker's own sends may wait when
    // the hub stops reading, so they go from a task of their own.
    let sender = tokio::spawn(async move {
        let chunk = vec![b'a'; 16 << 10];
        for _ in 0..600 {
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
    let answer = {
        let url = hub.url("/v1/chat/completions");
        tokio::spawn(async move {
            let r = client()
                .post(url)
                .json(&json!({"model": "scripted", "messages": user("a")}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        })
    };
    let id = task_id(&next_frame(&mut ws).await);
    // 17 MiB, one MiB a frame: the hub's limit is 16.
    let mib = vec![b'x'; 1 << 20];
    for _ in 0..17 {
        ws.send(frame(id, &mib)).await.unwrap();
    }
    assert_eq!(next_frame(&mut ws).await, json!({"id": id, "stop": true}));
    let (status, body) = answer.await.unwrap();
    assert!(!status.is_success(), "{status} {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("more than 16 MiB")),
        "{body}"
    );
    // Its late frames are dropped quietly, and the worker's slot serves the next request.
    ws.send(frame(id, b"late")).await.unwrap();
    ws.send(frame(id, b"")).await.unwrap();
    let next = {
        let url = hub.url("/v1/chat/completions");
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&json!({"model": "scripted", "messages": user("b")}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let id = task_id(&next_frame(&mut ws).await);
    ws.send(frame(id, b"fine")).await.unwrap();
    ws.send(frame(id, b"")).await.unwrap();
    let v = next.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "fine", "{v}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_brings_nothing_is_stopped_and_placed_again() {
    let hub = start_hub_with(1, false, |c| {
        c.hub.as_mut().unwrap().task_silence = Duration::from_secs(1);
    })
    .await;
    let (mut ws, _) = raw_worker(
        &hub,
        &format!("token={TOKEN}&model=scripted&max_concurrency=1&name=fake"),
    )
    .await;
    wait_workers(&hub, 1).await;
    let answer = {
        let url = hub.url("/v1/chat/completions");
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&json!({"model": "scripted", "messages": user("a")}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    // The worker stays connected (keepalives) but says nothing for the task: the hub stops it
    // and places it again, here on the same worker, which answers this time.
    let first = task_id(&next_frame(&mut ws).await);
    ws.send(Message::text("")).await.unwrap();
    assert_eq!(
        next_frame(&mut ws).await,
        json!({"id": first, "stop": true})
    );
    let again = next_frame(&mut ws).await;
    let second = task_id(&again);
    assert_ne!(first, second);
    assert_eq!(again["messages"], json!(user("a")), "{again}");
    ws.send(frame(first, b"")).await.unwrap();
    ws.send(frame(second, b"at last")).await.unwrap();
    ws.send(frame(second, b"")).await.unwrap();
    let v = answer.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "at last", "{v}");
    hub.stop().await;
}
