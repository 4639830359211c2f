//! A vision model whose positions are M-RoPE (Qwen2-VL's: an image's rows and columns are
//! positions of their own, so it takes fewer positions than tokens), written with random
//! weights by `tests/fixtures/make_mrope_model.py`. Its greedy answer about an image is
//! llama.cpp's own multimodal helper's on the same prompt (which places the image itself), and
//! a later turn, its image restored from the prompt cache, answers as on a node that computes
//! it all afresh.

use crate::common;

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use common::{dark, direct, image_url_part, stripes, TestNode};
use hearth_protocol::media::{Image, MEDIA_MARKER};
use hearth_protocol::ChatMessage;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::mtmd::{MtmdBitmap, MtmdContext, MtmdContextParams, MtmdInputText};
use serde_json::{json, Value};

const MAX_TOKENS: usize = 24;
const QUESTION: &str = "Describe the picture.";
const N_BATCH: u32 = 512;

/// A folder with the M-RoPE model and its projector beside it; the model's path.
fn m_rope_model() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny-vl.gguf");
    let out = std::process::Command::new(common::process::venv_python())
        .arg(common::process::repo_root().join("tests/fixtures/make_mrope_model.py"))
        .arg("--model")
        .arg(common::model_path())
        .arg("--out-model")
        .arg(&model)
        .arg("--out-projector")
        .arg(dir.path().join("mmproj-tiny-vl.gguf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make_mrope_model.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, model)
}

/// One request at a time, on one thread: answers that can be compared token for token.
async fn node(dir: &Path, model: &Path) -> TestNode {
    let (dir, model) = (dir.to_path_buf(), model.to_path_buf());
    TestNode::start_with(move |c| {
        c.models_dir = dir;
        c.model = Some(model.to_string_lossy().into_owned());
        c.parallel = 1;
        c.threads = 1;
    })
    .await
}

/// The node's greedy answer to `messages`, and how many prompt tokens came from a cache.
async fn ask(t: &TestNode, messages: Value) -> (String, u64) {
    let models = t.get_json("/v1/models").await;
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({
                "model": models["data"][0]["id"],
                "messages": messages,
                "max_tokens": MAX_TOKENS, "temperature": 0,
            }),
        )
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    (text.to_owned(), cached)
}

/// llama.cpp's own way, in this process: the chat rendered as the node renders it, cut and
/// evaluated by mtmd's helper (which gives the image its M-RoPE positions), then greedy.
fn direct_greedy(model_path: &Path, projector: &Path, png: &[u8]) -> String {
    let backend = hearth_engine::llama_backend().unwrap();
    let model =
        LlamaModel::load_from_file(backend, model_path, &LlamaModelParams::default()).unwrap();
    let mut ctx = model
        .new_context(
            backend,
            LlamaContextParams::default()
                .with_n_ctx(NonZeroU32::new(2048))
                .with_n_batch(N_BATCH)
                .with_n_ubatch(N_BATCH)
                .with_n_threads(1)
                .with_n_threads_batch(1),
        )
        .unwrap();
    let params = MtmdContextParams {
        use_gpu: false,
        print_timings: false,
        n_threads: 1,
        ..MtmdContextParams::default()
    };
    let mut mtmd =
        MtmdContext::init_from_file(projector.to_str().unwrap(), &model, &params).unwrap();
    assert!(
        mtmd.decode_use_mrope(),
        "the fixture's projector is not M-RoPE"
    );
    let rendered = direct::render_chat(
        &model,
        &[ChatMessage::new(
            "user",
            format!("{MEDIA_MARKER}{QUESTION}"),
        )],
    );
    // The pixels as the node decodes them.
    let pixels = Image(png.to_vec()).decode_within(2048).unwrap();
    let bitmap = MtmdBitmap::from_image_data(pixels.width, pixels.height, &pixels.rgb).unwrap();
    let input = MtmdInputText {
        text: rendered,
        add_special: true,
        parse_special: true,
    };
    let chunks = mtmd.tokenize(input, &[&bitmap]).unwrap();
    assert!(
        (chunks.total_positions() as usize) < chunks.total_tokens(),
        "the image takes as many positions as tokens: not M-RoPE"
    );
    let after = chunks
        .eval_chunks(&mut mtmd, &mut ctx, 0, 0, N_BATCH as i32, true)
        .unwrap();
    let bytes = direct::greedy_bytes(&mut ctx, &model, after, MAX_TOKENS);
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_m_rope_model_answers_about_an_image_as_llama_cpps_own_helper_does() {
    let (dir, model) = m_rope_model();
    let projector = dir.path().join("mmproj-tiny-vl.gguf");
    let t = node(dir.path(), &model).await;
    let asked = |png: Vec<u8>| json!([{"role": "user", "content": [image_url_part(&png), {"type": "text", "text": QUESTION}]}]);
    let (stripes_answer, _) = ask(&t, asked(stripes())).await;
    let (dark_answer, _) = ask(&t, asked(dark())).await;
    t.stop().await;
    assert!(!stripes_answer.is_empty());
    assert_ne!(
        stripes_answer, dark_answer,
        "the image does not reach the model"
    );
    let direct = tokio::task::spawn_blocking(move || direct_greedy(&model, &projector, &stripes()))
        .await
        .unwrap();
    assert_eq!(stripes_answer, direct);
}

/// Prompts that share an image and what follows it with earlier ones, after another prompt
/// took the only slot: the shared part comes back from the prompt cache (or the slot), is cut
/// where they part, and the rest goes in after it at the positions M-RoPE gives them; each
/// answer is that of a node that computes it all afresh.
#[tokio::test]
async fn prompts_after_an_m_rope_image_restored_from_the_cache_answer_as_cold_ones() {
    let (dir, model) = m_rope_model();
    // Long enough to be kept (the prompt cache keeps 64 tokens or more) and to be worth
    // restoring beyond what the other prompt shares with them.
    let shared = "Look at the picture closely. Say what its colours are, what shapes you see, \
        where the light comes from, what it might show and where it might have been made, \
        in one short sentence for each, and then";
    let turn = |ending: &str| {
        json!({"role": "user", "content": [image_url_part(&stripes()),
            {"type": "text", "text": format!("{shared} {ending}")}]})
    };
    let other = "Tell me about the history of clocks, from sundials and water clocks to \
        pendulums, springs, quartz crystals and atomic time, and who made each of them. "
        .repeat(2);
    let t = node(dir.path(), &model).await;
    let (first, _) = ask(&t, json!([turn("give it a title.")])).await;
    // The other prompt takes the slot: the first one's sequence goes to the prompt cache.
    ask(&t, json!([{"role": "user", "content": other}])).await;
    // The same image and words, another ending: restored, and cut where the two part.
    let parted = json!([turn("say nothing more.")]);
    let (warm_parted, cached) = ask(&t, parted.clone()).await;
    assert!(
        cached > 40,
        "the shared start was not reused: {cached} tokens cached"
    );
    // The first conversation's next turn: its first turn from the cache.
    let next = json!([turn("give it a title."), {"role": "assistant", "content": first},
        {"role": "user", "content": "And what colour is the largest part of it?"}]);
    let (warm_next, cached) = ask(&t, next.clone()).await;
    assert!(
        cached > 40,
        "the first turn was not reused: {cached} tokens cached"
    );
    t.stop().await;
    for (messages, warm) in [(parted, warm_parted), (next, warm_next)] {
        let cold_node = node(dir.path(), &model).await;
        let (cold, cached) = ask(&cold_node, messages).await;
        cold_node.stop().await;
        assert_eq!(cached, 0);
        assert_eq!(warm, cold);
    }
}
