//! Where a request goes now: this node's engine as a candidate, what a request needs of its
//! place, and [`placement`], which asks the hub's `place` and reserves the worker's slot.

use hearth_hub::place::{self, Ask, Candidate, Choice};
use hearth_hub::{Hub, Reservation, WorkerId};
use hearth_models::ModelHost;
use hearth_protocol::ModelId;

/// Where a request goes now.
#[derive(Debug)]
pub(crate) enum Destination {
    Local,
    Worker(Reservation),
    /// Workers serve the model but none has a free slot.
    Wait,
    Nobody,
}

/// A place that can run requests, as placement names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Local,
    Worker(WorkerId),
}

/// This node's engine as a placement candidate: its real load, throttle, (sensor) thermal
/// level and measured decode speed, which placement compares with the other places'.
fn local_candidate(host: &ModelHost, model: &ModelId) -> Candidate<Provider> {
    let s = host.stats_of(model);
    Candidate {
        id: Provider::Local,
        models: host
            .model_info(model)
            .map(|i| i.id.clone())
            .into_iter()
            .collect(),
        free_slots: s.slots.saturating_sub(s.active + s.queued),
        queue_depth: s.queued,
        throttle: host.throttle(),
        thermal: host.thermal(),
        tokens_per_s: s.decode_tokens_per_s,
        local: true,
        continues: true,
        preferred: false,
        vision: host.model_info(model).is_some_and(|i| i.vision),
    }
}

/// What a request needs of the place it runs at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Needs {
    /// Hearth's extension: a raw prompt, a grammar, tools, text to continue.
    pub(crate) continuation: bool,
    /// Images: a copy of the model that sees them.
    pub(crate) vision: bool,
    /// Audio: this node's copy only. Peers and workers do not say whether theirs hears, and
    /// one older than audio would drop the clips unseen.
    pub(crate) audio: bool,
}

/// Decide where `model` runs now ([`place::place`] over this node's engine, when it may serve,
/// and the hub's workers and LAN peers but those in `avoid`; `preferred` ran the conversation's
/// previous turn) and reserve the worker's slot it picks. Images go where the model is said to
/// see them; when no place says so, where the model is after all: a hub worker (whose
/// protocol does not say) or an older peer may see them, and this node's engine answers that
/// it cannot.
pub(crate) fn placement(
    avoid: &[WorkerId],
    hub: &Hub,
    host: &ModelHost,
    model: &ModelId,
    needs: Needs,
    serve_local: bool,
    preferred: Option<Provider>,
) -> Destination {
    // A worker's slot can be taken between reading the candidates and reserving it: look again.
    for _ in 0..3 {
        let mut candidates: Vec<Candidate<Provider>> = Vec::new();
        if serve_local {
            candidates.push(local_candidate(host, model));
        }
        candidates.extend(
            hub.candidates(model)
                .into_iter()
                .filter(|c| !avoid.contains(&c.id) && !needs.audio)
                .map(|c| {
                    let id = c.id;
                    c.with_id(Provider::Worker(id))
                }),
        );
        for c in &mut candidates {
            c.preferred = preferred == Some(c.id);
        }
        let ask = Ask {
            model,
            needs_continuation: needs.continuation,
            needs_vision: needs.vision,
        };
        let mut choice = place::place(ask, &candidates);
        if choice == Choice::Nobody && ask.needs_vision {
            choice = place::place(
                Ask {
                    needs_vision: false,
                    ..ask
                },
                &candidates,
            );
        }
        match choice {
            Choice::Run(Provider::Local) => return Destination::Local,
            Choice::Run(Provider::Worker(w)) => {
                if let Some(r) = hub.reserve(w) {
                    return Destination::Worker(r);
                }
            }
            Choice::Wait => return Destination::Wait,
            Choice::Nobody => return Destination::Nobody,
        }
    }
    Destination::Wait
}
