//! The batch WebSocket door, `/ws` and `/api/ws` (`protocols/batch-ws.md`): each message is a
//! batch of prompts run concurrently in the engine's slots, answered with JSON arrays of events;
//! several batches share one socket, and unfinished batches continue by their ids (see below).
//!
//! Wire types, validation and the protocol decisions are in `hearth_protocol::batch`. Here:
//! one task per batch (one writer per socket, fed through a bounded channel, so a slow client
//! holds back only its own generations), prompts the engine cannot admit yet wait in the batch
//! and are submitted as places free, and the [`ContinuationCache`]: when a batch ends with a
//! prompt that did not reach end-of-sequence, every prompt's token ids (prompt + generated) and
//! text are kept under the batch's ordered request ids, and a later message with the same ids
//! submits them as `Prompt::Tokens`: the engine keeps the KV cache of a slot whose last tenant
//! shares that prefix (so a continuation in a slot not yet reused prefills almost nothing) and
//! prefills the rest. The cache is the node's, shared by all sockets,
//! bounded in entries and bytes, and entries expire an hour after they were stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use hearth_engine::{Event, Events, ModelInfo, Prompt, Request, SubmitError};
use hearth_protocol::batch::{
    self as bw, BatchDefaults, BatchEvent, BatchRequest, EntryError, PromptEntry,
};
use hearth_protocol::limits::{MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use hearth_protocol::{FinishReason, ModelId, SamplingParams};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::ws::{classify, Incoming, BAD_UTF8_REASON, CLOSE_BAD_UTF8};
use super::AppState;

/// Batches running at once on one socket; more get a whole-message error.
const MAX_BATCHES_PER_SOCKET: usize = 16;
/// Messages buffered for a slow client before its batches wait for it.
const OUTBOX: usize = 64;
/// Engine events buffered per batch before its generations wait.
const BATCH_EVENTS: usize = 256;
/// Most engine events taken before a batch writes what it has.
const MAX_BURST: usize = 256;
/// Longest pause between attempts to submit prompts to a full engine.
const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(2);
/// How long prompts wait for a full engine before they fail.
const MAX_QUEUE_WAIT: Duration = Duration::from_secs(300);
/// How long a closing node waits for batches to send their final events.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// WebSocket close codes (RFC 6455).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_TOO_BIG: u16 = 1009;
/// Continuation cache bounds: entries, age, and bytes held (token ids + text).
const CACHE_CAPACITY: usize = 256;
const CACHE_TTL: Duration = Duration::from_secs(60 * 60);
const CACHE_MAX_BYTES: usize = 256 << 20;

/// What the batch door keeps between messages and sockets.
#[derive(Debug)]
pub struct BatchDoor {
    /// `generation_config` values for keys a message leaves out.
    defaults: BatchDefaults,
    cache: ContinuationCache,
}

impl Default for BatchDoor {
    fn default() -> Self {
        Self::new(BatchDefaults::default())
    }
}

impl BatchDoor {
    pub(crate) fn new(defaults: BatchDefaults) -> Self {
        Self {
            defaults,
            cache: ContinuationCache::new(CACHE_CAPACITY, CACHE_TTL, CACHE_MAX_BYTES),
        }
    }
}

pub(crate) async fn upgrade(State(state): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(WS_READ_LIMIT_BYTES)
        .max_frame_size(WS_READ_LIMIT_BYTES)
        .on_upgrade(move |socket| connection(state, socket))
}

/// One socket: read messages and start a batch task for each; write what the batches send.
async fn connection(state: Arc<AppState>, mut socket: WebSocket) {
    let (tx, mut outbox) = mpsc::channel::<String>(OUTBOX);
    // Dropped when the node shuts down: once every batch has dropped its sender too, the
    // outbox ends and the socket is closed.
    let mut tx = Some(tx);
    let mut batches: JoinSet<()> = JoinSet::new();
    let shutdown = state.shutdown.clone();
    let mut grace_end: Option<tokio::time::Instant> = None;
    loop {
        let accepting = tx.is_some();
        tokio::select! {
            msg = socket.recv(), if accepting => match classify(msg) {
                Incoming::Text(text) => {
                    let reply = match bw::parse_message(text.as_str()) {
                        Err(e) => Some(bw::message_error(&e.0)),
                        Ok(_) if batches.len() >= MAX_BATCHES_PER_SOCKET => {
                            Some(bw::message_error(&format!(
                                "{MAX_BATCHES_PER_SOCKET} batches are already running on this \
                                 connection; wait for one to finish"
                            )))
                        }
                        Ok(request) => {
                            if let Some(tx) = tx.as_ref() {
                                batches.spawn(run_batch(state.clone(), request, tx.clone()));
                            }
                            None
                        }
                    };
                    if let Some(reply) = reply {
                        if !send_text(&mut socket, reply).await {
                            return;
                        }
                    }
                }
                Incoming::Binary => {
                    let reply = bw::message_error(
                        "binary messages are not supported; send the batch as a JSON text message",
                    );
                    if !send_text(&mut socket, reply).await {
                        return;
                    }
                }
                Incoming::TooBig => {
                    too_big(&mut socket).await;
                    return;
                }
                Incoming::BadUtf8 => {
                    close(&mut socket, CLOSE_BAD_UTF8, BAD_UTF8_REASON).await;
                    return;
                }
                Incoming::Closed => return,
                Incoming::Control => {}
            },
            out = outbox.recv() => match out {
                Some(text) => {
                    if !send_text(&mut socket, text).await {
                        return;
                    }
                }
                // Shutting down, and every batch has sent its last events.
                None => break,
            },
            Some(joined) = batches.join_next(), if !batches.is_empty() => {
                if let Err(e) = joined {
                    if e.is_panic() {
                        tracing::error!(error = %e, "a batch task panicked");
                    }
                }
            }
            () = shutdown.cancelled(), if accepting => {
                // Batches see the same token and end their prompts with ERROR events.
                tx = None;
                grace_end = Some(tokio::time::Instant::now() + SHUTDOWN_GRACE);
            }
            () = tokio::time::sleep_until(grace_end.unwrap_or_else(tokio::time::Instant::now)),
                if grace_end.is_some() => break,
        }
    }
    close(&mut socket, CLOSE_GOING_AWAY, "server shutting down").await;
    // Dropping `batches` aborts what is left; dropped event streams cancel their generations.
}

async fn send_text(socket: &mut WebSocket, text: String) -> bool {
    socket
        .send(Message::Text(Utf8Bytes::from(text)))
        .await
        .is_ok()
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from(reason.to_owned()),
        })))
        .await;
}

