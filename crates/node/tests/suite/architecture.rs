//! The direction of the workspace's crates (ARCHITECTURE.md, "Crates"), read from
//! `cargo metadata`: each crate depends only on Hearth crates before it in [`ORDER`], some only
//! on the few they are allowed, HTTP's server libraries only from the server up, llama.cpp only
//! in the engine (and the benchmarks' floor), SQLite only in the store, the keyring only in
//! auth. Dev-dependencies are left out: a test may reach anything. Module circles inside a
//! crate are `module_circles.rs`'s.

use crate::common;

use std::collections::BTreeMap;

use common::workspace::metadata;

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
    "hearth-tools",
    "hearth-docs",
    "hearth-server",
    "hearth-node",
    "hearth-bench",
    "hearth-desktop",
];

/// Crates that may depend on these Hearth crates only, whatever comes before them.
const HEARTH_ONLY: &[(&str, &[&str])] = &[
    ("hearth-base", &[]),
    ("hearth-protocol", &[]),
    ("hearth-engine", &["hearth-protocol"]),
    // Rows, not what they are for: a client's key is bytes here, read by the auth door.
    ("hearth-store", &[]),
    // The MCP client: servers, processes, calls; nothing of the node's but its base types.
    ("hearth-tools", &["hearth-base"]),
    // Documents read into text: files in, text out, nothing of the node's.
    ("hearth-docs", &[]),
    ("hearth-bench", &["hearth-engine", "hearth-protocol"]),
    // Of the node's crates the desktop app knows the top one only.
    ("hearth-desktop", &["hearth-node", "hearth-protocol"]),
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
    ("pdf-extract", &["hearth-docs"]),
];

/// Each workspace crate's normal and build dependencies, by name.
fn dependencies() -> BTreeMap<String, Vec<String>> {
    metadata()["packages"]
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
        let allowed = HEARTH_ONLY.iter().find(|(c, _)| c == name).map(|(_, a)| *a);
        for dep in deps {
            if let Some(theirs) = rank(dep) {
                if theirs >= mine {
                    wrong.push(format!("{name} depends on {dep}, which comes after it"));
                } else if allowed.is_some_and(|a| !a.contains(&dep.as_str())) {
                    wrong.push(format!("{name} depends on {dep}, which it may not know"));
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
    }
    wrong
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let crates = dependencies();
    for name in ORDER {
        assert!(
            crates.contains_key(*name),
            "{name} is not in the workspace as read: {:?}",
            crates.keys()
        );
    }
    let wrong = violations(&crates);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_check_sees_each_kind_of_wrong_dependency() {
    let mut crates = dependencies();
    let mut add = |name: &str, dep: &str| {
        crates
            .get_mut(name)
            .expect("a crate of ORDER")
            .push(dep.to_owned())
    };
    add("hearth-base", "hearth-node");
    add("hearth-base", "axum");
    add("hearth-node", "rusqlite");
    add("hearth-engine", "hearth-base");
    add("hearth-desktop", "hearth-server");
    crates.insert("hearth-new".to_owned(), Vec::new());
    let wrong = violations(&crates);
    for expected in [
        "hearth-base depends on hearth-node, which comes after it",
        "hearth-base names axum, which only hearth-server and above may",
        "hearth-node names rusqlite, which only [\"hearth-store\"] may",
        "hearth-engine depends on hearth-base, which it may not know",
        "hearth-desktop depends on hearth-server, which it may not know",
        "hearth-new has no place in ORDER: say where it sits",
    ] {
        assert!(wrong.iter().any(|w| w == expected), "{expected}: {wrong:?}");
    }
    assert_eq!(wrong.len(), 6, "{wrong:?}");
}
