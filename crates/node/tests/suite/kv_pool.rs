//! The KV pool and the prompt cache against the real default model: the model's whole
//! context by default (a 5,000-token prompt answered), a prompt resent after its slot was
//! reused restored from host memory and reported as cached on every door, answers that grow
//! past a full pool parked and finished instead of failed (with guesses in the pool too), and
//! a q8_0 cache.

use crate::common;

use common::process::NodeProcess;
use common::{get_json_at, similarity, user, ws_recv, ws_send, ws_until, TestNode};
use serde_json::{json, Value};

/// About 2.9 × `words` of the default model's tokens of text that does not repeat, different for
/// each `seed` (2,600 words made 7,532 tokens with the chat template).
fn long_text(seed: usize, words: usize) -> String {
    const W: [&str; 12] = [
        "river", "stone", "lamp", "orchard", "copper", "meadow", "harbor", "violet", "engine",
        "canyon", "thread", "bakery",
    ];
    (0..words)
        .map(|i| format!("{}{}", W[(i * seed + seed) % W.len()], i % 89))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_5000_token_prompt_is_answered_at_the_default_settings() {
    let data = tempfile::tempdir().unwrap();
    // No --ctx, no --parallel: as a user starts it.
    let node = NodeProcess::start(data.path(), &[], None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let status = get_json_at(format!("{}/api/status", node.url)).await;
        // The default model was trained on 8,192 tokens: its whole context, in one pool.
        assert_eq!(status["model"]["context"], 8192, "{status}");
        assert_eq!(status["model"]["kv_type"], "f16", "{status}");
        // A long prefill on a busy machine: more than chat_at's two minutes.
        let v: Value = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", node.url))
            .json(
                &json!({"messages": user(&long_text(5, 1880)), "max_tokens": 4,
                "temperature": 0}),
            )
            .timeout(std::time::Duration::from_secs(600))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!((5000..8192).contains(&prompt), "{}", v["usage"]);
        assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    });
}

/// The prompt cached tokens each door reports for its answer.
async fn cached_by_door(t: &TestNode, door: &str, text: &str) -> (u64, u64) {
    let messages = user(text);
    match door {
        "openai" => {
            let v = t
                .chat(json!({"messages": messages, "max_tokens": 2, "temperature": 0}))
                .await;
            let u = &v["usage"];
            (
                u["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap(),
                u["prompt_tokens"].as_u64().unwrap(),
            )
        }
        "ollama" => {
            let body = json!({"model": common::MODEL_ID, "messages": messages, "stream": false,
                "options": {"num_predict": 2, "temperature": 0}});
            let v: Value = t.post("/api/chat", &body).await.json().await.unwrap();
            (
                v["prompt_eval_cached_count"].as_u64().unwrap_or(0),
                v["prompt_eval_count"].as_u64().unwrap(),
            )
        }
        _ => {
            let body = json!({"model": common::MODEL_ID, "messages": messages, "max_tokens": 2,
                "temperature": 0});
            let v: Value = t.post("/v1/messages", &body).await.json().await.unwrap();
            let u = &v["usage"];
            let cached = u["cache_read_input_tokens"].as_u64().unwrap();
            (cached, cached + u["input_tokens"].as_u64().unwrap())
        }
    }
}

/// One slot, two long prompts taking turns: each one's sequence is given up for the other's,
/// and comes back from host memory (`--cache-ram`) when its prompt is sent again. Without the
/// prompt cache only the chat template's opening is shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_resent_after_its_slot_was_reused_comes_back_from_the_prompt_cache() {
    let (a, b) = (long_text(5, 350), long_text(7, 350));
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.ctx = Some(4096);
    })
    .await;
    let (cold, prompt) = cached_by_door(&t, "openai", &a).await;
    assert!(prompt > 900 && cold < 64, "{cold} of {prompt}");
    cached_by_door(&t, "openai", &b).await;
    // A's sequence went to host memory when B took the slot; B's when A came back.
    for (door, text) in [("ollama", &a), ("anthropic", &b), ("openai", &a)] {
        let (cached, prompt) = cached_by_door(&t, door, text).await;
        assert_eq!(cached, prompt - 1, "{door}: all but the last prompt token");
    }
    let status = t.status().await;
    let pool = &status["pool"];
    assert!(pool["cache_entries"].as_u64().unwrap() >= 2, "{status}");
    assert!(
        pool["cache_restored_tokens"].as_u64().unwrap() >= 3 * 900,
        "{status}"
    );
    assert!(
        status["model"]["cache_ram"].as_u64().unwrap() > 0,
        "{status}"
    );
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("hearth_prompt_cache_restored_tokens_total"),
        "{metrics}"
    );
    t.stop().await;

    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.ctx = Some(4096);
        c.cache_ram = Some(0);
    })
    .await;
    cached_by_door(&t, "openai", &a).await;
    cached_by_door(&t, "openai", &b).await;
    let (cached, prompt) = cached_by_door(&t, "openai", &a).await;
    assert!(
        cached < 64,
        "without the prompt cache: {cached} of {prompt}"
    );
    assert_eq!(t.status().await["model"]["cache_ram"], 0);
    t.stop().await;
}

