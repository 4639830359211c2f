//! The direction of the workspace's crates (ARCHITECTURE.md, "Crates"), read from
//! `cargo metadata`: each crate depends only on Hearth crates before it in [`ORDER`], HTTP's
//! server libraries only from the server up, llama.cpp only in the engine (and the benchmarks'
//! floor), SQLite only in the store, the keyring only in auth. Dev-dependencies are left out:
//! a test may reach anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
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

/// Each top-level module of a crate (a file or folder under `src/`, the crate root aside) and
/// the top-level modules its code names through `crate::` (or `super::` from a file directly
/// under `src/`). Comments and everything from a file's `#[cfg(test)]` on are left out.
fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let top_of = |path: &Path| -> (String, bool) {
        let rel = path.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        let name = first.as_os_str().to_string_lossy();
        let direct = rel.components().count() == 1
            || (rel.components().count() == 2 && rel.ends_with("mod.rs"));
        (name.trim_end_matches(".rs").to_owned(), direct)
    };
    let roots = ["lib", "main"];
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| top_of(f).0)
        .filter(|m| !roots.contains(&m.as_str()))
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let (top, direct) = top_of(file);
        if roots.contains(&top.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut prefixes = vec!["crate::"];
        if direct {
            prefixes.push("super::");
        }
        for prefix in prefixes {
            for (at, _) in code.match_indices(prefix) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let rest = &code[at + prefix.len()..];
                let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    group.split(',').map(str::trim).collect()
                } else {
                    vec![rest]
                };
                for name in names {
                    let ident: String = name
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if ident != top && modules.contains(&ident) {
                        edges.entry(top.clone()).or_default().insert(ident);
                    }
                }
            }
        }
    }
    edges
}

/// Each circle among `edges`, as `a -> b -> ... -> a`, found once from its smallest name.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for start in edges.keys() {
        // Breadth first from `start`'s successors, over names after it only, back to it.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue: std::collections::VecDeque<&str> = std::collections::VecDeque::new();
        queue.push_back(start);
        let mut closed = None;
        while let Some(at) = queue.pop_front() {
            for next in edges.get(at).into_iter().flatten() {
                if next == start {
                    closed = Some(at);
                    break;
                }
                if next.as_str() > start.as_str() && !came_from.contains_key(next.as_str()) {
                    came_from.insert(next, at);
                    queue.push_back(next);
                }
            }
            if closed.is_some() {
                break;
            }
        }
        if let Some(mut at) = closed {
            let mut path = vec![start.as_str()];
            let mut back = vec![at];
            while at != start {
                at = came_from[at];
                if at != start {
                    back.push(at);
                }
            }
            path.extend(back.into_iter().rev());
            path.push(start);
            found.push(path.join(" -> "));
        }
    }
    found
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_circle() {
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
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut wrong = Vec::new();
    let mut read = 0;
    for p in meta["packages"].as_array().expect("packages") {
        let manifest = Path::new(p["manifest_path"].as_str().expect("a manifest path"));
        let src = manifest.parent().expect("a crate folder").join("src");
        if !src.is_dir() {
            continue;
        }
        read += 1;
        for circle in circles(&module_edges(&src)) {
            wrong.push(format!("{}: {circle}", p["name"].as_str().unwrap_or("?")));
        }
    }
    assert!(read >= 10, "read {read} crates");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_circle_check_sees_a_circle_through_a_file_and_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("c")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a; mod b; mod c; use crate::a::X;").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use super::b::Y;\n// crate::c, a comment\n",
    )
    .unwrap();
    std::fs::write(src.join("b.rs"), "use crate::{c::Z, a};").unwrap();
    std::fs::write(
        src.join("c/mod.rs"),
        "pub fn z() { crate::a::f() }\n#[cfg(test)]\nmod t { use crate::b; }",
    )
    .unwrap();
    let edges = module_edges(src);
    let names = |m: &str| -> Vec<&str> {
        edges
            .get(m)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    };
    assert_eq!(
        names("a"),
        ["b"],
        "super:: from a file under src/; no comment"
    );
    assert_eq!(names("b"), ["a", "c"], "a group of crate:: paths");
    assert_eq!(names("c"), ["a"], "a folder's module; not its tests");
    assert_eq!(circles(&edges), ["a -> b -> a"]);
    let mut cut = edges.clone();
    cut.get_mut("b").unwrap().remove("a");
    assert_eq!(circles(&cut), ["a -> b -> c -> a"]);
    cut.get_mut("c").unwrap().clear();
    assert!(circles(&cut).is_empty());
}
