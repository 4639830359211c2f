//! Speculation against the real default model: an answer that copies its prompt is the same
//! text with guesses on and off (greedy; sampled with a seed, the same text each time), guesses are made and held
//! and counted in `/metrics` and status, two requests guessing side by side are answered as
//! each alone, a request may turn it on or off, and a bad setting is refused on each door. A
//! draft model (`--draft-model`, here the default model drafting for itself) guesses too,
//! with the same text; one of another vocabulary is refused, and so is a request for it.

use crate::common;

use common::{user, TestNode};
use serde_json::{json, Value};

/// A prompt whose answer copies much of it: what n-gram guesses are for.
const CODE: &str = "def merge(left, right):\n    result = []\n    i = j = 0\n    while i < len(left) and j < len(right):\n        if left[i] <= right[j]:\n            result.append(left[i])\n            i += 1\n        else:\n            result.append(right[j])\n            j += 1\n    result.extend(left[i:])\n    result.extend(right[j:])\n    return result\n";

fn copy_prompt() -> String {
    format!(
        "Here is a Python function:\n\n{CODE}\nWrite the same function again, renamed to \
         merge_sorted, and nothing else.\n"
    )
}

fn body(spec: &str, extra: Value) -> Value {
    let mut b = json!({"messages": user(&copy_prompt()), "max_tokens": 160,
        "temperature": 0, "speculative": spec});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{metrics}"))
}

