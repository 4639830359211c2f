//! `@modelcontextprotocol/server-filesystem` on a temporary folder: what a user asks first
//! ("what files are in it?").

use hearth_tools::CancellationToken;
use serde_json::json;

use crate::common::{bounded, filesystem, servers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_a_folder() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
        std::fs::create_dir(dir.path().join("photos")).unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mcp = servers(vec![filesystem("files", &root)]);
        let tools = mcp.tools("files").await.expect("the server starts");
        assert!(
            tools.iter().any(|t| t.name == "list_directory"),
            "{tools:?}"
        );
        let outcome = mcp
            .call(
                "files",
                "list_directory",
                json!({"path": root.to_string_lossy()}),
                CancellationToken::new(),
            )
            .await
            .expect("list_directory answers");
        let text = outcome.text_for_model();
        assert!(!outcome.is_error, "{text}");
        assert!(text.contains("[FILE] notes.txt"), "{text}");
        assert!(text.contains("[DIR] photos"), "{text}");

        // Outside the allowed folder: the tool fails, as a result the model can read.
        let outside = mcp
            .call(
                "files",
                "list_directory",
                json!({"path": "/"}),
                CancellationToken::new(),
            )
            .await
            .expect("the call itself goes through");
        assert!(outside.is_error, "{outside:?}");
        mcp.shutdown().await;
    })
    .await;
}
