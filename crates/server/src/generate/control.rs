//! The client's `control` messages (stop, pause, resume, modify, regenerate) on the running
//! generation, acknowledged once the engine applies them, and `feedback`, checked and stored
//! in SQLite against the last request id.

use hearth_protocol::limits::MAX_FEEDBACK_TEXT_BYTES;
use hearth_protocol::streaming::{self as sw, Control, ErrorKind, RecoveryAction};

use super::messages::{error, invalid, status};
use super::Session;
use hearth_store::FeedbackRow;

impl Session {
    pub(super) async fn on_control(&mut self, control: Control) {
        if matches!(control, Control::Stop) && self.waiting.is_some() {
            // Stopped before the model finished loading: nothing was generated.
            self.waiting = None;
            self.follow_focus();
            self.send(&status(
                "stop",
                100,
                "Cancelled before generation started",
                None,
            ))
            .await;
            return;
        }
        let Some(running) = self.running.as_ref() else {
            if matches!(control, Control::Regenerate) {
                if let Some(config) = self.last_config.clone() {
                    self.start(config, false).await;
                    return;
                }
            }
            let hint = if self.last_config.is_none() {
                " (the first message must be a config message)"
            } else {
                ""
            };
            self.send(&invalid(format!(
                "no generation is running on this connection; '{}' needs one{hint}",
                control.name()
            )))
            .await;
            return;
        };
        let ctl = running.control.clone();
        let request_id = running.request_id.clone();
        let result = match &control {
            Control::Stop => ctl.stop(),
            Control::Pause => ctl.pause(),
            Control::Resume => ctl.resume(),
            Control::Regenerate => ctl.regenerate(),
            Control::Modify { parameters } => {
                if let Some(name) = parameters.fixed_at_start() {
                    self.send(&invalid(format!(
                        "parameters.{name} is set when a generation starts and cannot change while it runs; send it in the next config"
                    )))
                    .await;
                    return;
                }
                let ctx = self.state.host.model().map(|m| m.context);
                match parameters.to_raw(None).validate_patch(ctx) {
                    Ok(patch) if patch.is_empty() => {
                        self.send(&invalid("modify needs at least one parameter to change"))
                            .await;
                        return;
                    }
                    Ok(patch) => ctl.modify(patch),
                    Err(e) => {
                        self.send(&invalid(format!("parameters.{}: {}", e.param, e.message)))
                            .await;
                        return;
                    }
                }
            }
        };
        if let Err(e @ hearth_route::ControlError::Unsupported(_)) = result {
            self.send(&invalid(e.to_string())).await;
            return;
        }
        if let Err(e) = result {
            self.send(&error(
                ErrorKind::RateLimited,
                e.to_string(),
                true,
                RecoveryAction::RetryLater,
                Some(request_id),
            ))
            .await;
            return;
        }
        // The acknowledgement is sent when the engine reports the control took effect, so
        // that no token of the old state follows it.
        if let (Control::Modify { parameters }, Some(r)) = (&control, self.running.as_mut()) {
            let mut changed = Vec::new();
            for (name, set) in [
                ("temperature", parameters.temperature.is_some()),
                ("top_p", parameters.top_p.is_some()),
                ("top_k", parameters.top_k.is_some()),
                (
                    "repetition_penalty",
                    parameters.repetition_penalty.is_some(),
                ),
                ("seed", parameters.seed.is_some()),
                ("max_tokens", parameters.max_tokens.is_some()),
                ("stop", parameters.stop.is_some()),
            ] {
                if set {
                    changed.push(name);
                }
            }
            if let Some(m) = parameters.max_tokens {
                r.max_tokens = u32::try_from(m).ok();
            }
            r.modifications.push_back(changed.join(", "));
        }
    }

    pub(super) async fn on_feedback(&mut self, f: sw::Feedback) {
        if !f.rating.is_finite() || !(-1.0..=1.0).contains(&f.rating) {
            self.send(&invalid(format!(
                "rating must be between -1 and 1, got {}",
                f.rating
            )))
            .await;
            return;
        }
        if f.text
            .as_ref()
            .is_some_and(|t| t.len() > MAX_FEEDBACK_TEXT_BYTES)
        {
            self.send(&invalid(format!(
                "feedback text may be at most {MAX_FEEDBACK_TEXT_BYTES} bytes"
            )))
            .await;
            return;
        }
        if f.position.is_some_and(|p| p < 0) {
            self.send(&invalid("position must be >= 0")).await;
            return;
        }
        let Some(request_id) = self.last_request_id.clone() else {
            self.send(&invalid(
                "feedback needs a generation to refer to; send a config first",
            ))
            .await;
            return;
        };
        let row = FeedbackRow {
            request_id: request_id.clone(),
            rating: f.rating,
            text: f.text,
            position: f.position,
        };
        match self.state.store.add_feedback(row).await {
            Ok(()) => {
                self.send(&status(
                    "feedback",
                    100,
                    format!("Feedback recorded for {request_id}"),
                    None,
                ))
                .await
            }
            Err(e) => {
                tracing::error!(error = %e, "storing feedback failed");
                self.send(&error(
                    ErrorKind::InternalError,
                    "feedback could not be stored",
                    true,
                    RecoveryAction::Retry,
                    Some(request_id),
                ))
                .await
            }
        }
    }
}
