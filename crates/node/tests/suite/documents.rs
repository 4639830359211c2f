//! Documents in the chat (issue 52), with files made by real writers
//! (`tests/fixtures/make_documents.py`: reportlab, python-docx): each one is read in a child
//! process held to a time and a memory ceiling, kept once per digest, refused in words when it
//! is a scan, damaged, a zip bomb, too deep or too large, and the node keeps serving; a turn of
//! the real default model is given small documents whole and a 300-page manual's passages
//! that answer the question, and keeps them as its sources across a reload; they go with
//! their conversation.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common;
use crate::mcp::{events, messages, of_type};

use common::process::{repo_root, venv_python};
use common::TestNode;
use serde_json::{json, Value};

/// The documents, written once per test binary.
fn docs() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(venv_python())
            .arg(repo_root().join("tests/fixtures/make_documents.py"))
            .arg("--out")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "make_documents.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .path()
}

pub(crate) fn doc(name: &str) -> Vec<u8> {
    std::fs::read(docs().join(name)).unwrap()
}

/// POST a file to the conversation's documents: the status and the answer.
pub(crate) async fn attach(t: &TestNode, conv: &str, name: &str, bytes: Vec<u8>) -> (u16, Value) {
    let r = common::client()
        .post(t.url(&format!("/api/conversations/{conv}/documents")))
        .query(&[("name", name)])
        .header("content-type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_are_kept_once_answer_and_a_bad_one_is_refused_in_words_while_the_node_serves() {
    let t = TestNode::start(1).await;
    let conv = t.new_conversation("docs").await;
    let (status, first) = attach(&t, &conv, "manual.pdf", doc("manual.pdf")).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["added"], true);
    assert_eq!(first["document"]["pages"], 300);
    assert_eq!(first["document"]["kind"], "pdf");
    assert!(first["document"]["passages"].as_u64().unwrap() >= 300);
    // The same file again, under another name: kept once.
    let (status, again) = attach(&t, &conv, "copy.pdf", doc("manual.pdf")).await;
    assert_eq!(status, 201);
    assert_eq!(again["added"], false);
    assert_eq!(again["document"]["id"], first["document"]["id"]);

    let refusals: [(&str, Vec<u8>, u16, &str, &str); 6] = [
        ("scan.pdf", doc("scan.pdf"), 422, "no_text_layer", "OCR"),
        (
            "damaged.pdf",
            doc("damaged.pdf"),
            422,
            "document_damaged",
            "damaged",
        ),
        (
            "bomb.docx",
            doc("bomb.docx"),
            422,
            "document_damaged",
            "zip bomb",
        ),
        (
            "deep.docx",
            doc("deep.docx"),
            422,
            "document_damaged",
            "deep",
        ),
        (
            "blob.bin",
            vec![0u8, 159, 146, 150, 0, 1, 2, 3],
            415,
            "unsupported_document",
            "not text",
        ),
        (
            "huge.txt",
            vec![b'a'; (50 << 20) + 1],
            413,
            "document_too_large",
            "50 MiB",
        ),
    ];
    for (name, bytes, want, code, words) in refusals {
        let started = Instant::now();
        let (status, v) = attach(&t, &conv, name, bytes).await;
        assert_eq!(status, want, "{name}: {v}");
        assert_eq!(v["error"]["code"], code, "{name}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{name}: ")), "{message}");
        assert!(message.contains(words), "{name}: {message}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name} took {:?}",
            started.elapsed()
        );
    }
    let (status, v) = attach(&t, &conv, "", doc("notes.docx")).await;
    assert_eq!(status, 400, "{v}");
    let (status, _) = attach(&t, "c_nobody", "notes.docx", doc("notes.docx")).await;
    assert_eq!(status, 404);
    // The manual's page 40, asked about: the best passage is written next to the question,
    // where even the default 135M model reads it, and its answer is that page's word.
    t.patch_settings(&conv, json!({"temperature": 0, "max_tokens": 24}))
        .await;
    let (start, done) = turn(&t, &conv, "What is the code word of page 40?").await;
    let answer = done["message"]["content"].as_str().unwrap();
    assert!(answer.contains("amber-ember-40"), "{answer}");
    assert_eq!(start["sources"]["items"][0]["page"], 40, "{start}");
    // Nothing refused was kept, and the node answers as before.
    let listed = t
        .get_json(&format!("/api/conversations/{conv}/documents"))
        .await;
    assert_eq!(listed["documents"].as_array().unwrap().len(), 1, "{listed}");
    let answer = t
        .chat(json!({"messages": common::user("Hi"), "max_tokens": 4}))
        .await;
    assert!(answer["choices"][0]["message"]["content"].is_string());
    // They go with their conversation.
    let r = common::client()
        .delete(t.url(&format!("/api/conversations/{conv}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = common::client()
        .get(t.url(&format!("/api/conversations/{conv}/documents")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// A program standing in for the reader: a shell script doing `body`.
fn script(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("reader.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_is_held_to_its_time_and_memory_and_a_crash_is_told() {
    let dir = tempfile::tempdir().unwrap();
    // A reader that never answers is stopped at its deadline.
    let mut reader = hearth_docs::Reader::new(script(dir.path(), "exec sleep 60"));
    reader.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let e = reader.read("loop.pdf", b"%PDF-1.4").await.unwrap_err();
    assert_eq!(e, hearth_docs::ReadError::TimedOut { secs: 2 });
    assert!(started.elapsed() < Duration::from_secs(10));
    // One that dies (as on a stack overflow) is told as a crash.
    let reader = hearth_docs::Reader::new(script(dir.path(), "kill -SEGV $$"));
    let e = reader.read("crash.pdf", b"%PDF-1.4").await.unwrap_err();
    assert!(
        matches!(&e, hearth_docs::ReadError::Crashed(why) if why.contains("signal 11") || why.contains("crashed")),
        "{e}"
    );
    // The real reader reads the manual, and fails within a ceiling too low for it.
    let node = PathBuf::from(env!("CARGO_BIN_EXE_hearth-node"));
    let read = hearth_docs::Reader::new(node.clone())
        .read("manual.pdf", &doc("manual.pdf"))
        .await
        .unwrap();
    assert_eq!(read.pages.len(), 300);
    let mut starved = hearth_docs::Reader::new(node);
    starved.memory = 1 << 20;
    let e = starved
        .read("manual.pdf", &doc("manual.pdf"))
        .await
        .unwrap_err();
    assert!(matches!(e, hearth_docs::ReadError::Crashed(_)), "{e}");
}

/// A turn's answer as it started: its message (with its sources), and its stats once done.
pub(crate) async fn turn(t: &TestNode, conv: &str, question: &str) -> (Value, Value) {
    let events = events(
        t,
        &format!("/api/conversations/{conv}/chat"),
        json!({ "content": question }),
    )
    .await;
    let start = of_type(&events, "start")[0]["message"].clone();
    let done = of_type(&events, "done");
    assert_eq!(done.len(), 1, "{events:?}");
    (start, done[0].clone())
}

fn prompt_tokens(done: &Value) -> u64 {
    done["message"]["stats"]["prompt_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no prompt_tokens in {done}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_given_documents_whole_or_the_passages_that_answer_and_keeps_them() {
    let t = TestNode::start(1).await;
    let quiet = json!({"temperature": 0, "max_tokens": 8});
    let question = "What is the secret word of the kettle?";
    // The same question without documents: the prompt the documents are added to.
    let bare = t.new_conversation("bare").await;
    t.patch_settings(&bare, quiet.clone()).await;
    let (start, done) = turn(&t, &bare, question).await;
    assert!(start["sources"].is_null(), "{start}");
    let bare_tokens = prompt_tokens(&done);

    let conv = t.new_conversation("docs").await;
    t.patch_settings(&conv, quiet).await;
    let notes = "# Kitchen\n\nThe secret word of the kettle is heron-amber. The kettle sits on the left of the stove.\n";
    let (status, v) = attach(&t, &conv, "kitchen.md", notes.as_bytes().to_vec()).await;
    assert_eq!(status, 201, "{v}");
    let (start, done) = turn(&t, &conv, question).await;
    let sources = &start["sources"];
    assert_eq!(sources["path"], "whole", "{start}");
    assert_eq!(sources["items"][0]["document"], "kitchen.md");
    assert_eq!(sources["items"][0]["n"], 1);
    assert!(sources["items"][0]["text"]
        .as_str()
        .unwrap()
        .contains("heron-amber"));
    // The document is in the prompt: its words, and the request to cite it.
    assert!(
        prompt_tokens(&done) > bare_tokens + 30,
        "{} tokens with the document, {bare_tokens} without",
        prompt_tokens(&done)
    );
    // A 300-page manual does not fit a 1,024-token context: the passages that answer go.
    let (status, v) = attach(&t, &conv, "manual.pdf", doc("manual.pdf")).await;
    assert_eq!(status, 201, "{v}");
    let (start, done) = turn(&t, &conv, "What is the code word of page 40?").await;
    let sources = &start["sources"];
    assert_eq!(sources["path"], "passages", "{start}");
    assert_eq!(sources["documents"], 2);
    assert!(sources["reranker"].is_null(), "no reranker is loaded");
    let items = sources["items"].as_array().unwrap();
    assert!(!items.is_empty() && items.len() <= 8, "{sources}");
    assert!(
        items.iter().any(|s| s["document"] == "manual.pdf"
            && s["page"] == 40
            && s["text"].as_str().unwrap().contains("amber-ember-40")),
        "page 40 is among the sources: {sources}"
    );
    assert!(prompt_tokens(&done) <= 1024);
    // Kept with the answers: a reload shows them.
    let kept: Vec<Value> = messages(&t, &conv)
        .await
        .into_iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["sources"]["path"].clone())
        .collect();
    assert_eq!(kept, vec![json!("whole"), json!("passages")]);
    // Taken out, a document is given no more.
    let id = v["document"]["id"].as_str().unwrap();
    let r = common::client()
        .delete(t.url(&format!("/api/conversations/{conv}/documents/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (start, _) = turn(&t, &conv, question).await;
    assert_eq!(start["sources"]["path"], "whole", "{start}");
    assert_eq!(start["sources"]["documents"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_peer_the_document_is_read_here_and_goes_in_the_prompt_only() {
    let (a, b, _empty) = common::model_on_a_peer().await;
    let quiet = json!({"temperature": 0, "max_tokens": 4});
    let question = "What is the secret word of the kettle?";
    let bare = b.new_conversation("bare").await;
    b.patch_settings(&bare, quiet.clone()).await;
    let (_, done) = turn(&b, &bare, question).await;
    let bare_tokens = prompt_tokens(&done);
    let conv = b.new_conversation("docs").await;
    b.patch_settings(&conv, quiet).await;
    let notes = "The secret word of the kettle is heron-amber.\n";
    let (status, v) = attach(&b, &conv, "kitchen.txt", notes.as_bytes().to_vec()).await;
    assert_eq!(status, 201, "{v}");
    let (start, done) = turn(&b, &conv, question).await;
    assert_eq!(start["node"], "peer-a", "{start}");
    assert_eq!(start["sources"]["path"], "whole", "{start}");
    assert!(
        prompt_tokens(&done) > bare_tokens + 10,
        "{} tokens with the document, {bare_tokens} without",
        prompt_tokens(&done)
    );
    // The peer that generated keeps nothing of it.
    let kept = a.get_json("/api/conversations").await;
    assert_eq!(kept["conversations"], json!([]), "{kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_model_named_in_settings_finds_passages_beside_the_words() {
    let t = TestNode::start(1).await;
    let patch = |body: Value| {
        common::client()
            .patch(t.url("/api/node"))
            .json(&body)
            .send()
    };
    for bad in [
        json!({"documents_embedding_model": 3}),
        json!({}),
        json!({"documents_embedding_model": " "}),
    ] {
        assert_eq!(patch(bad.clone()).await.unwrap().status(), 400, "{bad}");
    }
    // The chat's own model embeds (mean pooling).
    let r = patch(json!({"documents_embedding_model": common::MODEL_ID}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let node = t.get_json("/api/node").await;
    assert_eq!(
        node["documents_embedding_model"],
        common::MODEL_ID,
        "{node}"
    );
    let conv = t.new_conversation("docs").await;
    t.patch_settings(&conv, json!({"temperature": 0, "max_tokens": 2}))
        .await;
    // Thirty boxes, a heading each: more than a 1,024-token context, thirty passages.
    let colours = ["red", "green", "blue", "amber", "violet", "white"];
    let boxes: String = (1..=30)
        .map(|n| {
            format!(
                "# Box {n}\n\nBox number {n} stands on shelf {} of the store room. The colour of box {n} is {}, and it holds {} spare fuses for the kitchen.\n\n",
                n % 7,
                colours[n % 6],
                n * 3
            )
        })
        .collect();
    let (status, v) = attach(&t, &conv, "boxes.md", boxes.into_bytes()).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["document"]["passages"], 30, "{v}");
    let (start, _) = turn(&t, &conv, "What is the colour of box 17?").await;
    let sources = &start["sources"];
    assert_eq!(sources["path"], "passages", "{start}");
    assert_eq!(sources["embedder"], common::MODEL_ID, "{sources}");
    // Box 17 is first by its words, and stays among the passages after the fusion.
    let headings = |s: &Value| -> Vec<String> {
        s["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["heading"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        headings(sources).contains(&"Box 17".to_owned()),
        "{sources}"
    );
    // A question none of whose words a passage holds: the embeddings alone find passages,
    // nearest first, where words alone give the documents' first ones in order.
    let (start, _) = turn(&t, &conv, "Xylophones? Quizzical zebras!").await;
    let by_meaning = headings(&start["sources"]);
    assert_eq!(start["sources"]["embedder"], common::MODEL_ID);
    let in_order: Vec<String> = (1..=by_meaning.len()).map(|n| format!("Box {n}")).collect();
    assert!(!by_meaning.is_empty());
    assert_ne!(
        by_meaning, in_order,
        "the nearest passages are the first ones in order"
    );
    // Words alone again.
    let r = patch(json!({"documents_embedding_model": null}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (start, _) = turn(&t, &conv, "Xylophones? Quizzical zebras!").await;
    assert!(start["sources"]["embedder"].is_null(), "{start}");
    let in_order: Vec<String> = (1..=8).map(|n| format!("Box {n}")).collect();
    assert_eq!(headings(&start["sources"]), in_order);
}