/// An over-limit message: the error in this protocol's shape, then close 1009.
async fn too_big(socket: &mut WebSocket) {
    let reply = bw::message_error(&format!(
        "message larger than the {} MiB limit",
        MAX_WS_MESSAGE_BYTES >> 20
    ));
    if send_text(socket, reply).await {
        close(socket, CLOSE_TOO_BIG, "message too big").await;
    }
}

/// Where a prompt of a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Valid, waiting for the engine to admit it.
    Waiting,
    /// In the engine.
    Running,
    /// COMPLETE sent.
    Finished { eos: bool },
    /// ERROR sent (or it was never valid).
    Failed,
}

/// One prompt of a batch.
#[derive(Debug)]
struct Item {
    /// `None` only for an entry without a usable id (it fails at once).
    request_id: Option<String>,
    phase: Phase,
    /// What the engine has seen for this prompt: the prompt's tokens, then each sampled token.
    tokens: Vec<u32>,
    /// The prompt as the client sees it: the original prompt, plus the text of earlier
    /// continuations.
    prefix: String,
    /// Text generated by this message.
    text: String,
    initialized: bool,
    /// The saved state this prompt continues from; kept in the cache if this run fails.
    resumed: Option<Saved>,
    /// PROGRESS events of this prompt in the events being gathered.
    progress_layer: usize,
}

impl Item {
    fn new(request_id: Option<String>, phase: Phase) -> Self {
        Self {
            request_id,
            phase,
            tokens: Vec::new(),
            prefix: String::new(),
            text: String::new(),
            initialized: false,
            resumed: None,
            progress_layer: 0,
        }
    }

    fn id(&self) -> String {
        self.request_id.clone().unwrap_or_default()
    }

    fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Waiting | Phase::Running)
    }
}

/// Events gathered since the last write, by type; each list becomes one array, in prompt
/// order. PROGRESS is layered: layer k holds each prompt's k-th token since the last write,
/// so no array carries two events of one prompt.
#[derive(Debug, Default)]
struct Gathered {
    started: Vec<(usize, BatchEvent)>,
    initialized: Vec<(usize, BatchEvent)>,
    progress: Vec<Vec<(usize, BatchEvent)>>,
    complete: Vec<(usize, BatchEvent)>,
    errors: Vec<(usize, BatchEvent)>,
}

