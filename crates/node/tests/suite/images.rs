//! Images through the doors, against the real default model with a projector the test writes
//! (`tests/fixtures/make_projector.py`: random weights, since no small real vision model can
//! be fetched here). The answers mean nothing; what is checked is that the image reaches the
//! model: at temperature 0 two different images give different answers and the same image
//! the same answer, on the OpenAI and Ollama doors; bad images and a model without a projector
//! are refused with a clear 400, and the node keeps serving.

use crate::common;

use base64::Engine as _;
use common::{
    cluster_config, dark, greedy_conversation, image_url_part, png, png_uri, stripes, ui_turn,
    TestNode, MODEL_ID,
};
use serde_json::{json, Value};

/// A folder holding the default model (a link to it) and its vision projector.
pub(crate) fn model_with_projector() -> (tempfile::TempDir, std::path::PathBuf) {
    common::model_with_projector("make_projector.py")
}

async fn vision_node() -> (TestNode, tempfile::TempDir) {
    let (dir, model) = model_with_projector();
    let node = TestNode::start_with(|c| {
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.parallel = 2;
    })
    .await;
    (node, dir)
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) async fn openai_answer(t: &TestNode, image: &[u8]) -> Value {
    openai_answer_to(t, image, "Describe the picture.").await
}

async fn openai_answer_to(t: &TestNode, image: &[u8], question: &str) -> Value {
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({
                "model": MODEL_ID,
                "messages": [{"role": "user", "content": [
                    image_url_part(image),
                    {"type": "text", "text": question},
                ]}],
                "max_tokens": 16, "temperature": 0,
            }),
        )
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

async fn ollama_answer(t: &TestNode, image: &[u8]) -> String {
    let r = t
        .post(
            "/api/chat",
            &json!({
                "model": MODEL_ID,
                "messages": [{"role": "user", "content": "Describe the picture.", "images": [b64(image)]}],
                "stream": false,
                "options": {"temperature": 0, "num_predict": 16},
            }),
        )
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v["message"]["content"].as_str().unwrap().to_owned()
}

/// Ollama's `/api/generate` with one image: the answer's text.
async fn ollama_generate(t: &TestNode, image: &[u8]) -> String {
    let r = t
        .post(
            "/api/generate",
            &json!({
                "model": MODEL_ID, "prompt": "Describe the picture.", "images": [b64(image)],
                "stream": false, "options": {"temperature": 0, "num_predict": 16},
            }),
        )
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v["response"].as_str().unwrap().to_owned()
}

/// The answer's text through Anthropic's Messages door and the Responses door.
async fn agent_door_answer(t: &TestNode, door: &str, image: &[u8]) -> String {
    let (path, body) = match door {
        "anthropic" => (
            "/v1/messages",
            json!({"model": MODEL_ID, "max_tokens": 16, "temperature": 0, "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(image)}},
                    {"type": "text", "text": "Describe the picture."}]}]}),
        ),
        _ => (
            "/v1/responses",
            json!({"model": MODEL_ID, "max_output_tokens": 16, "temperature": 0, "store": false, "input": [
                {"role": "user", "content": [
                    {"type": "input_image", "image_url": png_uri(image)},
                    {"type": "input_text", "text": "Describe the picture."}]}]}),
        ),
    };
    let r = t.post(path, &body).await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{door}: {v}");
    answer_text(&v)
}

