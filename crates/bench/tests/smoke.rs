//! A small run of the benchmark program (a few tokens, one run) against the real model and a
//! real node, so `make test` catches a benchmark that no longer runs or reports nonsense.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn a_quick_benchmark_run_reports_every_figure() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_hearth-bench"));
    let node = exe.parent().unwrap().join("hearth-node");
    assert!(
        node.is_file(),
        "{} is missing: run the workspace tests (`make test`), which build it",
        node.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.json");
    let svg = dir.path().join("throughput.svg");
    let doc = dir.path().join("PERFORMANCE.md");
    std::fs::write(
        &doc,
        "# perf\n<!-- bench:begin -->\nold\n<!-- bench:end -->\ntail\n",
    )
    .unwrap();
    let status = Command::new(&exe)
        .arg("--quick")
        .arg("--node-bin")
        .arg(&node)
        .arg("--out")
        .arg(&out)
        .arg("--svg")
        .arg(&svg)
        .arg("--update-docs")
        .arg(&doc)
        .status()
        .unwrap();
    assert!(status.success());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let figures = v["figures"].as_array().unwrap();
    let get = |name: &str| {
        figures
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no figure {name}"))
            .clone()
    };
    for name in [
        "floor prefill",
        "floor aggregate decode x 1",
        "floor aggregate decode per CPU-s x 8",
        "node decode per CPU-s, 1 stream (/generate)",
        "node aggregate decode per CPU-s x 4",
        "floor aggregate decode x 8",
        "floor decode, 1 sequence (around OpenAI SSE)",
        "floor decode per CPU-s, 1 sequence (around /generate)",
        "node decode, 1 stream (OpenAI SSE)",
        "node decode, 1 stream (/generate)",
        "node aggregate decode x 1",
        "node aggregate decode x 8",
        "time to first token, p50",
        "added by the node, p50",
        "resident memory per extra slot",
        "a long prompt resent after its slot was reused, node: resent / cold",
        "code edit: node --spec auto / none",
        "free chat: node --spec ngram / none",
        "code edit: node with itself as draft model, --spec draft / none",
        "first token at 8 streams, node",
        "Gemma 3 270M, 600-token prompt, node q8_0: decode",
        "Gemma 3 270M, 600-token prompt: decode q8_0 / f16",
        "SSE token messages, 1 client(s)",
        "/generate token messages, 32 client(s)",
        "cluster: 2 nodes on 1 core each, 4 requests",
        "cluster: one stream through a peer, decode",
        "cluster: a provider's kill to the client's next token",
        "cluster: a silent peer (link cut) noticed",
        "cluster: 4 nodes, bytes sent per node per second (idle)",
        "node decode, 1 stream (Ollama NDJSON)",
        "node embeddings (/v1/embeddings)",
        "floor embeddings (llama.cpp, 16 inputs per decode)",
        "node decode, 1 stream beside embeddings",
        "resident memory with the embedding context, 2 slots",
        "engine load of a model",
        "added to the first token by loading on demand",
        "resident memory with two models loaded, idle",
        "a model from a peer (query, transfer, SHA-256)",
        "plain TCP copy of the same file (floor)",
        "tool loop, 5 steps: prefilled per step",
        "tool loop, 5 steps: prefilled / prompt",
        "tool loop, 5 steps: the model's time per step",
        "tool loop, 5 steps: the MCP server's time per call",
        "tool loop, 5 steps: the node's own time per step",
        "documents: read and index a 300-page PDF (words)",
        "documents: a turn's retrieval over it",
        "documents: passages embedded per second in a turn (the chat's model)",
    ] {
        let f = get(name);
        let m = f["median"].as_f64().unwrap();
        assert!(
            m.is_finite() && m > 0.0 || name.starts_with("added"),
            "{name}: {f}"
        );
    }
    // Each door's single stream is compared with the floor runs around it.
    for door in ["OpenAI SSE", "/generate"] {
        let f = get(&format!("node decode, 1 stream ({door})"));
        assert_eq!(
            f["floor"],
            format!("floor decode, 1 sequence (around {door})")
        );
        assert!(f["ratio"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["pass"].is_boolean(), "{f}");
    }
    // Two rounds of one pair each: every node run has a floor run before and after it.
    for (node, floor) in [
        (
            "node decode, 1 stream (OpenAI SSE)",
            "floor decode, 1 sequence (around OpenAI SSE)",
        ),
        ("node aggregate decode x 8", "floor aggregate decode x 8"),
    ] {
        assert_eq!(get(node)["samples"].as_array().unwrap().len(), 2, "{node}");
        assert_eq!(
            get(floor)["samples"].as_array().unwrap().len(),
            4,
            "{floor}"
        );
    }
    // The Ollama door against the OpenAI door, embeddings against their floor, decoding
    // beside embeddings against decoding alone: ratios measured in this run.
    for (name, against) in [
        (
            "node decode, 1 stream (Ollama NDJSON)",
            "node decode, 1 stream (OpenAI SSE, around it)",
        ),
        (
            "node embeddings (/v1/embeddings)",
            "floor embeddings (llama.cpp, 16 inputs per decode)",
        ),
        (
            "node decode, 1 stream beside embeddings",
            "node decode, 1 stream alone (around it)",
        ),
    ] {
        let f = get(name);
        assert_eq!(f["floor"], against, "{f}");
        assert!(f["ratio"].as_f64().unwrap() > 0.0, "{f}");
    }
    let agg = get("node aggregate decode x 8");
    assert!(agg["ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(agg["floor"], "floor aggregate decode x 8");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(chart.matches("<polyline").count(), 2);
    let doc = std::fs::read_to_string(&doc).unwrap();
    assert!(
        doc.contains("node aggregate decode x 8")
            && doc.contains("2 pairs (2 for 4 and 8 streams, 2 for 2) in 2 rounds")
            && doc.ends_with("<!-- bench:end -->\ntail\n"),
        "{doc}"
    );
}

#[test]
fn one_part_can_be_measured_on_its_own_but_never_into_the_docs() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_hearth-bench"));
    let node = exe.parent().unwrap().join("hearth-node");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.json");
    let svg = dir.path().join("throughput.svg");
    let run = |extra: &[&str]| {
        Command::new(&exe)
            .args(["--quick", "--only", "doors", "--node-bin"])
            .arg(&node)
            .arg("--out")
            .arg(&out)
            .arg("--svg")
            .arg(&svg)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = run(&["--update-docs", "PERFORMANCE.md"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cannot be used with"),
        "{refused:?}"
    );
    let done = run(&[]);
    assert!(done.status.success(), "{done:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["only"], "doors");
    let names: Vec<&str> = v["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "SSE token messages, 1 client(s)",
            "SSE token messages, 32 client(s)",
            "/generate token messages, 1 client(s)",
            "/generate token messages, 32 client(s)"
        ]
    );
    assert!(!svg.exists(), "no chart without the decode figures");
}
