//! [`McpServers`]: the configured servers and their lives. A server starts on first need (its
//! tools listed, or a call), stops when idle, disabled, removed or at shutdown, and after it
//! failed is started again on the next need, with backoff once it fails twice in a row.
//!
//! Each server has a slot: its spec, its status, its log and at most one live
//! [`Connection`]. The slot's connection lock is held while a server starts or stops, so two
//! needs at once start one process. A keeper task per live connection stops it when idle (it
//! sleeps until the idle deadline; no polling) and records how it ended.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection::{self, Connection, Ended};
use crate::error::{McpCallError, McpServerError};
use crate::log::ServerLog;
use crate::names::{mcp_tool_name, parse_mcp_tool_name};
use crate::outcome::McpToolOutcome;
use crate::spec::{McpServerSpec, SpecError};

/// How the manager runs its servers.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// A server unused this long is stopped (a call in progress keeps it).
    pub idle_stop: Duration,
    /// Starting, initializing and listing tools must end within this (`npx` may download first).
    pub start_timeout: Duration,
    /// Backoff after repeated failures: the first delay and the cap (`hearth_base::backoff`).
    pub backoff_first: Duration,
    pub backoff_max: Duration,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            idle_stop: Duration::from_secs(10 * 60),
            start_timeout: Duration::from_secs(60),
            backoff_first: Duration::from_secs(2),
            backoff_max: Duration::from_secs(60),
        }
    }
}

/// A server's state as the UI shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum McpServerStatus {
    Stopped,
    Starting,
    Running { tools: usize },
    Failed { error: String, at_unix_ms: u64 },
}

/// A tool of an MCP server, as offered to a model and listed to the user.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    pub server: String,
    /// The server's own name for it.
    pub name: String,
    /// `server__tool`, what a model calls it ([`mcp_tool_name`]).
    pub offered_name: String,
    pub title: Option<String>,
    pub description: String,
    /// The tool's input JSON Schema (an object schema).
    pub input_schema: Value,
    /// Off when the user switched it off: not offered, not callable.
    pub enabled: bool,
}

/// A server's configuration and state together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServerView {
    pub spec: McpServerSpec,
    pub status: McpServerStatus,
}

/// The tools to offer a model: those of every enabled server that could be reached, and why
/// the others could not.
#[derive(Debug, Clone, Default)]
pub struct McpOffer {
    pub tools: Vec<McpTool>,
    pub failed: Vec<McpServerError>,
}

/// The MCP client's servers. Cheap to clone (one shared state); call [`McpServers::shutdown`]
/// before the runtime ends so every process group is stopped in order (dropping the last clone
/// asks them to stop too).
#[derive(Debug, Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: McpSettings,
    slots: Mutex<BTreeMap<String, Arc<Slot>>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

#[derive(Debug)]
struct Slot {
    spec: Mutex<McpServerSpec>,
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
    status: Mutex<McpServerStatus>,
    log: Arc<ServerLog>,
    failures: Mutex<Failures>,
    usage: Mutex<Usage>,
}

/// A connection and whether its end has been counted (by its keeper or by the next need).
#[derive(Debug)]
struct Live {
    conn: Connection,
    accounted: AtomicBool,
}

#[derive(Debug, Default)]
struct Failures {
    in_a_row: u32,
    last_error: String,
    at: Option<Instant>,
}

#[derive(Debug)]
struct Usage {
    in_flight: usize,
    last_used: Instant,
}

