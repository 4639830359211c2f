//! Submitting a generation: run it on this node's engine, or place it on a hub worker or LAN
//! peer under a supervisor, or queue it; and waiting for room instead of refusing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hearth_engine::{Request, SubmitError};
use hearth_protocol::RequestId;

use super::Router;
use crate::generation::Generation;
use crate::placement::{placement, Destination, Needs, Provider};
use crate::supervisor::{self, RemotePrompt};
use crate::target::Target;

impl Router {
    /// Start a generation of `target` wherever it should run. Fails at once like the engine
    /// when this node is full; a remote generation's problems arrive as an `Event::Error` on
    /// its stream.
    pub fn submit(&self, target: &Target, request: Request) -> Result<Generation, SubmitError> {
        let Some(hub) = &self.hub else {
            return self
                .host
                .submit(&target.model, request)
                .map(Generation::local);
        };
        let Some(prompt) = RemotePrompt::of(&request.prompt) else {
            // Token ids mean this node's tokenizer: such requests (continuations) stay here.
            return self
                .host
                .submit(&target.model, request)
                .map(Generation::local);
        };
        let serve_local = target.local.is_some() && hub.serves_locally();
        // Raw text prompts, grammars, tools, `think` and media travel only in Hearth's task
        // extension.
        let need_hearth = prompt
            .hearth_only(request.params.grammar.is_some())
            .is_some();
        // A conversation's next turn prefers the place that ran its last one.
        let conversation = match &prompt {
            RemotePrompt::Chat(c) => Some(c.messages.as_slice()),
            RemotePrompt::Text(_) => None,
        };
        let preferred = conversation.and_then(|m| self.affinity.preferred(request.owner, m));
        let mut placement = placement(
            &[],
            hub,
            &self.host,
            &target.model,
            Needs {
                continuation: need_hearth,
                vision: prompt.has_images(),
                audio: prompt.has_audio(),
            },
            serve_local,
            preferred,
        );
        // Queued here while older requests wait for the first slot anywhere: it waits with
        // them instead of going ahead of them.
        if matches!(placement, Destination::Local) && hub.waiting() > 0 {
            let s = self.host.stats_of(&target.model);
            if s.active + s.queued >= s.slots {
                placement = Destination::Wait;
            }
        }
        if let Some(m) = conversation {
            match &placement {
                Destination::Local => self.affinity.remember(request.owner, m, Provider::Local),
                Destination::Worker(r) => {
                    self.affinity
                        .remember(request.owner, m, Provider::Worker(r.worker))
                }
                Destination::Wait | Destination::Nobody => {}
            }
        }
        match placement {
            Destination::Local => {
                return self
                    .host
                    .submit(&target.model, request)
                    .map(Generation::local)
            }
            Destination::Wait if !hub.queue_has_room() => {
                return Err(SubmitError::QueueFull {
                    slots: hub
                        .snapshot()
                        .workers
                        .iter()
                        .map(|w| w.max_concurrency)
                        .sum(),
                    queued: hearth_hub::QUEUE_CAPACITY,
                    retry_after: Duration::from_secs(1),
                })
            }
            _ => {}
        }
        Ok(supervisor::spawn(supervisor::Start {
            id: RequestId(self.next_id.fetch_add(1, Ordering::Relaxed)),
            hub: hub.clone(),
            host: self.host.clone(),
            model: target.model.clone(),
            prompt,
            params: request.params,
            owner: request.owner,
            serve_local,
            shutdown: self.shutdown.clone(),
            first: placement,
        }))
    }

    /// Like [`Router::submit`], but when this node's engine has no room, wait for it (until
    /// `deadline`) instead of refusing: for protocols whose clients expect their work to queue
    /// (the batch door, whose token-id prompts always run here). One caller's requests,
    /// submitted one after another, keep their order; requests of different callers are not
    /// ordered among themselves.
    pub async fn submit_waiting(
        &self,
        target: &Target,
        request: Request,
        deadline: tokio::time::Instant,
    ) -> Result<Generation, SubmitError> {
        loop {
            // Ask to be woken before trying, so a place freed in between is not missed
            // (without an engine here, the route's own queue was full: look again shortly).
            let engine = self.host.engine_of(&target.model).is_some();
            let room = self.host.room(&target.model);
            let room = async move {
                if engine {
                    room.await;
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            match self.submit(target, request.clone()) {
                Err(SubmitError::QueueFull { .. }) if tokio::time::Instant::now() < deadline => {}
                other => return other,
            }
            tokio::select! {
                () = room => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = self.shutdown.cancelled() => return Err(SubmitError::ShuttingDown),
            }
        }
    }
}