/// An agent door's answer words: Anthropic's text blocks, or the Responses messages' parts.
fn answer_text(v: &Value) -> String {
    let blocks = v["content"].as_array().cloned().unwrap_or_else(|| {
        v["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["type"] == "message")
            .flat_map(|item| item["content"].as_array().unwrap().clone())
            .collect()
    });
    assert!(!blocks.is_empty(), "no answer: {v}");
    blocks.iter().filter_map(|b| b["text"].as_str()).collect()
}

#[tokio::test]
async fn an_image_reaches_the_model_on_every_door() {
    let (t, _dir) = vision_node().await;
    let a = openai_answer(&t, &stripes()).await;
    let text_a = a["choices"][0]["message"]["content"].as_str().unwrap();
    // The image's tokens count in the prompt: 16 for a 64-pixel projector with 16-pixel patches
    // (its marker, standing alone in the text, would be a few).
    let prompt_tokens = a["usage"]["prompt_tokens"].as_u64().unwrap();
    let text_only = t
        .chat(json!({"model": MODEL_ID, "max_tokens": 1, "messages": [
            {"role": "user", "content": "Describe the picture."}]}))
        .await;
    assert_eq!(
        prompt_tokens,
        text_only["usage"]["prompt_tokens"].as_u64().unwrap() + 16,
        "{}",
        a["usage"]
    );
    let b = openai_answer(&t, &dark()).await;
    let text_b = b["choices"][0]["message"]["content"].as_str().unwrap();
    assert_ne!(text_a, text_b, "two different images, one answer");
    assert_eq!(b["usage"]["prompt_tokens"], prompt_tokens);
    // The same image again: the same answer, its prompt found in the cache.
    let again = openai_answer(&t, &stripes()).await;
    assert_eq!(again["choices"][0]["message"]["content"], text_a);
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        cached > 16,
        "the resent image was encoded again: {}",
        again["usage"]
    );

    // Ollama's door places the image before the text, as the part order above did.
    let ollama_a = ollama_answer(&t, &stripes()).await;
    let ollama_b = ollama_answer(&t, &dark()).await;
    assert_ne!(ollama_a, ollama_b);
    assert_eq!(ollama_a, text_a);
    // `/api/generate` renders its prompt as one user turn: the chat's answer.
    let generated = ollama_generate(&t, &stripes()).await;
    assert_eq!(generated, ollama_a);
    assert_ne!(ollama_generate(&t, &dark()).await, generated);
    for door in ["anthropic", "responses"] {
        let a = agent_door_answer(&t, door, &stripes()).await;
        let b = agent_door_answer(&t, door, &dark()).await;
        assert_ne!(a, b, "{door}: two different images, one answer");
    }
    assert_eq!(t.status().await["model"]["vision"], true);

    // /api/show says what the model takes.
    let show: Value = t
        .post("/api/show", &json!({"model": MODEL_ID}))
        .await
        .json()
        .await
        .unwrap();
    let caps = show["capabilities"].as_array().unwrap();
    assert!(caps.contains(&json!("vision")), "{show}");

    // Anthropic's count_tokens counts the image as the model reads it: the prompt's tokens
    // the Messages door reports for the same request (computed and read from the cache).
    let messages = json!([{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&stripes())}},
        {"type": "text", "text": "Describe the picture."}]}]);
    let counted = t
        .post(
            "/v1/messages/count_tokens",
            &json!({"model": MODEL_ID, "messages": messages}),
        )
        .await;
    let counted: Value = counted.json().await.unwrap();
    let answered = t
        .post(
            "/v1/messages",
            &json!({"model": MODEL_ID, "max_tokens": 2, "messages": messages}),
        )
        .await;
    let answered: Value = answered.json().await.unwrap();
    let usage = &answered["usage"];
    let prompt = usage["input_tokens"].as_u64().unwrap()
        + usage["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(
        counted["input_tokens"].as_u64(),
        Some(prompt),
        "{counted} against {usage}"
    );
    t.stop().await;
}

