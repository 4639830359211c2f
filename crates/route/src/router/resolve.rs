//! Resolving a model name: a model loaded here, one a worker or peer serves, or one in the
//! models folder, which starts loading (waited for a while, then reported as loading).

use std::time::Duration;

use hearth_engine::{ModelState, PromptError, SubmitError};
use hearth_hub::Hub;
use hearth_protocol::ModelId;

use super::Router;
use crate::target::{ResolveError, Target};

impl Router {
    /// What `requested` (None or empty: this node's focus model) means here: a model loaded
    /// here, else one a worker or peer has loaded, else one in the models folder, which starts
    /// loading now. A model that is loading is waited for up to `wait` (zero: not at all),
    /// then reported as loading.
    pub async fn resolve(
        &self,
        requested: Option<&str>,
        wait: Duration,
    ) -> Result<Target, ResolveError> {
        let requested = requested.filter(|m| !m.is_empty());
        let unknown = |m: &str| ResolveError::Unknown {
            requested: m.chars().take(200).collect(),
            served: self.models(),
        };
        let engine = match requested {
            // No name: the focus model; with none here, the first one a peer or worker serves,
            // as a client of this node would expect.
            None => match self.host.engine() {
                Some(engine) => engine,
                None => {
                    if let Some(model) = self
                        .hub
                        .as_ref()
                        .and_then(|h| h.models().into_iter().next())
                    {
                        return Ok(Target { model, local: None });
                    }
                    return Err(self
                        .host
                        .ready()
                        .await
                        .err()
                        .unwrap_or(SubmitError::NoModel)
                        .into());
                }
            },
            Some(m) => {
                let here = self.host.models_here().into_iter().find(|id| id.matches(m));
                let healthy = here
                    .as_ref()
                    .and_then(|id| self.host.engine_of(id))
                    .filter(|e| !matches!(*e.model_state().borrow(), ModelState::Failed { .. }));
                match healthy {
                    Some(engine) => engine,
                    None => {
                        if let Some(model) = self.hub.as_ref().and_then(|h| h.serves(m)) {
                            return Ok(Target { model, local: None });
                        }
                        // A split model's file may be outside the folder (`--model PATH`).
                        match self.registry.find(m).or_else(|| self.host.split_file(m)) {
                            Some((id, path)) => {
                                if let Some(model) = self.split(m, &id, &path, wait).await? {
                                    return Ok(Target { model, local: None });
                                }
                                self.host.ensure(&id, path)?
                            }
                            None => match here.and_then(|id| self.host.engine_of(&id)) {
                                Some(failed) => failed,
                                None => return Err(unknown(m)),
                            },
                        }
                    }
                }
            }
        };
        let ready = tokio::select! {
            r = tokio::time::timeout(wait, engine.ready()) => r,
            () = self.shutdown.cancelled() => return Err(SubmitError::ShuttingDown.into()),
        };
        match ready {
            Ok(r) => {
                let target = Target::local(r?);
                self.host.touch(&target.model);
                Ok(target)
            }
            Err(_) => Err(loading(&engine).into()),
        }
    }

    /// Whether some place serving `target` says its copy sees images: this node's, or a hub
    /// worker's or LAN peer's (Hearth's say so; those that do not cannot take images at all).
    pub fn sees_images(&self, target: &Target) -> bool {
        let serves_here = self.hub.as_ref().is_none_or(Hub::serves_locally);
        (serves_here && target.local.as_ref().is_some_and(|i| i.vision))
            || self
                .hub
                .as_ref()
                .is_some_and(|h| h.candidates(&target.model).iter().any(|c| c.vision))
    }

    /// Whether `target` can be sent images, where that is sure before any is read: refused
    /// (the engine's own "cannot see images") when this node alone serves the model (no hub
    /// worker or peer has it) and its copy here has no projector that reads them. Unsure
    /// (another place may see them) is `Ok`: the route decides where they go.
    pub fn refuses_images(&self, target: &Target) -> Result<(), SubmitError> {
        let Some(info) = target.local.as_ref().filter(|i| !i.vision) else {
            return Ok(());
        };
        if let Some(hub) = &self.hub {
            if !hub.serves_locally() || !hub.candidates(&target.model).is_empty() {
                return Ok(());
            }
        }
        Err(PromptError::NoVision {
            model: info.id.clone(),
            why: info.projector_refused.clone(),
        }
        .into())
    }
}

/// The engine's "still loading" for a model.
fn loading(engine: &hearth_engine::Engine) -> SubmitError {
    match engine.model_state().borrow().clone() {
        ModelState::Loading {
            model, progress, ..
        } => SubmitError::ModelLoading {
            model,
            percent: (progress * 100.0).floor().clamp(0.0, 99.0) as u8,
        },
        _ => SubmitError::ModelLoading {
            model: ModelId::default(),
            percent: 0,
        },
    }
}
