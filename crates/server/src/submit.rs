//! A conversation submitted through the route with the reader of its answer
//! ([`hearth_engine::answer::Splitter`]): what every chat door starts an answer with.

use hearth_engine::answer::{starts_in_thinking, Splitter};
use hearth_protocol::SamplingParams;

/// Submit a conversation through the route, with the splitter for its answer: thinking apart
/// when `reasoning`, calls read when it has tools, and the start inside a thinking block when
/// the template of this node's model opens one.
pub(crate) fn submit_chat(
    router: &hearth_route::Router,
    target: &hearth_route::Target,
    chat: hearth_engine::Chat,
    params: SamplingParams,
    reasoning: bool,
) -> Result<(hearth_route::Generation, Splitter), hearth_engine::SubmitError> {
    let tools = chat.tools.clone();
    let opened = starts_in_thinking(target.local.as_deref(), chat.think, &params, tools.as_ref());
    let gen = router.submit(
        target,
        hearth_engine::Request {
            prompt: hearth_engine::Prompt::Chat(chat),
            params,
        },
    )?;
    let splitter = Splitter::new(reasoning, tools, gen.id.to_string()).opened_thinking(opened);
    Ok((gen, splitter))
}