#[tokio::test]
async fn the_ui_chat_keeps_images_with_the_conversation_and_shows_them_to_the_model() {
    let (t, _dir) = vision_node().await;
    let conv = greedy_conversation(&t, "stripes").await;
    let asked = json!({"content": "Describe the picture.", "images": [png_uri(&stripes())]});
    let answer = ui_turn(&t, &conv, asked).await;
    // The same answer as the OpenAI door gives for the same image and words: the image reached
    // the model, before the text.
    let door = openai_answer(&t, &stripes()).await;
    assert_eq!(
        answer,
        door["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let other = greedy_conversation(&t, "dark").await;
    let dark_answer = ui_turn(
        &t,
        &other,
        json!({"content": "Describe the picture.", "images": [png_uri(&dark())]}),
    )
    .await;
    assert_ne!(answer, dark_answer, "two different images, one answer");

    // Kept with the conversation: listed, counted, served as the file that was sent.
    let detail = t.get_json(&format!("/api/conversations/{conv}")).await;
    let images = detail["messages"][0]["images"].as_array().unwrap().clone();
    assert_eq!(images.len(), 1, "{detail}");
    assert_eq!(images[0]["mime"], "image/png");
    assert_eq!(
        (images[0]["width"].as_u64(), images[0]["height"].as_u64()),
        (Some(96), Some(64))
    );
    assert_eq!(images[0]["size"].as_u64(), Some(stripes().len() as u64));
    assert_eq!(detail["conversation"]["images"], 1);
    assert_eq!(
        detail["conversation"]["image_bytes"].as_u64(),
        Some(stripes().len() as u64)
    );
    let file = common::client()
        .get(t.url(&format!(
            "/api/images/{}",
            images[0]["id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(file.headers()["content-type"], "image/png");
    assert_eq!(file.bytes().await.unwrap().as_ref(), stripes().as_slice());

    // The next turn sends the image again with the history: the answer is the OpenAI door's for
    // the same conversation.
    let follow = ui_turn(&t, &conv, json!({"content": "And the colours?"})).await;
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": MODEL_ID, "max_tokens": 16, "temperature": 0, "messages": [
                {"role": "user", "content": [
                    image_url_part(&stripes()),
                    {"type": "text", "text": "Describe the picture."}]},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "And the colours?"}]}),
        )
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        follow,
        v["choices"][0]["message"]["content"].as_str().unwrap(),
        "{v}"
    );

    // A message may be images alone.
    let alone = greedy_conversation(&t, "alone").await;
    ui_turn(&t, &alone, json!({"images": [png_uri(&dark())]})).await;
    let detail = t.get_json(&format!("/api/conversations/{alone}")).await;
    assert_eq!(detail["messages"][0]["content"], "");
    assert_eq!(detail["messages"][0]["images"].as_array().unwrap().len(), 1);

    // Bad images are refused before anything is kept.
    let path = format!("/api/conversations/{alone}/chat");
    refused(
        &t,
        &path,
        &json!({"content": "x", "images": ["data:image/png;base64,JVBERi0xLjQK"]}),
        "images[0]: not an image",
    )
    .await;
    let seventeen: Vec<String> = (0..17).map(|_| png_uri(&dark())).collect();
    refused(
        &t,
        &path,
        &json!({"content": "x", "images": seventeen}),
        "17 images in one request; the limit is 16",
    )
    .await;
    // Two photos of 4 MiB each: each within its limit, together over what a turn sends.
    let photo = |seed: u32| {
        png(1200, 1200, |x, y| {
            let mut h = (x.wrapping_mul(0x9E37_79B9) ^ y.wrapping_mul(0x85EB_CA6B) ^ seed)
                .wrapping_mul(0xC2B2_AE35);
            h ^= h >> 15;
            h = h.wrapping_mul(0x2C1B_3C6D);
            let b = h.to_le_bytes();
            [b[0], b[1], b[2]]
        })
    };
    let two = json!({"content": "x", "images": [png_uri(&photo(1)), png_uri(&photo(2))]});
    refused(
        &t,
        &path,
        &two,
        "bytes together; a message's images may have 8 MiB together",
    )
    .await;
    let first = detail["messages"][0]["id"].as_str().unwrap();
    refused(
        &t,
        &path,
        &json!({"edit_message_id": first, "content": "x", "images": [png_uri(&dark())]}),
        "go with a new message",
    )
    .await;
    let after = t.get_json(&format!("/api/conversations/{alone}")).await;
    assert_eq!(after["messages"].as_array().unwrap().len(), 2, "{after}");

    // Deleted with their conversation.
    let r = common::client()
        .delete(t.url(&format!("/api/conversations/{conv}")))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let gone = common::client()
        .get(t.url(&format!(
            "/api/images/{}",
            images[0]["id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    t.stop().await;
}

/// A 400 from `path` for `body` whose text says `says`; the text.
pub(crate) async fn refused(t: &TestNode, path: &str, body: &Value, says: &str) -> String {
    let r = t.post(path, body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 400, "{path}: {text}");
    assert!(text.contains(says), "{path}: {text}");
    text
}

#[tokio::test]
async fn bad_images_are_refused_clearly_and_the_node_keeps_serving() {
    let (t, _dir) = vision_node().await;
    let mut cut = stripes();
    cut.truncate(cut.len() / 2);
    // A JPEG whose header claims 65,535 x 65,535 pixels.
    let mut jpeg = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(8, 8, image::Rgb([0, 0, 0]))
        .write_to(&mut jpeg, image::ImageFormat::Jpeg)
        .unwrap();
    let mut huge = jpeg.into_inner();
    let sof = huge.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    huge[sof + 5..sof + 9].copy_from_slice(&[0xFF; 4]);
    let pdf = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n".to_vec();
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("a cut PNG", cut, "a damaged PNG file"),
        ("4 gigapixels", huge, "the limit is 36000000 pixels"),
        ("a PDF named .png", pdf, "PNG, JPEG, GIF and WebP are"),
    ];
    for (_what, bytes, says) in cases {
        for (door, body) in [
            (
                "/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": [
                    image_url_part(&bytes),
                    {"type": "text", "text": "What is it?"}]}], "max_tokens": 4}),
            ),
            (
                "/api/chat",
                json!({"model": MODEL_ID, "stream": false, "messages": [
                    {"role": "user", "content": "What is it?", "images": [b64(&bytes)]}]}),
            ),
        ] {
            refused(&t, door, &body, says).await;
        }
    }
    // Over the byte limit (8.5 MiB, within the body's): refused before it is decoded, naming it.
    let big = "A".repeat((17 << 19) / 3 * 4);
    refused(
        &t,
        "/api/generate",
        &json!({"model": MODEL_ID, "prompt": "x", "images": [big]}),
        "the limit is 8388608 bytes (8 MiB)",
    )
    .await;
    // More than 16 images in one request, over several messages.
    let one = b64(&dark());
    let messages: Vec<Value> = (0..3)
        .map(|_| json!({"role": "user", "content": "x", "images": vec![one.clone(); 6]}))
        .collect();
    refused(
        &t,
        "/api/chat",
        &json!({"model": MODEL_ID, "stream": false, "messages": messages}),
        "18 images in one request; the limit is 16",
    )
    .await;
    // Still serving, images too.
    let ok = openai_answer(&t, &dark()).await;
    assert!(ok["choices"][0]["message"]["content"].is_string(), "{ok}");
    t.stop().await;
}

