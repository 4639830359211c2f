//! `@modelcontextprotocol/server-everything` over stdio: listing, echo, an image, resource
//! links, and a long-running operation stopped by cancellation and by the call timeout.

use std::time::{Duration, Instant};

use hearth_tools::{CancellationToken, McpCallError, McpContent, McpServerStatus};
use serde_json::json;

use crate::common::{bounded, everything, servers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_its_tools_and_echoes() {
    bounded(async {
        let mcp = servers(vec![everything("everything")]);
        assert_eq!(mcp.status("everything"), Some(McpServerStatus::Stopped));
        let tools = mcp.tools("everything").await.expect("the server starts");
        let echo = tools
            .iter()
            .find(|t| t.name == "echo")
            .expect("an echo tool");
        assert_eq!(echo.offered_name, "everything__echo");
        assert!(!echo.description.is_empty());
        assert_eq!(echo.input_schema["type"], "object");
        assert!(
            echo.input_schema["properties"]["message"].is_object(),
            "{}",
            echo.input_schema
        );
        assert_eq!(
            mcp.status("everything"),
            Some(McpServerStatus::Running { tools: tools.len() })
        );

        let outcome = mcp
            .call(
                "everything",
                "echo",
                json!({"message": "hello"}),
                CancellationToken::new(),
            )
            .await
            .expect("echo answers");
        assert_eq!(
            outcome.parts,
            vec![McpContent::Text {
                text: "Echo: hello".into()
            }]
        );
        assert!(!outcome.is_error);

        let offered = mcp
            .call_offered(
                "everything__echo",
                json!({"message": "again"}),
                CancellationToken::new(),
            )
            .await
            .expect("the offered name calls the same tool");
        assert_eq!(offered.text_for_model(), "Echo: again");

        let offer = mcp.offer().await;
        assert!(offer.failed.is_empty(), "{:?}", offer.failed);
        assert!(offer
            .tools
            .iter()
            .any(|t| t.offered_name == "everything__get-tiny-image"));
        mcp.shutdown().await;
        assert_eq!(mcp.status("everything"), Some(McpServerStatus::Stopped));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_kept_and_resources_become_links() {
    bounded(async {
        let mcp = servers(vec![everything("everything")]);
        let outcome = mcp
            .call(
                "everything",
                "get-tiny-image",
                json!({}),
                CancellationToken::new(),
            )
            .await
            .expect("the image tool answers");
        let image = outcome
            .parts
            .iter()
            .find_map(|p| match p {
                McpContent::Image { mime_type, data } => Some((mime_type, data)),
                _ => None,
            })
            .expect("an image part");
        assert_eq!(image.0, "image/png");
        assert!(
            image.1.starts_with("iVBORw0KGgo"),
            "base64 of a PNG: {}",
            &image.1[..20]
        );

        let links = mcp
            .call(
                "everything",
                "get-resource-links",
                json!({"count": 2}),
                CancellationToken::new(),
            )
            .await
            .expect("the resource-links tool answers");
        let uris: Vec<&str> = links
            .parts
            .iter()
            .filter_map(|p| match p {
                McpContent::Link { uri, .. } => Some(uri.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(uris.len(), 2, "{links:?}");
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_operation_is_cancelled_or_timed_out_and_the_server_lives_on() {
    bounded(async {
        let spec = everything("everything").with_call_timeout(Duration::from_secs(2));
        let mcp = servers(vec![spec]);
        mcp.tools("everything").await.expect("the server starts");
        let long = json!({"duration": 60, "steps": 60});

        let cancel = CancellationToken::new();
        let stopper = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            stopper.cancel();
        });
        let start = Instant::now();
        let cancelled = mcp
            .call("everything", "trigger-long-running-operation", long.clone(), cancel)
            .await;
        assert!(matches!(cancelled, Err(McpCallError::Cancelled { .. })), "{cancelled:?}");
        assert!(start.elapsed() < Duration::from_secs(2), "cancelled at once: {:?}", start.elapsed());

        let start = Instant::now();
        let timed_out = mcp
            .call("everything", "trigger-long-running-operation", long, CancellationToken::new())
            .await;
        assert!(
            matches!(timed_out, Err(McpCallError::Timeout { after, .. }) if after == Duration::from_secs(2)),
            "{timed_out:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(4), "{:?}", start.elapsed());

        // Nothing was killed: the same session answers.
        assert!(matches!(mcp.status("everything"), Some(McpServerStatus::Running { .. })));
        let echo = mcp
            .call("everything", "echo", json!({"message": "still here"}), CancellationToken::new())
            .await
            .expect("the server still answers");
        assert_eq!(echo.text_for_model(), "Echo: still here");
        mcp.shutdown().await;
    })
    .await;
}
