//! The one loop that turns a generation's events into a streaming door's messages (OpenAI's
//! SSE chunks, Ollama's NDJSON lines, the Messages and Responses doors' typed events): one
//! message per token, the closing ones, and how the stream ends. Events already waiting are
//! taken together so that a burst leaves in one write, but a slow burst never holds back what
//! is already generated. Also the non-streaming counterpart, [`collect`], and the SSE doors'
//! response ([`sse`]).

use std::collections::VecDeque;

use axum::response::sse::KeepAlive;
use futures_util::{stream, Stream};
use hearth_engine::{Done, Event, Failure, TokenEvent};
use tokio_util::sync::CancellationToken;

use hearth_route::Generation;

/// Most ready events coalesced into one write.
const MAX_BURST: usize = 64;

/// An SSE answer of `events`, never cached, with a comment line after `keep_alive` of silence
/// (waiting in the queue, a long prefill), so that a proxy with an idle timeout does not cut
/// it (clients skip comments; `--sse-keep-alive`).
pub(crate) fn sse<S>(events: S, keep_alive: std::time::Duration) -> axum::response::Response
where
    S: Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>> + Send + 'static,
{
    sse_keeping(events, KeepAlive::new().interval(keep_alive))
}

/// As [`sse`], with `ping` as the keep-alive message instead of a comment (Anthropic's
/// `ping` event, which its clients expect while they wait).
pub(crate) fn sse_with_ping<S>(
    events: S,
    keep_alive: std::time::Duration,
    ping: axum::response::sse::Event,
) -> axum::response::Response
where
    S: Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>> + Send + 'static,
{
    sse_keeping(events, KeepAlive::new().interval(keep_alive).event(ping))
}

/// A JSON event under its `type` as the SSE event name (`event: message_start`), as the
/// Messages and Responses APIs send them.
pub(crate) fn typed_event(v: serde_json::Value) -> axum::response::sse::Event {
    let name = v
        .get("type")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("message");
    axum::response::sse::Event::default()
        .event(name)
        .data(v.to_string())
}

/// A door's batches as SSE events, each message made one by `to_event`.
pub(crate) fn sse_events<M, S>(
    batches: S,
    to_event: fn(M) -> axum::response::sse::Event,
) -> impl Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>> + Send
where
    M: Send + 'static,
    S: Stream<Item = Vec<M>> + Send + 'static,
{
    use futures_util::StreamExt as _;
    batches.flat_map(move |batch| stream::iter(batch.into_iter().map(move |m| Ok(to_event(m)))))
}

fn sse_keeping<S>(events: S, keep_alive: KeepAlive) -> axum::response::Response
where
    S: Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>> + Send + 'static,
{
    use axum::http::{header, HeaderValue};
    use axum::response::sse::Sse;
    use axum::response::IntoResponse;
    let mut response = Sse::new(events).keep_alive(keep_alive).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// How a stream ended, for its door's last messages.
#[derive(Debug)]
pub(crate) enum End<'a> {
    /// `Done` arrived (its messages came from `on_done`).
    Done,
    Failed(&'a Failure),
    /// The node is shutting down, or the generation's stream closed without an end.
    ShuttingDown,
}

/// The door's messages for `gen`: `first`, then `on_token`'s per token (none, one, or several:
/// an `Option` or a `Vec`), `on_done`'s at the end, and `on_end`'s last of all (exactly once,
/// however the stream ends). Each item is the messages that leave in one write.
pub(crate) fn batches<M, I, T, D, E>(
    gen: Generation,
    shutdown: CancellationToken,
    first: Vec<M>,
    on_token: T,
    on_done: D,
    on_end: E,
) -> impl Stream<Item = Vec<M>> + Send
where
    M: Send + 'static,
    I: IntoIterator<Item = M>,
    T: FnMut(&TokenEvent) -> I + Send + 'static,
    D: FnOnce(&Done) -> Vec<M> + Send + 'static,
    E: FnOnce(End<'_>) -> Vec<M> + Send + 'static,
{
    struct St<M, T, D, E> {
        gen: Generation,
        shutdown: CancellationToken,
        queue: VecDeque<M>,
        on_token: T,
        on_done: Option<D>,
        on_end: Option<E>,
    }
    impl<M, I, T, D, E> St<M, T, D, E>
    where
        I: IntoIterator<Item = M>,
        T: FnMut(&TokenEvent) -> I,
        D: FnOnce(&Done) -> Vec<M>,
        E: FnOnce(End<'_>) -> Vec<M>,
    {
        fn finished(&self) -> bool {
            self.on_end.is_none()
        }

        fn handle(&mut self, event: Option<Event>) {
            match event {
                Some(Event::Token(t)) => {
                    self.queue.extend((self.on_token)(&t));
                }
                // Clients of these doors have no controls; nothing to tell them.
                Some(Event::Restarted | Event::Paused | Event::Resumed | Event::Modified) => {}
                Some(Event::Done(d)) => {
                    if let Some(f) = self.on_done.take() {
                        self.queue.extend(f(&d));
                    }
                    self.end(End::Done);
                }
                Some(Event::Error(f)) => self.end(End::Failed(&f)),
                None => self.end(End::ShuttingDown),
            }
        }

        fn end(&mut self, end: End<'_>) {
            if let Some(f) = self.on_end.take() {
                self.queue.extend(f(end));
            }
        }
    }
    let st = St {
        gen,
        shutdown,
        queue: first.into(),
        on_token,
        on_done: Some(on_done),
        on_end: Some(on_end),
    };
    // Each turn takes every event already waiting, so they leave in one write.
    stream::unfold(st, |mut st| async move {
        while st.queue.is_empty() && !st.finished() {
            let event = tokio::select! {
                e = st.gen.events.recv() => e,
                () = st.shutdown.cancelled() => None,
            };
            st.handle(event);
            for _ in 0..MAX_BURST {
                if st.finished() {
                    break;
                }
                match st.gen.events.try_recv() {
                    Some(e) => st.handle(Some(e)),
                    None => break,
                }
            }
        }
        if st.queue.is_empty() {
            return None;
        }
        let batch: Vec<M> = st.queue.drain(..).collect();
        Some((batch, st))
    })
}

/// Everything a non-streaming response needs.
#[derive(Debug)]
pub(crate) struct Collected {
    pub(crate) text: String,
    /// Every token event, when asked for (log-probabilities, token ids).
    pub(crate) tokens: Vec<TokenEvent>,
    pub(crate) done: Done,
}

/// Wait for the whole answer. Fails with the generation's failure, or `None` when the node is
/// shutting down.
pub(crate) async fn collect(
    gen: &mut Generation,
    shutdown: &CancellationToken,
    keep_tokens: bool,
) -> Result<Collected, Option<Failure>> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    loop {
        let event = tokio::select! {
            e = gen.events.recv() => e,
            () = shutdown.cancelled() => return Err(None),
        };
        match event {
            Some(Event::Token(t)) => {
                text.push_str(&t.text);
                if keep_tokens {
                    tokens.push(t);
                }
            }
            Some(Event::Restarted) => {
                text.clear();
                tokens.clear();
            }
            Some(Event::Paused | Event::Resumed | Event::Modified) => {}
            Some(Event::Done(done)) => return Ok(Collected { text, tokens, done }),
            Some(Event::Error(f)) => return Err(Some(f)),
            None => return Err(None),
        }
    }
}
