//! With a single request in flight, the node's greedy text equals a minimal direct llama.cpp
//! loop (llama-cpp-2, one context, greedy, no server) on the same prompt and chat template.
//! The node runs as a separate process; this one shares the process-wide llama.cpp backend
//! with the other tests' in-process nodes (`hearth_engine::llama_backend`).

use crate::common;

use std::num::NonZeroU32;

use common::direct;
use common::process::NodeProcess;
use hearth_protocol::ChatMessage;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use serde_json::json;

const MAX_TOKENS: usize = 48;
const PROMPTS: [&str; 2] = [
    "Write a short story about a robot learning to paint.",
    "What are three good habits for healthy sleep?",
];

/// The least code that generates greedily with llama.cpp.
fn direct_greedy(model_path: &std::path::Path, prompt: &str) -> String {
    // The backend libraries as the node loads them (the same CPU variant).
    let backend = hearth_engine::llama_backend().unwrap();
    let model =
        LlamaModel::load_from_file(backend, model_path, &LlamaModelParams::default()).unwrap();
    let threads = hearth_engine::config::physical_cores() as i32;
    let mut ctx = model
        .new_context(
            backend,
            LlamaContextParams::default()
                .with_n_ctx(NonZeroU32::new(1024))
                .with_n_threads(threads)
                .with_n_threads_batch(threads),
        )
        .unwrap();
    let rendered = direct::render_chat(&model, &[ChatMessage::new("user", prompt)]);
    let tokens = model.vocab().tokenize(rendered.as_bytes(), true, true);
    let mut batch = LlamaBatch::new(512, 1);
    for (i, t) in tokens.iter().enumerate() {
        batch
            .add(*t, i as i32, &[0], i == tokens.len() - 1)
            .unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    let bytes = direct::greedy_bytes(&mut ctx, &model, tokens.len() as i32, MAX_TOKENS);
    String::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_greedy_text_equals_a_direct_llama_cpp_loop() {
    let model = common::model_path();
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        &dir.path().join("data"),
        &["--parallel", "4", "--ctx", "1024"],
        None,
    );
    let url = node.url.clone();
    for prompt in PROMPTS {
        let expected = direct_greedy(&model, prompt);
        assert!(!expected.is_empty());
        let v: serde_json::Value = common::client()
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": MAX_TOKENS}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            v["choices"][0]["message"]["content"].as_str().unwrap(),
            expected,
            "prompt {prompt:?}"
        );
    }
}