async fn answer(t: &TestNode, body: Value) -> (String, u64) {
    let v = t.chat(body).await;
    (
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        v["usage"]["completion_tokens"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn answers_are_the_same_with_guesses_on_and_off() {
    let t = TestNode::start(2).await;
    // A prompt prefilled whole and one restored but its last token differ in the last bits
    // of their logits: every answer compared here comes after the prompt is cached.
    answer(&t, body("none", json!({"max_tokens": 1}))).await;
    let (plain, n) = answer(&t, body("none", json!({}))).await;
    assert!(
        n >= 40,
        "a long enough answer to guess in: {n} tokens: {plain}"
    );
    let m = t.metrics().await;
    assert_eq!(
        counter(&m, "hearth_spec_guessed_tokens_total"),
        0.0,
        "none guesses nothing"
    );

    let (guessed, _) = answer(&t, body("ngram", json!({}))).await;
    assert_eq!(guessed, plain, "greedy text differs with guesses");
    let m = t.metrics().await;
    let made = counter(&m, "hearth_spec_guessed_tokens_total");
    let held = counter(&m, "hearth_spec_held_tokens_total");
    assert!(made > 0.0 && held > 0.0, "guesses made {made}, held {held}");
    assert!(held <= made);
    let status = t.status().await;
    assert_eq!(status["spec"]["guessed"], made as u64, "{status}");
    assert_eq!(status["spec"]["held"], held as u64, "{status}");

    // Sampled with a seed: each token is drawn by the same rule from the same numbers, so the
    // answer keeps its distribution. Not its exact text: a token decoded beside guesses gets
    // logits that may differ from a lone token's in the last bits (llama.cpp's CPU kernels
    // add up in another order for wider batches), which a draw can feel and argmax not. The
    // same request twice is the same answer.
    let sampled = json!({"temperature": 0.7, "seed": 11});
    let before = counter(&t.metrics().await, "hearth_spec_guessed_tokens_total");
    let (a, _) = answer(&t, body("ngram", sampled.clone())).await;
    let (b, _) = answer(&t, body("ngram", sampled)).await;
    assert_eq!(a, b, "seeded sampled text with guesses is not reproducible");
    assert!(counter(&t.metrics().await, "hearth_spec_guessed_tokens_total") > before);

    // Streamed with log-probabilities: every token still gets its own.
    let (streamed, chunks) = t
        .chat_stream(body("ngram", json!({"logprobs": true, "top_logprobs": 2})))
        .await;
    assert_eq!(streamed, plain);
    let lps: usize = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(lps as u64, n, "one log-probability per token");

    // Two at once, both guessing, in one batch: each answers its own prompt. Two sequences in
    // a batch change the last bits of the logits too, so the text may part from the lone
    // answer's at any token: each is checked for its own prompt's words and not the other's.
    let before = counter(&t.metrics().await, "hearth_spec_held_tokens_total");
    let other = "Here is a list:\n\napples, pears, plums, cherries, grapes, figs, dates, limes, \
        lemons, melons\n\nWrite the same list again, in the same order.\n";
    let (x, y) = tokio::join!(
        answer(&t, body("ngram", json!({}))),
        answer(
            &t,
            json!({"messages": user(other), "max_tokens": 60, "temperature": 0,
            "speculative": "ngram"})
        )
    );
    assert!(x.0.contains("merge"), "{}", x.0);
    assert!(!x.0.to_lowercase().contains("plums"), "{}", x.0);
    assert!(y.0.to_lowercase().contains("plums, cherries"), "{}", y.0);
    assert!(!y.0.contains("merge"), "{}", y.0);
    assert!(counter(&t.metrics().await, "hearth_spec_held_tokens_total") > before);
    t.stop().await;
}

#[tokio::test]
async fn each_door_takes_the_setting_and_refuses_a_bad_one() {
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.spec = hearth_protocol::Speculation::None;
    })
    .await;
    // The node says none; the request says ngram, through the Ollama door.
    let r = t
        .post(
            "/api/chat",
            &json!({"model": common::MODEL_ID, "messages": user(&copy_prompt()),
                "stream": false, "options": {"num_predict": 80, "temperature": 0,
                "speculative": "ngram"}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let m = t.metrics().await;
    assert!(counter(&m, "hearth_spec_guessed_tokens_total") > 0.0);

    let bad = |door: &str| match door {
        "/api/chat" => json!({"model": common::MODEL_ID, "messages": user("Hi"),
            "stream": false, "options": {"speculative": "sometimes"}}),
        "/v1/messages" => json!({"model": common::MODEL_ID, "max_tokens": 8,
            "messages": user("Hi"), "speculative": "sometimes"}),
        "/v1/responses" => json!({"model": common::MODEL_ID, "input": "Hi",
            "speculative": "sometimes"}),
        _ => json!({"model": common::MODEL_ID, "messages": user("Hi"),
            "speculative": "sometimes"}),
    };
    for door in [
        "/v1/chat/completions",
        "/api/chat",
        "/v1/messages",
        "/v1/responses",
    ] {
        let r = t.post(door, &bad(door)).await;
        assert_eq!(r.status(), 400, "{door}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v.to_string()
                .contains("speculative must be auto, none, ngram or draft"),
            "{door}: {v}"
        );
    }
    t.stop().await;
}

#[tokio::test]
async fn a_draft_model_guesses_and_the_answer_is_the_same() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.spec = hearth_protocol::Speculation::None;
        c.draft_model = Some(common::model_path().to_string_lossy().into_owned());
    })
    .await;
    let status = t.status().await;
    assert_eq!(status["model"]["draft"], common::MODEL_ID, "{status}");
    answer(&t, body("none", json!({"max_tokens": 1}))).await;
    let (plain, n) = answer(&t, body("none", json!({}))).await;
    assert!(n >= 40, "{n} tokens: {plain}");
    let (drafted, _) = answer(&t, body("draft", json!({}))).await;
    assert_eq!(
        drafted, plain,
        "greedy text differs with the draft model's guesses"
    );
    let m = t.metrics().await;
    let made = counter(&m, "hearth_spec_guessed_tokens_total");
    let held = counter(&m, "hearth_spec_held_tokens_total");
    // The model drafting for itself: its greedy guesses are mostly what it then chooses.
    assert!(
        made > 0.0 && held >= 0.5 * made,
        "guesses made {made}, held {held}"
    );

    // A prompt longer than one batch: the draft catches up over several steps, then guesses.
    let long = format!(
        "Here are five copies of a Python function:\n\n{}\nWrite it once more, renamed to \
         merge_sorted, and nothing else.\n",
        CODE.repeat(5)
    );
    let long_body = |spec: &str| {
        json!({"messages": user(&long), "max_tokens": 100, "temperature": 0,
            "speculative": spec})
    };
    answer(
        &t,
        json!({"messages": user(&long), "max_tokens": 1, "temperature": 0}),
    )
    .await;
    let v = t.chat(long_body("none")).await;
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 512, "longer than a batch: {prompt_tokens}");
    let plain_long = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = counter(&t.metrics().await, "hearth_spec_held_tokens_total");
    let (drafted_long, _) = answer(&t, long_body("draft")).await;
    assert_eq!(drafted_long, plain_long);
    let held = counter(&t.metrics().await, "hearth_spec_held_tokens_total");
    assert!(
        held > before,
        "no guess held after the long prompt's catch-up"
    );

    // Two at once, both drafting in one batch (and a sampled one): each answers its own.
    let other = "Here is a list:\n\napples, pears, plums, cherries, grapes, figs, dates, limes, \
        lemons, melons\n\nWrite the same list again, in the same order.\n";
    let (x, y) = tokio::join!(
        answer(&t, body("draft", json!({"temperature": 0.5, "seed": 3}))),
        answer(
            &t,
            json!({"messages": user(other), "max_tokens": 60, "temperature": 0,
            "speculative": "draft"})
        )
    );
    assert!(
        x.0.contains("merge_sorted") || x.0.contains("def "),
        "{}",
        x.0
    );
    assert!(!x.0.contains("plums"), "{}", x.0);
    assert!(y.0.to_lowercase().contains("plums, cherries"), "{}", y.0);
    assert!(!y.0.contains("merge"), "{}", y.0);
    assert!(counter(&t.metrics().await, "hearth_spec_held_tokens_total") > held);
    t.stop().await;
}