impl Gathered {
    /// The arrays to send, in lifecycle order (each prompt's events stay in order).
    fn into_arrays(self) -> Vec<Vec<BatchEvent>> {
        let mut lists = vec![self.started, self.initialized];
        lists.extend(self.progress);
        lists.push(self.complete);
        lists.push(self.errors);
        lists
            .into_iter()
            .filter(|l| !l.is_empty())
            .map(|mut l| {
                l.sort_by_key(|(i, _)| *i);
                l.into_iter().map(|(_, e)| e).collect()
            })
            .collect()
    }
}

/// Engine events of a batch's prompts, by prompt index; `None` when a stream ended without
/// `Done` or `Error`.
type Tagged = (usize, Option<Event>);

struct Batch {
    state: Arc<AppState>,
    out: mpsc::Sender<String>,
    /// The client is still listening.
    open: bool,
    model: ModelId,
    key: Option<Vec<String>>,
    items: Vec<Item>,
    only_new_tokens: bool,
    stream: bool,
    params: SamplingParams,
    gathered: Gathered,
    events_tx: mpsc::Sender<Tagged>,
    events_rx: mpsc::Receiver<Tagged>,
    /// One task per running prompt, moving its engine events into `events_tx`. Dropped with
    /// the batch, which drops the event streams and so cancels the generations.
    forwarders: JoinSet<()>,
    /// When to try the engine again after it was full.
    retry_at: Option<tokio::time::Instant>,
    /// Since when the engine has refused this batch's next prompt.
    full_since: Option<Instant>,
    /// One of this batch's prompts ended since the last submission attempt.
    freed: bool,
}

/// Run one message's batch to its end.
async fn run_batch(state: Arc<AppState>, request: BatchRequest, out: mpsc::Sender<String>) {
    let shutdown = state.shutdown.clone();
    let ready = tokio::select! {
        r = state.host.ready() => r,
        () = shutdown.cancelled() => Err(SubmitError::ShuttingDown),
    };
    let info = match ready {
        Ok(info) => info,
        Err(e) => {
            // Nothing can run: every entry ends now.
            let reason = e.to_string();
            let events: Vec<BatchEvent> = request
                .entries
                .iter()
                .map(|entry| match entry {
                    Ok(p) => BatchEvent::Error {
                        request_id: Some(p.request_id.clone()),
                        error: reason.clone(),
                    },
                    Err(e) => BatchEvent::Error {
                        request_id: e.request_id.clone(),
                        error: e.message.clone(),
                    },
                })
                .collect();
            let _ = out.send(bw::to_json(&events)).await;
            return;
        }
    };
    let batch = Batch::prepare(state, &info, request, out);
    batch.run().await;
}

impl Batch {
    /// Validate every entry against the loaded model and the continuation cache.
    fn prepare(
        state: Arc<AppState>,
        info: &ModelInfo,
        request: BatchRequest,
        out: mpsc::Sender<String>,
    ) -> Self {
        let ctx = info.ctx_per_slot;
        let key = request.cache_key();
        let (events_tx, events_rx) = mpsc::channel(BATCH_EVENTS);
        let (only_new_tokens, stream, params) = match &request.options {
            Ok(o) => (
                o.only_new_tokens(),
                o.stream_response(),
                o.generation_config()
                    .validate(&state.batch.defaults, Some(ctx))
                    .map_err(|e| format!("generation_config.{}: {}", e.param, e.message)),
            ),
            Err(e) => (true, true, Err(e.clone())),
        };
        let saved = match (&key, &params) {
            (Some(k), Ok(_)) => state.batch.cache.get(k, &info.id, Instant::now()),
            _ => None,
        };
        let mut batch = Self {
            out,
            open: true,
            model: info.id.clone(),
            key,
            items: Vec::with_capacity(request.entries.len()),
            only_new_tokens,
            stream,
            params: params.clone().unwrap_or_default(),
            gathered: Gathered::default(),
            events_tx,
            events_rx,
            forwarders: JoinSet::new(),
            retry_at: None,
            full_since: None,
            freed: false,
            state,
        };
        for (index, entry) in request.entries.into_iter().enumerate() {
            let item = match (entry, &params) {
                (
                    Err(EntryError {
                        request_id,
                        message,
                    }),
                    _,
                ) => Err((request_id, message)),
                (Ok(entry), Err(message)) => Err((Some(entry.request_id), message.clone())),
                (Ok(entry), Ok(_)) => {
                    let resume = saved.as_ref().and_then(|s| s.get(&entry.request_id));
                    prepare_entry(index, entry, resume, info)
                }
            };
            match item {
                Ok(item) => batch.items.push(item),
                Err((request_id, message)) => batch.fail_new(request_id, message),
            }
        }
        batch
    }

