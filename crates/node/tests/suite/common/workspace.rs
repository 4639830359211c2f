//! The workspace as `cargo metadata` describes it (offline, without outside packages): the
//! architecture tests read each crate's dependencies and source folder from it.

use std::process::Command;

use serde_json::Value;

/// `cargo metadata --no-deps` of the workspace, as JSON.
pub fn metadata() -> Value {
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
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

/// Each workspace crate's name and manifest's folder.
pub fn crates() -> Vec<(String, std::path::PathBuf)> {
    metadata()["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("a path"));
            let dir = manifest.parent().expect("a crate folder").to_path_buf();
            (p["name"].as_str().expect("a name").to_owned(), dir)
        })
        .collect()
}