#[tokio::test]
async fn a_draft_model_of_another_vocabulary_is_refused_clearly() {
    // Node settings that cannot work fail at start, naming what is wrong.
    let e = TestNode::try_start_with(|c| c.spec = hearth_protocol::Speculation::Draft)
        .await
        .err()
        .expect("--spec draft without a draft model is refused");
    assert!(e.to_string().contains("--draft-model"), "{e}");
    let e = TestNode::try_start_with(|c| c.draft_model = Some("no-such-draft".into()))
        .await
        .err()
        .expect("a missing draft model is refused");
    assert!(e.to_string().contains("no-such-draft"), "{e}");

    // Gemma's vocabulary is not SmolLM2's: the model serves without a draft and says why.
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.draft_model = Some(common::long_model_path().to_string_lossy().into_owned());
    })
    .await;
    let status = t.status().await;
    assert!(status["model"]["draft"].is_null(), "{status}");
    let why = status["model"]["draft_refused"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("vocabulary"), "{status}");
    let ok = t
        .chat(json!({"messages": user("Hi"), "max_tokens": 4}))
        .await;
    assert!(ok["choices"][0]["message"]["content"].is_string());
    for (door, body) in [
        (
            "/v1/chat/completions",
            json!({"model": common::MODEL_ID, "messages": user("Hi"), "speculative": "draft"}),
        ),
        (
            "/api/chat",
            json!({"model": common::MODEL_ID, "messages": user("Hi"), "stream": false,
                "options": {"speculative": "draft"}}),
        ),
    ] {
        let r = t.post(door, &body).await;
        assert_eq!(r.status(), 400, "{door}");
        let v: Value = r.json().await.unwrap();
        assert!(v.to_string().contains("has no draft model"), "{door}: {v}");
    }
    t.stop().await;
}