#[tokio::test]
async fn a_model_without_a_projector_says_it_cannot_see_images() {
    // With the cluster on, as `hearth-node serve` runs: no place says it sees images, and the
    // request still goes to this node's engine, which says why not.
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.cluster = cluster_config(Vec::new());
    })
    .await;
    let png = b64(&dark());
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
                {"type": "text", "text": "What is it?"}]}]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot see images"), "{v}");
    assert!(message.contains(MODEL_ID), "{v}");
    // Ollama's doors, in Ollama's error shape.
    for (path, body) in [
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": "x", "images": [png], "stream": false}),
        ),
        (
            "/api/chat",
            json!({"model": MODEL_ID, "stream": false, "messages": [
                {"role": "user", "content": "x", "images": [png]}]}),
        ),
    ] {
        let r = t.post(path, &body).await;
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"].as_str().unwrap_or_default();
        assert!(message.contains("cannot see images"), "{path}: {v}");
    }
    // The agent doors, each in its own error shape.
    for (path, body) in [
        (
            "/v1/messages",
            json!({"model": MODEL_ID, "max_tokens": 8, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                {"type": "text", "text": "What is it?"}]}]}),
        ),
        (
            "/v1/responses",
            json!({"model": MODEL_ID, "max_output_tokens": 8, "store": false, "input": [
                {"role": "user", "content": [
                    {"type": "input_image", "image_url": format!("data:image/png;base64,{png}")},
                    {"type": "input_text", "text": "What is it?"}]}]}),
        ),
    ] {
        let r = t.post(path, &body).await;
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("cannot see images"), "{path}: {v}");
        assert!(message.contains(MODEL_ID), "{path}: {v}");
    }
    // The UI's chat says so too, and keeps nothing of the refused message.
    let conv = t.new_conversation("blind").await;
    refused(
        &t,
        &format!("/api/conversations/{conv}/chat"),
        &json!({"content": "What is it?", "images": [format!("data:image/png;base64,{png}")]}),
        "cannot see images",
    )
    .await;
    let detail = t.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(detail["messages"], json!([]), "{detail}");
    let show: Value = t
        .post("/api/show", &json!({"model": MODEL_ID}))
        .await
        .json()
        .await
        .unwrap();
    assert!(!show["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("vision")));
    t.stop().await;
}

/// `--cache-disk`: a prompt with an image, kept on disk when the node stops, is read back
/// after the restart (the image's stand-in ids are its hash's, the same in every process) and
/// gives the same answer.
#[tokio::test]
async fn an_image_prompt_outlives_a_restart_in_the_prompt_cache_on_disk() {
    let (dir, model) = model_with_projector();
    let disk = tempfile::tempdir().unwrap();
    let start = || {
        let (models, model) = (dir.path().to_path_buf(), model.clone());
        let root = disk.path().to_path_buf();
        TestNode::start_with(move |c| {
            c.parallel = 1;
            c.models_dir = models;
            c.model = Some(model.to_string_lossy().into_owned());
            c.cache_disk = Some(root);
        })
    };
    // Long enough to be worth a file (the prompt cache keeps 64 tokens or more).
    let question = "Look at the picture closely. Say what its colours are, what shapes you see, \
        where the light comes from, and what it might show, in one short sentence for each.";
    let t = start().await;
    let first = openai_answer_to(&t, &stripes(), question).await;
    t.stop().await;
    let t = start().await;
    let again = openai_answer_to(&t, &stripes(), question).await;
    let prompt = again["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        cached,
        prompt - 1,
        "not read back from disk: {}",
        again["usage"]
    );
    assert_eq!(
        again["choices"][0]["message"]["content"],
        first["choices"][0]["message"]["content"]
    );
    // Another image is not taken for it: only the template's text before the image is
    // reused, not the image's 16 tokens and the question after them.
    let other = openai_answer_to(&t, &dark(), question).await;
    let cached = other["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        cached + 16 < prompt - 1,
        "another image's cache was used: {}",
        other["usage"]
    );
    t.stop().await;
}

/// A tool's answer that is a picture (Claude Code's Read of a PNG, a screenshot tool's): the
/// Anthropic and Responses doors take it inside the tool result and the model sees it.
#[tokio::test]
async fn a_tools_picture_reaches_the_model_on_the_agent_doors() {
    let (t, _dir) = vision_node().await;
    let answer = |door: &'static str, image: Vec<u8>| {
        let t = &t;
        async move {
            let data = b64(&image);
            let (path, body) = if door == "anthropic" {
                (
                    "/v1/messages",
                    json!({"model": MODEL_ID, "max_tokens": 16, "temperature": 0, "messages": [
                    {"role": "user", "content": "Look at a.png."},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.png"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]}]}),
                )
            } else {
                (
                    "/v1/responses",
                    json!({"model": MODEL_ID, "max_output_tokens": 16, "temperature": 0, "store": false, "input": [
                    {"role": "user", "content": "Look at a.png."},
                    {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{\"path\":\"a.png\"}"},
                    {"type": "function_call_output", "call_id": "c1", "output": [
                        {"type": "input_image", "image_url": png_uri(&image)}]}]}),
                )
            };
            let r = t.post(path, &body).await;
            let status = r.status();
            let v: Value = r.json().await.unwrap();
            assert_eq!(status, 200, "{door}: {v}");
            // Anthropic counts the tokens read from a cache apart.
            let usage = &v["usage"];
            let tokens = usage["input_tokens"].as_u64().unwrap()
                + usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
            (answer_text(&v), tokens)
        }
    };
    for door in ["anthropic", "responses"] {
        let (a, tokens_a) = answer(door, stripes()).await;
        let (b, tokens_b) = answer(door, dark()).await;
        let (again, _) = answer(door, stripes()).await;
        // The picture's tokens are in the prompt (as many for either), and two pictures give
        // two answers.
        assert_eq!(tokens_a, tokens_b);
        assert!(tokens_a > 16, "{a}");
        assert_ne!(a, b, "{door}: two pictures, one answer");
        assert_eq!(a, again, "{door}");
    }
    t.stop().await;
}

/// Text that holds llama.cpp's media marker itself (a source file an agent read, say) beside
/// an image: the marker is words there, not a second image's place.
#[tokio::test]
async fn a_marker_in_the_words_is_not_an_images_place() {
    let (t, _dir) = vision_node().await;
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": MODEL_ID, "max_tokens": 4, "temperature": 0, "messages": [
                {"role": "system", "content": "mtmd splits a prompt on <__media__>."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Here is <__media__> and a picture:"},
                    image_url_part(&stripes())]}]}),
        )
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    // Ollama's door, whose images stand before the words, which hold no places.
    let r = t
        .post(
            "/api/chat",
            &json!({"model": MODEL_ID, "stream": false, "options": {"num_predict": 4},
                "messages": [{"role": "user", "content": "Here is <__media__> and <__media__>.", "images": [b64(&stripes())]}]}),
        )
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    t.stop().await;
}

