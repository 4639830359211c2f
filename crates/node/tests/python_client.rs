//! The official `openai` Python package (installed into `.venv` by `scripts/setup.sh`) as a
//! real client of the OpenAI door: models, chat, streaming with usage, completions, errors.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{TestNode, MODEL_ID};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing — run `make test` (or scripts/setup.sh) to create it",
        python.display()
    );
    let t = TestNode::start(2).await;
    let base = t.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(root.join("tests/openai_client.py"))
            .arg(base)
            .arg(MODEL_ID)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("openai client OK"), "{stdout}");
    t.stop().await;
}
