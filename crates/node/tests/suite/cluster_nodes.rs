//! Hearth nodes as a LAN cluster, each a real `hearth-node` process with the real default
//! model, over real TCP on loopback (`--peer`): a model on one node is served through the
//! others at every door; requests spread across two nodes that have it; a hot node gets no
//! new work; an answer whose provider is killed (`kill -9`) mid-stream completes from another
//! node and names it; a conversation's next turn goes back to the node that ran its last (on
//! the chat door and, naming the stored answer, on the Responses door); a
//! different passcode is refused; a frozen peer is gone in seconds and back when it wakes.

use crate::common;

use std::time::Duration;

use common::hub::greedy;
use common::process::NodeProcess;
use common::sse::{finish_stream, next_data, read_deltas, stream_chat_at, stream_sse};
use common::{client, get_json_at, similarity, MODEL_ID};
use serde_json::{json, Value};
use tempfile::TempDir;

const STORY: &str = "Write a long story about a robot learning to paint.";

/// A node process and the temp dir it lives in.
struct Peer {
    node: NodeProcess,
    _dir: TempDir,
}

impl Peer {
    /// `hearth-node serve --name NAME --cluster-port 0 ARGS`, with the default model or none.
    fn start(name: &str, model: bool, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut all = vec!["--name", name, "--cluster-port", "0"];
        all.extend_from_slice(args);
        let node = if model {
            NodeProcess::start(&data, &all, None)
        } else {
            NodeProcess::start_without_model(&data, &all)
        };
        Self { node, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.node.url)
    }

    async fn status(&self) -> Value {
        get_json_at(self.url("/api/status")).await
    }

    /// `127.0.0.1:PORT` of its cluster listener.
    async fn cluster(&self) -> String {
        let port = self.status().await["cluster"]["port"].as_u64().unwrap();
        format!("127.0.0.1:{port}")
    }