/// Two answers that together outgrow a 600-token pool: the younger one is parked (its
/// sequence saved, or decoded again without the prompt cache) until the older one is done,
/// and both end at their length; neither fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_outgrow_the_pool_are_parked_and_finish() {
    let prompts = [
        "Write a long story about a dragon and a knight.",
        "Explain in detail how a steam engine works.",
    ];
    for cache_ram in [None, Some(0)] {
        let t = TestNode::start_with(|c| {
            c.parallel = 2;
            c.ctx = Some(512);
            c.cache_ram = cache_ram;
            // Both answers grow a token a step: with guesses one may race ahead and finish
            // before the pool fills.
            c.spec = hearth_protocol::Speculation::None;
        })
        .await;
        let body = |p: &str| json!({"messages": user(p), "max_tokens": 300, "temperature": 0, "ignore_eos": true});
        let alone = t.chat(body(prompts[1])).await;
        let (first, second) = tokio::join!(t.chat(body(prompts[0])), t.chat(body(prompts[1])));
        for v in [&first, &second] {
            assert_eq!(v["usage"]["completion_tokens"], 300, "{v}");
            assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
        }
        let status = t.status().await;
        assert!(status["pool"]["parked"].as_u64().unwrap() >= 1, "{status}");
        // The parked answer went on where it was: like the same answer given alone (a few
        // tokens may differ where two streams shared a batch).
        let text = |v: &Value| {
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let like = similarity(&text(&alone), &text(&second));
        assert!(
            like > 0.5,
            "{cache_ram:?}: {like}\n{}\n{}",
            text(&alone),
            text(&second)
        );
        t.stop().await;
    }
}

/// The same with guesses in the pool, from n-grams of the text or from the draft model
/// (the default model drafting for itself): guessed cells count, a parked answer's guesses go
/// with it, and both answers end at their length, the parked one going on where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_guessing_ahead_are_parked_and_finish() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.ctx = Some(512);
        c.spec = hearth_protocol::Speculation::None;
        c.draft_model = Some(common::model_path().to_string_lossy().into_owned());
    })
    .await;
    // Lists to write out: text that repeats itself, where guesses hold.
    let prompts = [
        "Write the numbers from one to two hundred in words, separated by commas.",
        "List the days of the week again and again, separated by commas.",
    ];
    let body = |p: &str, spec: &str| {
        json!({"messages": user(p), "max_tokens": 300, "temperature": 0, "ignore_eos": true,
            "speculative": spec})
    };
    let text = |v: &Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let guessed = |m: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix("hearth_spec_guessed_tokens_total "))
            .map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
    };
    let alone = text(&t.chat(body(prompts[1], "none")).await);
    for spec in ["ngram", "draft"] {
        let parked = t.status().await["pool"]["parked"].as_u64().unwrap();
        let before = guessed(&t.metrics().await);
        let (first, second) = tokio::join!(
            t.chat(body(prompts[0], spec)),
            t.chat(body(prompts[1], spec))
        );
        for v in [&first, &second] {
            assert_eq!(v["usage"]["completion_tokens"], 300, "{spec}: {v}");
            assert_eq!(v["choices"][0]["finish_reason"], "length", "{spec}: {v}");
        }
        let status = t.status().await;
        assert!(
            status["pool"]["parked"].as_u64().unwrap() > parked,
            "{spec}: none parked: {status}"
        );
        assert!(guessed(&t.metrics().await) > before, "{spec}: no guesses");
        let like = similarity(&alone, &text(&second));
        assert!(like > 0.5, "{spec}: {like}\n{alone}\n{}", text(&second));
    }
    t.stop().await;
}