    /// Record an entry that fails before it is accepted.
    fn fail_new(&mut self, request_id: Option<String>, message: String) {
        let index = self.items.len();
        self.gathered.errors.push((
            index,
            BatchEvent::Error {
                request_id: request_id.clone(),
                error: message,
            },
        ));
        self.items.push(Item::new(request_id, Phase::Failed));
    }

    async fn run(mut self) {
        // ACCEPTED first, for every prompt that passed validation.
        let accepted: Vec<BatchEvent> = self
            .items
            .iter()
            .filter(|i| i.phase != Phase::Failed)
            .map(|i| BatchEvent::Accepted { request_id: i.id() })
            .collect();
        self.send(accepted).await;
        // Prompts that already reached end-of-sequence in an earlier message end at once.
        for (index, item) in self.items.iter().enumerate() {
            if let Phase::Finished { eos } = item.phase {
                let request_id = item.id();
                self.gathered.started.push((
                    index,
                    BatchEvent::Started {
                        request_id: request_id.clone(),
                    },
                ));
                let shown = if self.only_new_tokens {
                    String::new()
                } else {
                    item.prefix.clone()
                };
                if self.stream {
                    self.gathered.initialized.push((
                        index,
                        BatchEvent::Initialized {
                            request_id: request_id.clone(),
                            text: shown.clone(),
                        },
                    ));
                }
                self.gathered.complete.push((
                    index,
                    BatchEvent::Complete {
                        request_id,
                        text: shown,
                        is_eos: eos,
                        new_tokens_count: 0,
                        execution_time: 0.0,
                    },
                ));
            }
        }
        self.submit_waiting();
        self.flush().await;

        let shutdown = self.state.shutdown.clone();
        while self.open && self.items.iter().any(Item::is_open) {
            let retry = self.retry_at;
            tokio::select! {
                tagged = self.events_rx.recv() => {
                    // The batch holds a sender, so the channel never ends while it runs.
                    let Some((index, event)) = tagged else { break };
                    self.on_event(index, event);
                    for _ in 0..MAX_BURST {
                        match self.events_rx.try_recv() {
                            Ok((index, event)) => self.on_event(index, event),
                            Err(_) => break,
                        }
                    }
                    if self.freed {
                        self.submit_waiting();
                    }
                    self.flush().await;
                }
                () = tokio::time::sleep_until(retry.unwrap_or_else(tokio::time::Instant::now)),
                    if retry.is_some() =>
                {
                    self.retry_at = None;
                    self.submit_waiting();
                    self.flush().await;
                }
                () = shutdown.cancelled() => {
                    self.fail_open("the server is shutting down");
                    self.flush().await;
                    return;
                }
            }
        }
        self.save();
    }

    /// Submit waiting prompts in order until the engine is full.
    fn submit_waiting(&mut self) {
        self.freed = false;
        for index in 0..self.items.len() {
            if self.items[index].phase != Phase::Waiting {
                continue;
            }
            let request = Request {
                prompt: Prompt::Tokens(self.items[index].tokens.clone()),
                params: self.params.clone(),
            };
            match self.state.host.submit(request) {
                Ok(generation) => {
                    let item = &mut self.items[index];
                    item.phase = Phase::Running;
                    self.full_since = None;
                    self.gathered.started.push((
                        index,
                        BatchEvent::Started {
                            request_id: item.id(),
                        },
                    ));
                    self.forwarders.spawn(forward(
                        index,
                        generation.events,
                        self.events_tx.clone(),
                    ));
                }
                Err(e) => {
                    if let SubmitError::QueueFull { retry_after, .. } = &e {
                        let now = Instant::now();
                        let since = *self.full_since.get_or_insert(now);
                        if now.duration_since(since) < MAX_QUEUE_WAIT {
                            // Try again when one of ours ends, or after a pause.
                            self.retry_at = Some(
                                tokio::time::Instant::now()
                                    + (*retry_after).min(MAX_RETRY_INTERVAL),
                            );
                            return;
                        }
                        let message = format!(
                            "{e}; gave up after waiting {} s for room in the engine",
                            MAX_QUEUE_WAIT.as_secs()
                        );
                        for i in index..self.items.len() {
                            if self.items[i].phase == Phase::Waiting {
                                self.fail(i, message.clone());
                            }
                        }
                        return;
                    }
                    self.fail(index, e.to_string());
                }
            }
        }
    }