/// Marks a connection in use; the idle clock restarts when the last one drops.
#[derive(Debug)]
struct InUse {
    slot: Arc<Slot>,
    live: Arc<Live>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut usage = lock(&self.slot.usage);
        usage.in_flight -= 1;
        usage.last_used = Instant::now();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Slot {
    fn new(spec: McpServerSpec) -> Self {
        Self {
            spec: Mutex::new(spec),
            live: tokio::sync::Mutex::new(None),
            status: Mutex::new(McpServerStatus::Stopped),
            log: Arc::new(ServerLog::default()),
            failures: Mutex::new(Failures::default()),
            usage: Mutex::new(Usage {
                in_flight: 0,
                last_used: Instant::now(),
            }),
        }
    }

    fn spec(&self) -> McpServerSpec {
        lock(&self.spec).clone()
    }

    fn set_status(&self, status: McpServerStatus) {
        *lock(&self.status) = status;
    }

    fn fail(&self, error: String) {
        tracing::warn!(server = %lock(&self.spec).name, "MCP server failed: {error}");
        let mut failures = lock(&self.failures);
        failures.in_a_row += 1;
        failures.last_error = error.clone();
        failures.at = Some(Instant::now());
        self.set_status(McpServerStatus::Failed {
            error,
            at_unix_ms: unix_ms(SystemTime::now()),
        });
    }

    /// Counts how a connection ended, once: a failure unless it was stopped.
    fn account(&self, live: &Live) {
        if live.accounted.swap(true, Ordering::SeqCst) {
            return;
        }
        match live.conn.ended() {
            Some(Ended::Exited(why) | Ended::Protocol(why)) => self.fail(why),
            Some(Ended::Stopped) | None => self.set_status(McpServerStatus::Stopped),
        }
    }

    /// Stops the live connection, if any, and marks the server stopped.
    async fn stop(&self) {
        let mut live = self.live.lock().await;
        if let Some(current) = live.take() {
            current.accounted.store(true, Ordering::SeqCst);
            current.conn.stop().await;
        }
        self.set_status(McpServerStatus::Stopped);
    }
}

impl McpServers {
    /// A manager for `specs` (each checked; names unique). Nothing starts yet.
    pub fn new(specs: Vec<McpServerSpec>, settings: McpSettings) -> Result<Self, SpecError> {
        let mut slots = BTreeMap::new();
        for spec in specs {
            spec.validate()?;
            let name = spec.name.clone();
            if slots
                .insert(name.clone(), Arc::new(Slot::new(spec)))
                .is_some()
            {
                return Err(SpecError::Duplicate(name));
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                slots: Mutex::new(slots),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        })
    }

    fn slot(&self, server: &str) -> Result<Arc<Slot>, McpServerError> {
        lock(&self.inner.slots)
            .get(server)
            .cloned()
            .ok_or_else(|| McpServerError::Unknown(server.to_owned()))
    }

    /// Every server with its status, by name.
    pub fn servers(&self) -> Vec<McpServerView> {
        let slots: Vec<Arc<Slot>> = lock(&self.inner.slots).values().cloned().collect();
        slots
            .iter()
            .map(|slot| McpServerView {
                spec: slot.spec(),
                status: lock(&slot.status).clone(),
            })
            .collect()
    }

    pub fn spec(&self, server: &str) -> Option<McpServerSpec> {
        self.slot(server).ok().map(|s| s.spec())
    }

    pub fn status(&self, server: &str) -> Option<McpServerStatus> {
        self.slot(server).ok().map(|s| lock(&s.status).clone())
    }

    /// The server's recent stderr lines (and the client's notes on it), oldest first.
    pub fn log(&self, server: &str) -> Option<Vec<String>> {
        self.slot(server).ok().map(|s| s.log.lines())
    }

    /// Adds a server, or replaces the one of that name. A running server keeps running unless
    /// its command or URL changed (or it is now disabled); its failure count starts again.
    pub async fn upsert(&self, spec: McpServerSpec) -> Result<(), SpecError> {
        spec.validate()?;
        let existing = {
            let mut slots = lock(&self.inner.slots);
            match slots.get(&spec.name) {
                Some(slot) => Some(slot.clone()),
                None => {
                    slots.insert(spec.name.clone(), Arc::new(Slot::new(spec.clone())));
                    None
                }
            }
        };
        if let Some(slot) = existing {
            let restart = {
                let mut current = lock(&slot.spec);
                let restart = !current.same_server(&spec) || !spec.enabled;
                *current = spec;
                restart
            };
            *lock(&slot.failures) = Failures::default();
            if restart {
                slot.stop().await;
            }
        }
        Ok(())
    }

    /// Removes a server, stopping it first; returns its spec.
    pub async fn remove(&self, server: &str) -> Result<McpServerSpec, McpServerError> {
        let slot = lock(&self.inner.slots)
            .remove(server)
            .ok_or_else(|| McpServerError::Unknown(server.to_owned()))?;
        slot.stop().await;
        Ok(slot.spec())
    }

