//! One live MCP session with one server: started (process or HTTP), initialized and its tools
//! listed; an actor task that owns rmcp's service (and the process group) and says how the
//! session ended; tool calls with a timeout and MCP's cancellation notification.
//!
//! Sessions open with MCP's `initialize` handshake, which every server of 2025-26 speaks; rmcp's
//! `server/discover` lifecycle (the stateless 2026 protocol) is not used yet: its automatic mode
//! waits up to 10 s on a server that ignores the probe.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, JsonObject, ServerResult, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::ServiceExt as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::McpCallError;
use crate::log::ServerLog;
use crate::spec::{McpServerSpec, McpTransport};
use crate::stdio::{self, ChildGroup, StdioCommand};

/// How long a call that lost its connection waits to learn why (the actor reaps the process).
const END_REASON_WAIT: Duration = Duration::from_secs(5);

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Stopped by us (idle, disabled, removed, shutdown).
    Stopped,
    /// The server went away (exited, or its HTTP connection closed).
    Exited(String),
    /// The server broke the protocol (garbage on stdout); the connection was closed.
    Protocol(String),
}

/// A live session: a handle to rmcp's peer, the tools listed at start, and the actor's news.
#[derive(Debug)]
pub(crate) struct Connection {
    peer: Peer<RoleClient>,
    pub(crate) tools: Vec<Tool>,
    ended: watch::Receiver<Option<Ended>>,
    stop: CancellationToken,
}

type Service = RunningService<RoleClient, ClientConfig>;

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("hearth", env!("CARGO_PKG_VERSION")),
    )
}

/// Starts the server, initializes the session and lists its tools, all within `timeout`.
pub(crate) async fn connect(
    spec: &McpServerSpec,
    log: Arc<ServerLog>,
    timeout: Duration,
    tracker: &TaskTracker,
) -> Result<Connection, String> {
    let (service, group) = match &spec.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let cmd = StdioCommand {
                command,
                args,
                env,
                cwd: cwd.as_ref(),
            };
            log.note(&format!("starting {command} {}", args.join(" ")));
            let (group, transport) = stdio::spawn(cmd, log.clone())
                .map_err(|e| format!("cannot run {command:?}: {e}"))?;
            match tokio::time::timeout(timeout, client_config().serve(transport)).await {
                Ok(Ok(service)) => (service, Some(group)),
                Ok(Err(e)) => return Err(start_failure(chain(&e), group, &log).await),
                Err(_) => {
                    let why = format!("no answer to initialize in {} s", timeout.as_secs());
                    return Err(start_failure(why, group, &log).await);
                }
            }
        }
        McpTransport::Http { url, headers } => {
            let transport = crate::http::transport(url, headers)?;
            log.note(&format!("connecting to {url}"));
            match tokio::time::timeout(timeout, client_config().serve(transport)).await {
                Ok(Ok(service)) => (service, None),
                Ok(Err(e)) => return Err(format!("{url}: {}", chain(&e))),
                Err(_) => {
                    return Err(format!(
                        "{url}: no answer to initialize in {} s",
                        timeout.as_secs()
                    ))
                }
            }
        }
    };
    let peer = service.peer().clone();
    let tools = match tokio::time::timeout(timeout, peer.list_all_tools()).await {
        Ok(Ok(tools)) => tools,
        failed => {
            let why = match failed {
                Ok(Err(e)) => format!("tools/list failed: {e}"),
                _ => format!("no answer to tools/list in {} s", timeout.as_secs()),
            };
            let _ = service.cancel().await;
            return Err(match group {
                Some(group) => start_failure(why, group, &log).await,
                None => why,
            });
        }
    };
    let (ended_tx, ended) = watch::channel(None);
    let stop = CancellationToken::new();
    tracker.spawn(actor(service, group, stop.clone(), ended_tx, log));
    Ok(Connection {
        peer,
        tools,
        ended,
        stop,
    })
}

/// An error with its causes ("error sending request: ...: certificate not trusted"), since the
/// outer message alone rarely says what to fix.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Stops what a failed start left and says why it failed, with what the server last said.
async fn start_failure(why: String, group: ChildGroup, log: &ServerLog) -> String {
    let protocol = group.protocol_error();
    let status = group.stop().await;
    let mut message = protocol.unwrap_or(why);
    if let Some(status) = status.filter(|s| !s.success()) {
        message.push_str(&format!(" (the process {status})"));
    }
    if let Some(last) = log.last_said() {
        message.push_str(&format!("; it said: {last}"));
    }
    log.note(&format!("start failed: {message}"));
    message
}

