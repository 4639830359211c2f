//! The official `openai` and `ollama` Python packages (installed into `.venv` by
//! `scripts/setup.sh`) as real clients of the OpenAI and Ollama doors and of embeddings.

use crate::common;

use std::process::Command;

use common::process::{repo_root, run_peer, venv_python};
use common::{TestNode, MODEL_ID};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works() {
    let t = TestNode::start(2).await;
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/openai_client.py"))
        .arg(&t.base)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, "the python client").await;
    assert!(stdout.contains("openai client OK"), "{stdout}");
    t.stop().await;
}

/// The official `ollama` Python package, unchanged, against the Ollama door (on its own port,
/// as an Ollama user would point `OLLAMA_HOST` at it): list, show, ps, chat and generate
/// streamed and not, options, JSON format and schema, embed, and its own errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_ollama_python_client_works() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.ollama_port = Some(0);
    })
    .await;
    let ollama = format!(
        "http://{}",
        t.node().ollama_addr().expect("the Ollama port")
    );
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/ollama_client.py"))
        .arg(&ollama)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, "the ollama python client").await;
    assert!(stdout.contains("ollama client OK"), "{stdout}");
    t.stop().await;
}

/// The `openai` package's `embeddings.create`: a string, a batch, base64, token ids, and two
/// close sentences nearer each other than two unrelated ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_makes_embeddings() {
    let t = TestNode::start(1).await;
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/openai_embeddings.py"))
        .arg(&t.base)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, "the python embeddings client").await;
    assert!(stdout.contains("openai embeddings OK"), "{stdout}");
    t.stop().await;
}

/// Both official packages reading a thinking block and a tool call (the scripted engine's
/// answer): `reasoning_content` and `tool_calls` through `openai`, `thinking` and
/// `message.tool_calls` through `ollama`, whole and streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_clients_read_thinking_and_tool_calls() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.ollama_port = Some(0);
        c.script = Some(hearth_engine::Script {
            answer: [
                "<think>",
                "Plan it.",
                "</think>\n\n",
                "<tool_call>\n{\"name\": \"get_weather\", ",
                "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        });
    })
    .await;
    let ollama = format!(
        "http://{}",
        t.node().ollama_addr().expect("the Ollama port")
    );
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/scripted_clients.py"))
        .arg(&t.base)
        .arg(&ollama)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, "the scripted clients").await;
    assert!(stdout.contains("scripted clients OK"), "{stdout}");
    t.stop().await;
}

/// Every answer of both APIs against the official packages' own types: validated by them, and
/// holding every field they declare but those `tests/response_shapes.py` lists with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_has_the_fields_the_official_types_declare() {
    let t = TestNode::start(2).await;
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/response_shapes.py"))
        .arg(&t.base)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, "the response shapes check").await;
    assert!(stdout.contains("response shapes OK"), "{stdout}");
    t.stop().await;
}
