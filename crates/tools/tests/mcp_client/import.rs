//! The `mcpServers` JSON of Claude Desktop, LM Studio and Jan: read into specs, with typed
//! errors for bad input, and an imported server really started.

use hearth_tools::{
    import_mcp_servers_json, CancellationToken, EntryProblem, McpImportError, McpTransport,
};
use serde_json::json;

use crate::common::{bounded, everything, servers};

#[test]
fn reads_the_three_apps_formats() {
    let specs = import_mcp_servers_json(
        r#"{
          "mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                           "env": {"DEBUG": "1", "PORT": 8080}},
            "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            "typed": {"type": "streamable-http", "url": "http://127.0.0.1:9000/mcp"},
            "Jan Server": {"command": "uvx", "args": ["mcp-server-fetch"], "active": false, "cwd": "/srv"},
            "off": {"command": "x", "disabled": true}
          },
          "otherSetting": true
        }"#,
    )
    .expect("a valid document");
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["Jan-Server", "filesystem", "off", "remote", "typed"]
    );
    let fs = &specs[1];
    assert!(fs.enabled);
    let McpTransport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &fs.transport
    else {
        panic!("{fs:?}")
    };
    assert_eq!(command, "npx");
    assert_eq!(args.len(), 3);
    assert_eq!(env.get("PORT").map(String::as_str), Some("8080"));
    assert_eq!(cwd, &None);
    let McpTransport::Http { url, headers } = &specs[3].transport else {
        panic!()
    };
    assert_eq!(url, "https://example.com/mcp");
    assert_eq!(headers["Authorization"], "Bearer x");
    assert!(matches!(specs[4].transport, McpTransport::Http { .. }));
    assert!(!specs[0].enabled, "Jan's active: false");
    assert!(!specs[2].enabled, "disabled: true");
}

#[test]
fn bad_input_gets_a_typed_error_that_says_what() {
    let err = |json: &str| import_mcp_servers_json(json).expect_err(json);
    assert!(matches!(err("{not json"), McpImportError::Json(_)));
    assert!(matches!(
        err(r#"{"servers": {}}"#),
        McpImportError::NoMcpServers
    ));
    let sse = err(r#"{"mcpServers": {"old": {"type": "sse", "url": "http://x/sse"}}}"#);
    assert!(
        matches!(&sse, McpImportError::Entry { name, problem: EntryProblem::SseUnsupported } if name == "old"),
        "{sse:?}"
    );
    assert!(sse.to_string().contains("SSE"), "{sse}");
    assert!(matches!(
        err(r#"{"mcpServers": {"a": {"command": "x", "args": "not a list"}}}"#),
        McpImportError::Entry {
            problem: EntryProblem::WrongType { field: "args", .. },
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"mcpServers": {"a": {"args": []}}}"#),
        McpImportError::Entry {
            problem: EntryProblem::NoCommandOrUrl,
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://y"}}}"#),
        McpImportError::Entry {
            problem: EntryProblem::CommandAndUrl,
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"mcpServers": {"a": {"type": "websocket", "url": "ws://y"}}}"#),
        McpImportError::Entry {
            problem: EntryProblem::UnknownType(_),
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"mcpServers": {"a": {"url": "ftp://y"}}}"#),
        McpImportError::Entry {
            problem: EntryProblem::Invalid(_),
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"mcpServers": {"my server": {"command": "x"}, "my-server": {"command": "y"}}}"#),
        McpImportError::Duplicate { .. }
    ));
    assert!(matches!(
        err(r#"{"mcpServers": {"a": []}}"#),
        McpImportError::Entry {
            problem: EntryProblem::NotAnObject,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_server_runs() {
    bounded(async {
        let McpTransport::Stdio { command, args, .. } = everything("x").transport else {
            panic!()
        };
        let document = json!({"mcpServers": {"everything": {"command": command, "args": args}}});
        let specs = import_mcp_servers_json(&document.to_string()).expect("valid");
        let mcp = servers(specs);
        let outcome = mcp
            .call(
                "everything",
                "echo",
                json!({"message": "imported"}),
                CancellationToken::new(),
            )
            .await
            .expect("the imported server answers");
        assert_eq!(outcome.text_for_model(), "Echo: imported");
        mcp.shutdown().await;
    })
    .await;
}