/// `--projector`: a projector kept elsewhere, under another name, is the model's: it sees;
/// a file that is not a projector is refused at start, named.
#[tokio::test]
async fn a_projector_named_at_start_is_the_models_wherever_it_is() {
    let (dir, model) = model_with_projector();
    let name = model.file_name().unwrap().to_str().unwrap().to_owned();
    let elsewhere = tempfile::tempdir().unwrap();
    let projector = elsewhere.path().join("vision-encoder.gguf");
    std::fs::rename(dir.path().join(format!("mmproj-{name}")), &projector).unwrap();
    let start = |projector: std::path::PathBuf| {
        let (models, model) = (dir.path().to_path_buf(), model.clone());
        TestNode::try_start_with(move |c| {
            c.models_dir = models;
            c.model = Some(model.to_string_lossy().into_owned());
            c.projector = Some(projector);
        })
    };
    let t = start(projector).await.expect("node starts");
    let a = openai_answer(&t, &stripes()).await;
    let b = openai_answer(&t, &dark()).await;
    assert_ne!(
        a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"],
        "two different images, one answer"
    );
    assert_eq!(t.status().await["model"]["vision"], true);
    t.stop().await;

    let not_one = dir.path().join(&name);
    let Err(e) = start(not_one).await else {
        panic!("a model file was taken as a projector");
    };
    let e = e.to_string();
    assert!(
        e.contains("--projector") && e.contains("not a projector"),
        "{e}"
    );
}
