//! The official `openai` Python package (installed into `.venv` by `scripts/setup.sh`) as a
//! real client of the OpenAI door: models, chat, streaming with usage, completions, errors.

mod common;

use std::process::Command;

use common::process::{repo_root, run_peer, venv_python};
use common::{TestNode, MODEL_ID};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works() {
    let t = TestNode::start(2).await;
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/openai_client.py"))
        .arg(&t.base)
        .arg(MODEL_ID);
    let (stdout, _) = run_peer(cmd, "the python client").await;
    assert!(stdout.contains("openai client OK"), "{stdout}");
    t.stop().await;
}
