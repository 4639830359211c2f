//! Starting a generation from a `config` message: resolve the model (waiting while it loads),
//! validate the parameters against its context, submit the request through the route, and
//! answer with `init` before any token.

use std::time::Duration;

use hearth_engine::{ModelInfo, Prompt, Request, SubmitError};
use hearth_protocol::streaming::{self as sw, Config, ServerMessage};
use hearth_protocol::{ChatMessage, SamplingParams};

use super::messages::{invalid, load_failed, status, submit_error};
use super::{Running, Session, Waiting};
use hearth_route::{Generation, ResolveError};

/// Alternatives per token when `include_logprobs` is set and `top_logprobs` is not.
const DEFAULT_TOP_LOGPROBS: i64 = 5;

impl Session {
    /// Validate a config and submit it; on success send `init`. `polled`: it is tried again
    /// after waiting for a model loaded where no state showed its load.
    pub(super) async fn start(&mut self, config: Config, polled: bool) {
        // In hub mode a model that only workers serve is accepted: it runs on a worker, and
        // what this node knows of it is its name.
        let target = match self
            .state
            .router
            .resolve(config.model.as_deref(), Duration::ZERO)
            .await
        {
            Ok(t) => t,
            Err(ResolveError::Engine(SubmitError::ModelLoading { model, percent })) => {
                // Answer once the model is ready; meanwhile `status` messages flow.
                match self.state.host.engine_of(&model) {
                    // Its own state is followed: the focus model's, which the session follows
                    // otherwise, may be another's.
                    Some(engine) => {
                        self.model_state = engine.model_state();
                        self.waiting = Some(Waiting {
                            config,
                            poll_at: None,
                        });
                        self.last_percent = None;
                        self.report_loading().await;
                    }
                    // Loaded where no engine of this node shows it (a split model's worker):
                    // tried again every second, with the route's figure of its progress.
                    None => {
                        let poll_at = Some(tokio::time::Instant::now() + super::POLL_LOAD);
                        self.waiting = Some(Waiting { config, poll_at });
                        let percent = percent.min(99);
                        if self.last_percent != Some(percent) {
                            self.last_percent = Some(percent);
                            let text = format!("Loading model {model}");
                            self.send(&status("model_loading", percent, text, None))
                                .await;
                        }
                    }
                }
                return;
            }
            Err(ResolveError::Engine(SubmitError::LoadFailed { model, message })) => {
                self.send(&load_failed(&model, &message)).await;
                return;
            }
            Err(ResolveError::Engine(e)) => {
                self.send(&submit_error(&e)).await;
                return;
            }
            Err(ResolveError::Unknown { requested, served }) => {
                let served: Vec<String> = served.iter().map(|m| format!("'{m}'")).collect();
                self.send(&invalid(format!(
                    "unknown model '{requested}': this node serves {}",
                    if served.is_empty() {
                        "no model".to_owned()
                    } else {
                        served.join(", ")
                    }
                )))
                .await;
                return;
            }
        };
        // Ready after waiting where no state showed its load (a split model's worker).
        if polled {
            self.last_percent = None;
            let text = format!("Model {} loaded", target.model);
            self.send(&status("model_loading", 100, text, Some(0.0)))
                .await;
        }
        let info = target.local.clone();
        let top_logprobs = config
            .options
            .include_logprobs
            .then(|| config.options.top_logprobs.unwrap_or(DEFAULT_TOP_LOGPROBS));
        let mut params = match config
            .parameters
            .to_raw(top_logprobs)
            .validate(&SamplingParams::default(), info.as_ref().map(|i| i.context))
        {
            Ok(p) => p,
            Err(e) => {
                self.send(&invalid(format!("parameters.{}: {}", e.param, e.message)))
                    .await;
                return;
            }
        };
        // `logprobs` lists the chosen token and then N alternatives other than it: ask the
        // engine for one more than N so there are always N left after removing the chosen one.
        params.top_logprobs = params.top_logprobs.map(|n| n.saturating_add(1));
        let prompt = if config.options.raw {
            Prompt::Text(config.prompt.clone())
        } else {
            Prompt::Chat(vec![ChatMessage::new("user", config.prompt.clone())].into())
        };
        let max_tokens = params.max_tokens;
        let gen = match self.state.router.submit(
            &target,
            Request {
                prompt,
                params,
                owner: self.owner,
            },
        ) {
            Ok(g) => g,
            Err(e) => {
                self.send(&submit_error(&e)).await;
                return;
            }
        };
        self.begin(gen, info.as_deref(), config, max_tokens).await;
    }

    async fn begin(
        &mut self,
        gen: Generation,
        info: Option<&ModelInfo>,
        config: Config,
        max_tokens: Option<u32>,
    ) {
        let request_id = format!("gen_{}", gen.id);
        self.send(&ServerMessage::Init(sw::Init {
            request_id: request_id.clone(),
            model: gen.model.to_string(),
            // A generation on a worker: this node knows its model's name only.
            model_info: info.map(|info| sw::ModelInfo {
                version: info
                    .gguf
                    .name
                    .clone()
                    .unwrap_or_else(|| info.id.to_string()),
                max_tokens: info.context,
                quantization: info
                    .gguf
                    .quantization
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
                architecture: info.gguf.architecture.clone(),
                parameters: info.n_params,
            }),
        }))
        .await;
        let text = if config.options.echo_prompt {
            config.prompt.clone()
        } else {
            String::new()
        };
        self.last_request_id = Some(request_id.clone());
        self.running = Some(Running {
            request_id,
            events: gen.events,
            control: gen.control,
            prefix_len: text.len(),
            text,
            options: config.options.clone(),
            max_tokens,
            tokens: 0,
            modifications: std::collections::VecDeque::new(),
        });
        self.last_config = Some(config);
    }
}
