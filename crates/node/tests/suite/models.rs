//! Several models on one node, loaded when a request names them: requests alternating between
//! two models keep both loaded; under a low memory limit the least recently used one unloads;
//! ten first requests at once load a model once; a model loaded on demand unloads after the
//! keep-alive while the one the user chose stays; Ollama's `keep_alive: 0` unloads at once.
//! The models are the real default model under other names, in a folder the test makes.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{ask, client, wait_for_secs, without_model, TestNode};
use serde_json::{json, Value};

/// A models folder holding the default model as each of `names` (`NAME.gguf`).
fn folder(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = common::model_path();
    for name in names {
        let to = dir.path().join(format!("{name}.gguf"));
        if std::fs::hard_link(&model, &to).is_err() {
            std::fs::copy(&model, &to).expect("copy the model");
        }
    }
    dir
}

/// A chat answer of `tokens` tokens from `model` through the OpenAI door, once it is running
/// (the focus model's `active` in `/api/status`): its status and body when it ends.
async fn long_answer(
    t: &TestNode,
    model: &str,
    tokens: u32,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = t.url("/v1/chat/completions");
    let body = json!({"model": model, "max_tokens": tokens, "ignore_eos": true,
        "messages": common::user("Tell a story.")});
    let answer = tokio::spawn(async move {
        let r = client().post(url).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    wait_for_secs(
        30,
        async || t.get_json("/api/status").await["active"] != 0,
        "the answer runs",
    )
    .await;
    answer
}

async fn loaded(t: &TestNode) -> Vec<String> {
    let mut v: Vec<String> = t.get_json("/api/models").await["loaded_models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

/// How many times `id` was loaded, from the Models page's listing.
async fn loads(t: &TestNode, id: &str) -> u64 {
    let row = common::model_row(t, id).await;
    row["loads"]
        .as_u64()
        .unwrap_or_else(|| panic!("{id} is listed: {row}"))
}

async fn start(dir: &Path, f: impl FnOnce(&mut hearth_node::NodeConfig)) -> TestNode {
    TestNode::start_with(|c| {
        without_model(c, dir);
        c.parallel = 2;
        c.ctx = Some(512);
        f(c);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_alternating_between_two_models_keep_both_loaded() {
    let dir = folder(&["alpha", "beta"]);
    // With no --model the node loads the first model of the folder, for the user: alpha.
    let t = start(dir.path(), |_| {}).await;
    let listed = t.get_json("/v1/models").await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["alpha", "beta"],
        "every model in the folder is offered"
    );
    for model in ["alpha", "beta", "alpha", "beta"] {
        ask(&t, model).await;
    }
    assert_eq!(loaded(&t).await, ["alpha", "beta"]);
    assert_eq!((loads(&t, "alpha").await, loads(&t, "beta").await), (1, 1));
    // Ollama's ps lists both: the one loaded for a request unloads after the keep-alive (5
    // minutes by default), the one loaded for the user does not.
    let ps = t.get_json("/api/ps").await;
    let expires: Vec<(&str, bool)> = ps["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let never = m["expires_at"].as_str().unwrap().starts_with("9999");
            (m["name"].as_str().unwrap(), never)
        })
        .collect();
    assert_eq!(expires, [("alpha", true), ("beta", false)], "{ps}");
    // A name that is not in the folder is still unknown.
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": "gamma", "messages": common::user("Hi")}),
        )
        .await;
    assert_eq!(r.status(), 404);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_memory_limit_the_least_recently_used_model_unloads() {
    let dir = folder(&["alpha", "beta"]);
    let path = dir.path().join("alpha.gguf");
    let gguf = hearth_engine::gguf::read(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let one = hearth_models::memory::estimate(size, Some(&gguf), 512, hearth_engine::KvType::F16);
    // Room for one model and a half: the second one needs the first one's place.
    // alpha is loaded at start (the folder's first model).
    let t = start(dir.path(), |c| c.memory_limit = Some(one * 3 / 2)).await;
    ask(&t, "alpha").await;
    assert_eq!(loaded(&t).await, ["alpha"]);
    ask(&t, "beta").await;
    assert_eq!(loaded(&t).await, ["beta"]);
    ask(&t, "alpha").await;
    assert_eq!(loaded(&t).await, ["alpha"]);
    assert_eq!((loads(&t, "alpha").await, loads(&t, "beta").await), (2, 1));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_first_requests_at_once_load_the_model_once() {
    let dir = folder(&["alpha", "beta"]);
    let t = start(dir.path(), |c| c.queue = 16).await;
    assert_eq!(loads(&t, "beta").await, 0);
    let answers = futures_util::future::join_all((0..10).map(|_| ask(&t, "beta"))).await;
    assert_eq!(answers.len(), 10);
    assert_eq!(loads(&t, "beta").await, 1);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_model_unloads_after_the_keep_alive_and_the_chosen_one_stays() {
    let dir = folder(&["alpha", "beta"]);
    let chosen = dir.path().join("alpha.gguf");
    let t = start(dir.path(), |c| {
        c.model = Some(chosen.to_string_lossy().into_owned());
        c.keep_alive = Duration::from_secs(1);
    })
    .await;
    ask(&t, "beta").await;
    wait_for_secs(
        30,
        async || loaded(&t).await == ["alpha"],
        "beta unloads when idle",
    )
    .await;
    // The model chosen at start is still there, and beta loads again when asked for.
    ask(&t, "alpha").await;
    ask(&t, "beta").await;
    assert_eq!(loads(&t, "beta").await, 2);

    // Ollama's unload: no prompt and keep_alive 0, for a model loaded or not.
    let http = client();
    for model in ["alpha", "beta"] {
        let r: Value = http
            .post(t.url("/api/generate"))
            .json(&json!({"model": model, "keep_alive": 0}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["done_reason"], "unload", "{r}");
    }
    assert!(loaded(&t).await.is_empty());
    let r = http
        .post(t.url("/api/chat"))
        .json(&json!({"model": "nothing", "messages": [], "keep_alive": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A keep_alive on a request holds a model loaded on demand past the node's keep-alive.
    let r = http
        .post(t.url("/api/generate"))
        .json(&json!({"model": "beta", "keep_alive": "1h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(loaded(&t).await, ["beta"]);
    t.stop().await;
}

/// Ollama's folder (`manifests/registry.ollama.ai/library/NAME/latest` naming a blob) and LM
/// Studio's (`PUBLISHER/REPO/FILE.gguf`) under `root`, made from the default model.
fn other_apps(root: &Path) -> hearth_models::import::Roots {
    let model = common::model_path();
    let place = |to: &Path| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if std::fs::hard_link(&model, to).is_err() {
            std::fs::copy(&model, to).unwrap();
        }
    };
    let ollama = root.join("ollama");
    let hex = "5e".repeat(32);
    place(&ollama.join(format!("blobs/sha256-{hex}")));
    let manifest = ollama.join("manifests/registry.ollama.ai/library/tiny/latest");
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    let layers = json!({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{hex}"), "size": 1},
        {"mediaType": "application/vnd.ollama.image.template", "digest": format!("sha256:{}", "0".repeat(64)), "size": 1},
    ]});
    std::fs::write(&manifest, layers.to_string()).unwrap();
    let lmstudio = root.join("lmstudio");
    place(&lmstudio.join("someone/Small-GGUF/Small-Q4.gguf"));
    hearth_models::import::Roots {
        ollama: vec![ollama],
        lmstudio: vec![lmstudio],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn importing_all_goes_past_a_model_whose_name_is_taken() {
    let apps = tempfile::tempdir().unwrap();
    let roots = other_apps(apps.path());
    let models = tempfile::tempdir().unwrap();
    // Another file has LM Studio's model's name already.
    std::fs::write(models.path().join("Small-Q4.gguf"), b"not that model").unwrap();
    let t = start(models.path(), |c| c.import_roots = roots).await;
    let r = t.post("/api/models/import", &json!({})).await;
    assert_eq!(r.status(), 200);
    let r: Value = r.json().await.unwrap();
    assert_eq!(r["imported"], json!(["tiny"]), "{r}");
    assert_eq!(r["failed"][0]["id"], "Small-Q4", "{r}");
    assert!(
        r["failed"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("another file")),
        "{r}"
    );
    let link = std::fs::symlink_metadata(models.path().join("tiny.gguf")).unwrap();
    assert!(link.file_type().is_symlink());
    assert_eq!(
        std::fs::read(models.path().join("Small-Q4.gguf")).unwrap(),
        b"not that model",
        "the file there is untouched"
    );
    // Asked for alone, it is refused with the reason.
    let r = t
        .post("/api/models/import", &json!({"id": "Small-Q4"}))
        .await;
    assert_eq!(r.status(), 409);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_of_ollama_and_lm_studio_are_imported_without_a_copy_and_serve() {
    let apps = tempfile::tempdir().unwrap();
    let roots = other_apps(apps.path());
    let models = tempfile::tempdir().unwrap();
    let t = start(models.path(), |c| c.import_roots = roots).await;
    // A new machine: no model, and the doors say so.
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"messages": common::user("Hi")}),
        )
        .await;
    assert_eq!(r.status(), 503);
    let found = t.get_json("/api/models/importable").await;
    let found: Vec<(String, String, bool)> = found["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["source"].as_str().unwrap().to_owned(),
                m["imported"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("Small-Q4".into(), "lmstudio".into(), false),
            ("tiny".into(), "ollama".into(), false)
        ]
    );
    let r: Value = t
        .post("/api/models/import", &json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["imported"], json!(["Small-Q4", "tiny"]));
    // Listed with the size of the file they stand for.
    let size = std::fs::metadata(common::model_path()).unwrap().len();
    let listed = t.get_json("/api/models").await;
    for m in listed["models"].as_array().unwrap() {
        assert_eq!(m["size_bytes"], size, "{m}");
        assert!(m["linked_to"].as_str().is_some(), "{m}");
        assert_eq!(m["imported"], true, "{m}");
    }
    // Ollama's digest is its blob's name: the file is not read to list it.
    let tags = t.get_json("/api/tags").await;
    let tiny = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "tiny")
        .unwrap_or_else(|| panic!("{tags}"));
    assert_eq!(tiny["digest"], "5e".repeat(32), "{tiny}");
    // Referenced in place: links, not copies.
    for file in ["tiny.gguf", "Small-Q4.gguf"] {
        let meta = std::fs::symlink_metadata(models.path().join(file)).unwrap();
        assert!(meta.file_type().is_symlink(), "{file} is a link");
    }
    // Both answer at once, without a restart, under their own names (Ollama's with its tag).
    ask(&t, "tiny").await;
    ask(&t, "Small-Q4").await;
    let r: Value = client()
        .post(t.url("/api/chat"))
        .json(
            &json!({"model": "tiny:latest", "stream": false, "options": {"num_predict": 2},
                      "messages": [{"role": "user", "content": "Hi"}]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["done"], true, "{r}");
    // Deleting a loaded model is refused with the reason; once unloaded only the link goes.
    let http = client();
    let r = http.delete(t.url("/api/models/tiny")).send().await.unwrap();
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("unload it first"));
    let r = t.post("/api/models/unload", &json!({"id": "tiny"})).await;
    assert_eq!(r.status(), 200);
    let r = http.delete(t.url("/api/models/tiny")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(!models.path().join("tiny.gguf").exists());
    assert!(apps
        .path()
        .join(format!("ollama/blobs/sha256-{}", "5e".repeat(32)))
        .is_file());
    let r = http
        .delete(t.url("/api/models/..%2Fx"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    t.stop().await;
}

#[test]
fn the_command_line_imports_lists_and_removes() {
    let home = tempfile::tempdir().unwrap();
    let roots = other_apps(home.path());
    // LM Studio's folder where the command looks for it, under this HOME.
    std::fs::create_dir_all(home.path().join(".lmstudio")).unwrap();
    std::fs::rename(&roots.lmstudio[0], home.path().join(".lmstudio/models")).unwrap();
    // The node's data dir, as `serve` takes it: the models folder is in it.
    let data = home.path().join("data");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .arg("models")
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .env("HOME", home.path())
            .env("OLLAMA_MODELS", &roots.ollama[0])
            .env_remove("HEARTH_MODELS_DIR")
            .env_remove("HEARTH_DATA_DIR")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = run(&["import", "--dry-run"]);
    assert!(
        listed.contains("Small-Q4") && listed.contains("tiny"),
        "{listed}"
    );
    assert!(run(&["list"]).contains("no models"));
    assert!(run(&["import", "tiny"]).contains("imported tiny"));
    assert!(run(&["import"]).contains("imported Small-Q4"));
    let list = run(&["list"]);
    assert!(
        list.contains("tiny") && list.contains("Q4_1") && list.contains("->"),
        "{list}"
    );
    assert!(data.join("models/tiny.gguf").exists());
    assert!(run(&["rm", "tiny"]).contains("removed tiny.gguf"));
    assert!(!run(&["list"]).contains("tiny"));
    assert!(roots.ollama[0].join("blobs").read_dir().unwrap().count() == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollamas_unload_lets_running_answers_finish() {
    let dir = folder(&["alpha"]);
    let t = start(dir.path(), |_| {}).await;
    ask(&t, "alpha").await;
    let long = long_answer(&t, "alpha", 150).await;
    let r: Value = client()
        .post(t.url("/api/generate"))
        .json(&json!({"model": "alpha", "keep_alive": 0}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["done_reason"], "unload", "{r}");
    let (_, answer) = long.await.unwrap();
    assert_eq!(answer["choices"][0]["finish_reason"], "length", "{answer}");
    wait_for_secs(
        30,
        async || loaded(&t).await.is_empty(),
        "alpha unloads once idle",
    )
    .await;
    t.stop().await;
}

/// `/api/embed` to `model` with `body`'s other fields: its status and body.
async fn embed(t: &TestNode, model: &str, body: Value) -> (u16, Value) {
    let mut body = body;
    body["model"] = json!(model);
    let r = client()
        .post(t.url("/api/embed"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_keep_their_model_loaded_and_follow_keep_alive() {
    let dir = folder(&["alpha", "beta"]);
    let chosen = dir.path().join("alpha.gguf");
    let t = start(dir.path(), |c| {
        c.model = Some(chosen.to_string_lossy().into_owned());
        c.keep_alive = Duration::from_secs(1);
    })
    .await;
    // A request's keep_alive holds the model past the node's.
    let (status, body) = embed(&t, "beta", json!({"input": "hi", "keep_alive": "1h"})).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(loaded(&t).await, ["alpha", "beta"]);
    // No input and keep_alive 0 unloads it, as Ollama does.
    let (status, body) = embed(&t, "beta", json!({"keep_alive": 0})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(loaded(&t).await, ["alpha"]);

    // A long embedding request keeps its model from being reaped while it runs: sized from a
    // measured batch to outlast the node's keep-alive (1 s, and the 2 s least idle time).
    // The measuring batch is short (16 inputs of ~40 tokens); the long one is many of them.
    let text = "the quiet river runs past the old mill and the green hills. ".repeat(3);
    let batch: Vec<&str> = vec![text.as_str(); 16];
    // Loaded again first, so that the batch measured is the embedding's time alone.
    let (status, body) = embed(&t, "beta", json!({"input": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let started = std::time::Instant::now();
    let (status, body) = embed(&t, "beta", json!({"input": batch})).await;
    assert_eq!(status, 200, "{body}");
    let per_batch = started.elapsed().as_secs_f64().max(0.01);
    let batches = ((8.0 / per_batch).ceil() as usize).clamp(1, 400);
    let inputs: Vec<&str> = vec![text.as_str(); 16 * batches];
    let started = std::time::Instant::now();
    let (status, body) = embed(&t, "beta", json!({"input": inputs})).await;
    assert_eq!(status, 200, "after {:?}: {body}", started.elapsed());
    assert_eq!(body["embeddings"].as_array().unwrap().len(), inputs.len());
    assert!(
        started.elapsed() > Duration::from_secs(4),
        "the request must outlast the keep-alive to test anything: {:?}",
        started.elapsed()
    );
    assert_eq!(
        loads(&t, "beta").await,
        2,
        "loaded again only after the unload above"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollamas_show_reads_a_model_without_loading_it() {
    let dir = folder(&["alpha", "beta"]);
    let chosen = dir.path().join("alpha.gguf");
    let t = start(dir.path(), |c| {
        c.model = Some(chosen.to_string_lossy().into_owned());
    })
    .await;
    let r = client()
        .post(t.url("/api/show"))
        .json(&json!({"model": "beta:latest"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let shown: Value = r.json().await.unwrap();
    // From the file's header, as a loaded model's would be.
    assert_eq!(shown["details"]["family"], "llama", "{shown}");
    assert!(!shown["template"].as_str().unwrap().is_empty(), "{shown}");
    assert!(
        shown["model_info"]["llama.context_length"]
            .as_u64()
            .is_some(),
        "{shown}"
    );
    assert_eq!(loaded(&t).await, ["alpha"], "show loads nothing");
    assert_eq!(loads(&t, "beta").await, 0);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_cannot_fit_unloads_nothing() {
    let dir = folder(&["alpha", "beta"]);
    let path = dir.path().join("alpha.gguf");
    let gguf = hearth_engine::gguf::read(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let one = hearth_models::memory::estimate(size, Some(&gguf), 512, hearth_engine::KvType::F16);
    // gamma's header is the model's, its file twice as long: it needs about two models' room.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend(std::iter::repeat_n(0u8, bytes.len()));
    std::fs::write(dir.path().join("gamma.gguf"), bytes).unwrap();
    // Room for alpha and beta; gamma fits only if both go, and alpha is busy.
    let t = start(dir.path(), |c| c.memory_limit = Some(one * 22 / 10)).await;
    ask(&t, "alpha").await;
    ask(&t, "beta").await;
    assert_eq!(loaded(&t).await, ["alpha", "beta"]);
    let long = long_answer(&t, "alpha", 400).await;
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": "gamma", "max_tokens": 3, "messages": common::user("Hi")}),
        )
        .await;
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not enough memory")),
        "{body}"
    );
    // Loaded from the UI, it is the load's error; the model shown stays the one that works.
    let shown = t.get_json("/api/status").await["model"].clone();
    let r = t.post("/api/models/load", &json!({"id": "gamma"})).await;
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "model_load_failed", "{body}");
    assert_eq!(t.get_json("/api/status").await["model"], shown);
    assert_eq!(long.await.unwrap().0, 200);
    // beta was not unloaded for nothing: it answers without a second load.
    ask(&t, "beta").await;
    assert_eq!(loaded(&t).await, ["alpha", "beta"]);
    assert_eq!(loads(&t, "beta").await, 1);
    t.stop().await;
}

/// Ollama's load-only request for `model` with `keep_alive` when given.
async fn ollama_load(t: &TestNode, model: &str, keep_alive: Option<Value>) {
    let mut body = json!({"model": model});
    if let Some(k) = keep_alive {
        body["keep_alive"] = k;
    }
    let r = client()
        .post(t.url("/api/generate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_keep_alive_lasts_one_request_and_never_unloads_the_chosen_model() {
    let dir = folder(&["alpha", "beta"]);
    let chosen = dir.path().join("alpha.gguf");
    let t = start(dir.path(), |c| {
        c.model = Some(chosen.to_string_lossy().into_owned());
        c.keep_alive = Duration::from_secs(1);
    })
    .await;
    // Clients send their own default with every request; the user's choice outlasts it.
    ollama_load(&t, "alpha", Some(json!("1s"))).await;
    // beta is held for an hour, then a request without keep_alive gives it the node's again.
    ollama_load(&t, "beta", Some(json!("1h"))).await;
    ollama_load(&t, "beta", None).await;
    wait_for_secs(
        30,
        async || loaded(&t).await == ["alpha"],
        "beta unloads on the node's keep-alive",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(loaded(&t).await, ["alpha"], "the chosen model stays");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_whose_load_failed_can_be_deleted() {
    let dir = folder(&["alpha"]);
    // The model's first 16 MiB: a header that parses, tensors that are not there.
    let bytes = std::fs::read(common::model_path()).unwrap();
    std::fs::write(dir.path().join("broken.gguf"), &bytes[..16 << 20]).unwrap();
    let t = start(dir.path(), |_| {}).await;
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": "broken", "max_tokens": 3, "messages": common::user("Hi")}),
        )
        .await;
    assert!(r.status().is_server_error(), "{}", r.status());
    // The reason names the file, never the folder it is in (clients may be on other machines).
    let body: Value = r.json().await.unwrap();
    let said = body["error"]["message"].as_str().unwrap_or_default();
    let folder = dir.path().to_string_lossy().into_owned();
    assert!(
        said.contains("broken.gguf") && !said.contains(&folder),
        "{body}"
    );
    let status = t.get_json("/api/status").await;
    assert!(!status.to_string().contains(&folder), "{status}");
    let r = client()
        .delete(t.url("/api/models/broken"))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(!dir.path().join("broken.gguf").exists());
    t.stop().await;
}

/// The digest `/api/tags` gives `model` on the node at `url`, once it has one.
async fn tag_digest(url: &str, model: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let tags = common::get_json_at(format!("{url}/api/tags")).await;
        let digest = tags["models"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["model"] == model))
            .and_then(|m| m["digest"].as_str())
            .unwrap_or_default()
            .to_owned();
        if !digest.is_empty() {
            return digest;
        }
        assert!(std::time::Instant::now() < deadline, "no digest: {tags}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_digest_is_kept_across_restarts_until_its_file_changes() {
    use common::process::NodeProcess;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let other = models.join("other.gguf");
    std::fs::copy(common::model_path(), &other).unwrap();
    let models_arg = models.to_string_lossy().into_owned();
    let args = ["--models-dir", models_arg.as_str(), "--parallel", "1"];
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, &args, None);
    let first = tag_digest(&node.url, "other").await;
    drop(node);
    // A byte changed, with the file's size and time kept: a digest read again from the file
    // would differ, the kept one does not.
    let modified = std::fs::metadata(&other).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&other).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&other, &bytes).unwrap();
    let file = std::fs::File::options().write(true).open(&other).unwrap();
    file.set_modified(modified).unwrap();
    drop(file);
    let node = NodeProcess::start(&data, &args, None);
    assert_eq!(
        tag_digest(&node.url, "other").await,
        first,
        "kept, not read again"
    );
    // Its time changed: the file is another one, hashed anew.
    let file = std::fs::File::options().write(true).open(&other).unwrap();
    file.set_modified(modified + Duration::from_secs(60))
        .unwrap();
    drop(file);
    let again = tag_digest(&node.url, "other").await;
    assert_ne!(again, first);
    use sha2::Digest as _;
    assert_eq!(again, hex::encode(sha2::Sha256::digest(&bytes)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_that_fails_gives_the_focus_back_to_the_model_before() {
    let dir = folder(&["alpha", "beta"]);
    let bytes = std::fs::read(common::model_path()).unwrap();
    // A header cut short (fails at once), and a header with no tensors (llama.cpp fails).
    std::fs::write(dir.path().join("garbled.gguf"), &bytes[..1 << 20]).unwrap();
    std::fs::write(dir.path().join("broken.gguf"), &bytes[..16 << 20]).unwrap();
    let t = start(dir.path(), |_| {}).await;
    let focus = async || t.get_json("/api/status").await["model"].clone();
    let load = async |id: &str| {
        let r = t.post("/api/models/load", &json!({"id": id})).await;
        assert_eq!(r.status(), 202, "{id}");
    };
    load("alpha").await;
    wait_for_secs(30, async || focus().await["state"] == "ready", "alpha").await;
    // beta answers a request (the most recently used), alpha stays the user's choice.
    ask(&t, "beta").await;
    for bad in ["garbled", "broken"] {
        load(bad).await;
        let row = async || common::model_row(&t, bad).await;
        wait_for_secs(30, async || row().await["state"] == "failed", bad).await;
        assert!(row().await["load_error"].is_string(), "{bad}");
        // The focus settles (it moves back a moment after the failure) on alpha.
        let mut now = Value::Null;
        let settled = async || {
            now = focus().await;
            !matches!(now["state"].as_str(), Some("loading" | "failed"))
        };
        wait_for_secs(10, settled, bad).await;
        assert_eq!(
            (now["id"].as_str(), now["state"].as_str()),
            (Some("alpha"), Some("ready")),
            "{bad}: {now}"
        );
    }
    t.stop().await;
}

/// A node started with `--model PATH` outside its models folder: the Models page's list has
/// the model while it is loaded (with its header, marked as outside), and its path only for
/// this machine; no peer is asked for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_loaded_from_outside_the_folder_is_listed() {
    let empty = tempfile::tempdir().unwrap();
    let folder = empty.path().to_path_buf();
    let t = TestNode::start_with(move |c| c.models_dir = folder).await;
    let v = t.get_json("/api/models").await;
    let rows = v["models"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let row = &rows[0];
    assert_eq!(row["id"], common::MODEL_ID);
    assert_eq!(
        (&row["loaded"], &row["outside"]),
        (&json!(true), &json!(true)),
        "{v}"
    );
    assert_eq!(row["imported"], false);
    assert_eq!(row["quantization"], "Q4_1", "{v}");
    assert_eq!(
        row["linked_to"].as_str(),
        common::model_path().to_str(),
        "this machine sees where it is"
    );
    assert_eq!(v["from_peers"], json!([]));
    t.stop().await;
}
