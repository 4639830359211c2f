//! Audio through the OpenAI door (`input_audio` parts), against the real default model with
//! an audio projector the test writes (`tests/fixtures/make_audio_projector.py`: Qwen2-Audio's
//! layout, random weights, since no small real audio model can be fetched here). The answers
//! mean nothing; what is checked is that the clip reaches the model: at temperature 0 two
//! different clips give different answers and the same clip the same answer, WAV and MP3; a
//! model that cannot hear, and bad clips, are refused with a clear 400.

use crate::common;

use base64::Engine as _;
use common::process::venv_python;
use common::{
    greedy_conversation, model_on_a_peer_with, ui_turn, without_model, TestNode, MODEL_ID,
};
use hearth_protocol::audio::wav;
use serde_json::{json, Value};

async fn node_with(script: &str) -> (TestNode, tempfile::TempDir) {
    let (dir, model) = common::model_with_projector(script);
    let node = TestNode::start_with(|c| {
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.parallel = 1;
    })
    .await;
    (node, dir)
}

/// One second of a tone at `hz`, 16 kHz.
fn tone(hz: f32) -> Vec<i16> {
    (0..16_000)
        .map(|i| ((i as f32 * hz * std::f32::consts::TAU / 16_000.0).sin() * 12_000.0) as i16)
        .collect()
}

/// One second of noise, 22.05 kHz stereo (resampled and mixed down on the way in).
fn noise() -> Vec<i16> {
    let mut x = 0x1234_5678u32;
    (0..2 * 22_050)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 16) as i16 / 3
        })
        .collect()
}

