//! Our Python server over streamable HTTP (started by the test on a free port of 127.0.0.1):
//! echo, an image, a hang that times out without killing the session, a result over the cap.

use std::time::Duration;

use hearth_tools::{CancellationToken, McpCallError, McpContent, McpServerSpec, MAX_OUTCOME_BYTES};
use serde_json::json;

use crate::common::{bounded, servers, HttpServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_tools_work_over_streamable_http() {
    bounded(async {
        let server = HttpServer::start();
        let spec = McpServerSpec::http("web", &server.url).with_call_timeout(Duration::from_secs(1));
        let mcp = servers(vec![spec]);
        let tools = mcp.tools("web").await.expect("the session starts");
        assert!(tools.iter().any(|t| t.offered_name == "web__spawn_grandchild"), "{tools:?}");

        let echo = mcp.call("web", "echo", json!({"message": "http"}), CancellationToken::new()).await.unwrap();
        assert_eq!(echo.text_for_model(), "Echo: http");
        let image = mcp.call("web", "image", json!({}), CancellationToken::new()).await.unwrap();
        assert!(matches!(&image.parts[..], [McpContent::Image { mime_type, .. }] if mime_type == "image/png"), "{image:?}");

        let hung = mcp.call("web", "hang", json!({}), CancellationToken::new()).await;
        assert!(matches!(hung, Err(McpCallError::Timeout { .. })), "{hung:?}");
        let echo = mcp.call("web", "echo", json!({"message": "still"}), CancellationToken::new()).await.unwrap();
        assert_eq!(echo.text_for_model(), "Echo: still", "the session lives on");

        let spec = McpServerSpec::http("web", &server.url).with_call_timeout(Duration::from_secs(60));
        mcp.upsert(spec).await.unwrap();
        let big = mcp.call("web", "big", json!({"megabytes": 10}), CancellationToken::new()).await.unwrap();
        assert!(big.cut_bytes > 0 && big.size() <= MAX_OUTCOME_BYTES, "{} {}", big.cut_bytes, big.size());
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_listening_is_a_start_error() {
    bounded(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mcp = servers(vec![McpServerSpec::http(
            "gone",
            format!("http://127.0.0.1:{port}/mcp"),
        )]);
        let err = mcp.tools("gone").await.expect_err("nothing listens");
        assert!(err.to_string().contains(&port.to_string()), "{err}");
        mcp.shutdown().await;
    })
    .await;
}
