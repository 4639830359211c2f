//! The OpenAI door against a real node and the real default model: streaming equals
//! non-streaming under greedy sampling, usage is real, `length` lands exactly at max_tokens,
//! seeds reproduce, stop strings cut, concurrent streams stay in their own slots.

use crate::common;

use common::{similarity, user, TestNode, MODEL_ID};
use serde_json::json;

const PROMPT: &str = "Write a short story about a robot learning to paint.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_equals_non_streamed_text_and_usage_is_real() {
    let t = TestNode::start(4).await;
    let body =
        json!({"model": MODEL_ID, "messages": user(PROMPT), "temperature": 0, "max_tokens": 48});
    let full = t.chat(body.clone()).await;
    let text = full["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!text.is_empty());
    assert_eq!(full["object"], "chat.completion");
    assert_eq!(full["model"], MODEL_ID);
    assert_eq!(full["choices"][0]["message"]["role"], "assistant");

    let mut streamed_body = body.clone();
    streamed_body["stream_options"] = json!({"include_usage": true});
    let (streamed, chunks) = t.chat_stream(streamed_body).await;
    assert_eq!(
        streamed, text,
        "greedy streamed text differs from non-streamed text"
    );

    // Usage adds up and matches the engine's own tokenization of the rendered prompt.
    let usage = &full["usage"];
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
    let completion_tokens = usage["completion_tokens"].as_u64().unwrap();
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        prompt_tokens + completion_tokens
    );
    let info = t.node().host().model().unwrap();
    let rendered = info
        .render_chat(&vec![hearth_protocol::ChatMessage::new("user", PROMPT)].into())
        .unwrap();
    assert_eq!(prompt_tokens as usize, info.count_tokens(&rendered));
    assert!(rendered.contains("<|im_start|>assistant\n"), "{rendered}");

    // Stream shape: role first, finish reason on the last choice chunk, then a usage chunk
    // with no choices; usage null on the others.
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(last["usage"][count], usage[count], "{count}");
    }
    // The same prompt again: all but its last token came from the slot's cache.
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"], 0,
        "{usage}"
    );
    assert_eq!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt_tokens - 1
    );
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(
        finish["choices"][0]["finish_reason"],
        full["choices"][0]["finish_reason"]
    );
    assert!(chunks[1]["usage"].is_null());
    assert_eq!(chunks[0]["id"], last["id"]);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_lands_exactly_at_max_tokens_and_streams_without_usage_unless_asked() {
    let t = TestNode::start(2).await;
    for max in [1u64, 7, 16] {
        let v = t
            .chat(json!({"messages": user(PROMPT), "temperature": 0, "max_tokens": max}))
            .await;
        assert_eq!(
            v["choices"][0]["finish_reason"], "length",
            "max_tokens {max}"
        );
        assert_eq!(v["usage"]["completion_tokens"].as_u64().unwrap(), max);
    }
    let (_, chunks) = t
        .chat_stream(json!({"messages": user(PROMPT), "max_completion_tokens": 5}))
        .await;
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_gives_the_same_text_at_temperature_0_9() {
    let t = TestNode::start(2).await;
    let body = |seed: u64| json!({"messages": user(PROMPT), "temperature": 0.9, "seed": seed, "max_tokens": 40});
    let a = t.chat(body(1234)).await["choices"][0]["message"]["content"].clone();
    let b = t.chat(body(1234)).await["choices"][0]["message"]["content"].clone();
    assert_eq!(a, b);
    // Different seeds almost surely differ over 40 sampled tokens; try a few to be sure the
    // seed is used at all.
    let mut differs = false;
    for seed in [1, 2, 3, 4] {
        if t.chat(body(seed)).await["choices"][0]["message"]["content"] != a {
            differs = true;
            break;
        }
    }
    assert!(differs, "the seed has no effect");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_string_from_the_middle_cuts_the_answer_just_before_it() {
    let t = TestNode::start(2).await;
    let body = json!({"messages": user(PROMPT), "temperature": 0, "max_tokens": 60});
    let answer = t.chat(body.clone()).await["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    // A short piece from the middle, on character boundaries.
    let chars: Vec<(usize, char)> = answer.char_indices().collect();
    assert!(chars.len() > 20, "answer too short: {answer:?}");
    let mid = chars.len() / 2;
    let start = chars[mid].0;
    let end = chars[mid + 6].0;
    let stop = &answer[start..end];
    let expected = &answer[..answer.find(stop).unwrap()];
    for stream in [false, true] {
        let mut b = body.clone();
        b["stop"] = json!([stop]);
        let (text, finish) = if stream {
            let (text, chunks) = t.chat_stream(b).await;
            let finish = chunks.last().unwrap()["choices"][0]["finish_reason"].clone();
            (text, finish)
        } else {
            let v = t.chat(b).await;
            (
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                v["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(text, expected, "stop {stop:?} (stream: {stream})");
        assert_eq!(finish, "stop");
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_streams_of_two_prompts_stay_in_their_own_slots() {
    let t = TestNode::start(8).await;
    let prompts = [
        "List the planets of the solar system in order.",
        "Write a recipe for chocolate chip cookies.",
    ];
    let body = |p: &str| json!({"messages": user(p), "temperature": 0, "max_tokens": 40});
    let mut single = Vec::new();
    for p in prompts {
        single.push(
            t.chat(body(p)).await["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(
        similarity(&single[0], &single[1]) < 0.5,
        "the two prompts must answer differently"
    );
    let mut tasks = Vec::new();
    for i in 0..8 {
        let url = t.url("/v1/chat/completions");
        let mut b = body(prompts[i % 2]);
        b["stream"] = json!(true);
        tasks.push(tokio::spawn(async move {
            let r = common::client().post(url).json(&b).send().await.unwrap();
            common::parse_sse(&r.text().await.unwrap()).0
        }));
    }
    let mut saw_batching = false;
    for _ in 0..50 {
        if t.status().await["active"].as_u64().unwrap() > 1 {
            saw_batching = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let text = task.await.unwrap();
        let own = similarity(&text, &single[i % 2]);
        let other = similarity(&text, &single[1 - i % 2]);
        assert!(own > other, "stream {i} looks like the other prompt's answer: {text:?} (own {own:.2}, other {other:.2})");
    }
    assert!(saw_batching, "the streams never ran together");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_and_text_completions() {
    let t = TestNode::start(2).await;
    let models = t.get_json("/v1/models").await;
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], MODEL_ID);
    assert_eq!(models["data"][0]["object"], "model");
    // One model, as the SDKs' `models.retrieve` asks for it.
    let one = t.get_json(&format!("/v1/models/{MODEL_ID}")).await;
    assert_eq!(one["id"], MODEL_ID, "{one}");
    assert_eq!(one["object"], "model", "{one}");
    assert_eq!(one["owned_by"], models["data"][0]["owned_by"], "{one}");
    let r = common::client()
        .get(format!("{}/v1/models/owner/no-such-model", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "model_not_found", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("owner/no-such-model"),
        "{e}"
    );

    let r = t
        .post("/v1/completions", &json!({"model": MODEL_ID, "prompt": "Once upon a time", "temperature": 0, "max_tokens": 12, "echo": true}))
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["object"], "text_completion");
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Once upon a time") && text.len() > "Once upon a time".len(),
        "{text}"
    );
    assert_eq!(v["usage"]["completion_tokens"], 12);

    // Streaming completions equal non-streaming; logprobs are real log-probabilities.
    let body = json!({"prompt": "The capital of France is", "temperature": 0, "max_tokens": 10, "logprobs": 2});
    let v: serde_json::Value = t.post("/v1/completions", &body).await.json().await.unwrap();
    let lp = &v["choices"][0]["logprobs"];
    let n = lp["tokens"].as_array().unwrap().len();
    assert_eq!(n, 10);
    for i in 0..n {
        let l = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(l <= 0.0 && l.is_finite());
        // Greedy: the chosen token is the most likely one.
        let top = lp["top_logprobs"][i].as_object().unwrap();
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(
            (best - l).abs() < 1e-4,
            "greedy token is not the top token at {i}"
        );
    }
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let text = t.post("/v1/completions", &sb).await.text().await.unwrap();
    let (streamed, _) = common::parse_sse(&text);
    assert_eq!(streamed, v["choices"][0]["text"].as_str().unwrap());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_are_reported_per_token() {
    let t = TestNode::start(2).await;
    let v = t
        .chat(json!({"messages": user(PROMPT), "temperature": 0, "max_tokens": 8, "logprobs": true, "top_logprobs": 3}))
        .await;
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 8);
    let joined: String = content
        .iter()
        .map(|c| c["token"].as_str().unwrap())
        .collect();
    assert_eq!(
        joined,
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );
    for c in content {
        assert_eq!(c["top_logprobs"].as_array().unwrap().len(), 3);
        assert_eq!(c["top_logprobs"][0]["logprob"], c["logprob"]);
    }
    t.stop().await;
}

/// A prompt that starts like the slot's previous one reuses that KV cache (llama-server's
/// `cache_prompt`): only the rest is prefilled, and `timings.cache_n` says how much was kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_prompt_reuses_the_slots_kv_cache() {
    let t = TestNode::start(1).await;
    let body = json!({
        "messages": user("Name three colours of the rainbow."),
        "max_tokens": 6,
        "temperature": 0,
    });
    let first = t.chat(body.clone()).await;
    assert_eq!(first["timings"]["cache_n"], 0, "{first}");
    let second = t.chat(body).await;
    let prompt_n = second["timings"]["prompt_n"].as_u64().unwrap();
    // Everything but the last prompt token, which is decoded again for fresh logits.
    assert_eq!(
        second["timings"]["cache_n"].as_u64().unwrap(),
        prompt_n - 1,
        "{second}"
    );
    let other = t
        .chat(json!({"messages": user("Something else entirely."), "max_tokens": 4, "temperature": 0}))
        .await;
    let shared = other["timings"]["cache_n"].as_u64().unwrap();
    assert!(
        shared < prompt_n - 1,
        "only the shared template prefix is kept: {other}"
    );
    t.stop().await;
}