/// A tone as an MP3 file, made by LAME (`lameenc`).
fn mp3_tone() -> Vec<u8> {
    let script = "import lameenc, math, sys\n\
        e = lameenc.Encoder(); e.set_bit_rate(64); e.set_in_sample_rate(16000); e.set_channels(1); e.set_quality(2)\n\
        pcm = b''.join(int(math.sin(i * 660 * 2 * math.pi / 16000) * 12000).to_bytes(2, 'little', signed=True) for i in range(16000))\n\
        sys.stdout.buffer.write(e.encode(pcm) + e.flush())\n";
    let out = std::process::Command::new(venv_python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn asking(clips: &[(&[u8], &str)]) -> Value {
    let mut parts: Vec<Value> = clips
        .iter()
        .map(|(bytes, format)| {
            json!({"type": "input_audio", "input_audio": {"data": b64(bytes), "format": format}})
        })
        .collect();
    parts.push(json!({"type": "text", "text": "What do you hear?"}));
    json!({"model": MODEL_ID, "max_tokens": 16, "temperature": 0, "logprobs": true,
        "messages": [{"role": "user", "content": parts}]})
}

async fn answer(t: &TestNode, bytes: &[u8], format: &str) -> Value {
    let r = t
        .post("/v1/chat/completions", &asking(&[(bytes, format)]))
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

fn text(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap()
}

/// The answer's tokens with their log-probabilities: two clips that reach the model differ
/// here even where greedy text could happen to agree.
fn logprobs(v: &Value) -> &Value {
    &v["choices"][0]["logprobs"]["content"]
}

/// A 400 from the OpenAI door for `body` whose message says `says`.
async fn refused(t: &TestNode, body: &Value, says: &str) {
    let r = t.post("/v1/chat/completions", body).await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{v}");
}

#[tokio::test]
async fn a_clip_reaches_the_model_through_the_openai_door() {
    let (t, _dir) = node_with("make_audio_projector.py").await;
    assert_eq!(t.status().await["model"]["audio"], true);
    // Loaded, the doors that list capabilities say so.
    let show = t.post("/api/show", &json!({"model": MODEL_ID})).await;
    let show: Value = show.json().await.unwrap();
    let caps = show["capabilities"].as_array().unwrap();
    assert!(caps.contains(&json!("audio")), "{show}");
    let one = t.get_json(&format!("/v1/models/{MODEL_ID}")).await;
    assert_eq!(one["capabilities"], json!(["completion", "audio"]), "{one}");
    let a = answer(&t, &wav(&tone(440.0), 16_000, 1), "wav").await;
    // A clip under 30 s is one window of Whisper's: 750 tokens, with the words around it.
    let text_only = t
        .chat(json!({"model": MODEL_ID, "max_tokens": 1, "messages": [
            {"role": "user", "content": "What do you hear?"}]}))
        .await;
    let plain = text_only["usage"]["prompt_tokens"].as_u64().unwrap();
    let with_clip = a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        (plain + 750..plain + 800).contains(&with_clip),
        "{plain} then {with_clip}"
    );
    let b = answer(&t, &wav(&noise(), 22_050, 2), "wav").await;
    assert_ne!(
        logprobs(&a),
        logprobs(&b),
        "two different clips, one answer"
    );
    // The words before the clip were found in the cache, the clip itself was not.
    let cached_b = b["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert!(cached_b.unwrap_or(0) < 100, "{}", b["usage"]);
    // The same clip again: its prompt found in the cache, not encoded again. (Its answer is
    // not compared: on two threads a cached prompt's last token is decoded by another CPU
    // flash-attention path than a cold one's, and near-tied tokens can swap; see
    // `exact_audio_node`.)
    let again = answer(&t, &wav(&tone(440.0), 16_000, 1), "wav").await;
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        cached > 750,
        "the resent clip was encoded again: {}",
        again["usage"]
    );
    // MP3 too, and its answer is its own.
    let mp3 = answer(&t, &mp3_tone(), "mp3").await;
    assert_ne!(logprobs(&mp3), logprobs(&a));

    // Bad clips, each named.
    let pdf = b"%PDF-1.4\n".as_slice();
    refused(&t, &asking(&[(pdf, "wav")]), "not audio this node reads").await;
    let clip = wav(&tone(440.0), 16_000, 1);
    refused(
        &t,
        &asking(&[(&clip, "mp3")]),
        "says it is mp3 but its bytes are wav",
    )
    .await;
    refused(
        &t,
        &asking(&[(&clip, "flac")]),
        "audio format 'flac' is not read here",
    )
    .await;
    let five = [(clip.as_slice(), "wav"); 5];
    refused(
        &t,
        &asking(&five),
        "5 audio clips in one request; the limit is 4",
    )
    .await;
    let mut cut = clip.clone();
    cut.truncate(44);
    refused(
        &t,
        &asking(&[(&cut, "wav")]),
        "audio clip 0: damaged WAV audio",
    )
    .await;
    // The node keeps serving.
    assert!(!text(&answer(&t, &clip, "wav").await).is_empty());
    t.stop().await;
}

#[tokio::test]
async fn a_model_that_cannot_hear_says_so() {
    let clip = wav(&tone(440.0), 16_000, 1);
    // No projector at all, then one that sees and does not hear.
    let t = TestNode::start(1).await;
    refused(&t, &asking(&[(&clip, "wav")]), "cannot hear audio").await;
    t.stop().await;
    let (t, _dir) = node_with("make_projector.py").await;
    refused(&t, &asking(&[(&clip, "wav")]), "cannot hear audio").await;
    assert_eq!(t.status().await["model"]["audio"], false);
    // The chat page's door too, keeping nothing of the message.
    let conv = t.new_conversation("deaf").await;
    let r = t
        .post(
            &format!("/api/conversations/{conv}/chat"),
            &json!({"content": "Listen.", "audio": [b64(&clip)]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "no_audio", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot hear audio"),
        "{v}"
    );
    let detail = t.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(detail["messages"], json!([]), "{detail}");
    t.stop().await;
}

/// A node whose model hears, on one llama.cpp thread: its answers repeat to the bit, cold or
/// from the cache. (On more, CPU flash attention sums a long sequence's single-token decode in
/// one piece per thread, and the node's CPU share changes their count under load: answers over
/// a clip's 750 tokens then differ in the last bits, enough to swap near-tied tokens.)
async fn exact_audio_node() -> (TestNode, tempfile::TempDir) {
    let (dir, model) = common::model_with_projector("make_audio_projector.py");
    let node = TestNode::start_with(|c| {
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.parallel = 1;
        c.threads = 1;
    })
    .await;
    (node, dir)
}

/// The chat page's door keeps a clip with its message, serves it back as it was sent, and the
/// model hears it: the answer is the OpenAI door's for the same clip and words (asked of a
/// second node, so that neither answer comes from a cache), and not the words' alone.
#[tokio::test]
async fn the_ui_chat_keeps_clips_with_the_conversation_and_the_model_hears_them() {
    let clip = wav(&tone(440.0), 16_000, 1);
    let (t, _dir) = exact_audio_node().await;
    let conv = greedy_conversation(&t, "tone").await;
    let uri = format!("data:audio/wav;base64,{}", b64(&clip));
    let heard = ui_turn(
        &t,
        &conv,
        json!({"content": "What do you hear?", "audio": [uri]}),
    )
    .await;
    let words = greedy_conversation(&t, "words").await;
    let unheard = ui_turn(&t, &words, json!({"content": "What do you hear?"})).await;
    assert_ne!(heard, unheard, "the clip made no difference");

    // Kept with the conversation: listed and served as the file that was sent.
    let detail = t.get_json(&format!("/api/conversations/{conv}")).await;
    let clips = detail["messages"][0]["audio"].as_array().unwrap().clone();
    assert_eq!(clips.len(), 1, "{detail}");
    assert_eq!(clips[0]["format"], "wav");
    assert_eq!(clips[0]["size"].as_u64(), Some(clip.len() as u64));
    let file = common::client()
        .get(t.url(&format!("/api/audio/{}", clips[0]["id"].as_str().unwrap())))
        .send()
        .await
        .unwrap();
    assert_eq!(file.headers()["content-type"], "audio/wav");
    assert_eq!(file.bytes().await.unwrap().as_ref(), clip.as_slice());

    // The next turn is answered with the clip in its history; a message may be a clip alone;
    // a damaged clip is refused by name, and a clip cannot go with an edit.
    ui_turn(&t, &conv, json!({"content": "And then?"})).await;
    let alone = greedy_conversation(&t, "alone").await;
    ui_turn(&t, &alone, json!({"audio": [b64(&mp3_tone())]})).await;
    let detail = t.get_json(&format!("/api/conversations/{alone}")).await;
    assert_eq!(
        detail["messages"][0]["audio"][0]["format"], "mp3",
        "{detail}"
    );
    let r = t
        .post(
            &format!("/api/conversations/{alone}/chat"),
            &json!({"content": "x", "audio": ["JVBERi0xLjQK"]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("audio[0]: not audio"),
        "{v}"
    );
    t.stop().await;

    // A second node, cold: the OpenAI door's answer to the same clip and words.
    let (other, _dir2) = exact_audio_node().await;
    let door = answer(&other, &clip, "wav").await;
    assert_eq!(heard, text(&door));
    other.stop().await;
}

/// A peer's copy may hear, but peers do not say so (and one older than audio drops the clip
/// unheard): a node without the model refuses audio instead of sending it on, and still sends
/// words on.
#[tokio::test]
async fn audio_is_never_sent_to_a_peer() {
    let (dir, model) = common::model_with_projector("make_audio_projector.py");
    let (a, b, _empty) = model_on_a_peer_with(|c| {
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
    })
    .await;
    let clip = wav(&tone(440.0), 16_000, 1);
    answer(&a, &clip, "wav").await;
    let r = b
        .post("/v1/chat/completions", &asking(&[(&clip, "wav")]))
        .await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert!(!status.is_success(), "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("audio is heard only by the node it is sent to"),
        "{v}"
    );
    let words = b
        .chat(json!({"model": MODEL_ID, "max_tokens": 4, "messages": [
            {"role": "user", "content": "Hello"}]}))
        .await;
    assert!(
        words["choices"][0]["message"]["content"].is_string(),
        "{words}"
    );
    b.stop().await;
    a.stop().await;
}

/// A model not loaded is marked by what its projector's header says: one that hears only is
/// marked as hearing and not as seeing, and a vision projector the other way round, on the
/// Models page, in Ollama's capabilities and in `/v1/models`.
#[tokio::test]
async fn a_model_not_loaded_is_marked_by_what_its_projector_takes() {
    for (script, sees) in [
        ("make_audio_projector.py", false),
        ("make_projector.py", true),
    ] {
        let hears = !sees;
        let (dir, _) = common::model_with_projector(script);
        let path = dir.path().to_path_buf();
        let t = TestNode::start_with(move |c| without_model(c, &path)).await;
        let row = common::model_row(&t, MODEL_ID).await;
        assert_eq!(
            row["vision"].as_bool().unwrap_or(false),
            sees,
            "{script}: {row}"
        );
        let show: Value = t
            .post("/api/show", &json!({"model": MODEL_ID}))
            .await
            .json()
            .await
            .unwrap();
        let caps = show["capabilities"].as_array().unwrap();
        assert_eq!(caps.contains(&json!("vision")), sees, "{script}: {show}");
        assert_eq!(caps.contains(&json!("audio")), hears, "{script}: {show}");
        assert_eq!(
            row["audio"].as_bool().unwrap_or(false),
            hears,
            "{script}: {row}"
        );
        let listed = t.get_json("/v1/models").await;
        let entry = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == MODEL_ID)
            .cloned()
            .unwrap_or_else(|| panic!("{listed}"));
        let mut want = vec!["completion"];
        want.extend(sees.then_some("vision"));
        want.extend(hears.then_some("audio"));
        assert_eq!(entry["capabilities"], json!(want), "{script}: {entry}");
        let one = t.get_json(&format!("/v1/models/{MODEL_ID}")).await;
        assert_eq!(one["capabilities"], entry["capabilities"], "{script}");
        t.stop().await;
    }
}
