//! The long-context test model (Gemma 3 270M: 32k tokens of context, sliding-window layers, a
//! 262k vocabulary) as a user starts it: its whole context by default, a 30k-token prompt
//! answered, and sent again with more after it, restored from the pool instead of prefilled.

use crate::common;

use common::get_json_at;
use common::process::NodeProcess;
use serde_json::{json, Value};
use std::time::Duration;

/// About 2.9 × `words` of Gemma's tokens of text that does not repeat.
fn long_text(words: usize) -> String {
    const W: [&str; 12] = [
        "river", "stone", "lamp", "orchard", "copper", "meadow", "harbor", "violet", "engine",
        "canyon", "thread", "bakery",
    ];
    (0..words)
        .map(|i| format!("{}{}", W[(i * 5 + 5) % W.len()], i % 89))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn complete(url: &str, prompt: &str) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        // A base model rarely stops: its answer is bounded.
        .json(&json!({"prompt": prompt, "max_tokens": 4, "temperature": 0}))
        .timeout(Duration::from_secs(900))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[test]
fn a_30k_token_prompt_is_answered_and_its_resend_restored() {
    let data = tempfile::tempdir().unwrap();
    // No --ctx: the model's training context, in one pool.
    let node = NodeProcess::start_model(data.path(), &common::long_model_path(), &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let status = get_json_at(format!("{}/api/status", node.url)).await;
        assert_eq!(status["model"]["context"], 32768, "{status}");
        let text = long_text(10_300);
        let v = complete(&node.url, &text).await;
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!((29_000..32_768).contains(&prompt), "{}", v["usage"]);
        assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
        // The same text and a little more: the pool still holds it, across the sliding
        // window's layers too.
        let v = complete(&node.url, &format!("{text} river copper lamp")).await;
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        assert!(
            cached + 16 >= prompt,
            "{cached} of {prompt}: {}",
            v["usage"]
        );
        assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    });
}