    /// Switches a server on or off; off stops it.
    pub async fn set_enabled(&self, server: &str, enabled: bool) -> Result<(), McpServerError> {
        let slot = self.slot(server)?;
        lock(&slot.spec).enabled = enabled;
        *lock(&slot.failures) = Failures::default();
        if !enabled {
            slot.stop().await;
        }
        Ok(())
    }

    /// Switches one tool of a server on or off (by the server's own name for it).
    pub fn set_tool_enabled(
        &self,
        server: &str,
        tool: &str,
        enabled: bool,
    ) -> Result<(), McpServerError> {
        let slot = self.slot(server)?;
        let mut spec = lock(&slot.spec);
        if enabled {
            spec.disabled_tools.remove(tool);
        } else {
            spec.disabled_tools.insert(tool.to_owned());
        }
        Ok(())
    }

    /// Stops a server now (it starts again on the next need).
    pub async fn stop(&self, server: &str) -> Result<(), McpServerError> {
        self.slot(server)?.stop().await;
        Ok(())
    }

    /// Stops every server and waits for their processes and tasks; later needs fail.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let slots: Vec<Arc<Slot>> = lock(&self.inner.slots).values().cloned().collect();
        futures_util::future::join_all(slots.iter().map(|s| s.stop())).await;
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// A live connection to the server, started if need be, marked in use.
    async fn ensure(&self, slot: &Arc<Slot>) -> Result<InUse, McpServerError> {
        let spec = slot.spec();
        if self.inner.shutdown.is_cancelled() {
            return Err(McpServerError::ShutDown);
        }
        if !spec.enabled {
            return Err(McpServerError::Disabled(spec.name));
        }
        let mut live = slot.live.lock().await;
        if let Some(current) = live.as_ref() {
            if !current.conn.is_closed() {
                let mut usage = lock(&slot.usage);
                usage.in_flight += 1;
                usage.last_used = Instant::now();
                return Ok(InUse {
                    slot: slot.clone(),
                    live: current.clone(),
                });
            }
            // It ended on its own: make sure it is all gone, and count it.
            let current = live.take().expect("checked above");
            current.conn.stop().await;
            slot.account(&current);
        }
        {
            let failures = lock(&slot.failures);
            if failures.in_a_row >= 2 {
                let delay = hearth_base::backoff::jittered(
                    self.inner.settings.backoff_first,
                    self.inner.settings.backoff_max,
                )
                .nth(failures.in_a_row as usize - 2)
                .unwrap_or(self.inner.settings.backoff_max);
                let since = failures.at.map_or(delay, |at| at.elapsed());
                if since < delay {
                    return Err(McpServerError::Backoff {
                        server: spec.name,
                        failures: failures.in_a_row,
                        last_error: failures.last_error.clone(),
                        retry_in: delay - since,
                    });
                }
            }
        }
        slot.set_status(McpServerStatus::Starting);
        let settings = &self.inner.settings;
        let conn = match connection::connect(
            &spec,
            slot.log.clone(),
            settings.start_timeout,
            &self.inner.tracker,
        )
        .await
        {
            Ok(conn) => conn,
            Err(detail) => {
                slot.fail(detail.clone());
                return Err(McpServerError::Start {
                    server: spec.name,
                    detail,
                });
            }
        };
        tracing::info!(server = %spec.name, tools = conn.tools.len(), "MCP server started");
        slot.set_status(McpServerStatus::Running {
            tools: conn.tools.len(),
        });
        let current = Arc::new(Live {
            conn,
            accounted: AtomicBool::new(false),
        });
        *live = Some(current.clone());
        {
            let mut usage = lock(&slot.usage);
            usage.in_flight += 1;
            usage.last_used = Instant::now();
        }
        self.inner
            .tracker
            .spawn(keep(slot.clone(), current.clone(), settings.idle_stop));
        Ok(InUse {
            slot: slot.clone(),
            live: current,
        })
    }

    /// The server's tools (off ones included, marked), starting it if need be.
    pub async fn tools(&self, server: &str) -> Result<Vec<McpTool>, McpServerError> {
        let slot = self.slot(server)?;
        let in_use = self.ensure(&slot).await?;
        let spec = slot.spec();
        Ok(in_use
            .live
            .conn
            .tools
            .iter()
            .map(|tool| McpTool {
                server: spec.name.clone(),
                name: tool.name.to_string(),
                offered_name: mcp_tool_name(&spec.name, &tool.name),
                title: tool.title.clone(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*tool.input_schema).clone()),
                enabled: spec.tool_enabled(&tool.name),
            })
            .collect())
    }

