//! llama.cpp driven directly (llama-cpp-2, one context, no server), as the reference tests
//! compare the node with: a chat rendered by the model's own template as the engine renders
//! it, and the greedy tokens after a prompt.

use hearth_engine::template::ChatTemplate;
use hearth_protocol::ChatMessage;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;

/// `messages` through the model's chat template, ready for the answer.
pub fn render_chat(model: &LlamaModel, messages: &[ChatMessage]) -> String {
    let vocab = model.vocab();
    let piece = |t| {
        let mut b = Vec::new();
        vocab.token_to_piece_into(t, &mut b, true, None);
        String::from_utf8(b).unwrap()
    };
    let template = model.chat_template(None).unwrap().to_string().unwrap();
    ChatTemplate::new(&template, &piece(vocab.bos()), &piece(vocab.eos()))
        .unwrap()
        .render(messages, true)
        .unwrap()
}

/// The bytes of at most `max` greedy tokens after a prompt whose last logits `ctx` holds,
/// the first at position `pos`, until the end of generation.
pub fn greedy_bytes(
    ctx: &mut LlamaContext<'_>,
    model: &LlamaModel,
    pos: i32,
    max: usize,
) -> Vec<u8> {
    let vocab = model.vocab();
    let mut sampler = LlamaSampler::greedy();
    let mut batch = LlamaBatch::new(8, 1);
    let mut bytes = Vec::new();
    for pos in (pos..).take(max) {
        let token = sampler.sample(ctx, -1);
        if vocab.is_eog(token) {
            break;
        }
        vocab.token_to_piece_into(token, &mut bytes, false, None);
        batch.clear();
        batch.add(token, pos, &[0], true).unwrap();
        ctx.decode(&mut batch).unwrap();
    }
    bytes
}