    fn fail(&mut self, index: usize, message: String) {
        let item = &mut self.items[index];
        item.phase = Phase::Failed;
        self.freed = true;
        self.gathered.errors.push((
            index,
            BatchEvent::Error {
                request_id: item.request_id.clone(),
                error: message,
            },
        ));
    }

    /// End every prompt still waiting or running with an ERROR.
    fn fail_open(&mut self, message: &str) {
        for index in 0..self.items.len() {
            if self.items[index].is_open() {
                self.fail(index, message.to_owned());
            }
        }
    }

    /// Translate one engine event of prompt `index` into gathered batch events.
    fn on_event(&mut self, index: usize, event: Option<Event>) {
        let stream = self.stream;
        let only_new_tokens = self.only_new_tokens;
        let Some(item) = self.items.get_mut(index) else {
            return;
        };
        if item.phase != Phase::Running {
            return;
        }
        let initialize = |item: &mut Item, gathered: &mut Gathered| {
            if !item.initialized {
                item.initialized = true;
                if stream {
                    gathered.initialized.push((
                        index,
                        BatchEvent::Initialized {
                            request_id: item.id(),
                            text: if only_new_tokens {
                                String::new()
                            } else {
                                item.prefix.clone()
                            },
                        },
                    ));
                }
            }
        };
        match event {
            Some(Event::Token(t)) => {
                initialize(&mut *item, &mut self.gathered);
                if let Some(id) = t.id.and_then(|id| u32::try_from(id).ok()) {
                    item.tokens.push(id);
                }
                if !t.text.is_empty() {
                    item.text.push_str(&t.text);
                    if stream {
                        let layer = item.progress_layer;
                        item.progress_layer += 1;
                        if self.gathered.progress.len() <= layer {
                            self.gathered.progress.resize_with(layer + 1, Vec::new);
                        }
                        self.gathered.progress[layer].push((
                            index,
                            BatchEvent::Progress {
                                request_id: item.id(),
                                text: t.text,
                            },
                        ));
                    }
                }
            }
            Some(Event::Done(done)) => {
                initialize(&mut *item, &mut self.gathered);
                let eos = done.reason == FinishReason::Stop;
                item.phase = Phase::Finished { eos };
                self.freed = true;
                let text = if only_new_tokens {
                    item.text.clone()
                } else {
                    format!("{}{}", item.prefix, item.text)
                };
                self.gathered.complete.push((
                    index,
                    BatchEvent::Complete {
                        request_id: item.id(),
                        text,
                        is_eos: eos,
                        new_tokens_count: done.usage.completion_tokens,
                        execution_time: seconds(done.timing.total),
                    },
                ));
            }
            Some(Event::Error(failure)) => self.fail(index, failure.message),
            None => self.fail(index, "the engine stopped unexpectedly".to_owned()),
            // This door sends no controls, so pause, resume, modify and restart never come.
            Some(_) => {}
        }
    }

    /// Write everything gathered, one array per event type.
    async fn flush(&mut self) {
        for item in &mut self.items {
            item.progress_layer = 0;
        }
        let arrays = std::mem::take(&mut self.gathered).into_arrays();
        for events in arrays {
            self.send(events).await;
        }
    }

    async fn send(&mut self, events: Vec<BatchEvent>) {
        if events.is_empty() || !self.open {
            return;
        }
        if self.out.send(bw::to_json(&events)).await.is_err() {
            self.open = false;
        }
    }