    /// The tools to offer a model: the switched-on tools of every enabled server, the servers
    /// started at once where need be.
    pub async fn offer(&self) -> McpOffer {
        let names: Vec<String> = self
            .servers()
            .into_iter()
            .filter(|s| s.spec.enabled)
            .map(|s| s.spec.name)
            .collect();
        let lists = futures_util::future::join_all(names.iter().map(|n| self.tools(n))).await;
        let mut offer = McpOffer::default();
        for list in lists {
            match list {
                Ok(tools) => offer.tools.extend(tools.into_iter().filter(|t| t.enabled)),
                Err(e) => offer.failed.push(e),
            }
        }
        offer
    }

    /// Calls `tool` (the server's own name for it) with `arguments` (a JSON object, or null for
    /// none). The server's call timeout applies; on it, or on `cancel`, MCP's cancellation is
    /// sent and the call returns; the server keeps running.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<McpToolOutcome, McpCallError> {
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            Value::Bool(_) => return Err(McpCallError::ArgumentsNotAnObject("a boolean")),
            Value::Number(_) => return Err(McpCallError::ArgumentsNotAnObject("a number")),
            Value::String(_) => return Err(McpCallError::ArgumentsNotAnObject("a string")),
            Value::Array(_) => return Err(McpCallError::ArgumentsNotAnObject("an array")),
        };
        let slot = self.slot(server)?;
        let spec = slot.spec();
        if !spec.tool_enabled(tool) {
            return Err(McpCallError::ToolDisabled {
                server: server.into(),
                tool: tool.into(),
            });
        }
        let in_use = self.ensure(&slot).await?;
        if !in_use.live.conn.tools.iter().any(|t| t.name == tool) {
            return Err(McpCallError::UnknownTool {
                server: server.into(),
                tool: tool.into(),
            });
        }
        tracing::debug!(server, tool, "MCP tool call");
        let result = in_use
            .live
            .conn
            .call(server, tool, arguments, spec.call_timeout(), &cancel)
            .await?;
        lock(&slot.failures).in_a_row = 0;
        Ok(McpToolOutcome::from_result(result))
    }

    /// Calls a tool by the name a model was offered (`server__tool`).
    pub async fn call_offered(
        &self,
        offered_name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<McpToolOutcome, McpCallError> {
        let (server, _) = parse_mcp_tool_name(offered_name)
            .ok_or_else(|| McpCallError::BadToolName(offered_name.to_owned()))?;
        let tool = self
            .tools(server)
            .await?
            .into_iter()
            .find(|t| t.offered_name == offered_name)
            .ok_or_else(|| McpCallError::BadToolName(offered_name.to_owned()))?;
        self.call(server, &tool.name, arguments, cancel).await
    }
}

/// Watches one live connection: records its end, or stops it once idle.
async fn keep(slot: Arc<Slot>, live: Arc<Live>, idle: Duration) {
    let mut ended = live.conn.watch_ended();
    loop {
        let deadline = lock(&slot.usage).last_used + idle;
        tokio::select! {
            _ = async { let _ = ended.wait_for(Option::is_some).await; } => {
                slot.account(&live);
                return;
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let mut current = slot.live.lock().await;
                if !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &live)) {
                    return; // replaced or stopped by someone else
                }
                let idle_now = {
                    let usage = lock(&slot.usage);
                    usage.in_flight == 0 && usage.last_used.elapsed() >= idle
                };
                if idle_now {
                    current.take();
                    live.accounted.store(true, Ordering::SeqCst);
                    slot.log.note("idle: stopping");
                    live.conn.stop().await;
                    slot.set_status(McpServerStatus::Stopped);
                    return;
                }
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without shutdown(): ask each actor to stop its process group (it does so if the
        // runtime still runs; if not, dropping the group kills it).
        for slot in lock(&self.slots).values() {
            if let Ok(live) = slot.live.try_lock() {
                if let Some(live) = live.as_ref() {
                    live.conn.request_stop();
                }
            }
        }
    }
}
