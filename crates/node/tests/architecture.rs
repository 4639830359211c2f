//! The direction of the workspace's crates (ARCHITECTURE.md, "Crates"), read from
//! `cargo metadata`: each crate depends only on Hearth crates before it in [`ORDER`], HTTP's
//! server libraries only from the server up, llama.cpp only in the engine (and the benchmarks'
//! floor), SQLite only in the store, the keyring only in auth. Dev-dependencies are left out:
//! a test may reach anything.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// Hearth's crates, lowest first: a crate may depend on those before it, never after.
const ORDER: &[&str] = &[
    "hearth-base",
    "hearth-protocol",
    "hearth-engine",
    "hearth-auth",
    "hearth-store",
    "hearth-models",
    "hearth-hub",
    "hearth-route",
    "hearth-cluster",
    "hearth-split",
    "hearth-server",
    "hearth-node",
    "hearth-bench",
    "hearth-desktop",
];

/// Outside crates only some of Hearth's may name: (crate, the lowest of ours that may).
const ONLY_FROM: &[(&str, &str)] = &[
    ("axum", "hearth-server"),
    ("hyper", "hearth-server"),
    ("hyper-util", "hearth-server"),
    ("tower-http", "hearth-server"),
    ("rust-embed", "hearth-server"),
];

/// Outside crates only the given ones of Hearth's may name.
const ONLY_IN: &[(&str, &[&str])] = &[
    // The floor of the benchmarks drives llama.cpp directly, with the least code possible.
    ("llama-cpp-2", &["hearth-engine", "hearth-bench"]),
    ("llama-cpp-sys-2", &["hearth-engine"]),
    ("rusqlite", &["hearth-store"]),
    ("keyring", &["hearth-auth"]),
];

/// Each workspace crate's normal and build dependencies, by name.
fn dependencies() -> BTreeMap<String, Vec<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().expect("a name").to_owned())
                .collect();
            (p["name"].as_str().expect("a name").to_owned(), deps)
        })
        .collect()
}

fn rank(name: &str) -> Option<usize> {
    ORDER.iter().position(|c| *c == name)
}

/// What is wrong with the dependencies `crates` name, one line each.
fn violations(crates: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, deps) in crates {
        let Some(mine) = rank(name) else {
            wrong.push(format!("{name} has no place in ORDER: say where it sits"));
            continue;
        };
        for dep in deps {
            if let Some(theirs) = rank(dep) {
                if theirs >= mine {
                    wrong.push(format!("{name} depends on {dep}, which comes after it"));
                }
            }
            if let Some((_, floor)) = ONLY_FROM.iter().find(|(c, _)| c == dep) {
                if mine < rank(floor).expect("floors are in ORDER") {
                    wrong.push(format!(
                        "{name} names {dep}, which only {floor} and above may"
                    ));
                }
            }
            if let Some((_, only)) = ONLY_IN.iter().find(|(c, _)| c == dep) {
                if !only.contains(&name.as_str()) {
                    wrong.push(format!("{name} names {dep}, which only {only:?} may"));
                }
            }
        }
        if name == "hearth-desktop" {
            for dep in deps.iter().filter(|d| rank(d).is_some_and(|r| r > 2)) {
                if dep != "hearth-node" {
                    wrong.push(format!(
                        "hearth-desktop depends on {dep}: of the node's crates it knows hearth-node only"
                    ));
                }
            }
        }
    }
    wrong
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let crates = dependencies();
    assert!(
        crates.contains_key("hearth-node") && crates.contains_key("hearth-base"),
        "the workspace as read: {:?}",
        crates.keys()
    );
    let wrong = violations(&crates);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_check_sees_a_dependency_that_points_up() {
    let mut crates = dependencies();
    crates
        .get_mut("hearth-base")
        .expect("hearth-base")
        .push("hearth-node".to_owned());
    crates
        .get_mut("hearth-base")
        .expect("hearth-base")
        .push("axum".to_owned());
    crates
        .get_mut("hearth-node")
        .expect("hearth-node")
        .push("rusqlite".to_owned());
    crates.insert("hearth-new".to_owned(), Vec::new());
    let wrong = violations(&crates);
    assert!(
        wrong
            .iter()
            .any(|w| w == "hearth-base depends on hearth-node, which comes after it"),
        "{wrong:?}"
    );
    assert!(
        wrong
            .iter()
            .any(|w| w == "hearth-base names axum, which only hearth-server and above may"),
        "{wrong:?}"
    );
    assert!(wrong
        .iter()
        .any(|w| w.starts_with("hearth-new has no place")));
}