    async fn peers(&self) -> Vec<Value> {
        self.status().await["cluster"]["peers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Wait until a peer named `name` is connected with `model` loaded.
    async fn wait_peer(&self, name: &str, model: &str) {
        wait(
            async || {
                self.peers().await.iter().any(|p| {
                    p["name"] == name
                        && p["loaded_models"]
                            .as_array()
                            .is_some_and(|m| m.iter().any(|m| m == model))
                })
            },
            &format!("peer {name} with {model}"),
        )
        .await;
    }

    async fn chat(&self, body: Value) -> Value {
        self.post("/v1/chat/completions", body).await
    }

    /// POST `body` to `path`; the answer, which must be a success.
    async fn post(&self, path: &str, body: Value) -> Value {
        let r = client()
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{v}");
        v
    }

    /// A new conversation of the UI's, by id.
    async fn conversation(&self, title: &str) -> String {
        let conv: Value = client()
            .post(self.url("/api/conversations"))
            .json(&json!({ "title": title }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        conv["id"].as_str().unwrap().to_owned()
    }

    async fn finished(&self) -> u64 {
        self.status().await["requests_finished"].as_u64().unwrap()
    }
}

/// `common::wait_for` with 30 s: heartbeats come every 5 s.
async fn wait(cond: impl AsyncFnMut() -> bool, what: &str) {
    common::wait_for_secs(30, cond, what).await;
}

fn text(answer: &Value) -> String {
    answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_on_one_node_is_served_through_the_others() {
    let alpha = Peer::start("alpha", true, &[]);
    let a = alpha.cluster().await;
    let beta = Peer::start("beta", false, &["--peer", &a]);
    let b = beta.cluster().await;
    let gamma = Peer::start("gamma", false, &["--peer", &a, "--peer", &b]);
    beta.wait_peer("alpha", MODEL_ID).await;
    gamma.wait_peer("alpha", MODEL_ID).await;
    let peer = gamma
        .peers()
        .await
        .into_iter()
        .find(|p| p["name"] == "alpha")
        .unwrap();
    assert_eq!(peer["kind"], "hearth", "{peer}");
    assert_eq!(peer["outbound"], true, "{peer}");

    let reference = text(&alpha.chat(greedy(STORY, 24)).await);
    // OpenAI, no model named: the only model there is, on alpha.
    let mut body = greedy(STORY, 24);
    body.as_object_mut().unwrap().remove("model");
    let via_beta = beta.chat(body).await;
    assert_eq!(text(&via_beta), reference, "{via_beta}");
    assert_eq!(via_beta["model"], MODEL_ID);
    // OpenAI streamed, through gamma.
    let mut rx = stream_chat_at(gamma.url("/v1/chat/completions"), greedy(STORY, 24));
    let mut streamed = String::new();
    let (finish, error) = finish_stream(&mut rx, &mut streamed).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(finish.as_deref(), Some("length"));
    assert_eq!(streamed, reference);
    // The models list and the UI's chat, which names the node that answered.
    let models = get_json_at(gamma.url("/v1/models")).await;
    assert_eq!(models["data"][0]["id"], MODEL_ID, "{models}");
    let conv = gamma.conversation("through the cluster").await;
    let conv = conv.as_str();
    let mut ui = stream_sse(
        gamma.url(&format!("/api/conversations/{conv}/chat")),
        json!({"content": "Name three fruits."}),
    );
    let done = loop {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("done") => break v,
            Some("error") => panic!("{v}"),
            _ => {}
        }
    };
    assert_eq!(done["message"]["node"], "alpha", "{done}");
    assert_eq!(done["message"]["status"], "complete", "{done}");
    // alpha served all four.
    assert_eq!(alpha.finished().await, 4);
    // The cluster's figures in /metrics.
    let metrics = client()
        .get(gamma.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("hearth_cluster_peers{kind=\"hearth\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hearth_cluster_peer_throttle{name=\"alpha\""),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spread_across_two_nodes_with_the_model() {
    let alpha = Peer::start("alpha", true, &["--parallel", "1"]);
    let gamma = Peer::start("gamma", true, &["--parallel", "1"]);
    let (a, g) = (alpha.cluster().await, gamma.cluster().await);
    let beta = Peer::start("beta", false, &["--peer", &a, "--peer", &g]);
    beta.wait_peer("alpha", MODEL_ID).await;
    beta.wait_peer("gamma", MODEL_ID).await;
    let url = beta.url("/v1/chat/completions");
    let asks: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let r = client()
                    .post(url)
                    .json(&greedy(STORY, 32))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            })
        })
        .collect();
    for a in asks {
        a.await.unwrap();
    }
    let (on_a, on_g) = (alpha.finished().await, gamma.finished().await);
    assert_eq!(on_a + on_g, 4);
    assert!(on_a >= 1 && on_g >= 1, "alpha {on_a}, gamma {on_g}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_node_gets_no_new_work_and_says_so() {
    let zones = tempfile::tempdir().unwrap();
    let (cool, hot) = (zones.path().join("cool"), zones.path().join("hot"));
    std::fs::write(&cool, "40000\n").unwrap();
    std::fs::write(&hot, "40000\n").unwrap();
    let alpha = Peer::start("alpha", true, &["--thermal-zone", cool.to_str().unwrap()]);
    let gamma = Peer::start("gamma", true, &["--thermal-zone", hot.to_str().unwrap()]);
    let (a, g) = (alpha.cluster().await, gamma.cluster().await);
    let beta = Peer::start("beta", false, &["--peer", &a, "--peer", &g]);
    beta.wait_peer("alpha", MODEL_ID).await;
    beta.wait_peer("gamma", MODEL_ID).await;
    // gamma runs hot: its own status, then its heartbeat to beta, say so.
    std::fs::write(&hot, "120000\n").unwrap();
    wait(
        async || {
            beta.peers().await.iter().any(|p| {
                p["name"] == "gamma" && p["thermal_level"] == "critical" && p["throttle"] == 0
            })
        },
        "gamma's heartbeat saying it is critical",
    )
    .await;
    for _ in 0..3 {
        beta.chat(greedy(STORY, 8)).await;
    }
    assert_eq!(alpha.finished().await, 3);
    assert_eq!(gamma.finished().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_provider_is_killed_completes_from_another_node() {
    let mut alpha = Some(Peer::start("alpha", true, &["--parallel", "1"]));
    let mut gamma = Some(Peer::start("gamma", true, &["--parallel", "1"]));
    let a = alpha.as_ref().unwrap().cluster().await;
    let g = gamma.as_ref().unwrap().cluster().await;
    let beta = Peer::start("beta", false, &["--peer", &a, "--peer", &g]);
    beta.wait_peer("alpha", MODEL_ID).await;
    beta.wait_peer("gamma", MODEL_ID).await;

    // The UI's chat, which names the node that finished the answer.
    let conv = beta.conversation("moves").await;
    let r = client()
        .patch(beta.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"temperature": 0, "max_tokens": 160}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut ui = stream_sse(
        beta.url(&format!("/api/conversations/{conv}/chat")),
        json!({"content": STORY}),
    );
    let mut started_on = String::new();
    let mut before = String::new();
    let mut tokens = 0;
    while tokens < 5 {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("start") => started_on = v["message"]["node"].as_str().unwrap().to_owned(),
            Some("token") => {
                before.push_str(v["text"].as_str().unwrap_or_default());
                tokens += 1;
            }
            Some("user") => {}
            _ => panic!("the answer ended before its provider could be killed: {v}"),
        }
    }
    let (victim, survivor) = match started_on.as_str() {
        "alpha" => (alpha.take(), gamma.take()),
        "gamma" => (gamma.take(), alpha.take()),
        other => panic!("started on {other:?}"),
    };
    let mut victim = victim.unwrap();
    victim.node.child.kill().unwrap(); // SIGKILL
    victim.node.child.wait().unwrap();
    let survivor = survivor.unwrap();
    let survivor_name = if started_on == "alpha" {
        "gamma"
    } else {
        "alpha"
    };
    let done = loop {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("done") => break v,
            Some("error") => panic!("the answer did not survive its killed provider: {v}"),
            _ => {}
        }
    };
    assert_eq!(done["message"]["node"], survivor_name, "{done}");
    assert_eq!(done["message"]["status"], "complete", "{done}");
    let content = done["message"]["content"].as_str().unwrap().to_owned();
    assert!(
        content.starts_with(&before) && content.len() > before.len(),
        "{before:?} then {content:?}"
    );
    // The whole answer is what the survivor gives from scratch (greedy; continuing from text
    // can tokenize differently, so a similarity), with nothing lost or repeated at the seam.
    let mut body = greedy(STORY, 160);
    body["ignore_eos"] = json!(false);
    let reference = text(&survivor.chat(body).await);
    assert!(
        similarity(&content, &reference) > 0.6,
        "continued: {content:?}\nfrom scratch: {reference:?}"
    );
    // The killed node is gone from beta's peers at once (its connection closed).
    wait(
        async || !beta.peers().await.iter().any(|p| p["name"] == started_on),
        "the killed node leaving the peer list",
    )
    .await;

    // An OpenAI stream on the survivor, the last node with the model: killed too, the client
    // gets a clear error in the stream.
    let mut rx = stream_chat_at(beta.url("/v1/chat/completions"), greedy(STORY, 400));
    let mut streamed = String::new();
    read_deltas(&mut rx, 3, &mut streamed).await;
    drop(survivor);
    let (_, error) = finish_stream(&mut rx, &mut streamed).await;
    let error = error.expect("an error once no node has the model");
    assert!(
        error.to_string().contains("no other node serves"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_passcode_is_refused_and_the_same_one_admitted() {
    let alpha = Peer::start("alpha", true, &["--passcode", "one"]);
    let a = alpha.cluster().await;
    let wrong = Peer::start("wrong", false, &["--passcode", "two", "--peer", &a]);
    let right = Peer::start("right", false, &["--passcode", "one", "--peer", &a]);
    right.wait_peer("alpha", MODEL_ID).await;
    // The wrong one has tried (its keeper retries with backoff) and is never admitted.
    wait(
        async || alpha.node.stderr().contains("a different passcode"),
        "alpha refusing the wrong passcode",
    )
    .await;
    assert!(wrong.peers().await.is_empty());
    assert!(alpha.peers().await.iter().all(|p| p["name"] != "wrong"));
}

/// `kill -SIG pid`.
fn signal(sig: &str, pid: u32) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_hearth_peer_is_gone_in_seconds_and_back_when_it_wakes() {
    let alpha = Peer::start("alpha", true, &[]);
    let a = alpha.cluster().await;
    let beta = Peer::start("beta", false, &["--peer", &a]);
    beta.wait_peer("alpha", MODEL_ID).await;
    // Frozen: its connection stays open but it says nothing.
    let pid = alpha.node.child.id();
    signal("-STOP", pid);
    let frozen = tokio::time::Instant::now();
    let mut gone = false;
    // Well before a TealeNet peer's 30 s (the bench measures the figure).
    while frozen.elapsed() < Duration::from_secs(10) {
        if !beta.peers().await.iter().any(|p| p["name"] == "alpha") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal("-CONT", pid);
    assert!(gone, "a silent Hearth peer still listed after 10 s");
    // Awake again: beta's keeper connects again.
    beta.wait_peer("alpha", MODEL_ID).await;
    let answer = beta.chat(greedy(STORY, 4)).await;
    assert_eq!(answer["model"], MODEL_ID, "{answer}");
}

/// Which of `alpha` and `gamma` ran what `run` sent (each runs one request at a time here).
async fn ran_on<F: std::future::Future<Output = Value>>(
    alpha: &Peer,
    gamma: &Peer,
    run: F,
) -> (&'static str, Value) {
    let (a0, g0) = (alpha.finished().await, gamma.finished().await);
    let answer = run.await;
    let (a1, g1) = (alpha.finished().await, gamma.finished().await);
    match (a1 - a0, g1 - g0) {
        (1, 0) => ("alpha", answer),
        (0, 1) => ("gamma", answer),
        other => panic!("expected one request on one node, got {other:?}"),
    }
}

/// The door a conversation goes through: the chat door (the client sends the history) or the
/// Responses door (the node keeps it; the next turn names the previous answer).
#[derive(Clone, Copy)]
enum Door {
    Chat,
    Responses,
}

/// A conversation's first turn run while a long request keeps one node busy, so it lands on
/// the other: which one, and the door's path and body of its second turn.
async fn first_turn_beside_a_long_one(
    alpha: &Peer,
    gamma: &Peer,
    beta: &Peer,
    question: &str,
    door: Door,
) -> (&'static str, &'static str, Value) {
    let url = beta.url("/v1/chat/completions");
    let long = tokio::spawn(async move {
        client()
            .post(url)
            .json(&greedy(STORY, 300))
            .send()
            .await
            .unwrap()
            .status()
    });
    wait(
        async || alpha.status().await["active"] == 1 || gamma.status().await["active"] == 1,
        "the long request running",
    )
    .await;
    let busy = if alpha.status().await["active"] == 1 {
        "alpha"
    } else {
        "gamma"
    };
    let messages = json!([{"role": "user", "content": question}]);
    let (at, answer) = {
        let (a0, g0) = (alpha.finished().await, gamma.finished().await);
        let answer = match door {
            Door::Chat => {
                beta.chat(json!({"messages": messages, "max_tokens": 12, "temperature": 0}))
                    .await
            }
            Door::Responses => {
                beta.post(
                    "/v1/responses",
                    json!({"input": question, "max_output_tokens": 12, "temperature": 0}),
                )
                .await
            }
        };
        let (a1, g1) = (alpha.finished().await, gamma.finished().await);
        let at = match (a1 - a0, g1 - g0) {
            (1, 0) => "alpha",
            (0, 1) => "gamma",
            other => panic!("expected the turn on one node, got {other:?}"),
        };
        (at, answer)
    };
    assert_ne!(at, busy, "the first turn went to the free node");
    assert_eq!(long.await.unwrap(), 200);
    match door {
        Door::Chat => {
            let next = json!([
                {"role": "user", "content": question},
                {"role": "assistant", "content": text(&answer)},
                {"role": "user", "content": "Say more."},
            ]);
            let body = json!({"messages": next, "max_tokens": 8, "temperature": 0});
            (at, "/v1/chat/completions", body)
        }
        Door::Responses => {
            let body = json!({"previous_response_id": answer["id"], "input": "Say more.",
                "max_output_tokens": 8, "temperature": 0});
            (at, "/v1/responses", body)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_next_turn_goes_back_to_the_node_that_ran_the_last() {
    // One core each: two "machines" sharing this one's cores would measure each other's work
    // (a short turn run beside the other's long answer decodes at a third of its speed alone),
    // and beta would see one node as much faster than the other although they are the same.
    let alpha = Peer::start("alpha", true, &["--parallel", "1", "--threads", "1"]);
    let gamma = Peer::start("gamma", true, &["--parallel", "1", "--threads", "1"]);
    let (a, g) = (alpha.cluster().await, gamma.cluster().await);
    let beta = Peer::start("beta", false, &["--peer", &a, "--peer", &g]);
    beta.wait_peer("alpha", MODEL_ID).await;
    beta.wait_peer("gamma", MODEL_ID).await;
    // Conversations whose first turns ran where the other node was busy. Left to speed alone,
    // their second turns would all go to whichever node measured faster. The third goes
    // through the Responses door: its next turn names the stored answer (beta keeps it) and
    // goes where the answer's prompt cache is too.
    let mut turns = Vec::new();
    for (question, door) in [
        ("Name a fruit.", Door::Chat),
        ("Name a tree.", Door::Chat),
        ("Name a river.", Door::Responses),
    ] {
        turns.push(first_turn_beside_a_long_one(&alpha, &gamma, &beta, question, door).await);
    }
    for (first, path, next) in turns {
        let (second, _) = ran_on(&alpha, &gamma, beta.post(path, next)).await;
        let cluster = get_json_at(beta.url("/api/cluster")).await;
        let speeds: Vec<(&Value, &Value)> = cluster["peers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (&p["name"], &p["tokens_per_s"]))
            .collect();
        assert_eq!(
            second, first,
            "the second turn went back to the first turn's node (speeds beta measured: {speeds:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generate_stream_whose_provider_is_killed_completes_from_another_node() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let mut alpha = Some(Peer::start("alpha", true, &["--parallel", "1"]));
    let mut gamma = Some(Peer::start("gamma", true, &["--parallel", "1"]));
    let a = alpha.as_ref().unwrap().cluster().await;
    let g = gamma.as_ref().unwrap().cluster().await;
    let beta = Peer::start("beta", false, &["--peer", &a, "--peer", &g]);
    beta.wait_peer("alpha", MODEL_ID).await;
    beta.wait_peer("gamma", MODEL_ID).await;
    let url = format!("ws://{}/generate", beta.node.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let config = json!({"type": "config", "model": MODEL_ID, "prompt": STORY,
        "parameters": {"max_tokens": 160, "temperature": 0}});
    ws.send(WsMessage::text(config.to_string())).await.unwrap();
    let mut next = async || -> Value {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(60), ws.next())
                .await
                .expect("a message within 60 s")
                .expect("the socket is open")
                .unwrap();
            if let WsMessage::Text(t) = m {
                return serde_json::from_str(t.as_str()).unwrap();
            }
        }
    };
    let mut before = String::new();
    let mut tokens = 0;
    while tokens < 5 {
        let m = next().await;
        match m["type"].as_str() {
            Some("token") => {
                before.push_str(m["text"].as_str().unwrap_or_default());
                tokens += 1;
            }
            Some("init" | "status") => {}
            _ => panic!("the answer ended before its provider could be killed: {m}"),
        }
    }
    let on_alpha = alpha.as_ref().unwrap().status().await["active"] == 1;
    let victim = if on_alpha { alpha.take() } else { gamma.take() };
    let mut victim = victim.unwrap();
    victim.node.child.kill().unwrap(); // SIGKILL
    victim.node.child.wait().unwrap();
    let done = loop {
        let m = next().await;
        match m["type"].as_str() {
            Some("completion") => break m,
            Some("error") => panic!("the answer did not survive its killed provider: {m}"),
            _ => {}
        }
    };
    let text_done = done["generated_text"].as_str().unwrap().to_owned();
    assert!(
        text_done.starts_with(&before) && text_done.len() > before.len(),
        "{before:?} then {text_done:?}"
    );
    let survivor = alpha.or(gamma).unwrap();
    let mut body = greedy(STORY, 160);
    body["ignore_eos"] = json!(false);
    let reference = text(&survivor.chat(body).await);
    assert!(
        similarity(&text_done, &reference) > 0.6,
        "continued: {text_done:?}\nfrom scratch: {reference:?}"
    );
}