    /// Keep the batch for continuation if a prompt stopped before end-of-sequence; else
    /// forget it (a later message with the same ids starts afresh).
    fn save(&self) {
        let Some(key) = self.key.clone() else {
            return;
        };
        let mut prompts = HashMap::new();
        let mut unfinished = false;
        for item in &self.items {
            let Some(id) = &item.request_id else {
                continue;
            };
            let saved = match item.phase {
                Phase::Finished { eos } => Saved {
                    tokens: item.tokens.clone(),
                    text: format!("{}{}", item.prefix, item.text),
                    eos,
                },
                _ => match &item.resumed {
                    Some(s) => s.clone(),
                    None => continue,
                },
            };
            unfinished |= !saved.eos;
            prompts.insert(id.clone(), saved);
        }
        let cache = &self.state.batch.cache;
        if unfinished {
            cache.put(key, self.model.clone(), prompts, Instant::now());
        } else {
            cache.remove(&key);
        }
    }
}

/// Turn one valid entry into a prompt ready to submit: tokenized (or restored from the
/// cache) and checked against the context. `Err` carries the ERROR to send.
fn prepare_entry(
    index: usize,
    entry: PromptEntry,
    resume: Option<&Saved>,
    info: &ModelInfo,
) -> Result<Item, (Option<String>, String)> {
    let ctx = info.ctx_per_slot;
    let PromptEntry { request_id, prompt } = entry;
    if let Some(saved) = resume {
        if saved.eos {
            let mut item = Item::new(Some(request_id), Phase::Finished { eos: true });
            item.tokens = saved.tokens.clone();
            item.prefix = saved.text.clone();
            item.resumed = Some(saved.clone());
            return Ok(item);
        }
        if saved.tokens.len() >= ctx as usize {
            return Err((
                Some(request_id),
                format!(
                    "this generation has reached the end of the model's context ({ctx} tokens) \
                     and cannot continue"
                ),
            ));
        }
        let mut item = Item::new(Some(request_id), Phase::Waiting);
        item.tokens = saved.tokens.clone();
        item.prefix = saved.text.clone();
        item.resumed = Some(saved.clone());
        return Ok(item);
    }
    let prompt = match prompt {
        Some(p) if !p.is_empty() => p,
        Some(_) => return Err((Some(request_id), "the prompt is empty".to_owned())),
        None => {
            return Err((
                Some(request_id),
                format!(
                    "prompts[{index}].prompt is required (no unfinished generation is cached \
                     for these request ids)"
                ),
            ))
        }
    };
    let tokens = info.tokenize(&prompt);
    if tokens.is_empty() {
        return Err((Some(request_id), "the prompt is empty".to_owned()));
    }
    if tokens.len() >= ctx as usize {
        let e = SubmitError::ContextLengthExceeded {
            prompt_tokens: tokens.len(),
            context: ctx,
        };
        return Err((Some(request_id), e.to_string()));
    }
    let mut item = Item::new(Some(request_id), Phase::Waiting);
    item.tokens = tokens;
    item.prefix = prompt;
    Ok(item)
}

/// Move one generation's events into its batch's channel, tagged with the prompt's index.
async fn forward(index: usize, mut events: Events, tx: mpsc::Sender<Tagged>) {
    loop {
        let event = events.recv().await;
        let last = matches!(event, None | Some(Event::Done(_) | Event::Error(_)));
        if tx.send((index, event)).await.is_err() || last {
            return;
        }
    }
}

fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Where one prompt's generation stopped.
#[derive(Debug, Clone, PartialEq)]
struct Saved {
    /// The prompt's tokens and every token generated for it so far, as the engine saw them.
    tokens: Vec<u32>,
    /// The original prompt followed by all text generated so far.
    text: String,
    /// It ended at end-of-sequence: there is nothing to continue.
    eos: bool,
}

impl Saved {
    fn bytes(&self) -> usize {
        self.tokens.len() * std::mem::size_of::<u32>() + self.text.len()
    }
}

#[derive(Debug)]
struct CacheEntry {
    /// Token ids only mean something to the model that made them.
    model: ModelId,
    prompts: HashMap<String, Saved>,
    stored: Instant,
    bytes: usize,
}

/// Unfinished batches by their ordered request ids (a `Vec`, so no joining can make two
/// different id lists collide). Bounded in entries and bytes (the oldest go first); entries
/// expire `ttl` after they were stored.
#[derive(Debug)]
struct ContinuationCache {
    entries: Mutex<HashMap<Vec<String>, CacheEntry>>,
    capacity: usize,
    ttl: Duration,
    max_bytes: usize,
}