/// `--kv-type q8_0`: the pool takes about half the memory of f16's, and the model answers as it
/// does with f16. (A question whose greedy answer has no near tie: every token leads the next
/// best by 0.96 nat or more. Asked to name the planets, or the days of the week, the default
/// model weighs two tokens 0.1 nat apart or less within 12 tokens, and the q8_0 cache's
/// rounding of the keys, which moves log-probabilities by about that, flips them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_q8_0_cache_takes_half_the_memory_and_answers_alike() {
    let mut kv = Vec::new();
    let mut answers = Vec::new();
    for kv_type in [hearth_engine::KvType::F16, hearth_engine::KvType::Q8_0] {
        let t = TestNode::start_with(|c| {
            c.parallel = 1;
            c.kv_type = kv_type;
        })
        .await;
        let status = t.status().await;
        assert_eq!(status["model"]["kv_type"], kv_type.name(), "{status}");
        kv.push(status["model"]["kv_bytes"].as_u64().unwrap());
        let v = t
            .chat(
                json!({"messages": user("What is the capital of France? Answer in one sentence."),
                "max_tokens": 32, "temperature": 0}),
            )
            .await;
        answers.push(
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        t.stop().await;
    }
    assert_eq!(kv[1], kv[0] / 64 * 34, "{kv:?}");
    let like = similarity(&answers[0], &answers[1]);
    assert!(like > 0.5, "{like}: {answers:?}");
}

/// A paused answer holds no room from the others: an answer that needs the pool parks it, and
/// once resumed it goes on as if it had never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_answer_does_not_hold_the_pool_from_the_others() {
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.ctx = Some(512);
    })
    .await;
    let prompt = "Write a long story about a dragon and a knight.";
    let config = json!({"type": "config", "prompt": prompt,
        "parameters": {"max_tokens": 200, "temperature": 0, "ignore_eos": true}});
    let mut ws = t.ws("/generate").await;
    ws_send(&mut ws, config.clone()).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    for _ in 0..3 {
        ws_recv(&mut ws).await;
    }
    ws_send(&mut ws, json!({"type": "control", "action": "pause"})).await;
    let (ack, _) = ws_until(&mut ws, "status").await;
    assert_eq!(ack["operation"], "pause");

    // 40 prompt tokens and 440 answer tokens: the pool's room and the paused answer's cells.
    let v = t
        .chat(
            json!({"messages": user("Explain in detail how a steam engine works."),
            "max_tokens": 440, "temperature": 0, "ignore_eos": true}),
        )
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 440, "{v}");
    let status = t.status().await;
    assert!(status["pool"]["parked"].as_u64().unwrap() >= 1, "{status}");

    ws_send(&mut ws, json!({"type": "control", "action": "resume"})).await;
    let (done, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(done["usage"]["completion_tokens"], 200, "{done}");
    ws_send(&mut ws, config).await;
    let (straight, _) = ws_until(&mut ws, "completion").await;
    assert_eq!(straight["generated_text"], done["generated_text"]);
    t.stop().await;
}

/// The `.kv` files of the prompt cache under `root`.
fn cache_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    common::cache_layout_folders(root)
        .iter()
        .flat_map(|layout| std::fs::read_dir(layout).into_iter().flatten().flatten())
        .map(|f| f.path())
        .filter(|f| f.extension().is_some_and(|x| x == "kv"))
        .collect()
}

/// `--cache-disk`: a sequence given up before a restart comes back from its file after it; a
/// file damaged on disk is deleted and never loaded, and the node answers all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_cache_on_disk_outlives_a_restart_and_a_damaged_file_is_never_loaded() {
    let disk = tempfile::tempdir().unwrap();
    let (a, b) = (long_text(5, 350), long_text(7, 350));
    let start = || {
        let root = disk.path().to_path_buf();
        TestNode::start_with(move |c| {
            c.parallel = 1;
            c.ctx = Some(4096);
            c.cache_disk = Some(root);
        })
    };
    let t = start().await;
    cached_by_door(&t, "openai", &a).await;
    // B takes the only slot: A's sequence goes to memory and to a file.
    cached_by_door(&t, "openai", &b).await;
    // A's file (B took its slot) and B's (idle when the node stopped).
    t.stop().await;
    assert_eq!(cache_files(disk.path()).len(), 2);

    let t = start().await;
    let (cached, prompt) = cached_by_door(&t, "openai", &a).await;
    assert_eq!(cached, prompt - 1, "read back from disk after the restart");
    t.stop().await;

    let mut damaged = Vec::new();
    for file in cache_files(disk.path()) {
        let mut bytes = std::fs::read(&file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        std::fs::write(&file, &bytes).unwrap();
        damaged.push((file, bytes));
    }
    let t = start().await;
    for text in [&a, &b] {
        let (cached, prompt) = cached_by_door(&t, "openai", text).await;
        assert!(
            cached < 64,
            "a damaged file was loaded: {cached} of {prompt}"
        );
    }
    t.stop().await;
    // Deleted when read (and written anew from the pool when the node stopped).
    for (file, bytes) in damaged {
        assert_ne!(std::fs::read(&file).ok(), Some(bytes), "{}", file.display());
    }
}
