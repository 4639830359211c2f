//! The hub's model search, against `tests/hub_server.py` (the hub's documented search and
//! listing, on loopback): `GET /api/models/search` lists the matching GGUF repositories, the
//! most downloaded first, each file with its size and quantisation and whether it fits this
//! machine; a file found downloads by its spec and is then marked as here; bad queries and an
//! unreachable hub are clear errors; `hearth-node models search` prints the same.

use crate::common;

use std::process::Command;

use common::model_hub::ModelHub;
use common::{client, model_size, wait_for_secs, without_model, TestNode};
use serde_json::{json, Value};

const REPO: &str = "hearth-test/Tiny-GGUF";
const IN_REPO: &str = "quants/Tiny-Q4_K_M.gguf";
/// A repository the search finds with one file far larger than any machine.
/// (The fixture lists it before the served one unless asked to sort by downloads.)
const HUGE: &str = "other/Tiny-Huge-GGUF:50:Tiny-Huge-Q8_0.gguf:999999999999999";
/// One whose model is small and whose vision projector, which comes with it, is not.
const VISION: &str =
    "other/Tiny-Vision-GGUF:20:Tiny-Vision-Q4_0.gguf:1000:mmproj-Tiny-Vision-f16.gguf:999999999999999";
/// One it must not find for "tiny".
const UNRELATED: &str = "other/Unrelated-GGUF:99999:Unrelated-Q4_0.gguf:1000";

fn hub() -> ModelHub {
    ModelHub::serving(
        REPO,
        &[(IN_REPO, common::model_path())],
        &["--listed", HUGE, "--listed", VISION, "--listed", UNRELATED],
    )
}

async fn search(t: &TestNode, q: &str) -> (u16, Value) {
    let r = client()
        .get(t.url("/api/models/search"))
        .query(&[("q", q)])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_lists_what_fits_and_a_found_file_downloads() {
    let hub = hub();
    let models = tempfile::tempdir().unwrap();
    let (dir, url) = (models.path().to_path_buf(), hub.url.clone());
    let t = TestNode::start_with(move |c| {
        without_model(c, &dir);
        c.hub_url = url;
        c.parallel = 1;
        c.ctx = Some(512);
    })
    .await;

    let (status, v) = search(&t, "tiny").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["context"], 512, "{v}");
    let repos = v["repos"].as_array().unwrap();
    let ids: Vec<&str> = repos.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [REPO, "other/Tiny-Huge-GGUF", "other/Tiny-Vision-GGUF"],
        "most downloaded first, only matches"
    );
    assert_eq!(repos[0]["downloads"], 1000);
    let file = &repos[0]["files"][0];
    assert_eq!(file["spec"], format!("{REPO}/{IN_REPO}"), "{v}");
    assert_eq!(file["name"], "Tiny-Q4_K_M.gguf");
    assert_eq!(file["size"], model_size());
    assert_eq!(file["quant"], "Q4_K_M");
    assert_eq!(file["shards"], 1);
    assert_eq!(file["fits"], true, "{v}");
    assert_eq!(file["here"], false);
    assert!(file["needs"].as_u64().unwrap() > model_size());
    let huge = &repos[1]["files"][0];
    assert_eq!(
        (&huge["quant"], &huge["fits"]),
        (&json!("Q8_0"), &json!(false)),
        "{v}"
    );
    assert!(file.get("projector_size").is_none(), "{v}");
    // The projector is no model of its own; it comes with the model and counts in its fit.
    let vision = repos[2]["files"].as_array().unwrap();
    assert_eq!(vision.len(), 1, "{v}");
    assert_eq!(vision[0]["name"], "Tiny-Vision-Q4_0.gguf");
    assert_eq!(vision[0]["projector_size"], 999_999_999_999_999u64);
    assert_eq!(vision[0]["fits"], false, "{v}");
    assert!(vision[0]["needs"].as_u64().unwrap() > 999_999_999_999_999);
    // The hub was asked as its API documents: GGUF repositories, the query's words.
    let log = hub.log().await;
    let asked = log
        .iter()
        .find(|e| e["search"] == "tiny")
        .unwrap_or_else(|| panic!("{log:?}"));
    assert_eq!(
        (&asked["filter"], &asked["sort"], &asked["direction"]),
        (&json!("gguf"), &json!("downloads"), &json!("-1")),
        "{asked}"
    );

    // One click: the spec downloads, and the next search says it is here.
    let r = t
        .post("/api/models/downloads", &json!({"model": file["spec"]}))
        .await;
    assert_eq!(r.status(), 202);
    wait_for_secs(
        120,
        async || {
            let (_, v) = search(&t, "tiny").await;
            v["repos"][0]["files"][0]["here"] == true
        },
        "the found file downloaded",
    )
    .await;

    // Bad queries, in the UI API's words.
    for q in ["", "   ", &"x".repeat(300)] {
        let (status, v) = search(&t, q).await;
        assert_eq!(status, 400, "{q:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not a search")),
            "{v}"
        );
    }
    drop(hub);
    let (status, v) = search(&t, "tiny").await;
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("hub")),
        "{v}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_searches_the_hub() {
    let hub = hub();
    let data = tempfile::tempdir().unwrap();
    let (url, dir) = (hub.url.clone(), data.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .args(["models", "search", "tiny", "--hub-url", &url, "--data-dir"])
            .arg(&dir)
            .env_remove("HEARTH_MODELS_DIR")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{stdout}"))
    };
    assert!(at(REPO) < at("other/Tiny-Huge-GGUF"), "{stdout}");
    let tiny = lines[at(IN_REPO)];
    assert!(tiny.contains("Q4_K_M") && tiny.contains("\tfits"), "{tiny}");
    assert!(
        lines[at("Tiny-Huge-Q8_0.gguf")].contains("too large"),
        "{stdout}"
    );
    assert!(!stdout.contains("Unrelated"), "{stdout}");
}