impl ContinuationCache {
    fn new(capacity: usize, ttl: Duration, max_bytes: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            ttl,
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Vec<String>, CacheEntry>> {
        // The map stays consistent even if a holder panicked: every change is one call.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The saved prompts for `key`, if they were made by `model` and have not expired. The
    /// entry stays (a batch cut short by a disconnect can be continued again).
    fn get(&self, key: &[String], model: &ModelId, now: Instant) -> Option<HashMap<String, Saved>> {
        let mut entries = self.lock();
        let usable = {
            let entry = entries.get(key)?;
            now.saturating_duration_since(entry.stored) < self.ttl && entry.model == *model
        };
        if usable {
            entries.get(key).map(|e| e.prompts.clone())
        } else {
            entries.remove(key);
            None
        }
    }

    /// Store (or replace) `key`, evicting expired entries and then the oldest ones as needed.
    fn put(&self, key: Vec<String>, model: ModelId, prompts: HashMap<String, Saved>, now: Instant) {
        let bytes: usize = prompts.values().map(Saved::bytes).sum::<usize>()
            + key.iter().map(String::len).sum::<usize>();
        let mut entries = self.lock();
        entries.remove(&key);
        if bytes > self.max_bytes {
            return;
        }
        let ttl = self.ttl;
        entries.retain(|_, e| now.saturating_duration_since(e.stored) < ttl);
        let mut total: usize = entries.values().map(|e| e.bytes).sum();
        while !entries.is_empty()
            && (entries.len() >= self.capacity || total + bytes > self.max_bytes)
        {
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| e.stored)
                .map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            if let Some(e) = entries.remove(&oldest) {
                total = total.saturating_sub(e.bytes);
            }
        }
        entries.insert(
            key,
            CacheEntry {
                model,
                prompts,
                stored: now,
                bytes,
            },
        );
    }

    fn remove(&self, key: &[String]) {
        self.lock().remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    fn model(name: &str) -> ModelId {
        ModelId(name.to_owned())
    }

    fn saved(tokens: &[u32], text: &str, eos: bool) -> Saved {
        Saved {
            tokens: tokens.to_vec(),
            text: text.to_owned(),
            eos,
        }
    }

    fn prompts(entries: &[(&str, Saved)]) -> HashMap<String, Saved> {
        entries
            .iter()
            .map(|(id, s)| ((*id).to_owned(), s.clone()))
            .collect()
    }

    fn cache() -> ContinuationCache {
        ContinuationCache::new(3, Duration::from_secs(3600), 1 << 20)
    }

    #[test]
    fn stores_and_returns_by_ordered_ids() {
        let c = cache();
        let t0 = Instant::now();
        let p = prompts(&[
            ("a", saved(&[1, 2, 3], "hi there", false)),
            ("b", saved(&[1, 4], "yo", true)),
        ]);
        c.put(key(&["a", "b"]), model("m"), p.clone(), t0);
        assert_eq!(c.get(&key(&["a", "b"]), &model("m"), t0), Some(p.clone()));
        // Another order is another key.
        assert_eq!(c.get(&key(&["b", "a"]), &model("m"), t0), None);
        // Ids are not joined into one string, so these do not collide.
        assert_eq!(c.get(&key(&["ab"]), &model("m"), t0), None);
        c.put(key(&["a", "bc"]), model("m"), p.clone(), t0);
        assert_eq!(c.get(&key(&["ab", "c"]), &model("m"), t0), None);
        // Reading leaves the entry in place.
        assert_eq!(c.get(&key(&["a", "b"]), &model("m"), t0), Some(p));
    }

    #[test]
    fn another_model_misses_and_drops_the_entry() {
        let c = cache();
        let t0 = Instant::now();
        c.put(
            key(&["a"]),
            model("m1"),
            prompts(&[("a", saved(&[1], "x", false))]),
            t0,
        );
        assert_eq!(c.get(&key(&["a"]), &model("m2"), t0), None);
        assert_eq!(c.len(), 0);
        assert_eq!(c.get(&key(&["a"]), &model("m1"), t0), None);
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let c = cache();
        let t0 = Instant::now();
        c.put(
            key(&["a"]),
            model("m"),
            prompts(&[("a", saved(&[1], "x", false))]),
            t0,
        );
        let almost = t0 + Duration::from_secs(3599);
        assert!(c.get(&key(&["a"]), &model("m"), almost).is_some());
        let later = t0 + Duration::from_secs(3600);
        assert!(c.get(&key(&["a"]), &model("m"), later).is_none());
        assert_eq!(c.len(), 0);
        // Expired entries are also swept when something new is stored.
        c.put(
            key(&["b"]),
            model("m"),
            prompts(&[("b", saved(&[1], "x", false))]),
            t0,
        );
        c.put(
            key(&["c"]),
            model("m"),
            prompts(&[("c", saved(&[1], "x", false))]),
            later + Duration::from_secs(1),
        );
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_oldest_entry_goes_when_full() {
        let c = cache();
        let t0 = Instant::now();
        for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            c.put(
                key(&[id]),
                model("m"),
                prompts(&[(id, saved(&[1], "x", false))]),
                t0 + Duration::from_secs(i as u64),
            );
        }
        let now = t0 + Duration::from_secs(10);
        assert_eq!(c.len(), 3);
        assert!(c.get(&key(&["a"]), &model("m"), now).is_none());
        for id in ["b", "c", "d"] {
            assert!(c.get(&key(&[id]), &model("m"), now).is_some(), "{id}");
        }
        // Replacing an entry does not evict another.
        c.put(
            key(&["c"]),
            model("m"),
            prompts(&[("c", saved(&[1, 2], "xy", false))]),
            now,
        );
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.get(&key(&["c"]), &model("m"), now).unwrap()["c"].tokens,
            vec![1, 2]
        );
    }

    #[test]
    fn the_byte_budget_evicts_and_refuses_oversized_entries() {
        let c = ContinuationCache::new(100, Duration::from_secs(3600), 1000);
        let t0 = Instant::now();
        let big = "x".repeat(600);
        c.put(
            key(&["a"]),
            model("m"),
            prompts(&[("a", saved(&[], &big, false))]),
            t0,
        );
        c.put(
            key(&["b"]),
            model("m"),
            prompts(&[("b", saved(&[], &big, false))]),
            t0 + Duration::from_secs(1),
        );
        assert_eq!(c.len(), 1, "two 600-byte entries do not fit in 1000 bytes");
        assert!(c.get(&key(&["b"]), &model("m"), t0).is_some());
        let huge = "x".repeat(2000);
        c.put(
            key(&["b"]),
            model("m"),
            prompts(&[("b", saved(&[], &huge, false))]),
            t0,
        );
        assert_eq!(
            c.len(),
            0,
            "an entry over the whole budget replaces nothing and is not kept"
        );
    }

    #[test]
    fn remove_forgets_a_key() {
        let c = cache();
        let t0 = Instant::now();
        c.put(
            key(&["a"]),
            model("m"),
            prompts(&[("a", saved(&[1], "x", false))]),
            t0,
        );
        c.remove(&key(&["a"]));
        assert_eq!(c.len(), 0);
        c.remove(&key(&["zzz"]));
    }

    #[test]
    fn gathered_arrays_are_homogeneous_ordered_and_layered() {
        let ev = |ty: &str, id: &str| match ty {
            "S" => BatchEvent::Started {
                request_id: id.into(),
            },
            "P" => BatchEvent::Progress {
                request_id: id.into(),
                text: "t".into(),
            },
            _ => BatchEvent::Complete {
                request_id: id.into(),
                text: String::new(),
                is_eos: true,
                new_tokens_count: 1,
                execution_time: 0.1,
            },
        };
        let g = Gathered {
            started: vec![(1, ev("S", "b")), (0, ev("S", "a"))],
            initialized: Vec::new(),
            progress: vec![
                vec![(1, ev("P", "b")), (0, ev("P", "a"))],
                vec![(1, ev("P", "b"))],
            ],
            complete: vec![(0, ev("C", "a"))],
            errors: Vec::new(),
        };
        let arrays = g.into_arrays();
        let ids: Vec<Vec<&str>> = arrays
            .iter()
            .map(|a| a.iter().map(|e| e.request_id().unwrap()).collect())
            .collect();
        assert_eq!(
            ids,
            vec![vec!["a", "b"], vec!["a", "b"], vec!["b"], vec!["a"]]
        );
        assert!(matches!(arrays[0][0], BatchEvent::Started { .. }));
        assert!(matches!(arrays[3][0], BatchEvent::Complete { .. }));
    }
}
