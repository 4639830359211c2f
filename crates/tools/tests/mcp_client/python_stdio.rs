//! Our Python server (tests/mcp/py_server.py) over stdio: the ways a real server misbehaves.
//! A crash mid-call, a hang (timeout, and MCP's cancellation reaching the server), garbage on
//! stdout, a 10 MB result, an image; the whole process group stopped; idle stop; restart and
//! backoff.

use std::time::{Duration, Instant};

use hearth_tools::{
    CancellationToken, McpCallError, McpContent, McpServerError, McpServerSpec, McpServerStatus,
    McpServers, McpSettings, MAX_OUTCOME_BYTES,
};
use serde_json::json;

use crate::common::{alive, bounded, eventually, py_stdio, servers, settings};

async fn echo(mcp: &McpServers, server: &str, message: &str) -> Result<String, McpCallError> {
    let outcome = mcp
        .call(
            server,
            "echo",
            json!({"message": message}),
            CancellationToken::new(),
        )
        .await?;
    Ok(outcome.text_for_model())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoes_and_returns_an_image() {
    bounded(async {
        let mcp = servers(vec![py_stdio("py")]);
        assert_eq!(echo(&mcp, "py", "hi").await.unwrap(), "Echo: hi");
        let image = mcp.call("py", "image", json!({}), CancellationToken::new()).await.unwrap();
        assert_eq!(
            image.parts,
            vec![McpContent::Image {
                mime_type: "image/png".into(),
                data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC".into()
            }]
        );
        let unknown = mcp.call("py", "nope", json!({}), CancellationToken::new()).await;
        assert!(matches!(unknown, Err(McpCallError::UnknownTool { .. })), "{unknown:?}");
        let bad_args = mcp.call("py", "echo", json!([1]), CancellationToken::new()).await;
        assert!(matches!(bad_args, Err(McpCallError::ArgumentsNotAnObject(_))), "{bad_args:?}");
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_an_error_and_the_next_need_restarts_it() {
    bounded(async {
        let mcp = servers(vec![py_stdio("py")]);
        assert_eq!(echo(&mcp, "py", "before").await.unwrap(), "Echo: before");
        let crashed = mcp
            .call("py", "crash", json!({}), CancellationToken::new())
            .await;
        let Err(McpCallError::ServerExited { server, detail }) = &crashed else {
            panic!("{crashed:?}")
        };
        assert_eq!(server, "py");
        assert!(
            detail.contains("exit status: 3") && detail.contains("crashing now"),
            "{detail}"
        );
        assert!(
            eventually(Duration::from_secs(5), || matches!(
                mcp.status("py"),
                Some(McpServerStatus::Failed { .. })
            ))
            .await,
            "{:?}",
            mcp.status("py")
        );
        assert_eq!(
            echo(&mcp, "py", "after").await.unwrap(),
            "Echo: after",
            "restarted"
        );
        assert!(matches!(
            mcp.status("py"),
            Some(McpServerStatus::Running { .. })
        ));
        let log = mcp.log("py").unwrap();
        assert_eq!(
            log.iter()
                .filter(|l| l.starts_with("[hearth] starting"))
                .count(),
            2,
            "{log:?}"
        );
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_call_times_out_and_the_server_hears_the_cancellation() {
    bounded(async {
        let spec = py_stdio("py").with_call_timeout(Duration::from_secs(1));
        let mcp = servers(vec![spec]);
        let start = Instant::now();
        let hung = mcp
            .call("py", "hang", json!({}), CancellationToken::new())
            .await;
        assert!(
            matches!(hung, Err(McpCallError::Timeout { .. })),
            "{hung:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        let heard = eventually(Duration::from_secs(5), || {
            mcp.log("py").unwrap().iter().any(|l| l == "hang cancelled")
        })
        .await;
        assert!(
            heard,
            "notifications/cancelled reached the server: {:?}",
            mcp.log("py")
        );
        assert_eq!(
            echo(&mcp, "py", "alive").await.unwrap(),
            "Echo: alive",
            "nothing was killed"
        );
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_stdout_is_a_clear_error_not_a_hang() {
    bounded(async {
        let mcp = servers(vec![py_stdio("py")]);
        let start = Instant::now();
        let garbage = mcp
            .call("py", "garbage", json!({}), CancellationToken::new())
            .await;
        let Err(McpCallError::Protocol { detail, .. }) = &garbage else {
            panic!("{garbage:?}")
        };
        assert!(
            detail.contains("not JSON-RPC") && detail.contains("this line is not JSON-RPC"),
            "{detail}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(
            eventually(Duration::from_secs(5), || matches!(
                mcp.status("py"),
                Some(McpServerStatus::Failed { .. })
            ))
            .await
        );
        assert_eq!(
            echo(&mcp, "py", "again").await.unwrap(),
            "Echo: again",
            "restarted"
        );
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_result_is_cut_to_the_cap_with_a_note() {
    bounded(async {
        let mcp = servers(vec![py_stdio("py")]);
        let big = mcp
            .call(
                "py",
                "big",
                json!({"megabytes": 10}),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(big.size() <= MAX_OUTCOME_BYTES, "{}", big.size());
        assert!(
            big.size() > MAX_OUTCOME_BYTES - 1024,
            "kept nearly the cap: {}",
            big.size()
        );
        assert_eq!(big.cut_bytes, 10_000_000 - (big.size() - note_len(&big)));
        let McpContent::Text { text: note } = big.parts.last().unwrap() else {
            panic!()
        };
        assert!(
            note.contains("cut this tool result") && note.contains("of its 10000000 bytes"),
            "{note}"
        );
        mcp.shutdown().await;
    })
    .await;
}

fn note_len(outcome: &hearth_tools::McpToolOutcome) -> usize {
    match outcome.parts.last() {
        Some(McpContent::Text { text }) => text.len(),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_kills_the_whole_process_group() {
    bounded(async {
        let mcp = servers(vec![py_stdio("py")]);
        let pid: u32 = mcp
            .call(
                "py",
                "spawn_grandchild",
                json!({}),
                CancellationToken::new(),
            )
            .await
            .unwrap()
            .text_for_model()
            .parse()
            .expect("a pid");
        assert!(alive(pid), "the grandchild runs");
        mcp.stop("py").await.unwrap();
        assert_eq!(mcp.status("py"), Some(McpServerStatus::Stopped));
        assert!(
            eventually(Duration::from_secs(3), || !alive(pid)).await,
            "grandchild {pid} was left running"
        );

        // Shutdown does the same for a server still running.
        let pid: u32 = mcp
            .call(
                "py",
                "spawn_grandchild",
                json!({}),
                CancellationToken::new(),
            )
            .await
            .unwrap()
            .text_for_model()
            .parse()
            .unwrap();
        mcp.shutdown().await;
        assert!(
            eventually(Duration::from_secs(3), || !alive(pid)).await,
            "grandchild {pid} was left running"
        );
        let after = mcp
            .call(
                "py",
                "echo",
                json!({"message": "x"}),
                CancellationToken::new(),
            )
            .await;
        assert!(
            matches!(after, Err(McpCallError::Server(McpServerError::ShutDown))),
            "{after:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_is_stopped_and_a_disabled_one_is_not_started() {
    bounded(async {
        let mcp = McpServers::new(
            vec![py_stdio("py")],
            McpSettings {
                idle_stop: Duration::from_secs(1),
                ..settings()
            },
        )
        .unwrap();
        let pid: u32 = mcp
            .call(
                "py",
                "spawn_grandchild",
                json!({}),
                CancellationToken::new(),
            )
            .await
            .unwrap()
            .text_for_model()
            .parse()
            .unwrap();
        assert!(
            eventually(Duration::from_secs(8), || mcp.status("py")
                == Some(McpServerStatus::Stopped))
            .await,
            "{:?}",
            mcp.status("py")
        );
        assert!(eventually(Duration::from_secs(3), || !alive(pid)).await);
        assert!(mcp
            .log("py")
            .unwrap()
            .iter()
            .any(|l| l == "[hearth] idle: stopping"));

        mcp.set_enabled("py", false).await.unwrap();
        let off = mcp.tools("py").await;
        assert_eq!(off, Err(McpServerError::Disabled("py".into())));
        mcp.set_enabled("py", true).await.unwrap();
        mcp.set_tool_enabled("py", "echo", false).unwrap();
        let tools = mcp.tools("py").await.unwrap();
        assert!(!tools.iter().find(|t| t.name == "echo").unwrap().enabled);
        assert!(!mcp.offer().await.tools.iter().any(|t| t.name == "echo"));
        let refused = mcp
            .call(
                "py",
                "echo",
                json!({"message": "x"}),
                CancellationToken::new(),
            )
            .await;
        assert!(
            matches!(refused, Err(McpCallError::ToolDisabled { .. })),
            "{refused:?}"
        );
        mcp.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_fails_clearly_then_backs_off() {
    bounded(async {
        let missing = McpServerSpec::stdio("missing", "/nonexistent/mcp-server", vec![]);
        let exits = McpServerSpec::stdio(
            "exits",
            "sh",
            vec!["-c".into(), "echo 'no config given' >&2; exit 2".into()],
        );
        let mcp = servers(vec![missing, exits]);
        let first = mcp.tools("missing").await;
        let Err(McpServerError::Start { detail, .. }) = &first else {
            panic!("{first:?}")
        };
        assert!(detail.contains("/nonexistent/mcp-server"), "{detail}");
        let Some(McpServerStatus::Failed { error, at_unix_ms }) = mcp.status("missing") else {
            panic!()
        };
        assert_eq!(&error, detail);
        assert!(at_unix_ms > 0);

        let exited = mcp.tools("exits").await;
        let Err(McpServerError::Start { detail, .. }) = &exited else {
            panic!("{exited:?}")
        };
        assert!(
            detail.contains("no config given"),
            "the server's last words: {detail}"
        );
        assert!(
            matches!(mcp.tools("exits").await, Err(McpServerError::Start { .. })),
            "one quick retry"
        );
        let backoff = mcp.tools("exits").await;
        assert!(
            matches!(&backoff, Err(McpServerError::Backoff { failures: 2, .. })),
            "{backoff:?}"
        );
        assert!(backoff.unwrap_err().to_string().contains("no config given"));
        mcp.shutdown().await;
    })
    .await;
}