/// Owns the session until it ends (stopped, closed by the server, or the process exited), then
/// stops the process group and publishes how it ended.
async fn actor(
    service: Service,
    mut group: Option<ChildGroup>,
    stop: CancellationToken,
    ended_tx: watch::Sender<Option<Ended>>,
    log: Arc<ServerLog>,
) {
    enum Why {
        Stop,
        Closed,
        Exited(String),
    }
    let service_ct = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let why = {
        let exited = async {
            match group.as_mut() {
                Some(group) => group.exited().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => Why::Stop,
            _ = &mut waiting => Why::Closed,
            status = exited => Why::Exited(match status {
                Ok(status) => status.to_string(),
                Err(e) => e.to_string(),
            }),
        }
    };
    if !matches!(why, Why::Closed) {
        // Ends rmcp's loop: pending calls fail, the transport closes stdin.
        service_ct.cancel();
        let _ = waiting.await;
    }
    let status = match group.take() {
        Some(group) => {
            let protocol = group.protocol_error();
            let status = group.stop().await;
            protocol.map(Err).or(status.map(Ok))
        }
        None => None,
    };
    let exited = |status: String| {
        let mut detail = format!("the process ended ({status})");
        if let Some(last) = log.last_said() {
            detail.push_str(&format!("; it said: {last}"));
        }
        Ended::Exited(detail)
    };
    let ended = match (why, status) {
        (Why::Stop, _) => Ended::Stopped,
        (_, Some(Err(protocol))) => Ended::Protocol(protocol),
        (Why::Exited(status), _) => exited(status),
        (Why::Closed, Some(Ok(status))) => exited(status.to_string()),
        (Why::Closed, None) => Ended::Exited("the connection closed".into()),
    };
    match &ended {
        Ended::Stopped => log.note("stopped"),
        Ended::Exited(why) | Ended::Protocol(why) => log.note(why),
    }
    let _ = ended_tx.send(Some(ended));
}

impl Connection {
    /// Whether the session has ended (or is ending) on its own or by a stop.
    pub(crate) fn is_closed(&self) -> bool {
        self.ended.borrow().is_some() || self.peer.is_transport_closed() || self.stop.is_cancelled()
    }

    /// How the session ended, once it has.
    pub(crate) fn ended(&self) -> Option<Ended> {
        self.ended.borrow().clone()
    }

    /// A receiver of how the session ended (`None` while it lives).
    pub(crate) fn watch_ended(&self) -> watch::Receiver<Option<Ended>> {
        self.ended.clone()
    }

    /// Asks the actor to stop the session, without waiting.
    pub(crate) fn request_stop(&self) {
        self.stop.cancel();
    }

    /// Asks the actor to stop the session and waits until it has (process group included).
    pub(crate) async fn stop(&self) {
        self.stop.cancel();
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(Option::is_some).await;
    }

    /// Calls `tool`; on timeout or `cancel`, sends MCP's `notifications/cancelled` for the
    /// request and returns at once (the server is left running).
    pub(crate) async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: JsonObject,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<rmcp::model::CallToolResult, McpCallError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = match self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(_) => return Err(self.lost(server).await),
        };
        let answer = tokio::select! {
            answer = &mut handle.rx => answer,
            _ = tokio::time::sleep(timeout) => {
                let reason = format!("no answer in {} s", timeout.as_secs_f32());
                let _ = handle.cancel(Some(reason)).await;
                return Err(McpCallError::Timeout { server: server.into(), tool: tool.into(), after: timeout });
            }
            _ = cancel.cancelled() => {
                let _ = handle.cancel(Some("the user stopped the answer".into())).await;
                return Err(McpCallError::Cancelled { server: server.into(), tool: tool.into() });
            }
        };
        match answer {
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
            Ok(Ok(other)) => Err(McpCallError::Protocol {
                server: server.into(),
                detail: format!("answered tools/call with {}", result_kind(&other)),
            }),
            Ok(Err(ServiceError::McpError(e))) => Err(McpCallError::Refused {
                server: server.into(),
                code: e.code.0,
                message: e.message.into_owned(),
            }),
            Ok(Err(ServiceError::TransportClosed)) | Err(_) => Err(self.lost(server).await),
            Ok(Err(e)) => Err(McpCallError::Protocol {
                server: server.into(),
                detail: e.to_string(),
            }),
        }
    }

    /// The error for a call whose session went away under it, once the actor says why.
    async fn lost(&self, server: &str) -> McpCallError {
        let mut ended = self.ended.clone();
        let why = tokio::time::timeout(END_REASON_WAIT, ended.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|e| e.clone()));
        match why {
            Some(Ended::Protocol(detail)) => McpCallError::Protocol {
                server: server.into(),
                detail,
            },
            Some(Ended::Exited(detail)) => McpCallError::ServerExited {
                server: server.into(),
                detail,
            },
            Some(Ended::Stopped) => McpCallError::ServerExited {
                server: server.into(),
                detail: "it was stopped".into(),
            },
            None => McpCallError::ServerExited {
                server: server.into(),
                detail: "the connection closed".into(),
            },
        }
    }
}

fn result_kind(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::InputRequiredResult(_) => "a request for input (not supported yet)",
        ServerResult::CreateTaskResult(_) => "a task (not supported yet)",
        _ => "an unexpected result",
    }
}
