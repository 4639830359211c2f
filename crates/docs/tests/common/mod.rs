//! The documents the tests read, made once per test binary by real writers
//! (`tests/fixtures/make_documents.py`: reportlab, python-docx).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents, written once per test binary.
pub(crate) fn docs() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let python = repo().join(".venv/bin/python");
        assert!(
            python.is_file(),
            "{} is missing: run scripts/setup.sh",
            python.display()
        );
        let out = std::process::Command::new(python)
            .arg(repo().join("tests/fixtures/make_documents.py"))
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

pub(crate) fn file(name: &str) -> Vec<u8> {
    std::fs::read(docs().join(name)).unwrap()
}
