//! What a chat turn is given of its conversation's documents. When they all fit beside the
//! conversation with room for the answer (counted with the model's own tokenizer) they go
//! whole, each under its name, after the system prompt, where the next turns read them from
//! the cache. Else the passages whose words best match the newest question (FTS5's BM25),
//! fused with those nearest it by the embedding model named in Settings (`vectors`), in the
//! order a reranker loaded on this node gives them when there is one, go before it, as many
//! as fit. Either way they are numbered sources the model is asked to cite
//! as [n], and the answer keeps them (`Message::sources`), so the UI shows what it was given.
//! A peer's model is measured at [`PEER_CONTEXT`] tokens of [`PEER_BYTES_PER_TOKEN`] bytes.

use std::sync::Arc;

use hearth_engine::{Chat, ModelInfo};
use hearth_protocol::ChatMessage;
use hearth_store::documents::{DocumentRow, Hit};
use hearth_store::Message;
use serde::Serialize;
use serde_json::Value;

use super::fit::answer_room;
use crate::api::ApiFailure;
use crate::state::AppState;

/// The context assumed of a model served elsewhere (its tokenizer is not here).
const PEER_CONTEXT: u32 = 4096;
/// Bytes a token of text takes, as a peer's model is measured: few, to stay within it.
const PEER_BYTES_PER_TOKEN: usize = 3;
/// Passages a turn is given at most.
const MAX_PASSAGES: usize = 8;
/// Passages looked at for a question, best first.
const CANDIDATES: usize = 30;
/// Characters of a whole document its source shows.
const EXCERPT_CHARS: usize = 600;
/// Tokens kept for the words around the documents (their names, the request to cite).
const FRAME_TOKENS: usize = 64;

/// What a turn is given, and where.
#[derive(Debug, Clone)]
pub(super) struct Given {
    /// After the system prompt: the documents whole.
    system: Option<String>,
    /// Before the newest question's words: the passages retrieved for it.
    question: Option<String>,
    /// What the answer keeps: [`Sources`] as JSON.
    pub(super) sources: Value,
}

/// The sources of an answer, as kept and shown.
#[derive(Debug, Serialize)]
struct Sources {
    /// `whole` or `passages`.
    path: &'static str,
    /// The conversation's documents, all of them.
    documents: usize,
    items: Vec<Source>,
    /// Milliseconds the turn spent choosing them (reading the index, counting tokens).
    ms: f64,
}

#[derive(Debug, Serialize)]
struct Source {
    n: usize,
    document_id: String,
    document: String,
    page: Option<u32>,
    heading: Option<String>,
    /// The passage (a whole document's first lines).
    text: String,
    whole: bool,
}

/// How the model's tokens are counted here.
#[derive(Clone)]
enum Measure {
    Model(Arc<ModelInfo>),
    Peer,
}

impl Measure {
    fn tokens(&self, text: &str) -> usize {
        match self {
            Self::Model(info) => info.count_tokens(text),
            Self::Peer => text.len().div_ceil(PEER_BYTES_PER_TOKEN),
        }
    }

    fn prompt(&self, chat: &Chat) -> usize {
        match self {
            Self::Model(info) => info
                .render_chat(chat)
                .map_or(usize::MAX, |t| info.count_tokens(&t)),
            Self::Peer => serde_json::to_string(&chat.messages)
                .map_or(usize::MAX, |t| t.len().div_ceil(PEER_BYTES_PER_TOKEN)),
        }
    }

    fn context(&self) -> u32 {
        match self {
            Self::Model(info) => info.context,
            Self::Peer => PEER_CONTEXT,
        }
    }
}

/// What this turn is given of the conversation's documents (`None`: it has none). `history`
/// is the conversation as the turn reads it, `chat` its prompt without them.
pub(super) async fn given(
    state: &AppState,
    conversation_id: &str,
    history: &[Message],
    local: Option<Arc<ModelInfo>>,
    max_tokens: Option<u32>,
    chat: &Chat,
) -> Result<Option<Given>, ApiFailure> {
    let started = std::time::Instant::now();
    let documents = state.store.documents(conversation_id.to_owned()).await?;
    if documents.is_empty() {
        return Ok(None);
    }
    let measure = local.map_or(Measure::Peer, Measure::Model);
    let room = answer_room(measure.context(), max_tokens);
    let mut texts = Vec::with_capacity(documents.len());
    for d in &documents {
        let passages = state.store.document_passages(d.id.clone()).await?;
        texts.push(whole_text(&passages));
    }
    let question = history
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| m.content.clone())
        .unwrap_or_default();
    let hits = state
        .store
        .search_passages(conversation_id.to_owned(), question.clone(), CANDIDATES)
        .await?;
    let (hits, embedder) = super::vectors::fused(state, conversation_id, &question, hits).await;
    let (hits, reranked) = if hits.is_empty() {
        (first_passages(state, &documents).await?, None)
    } else {
        rerank(state, &question, hits).await
    };
    let chat = chat.clone();
    let counted = tokio::task::spawn_blocking(move || {
        let context = measure.context() as usize;
        let budget = context
            .saturating_sub(room)
            .saturating_sub(measure.prompt(&chat))
            .saturating_sub(FRAME_TOKENS);
        choose(&measure, budget, &documents, texts, hits)
    })
    .await;
    match counted {
        Ok(mut given) => {
            given.sources["ms"] = serde_json::json!(started.elapsed().as_secs_f64() * 1000.0);
            given.sources["reranker"] = serde_json::json!(reranked);
            given.sources["embedder"] = serde_json::json!(embedder);
            Ok(Some(given))
        }
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(ApiFailure::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            e.to_string(),
        )),
    }
}

/// The whole documents when they fit `budget` tokens, else the best passages that do.
fn choose(
    measure: &Measure,
    budget: usize,
    documents: &[DocumentRow],
    texts: Vec<String>,
    hits: Vec<Hit>,
) -> Given {
    // A token is at least a byte: more bytes than 16 a token never fit, and are not counted.
    let bytes: usize = texts.iter().map(String::len).sum();
    let whole = bytes <= budget.saturating_mul(16)
        && texts.iter().map(|t| measure.tokens(t)).sum::<usize>() <= budget;
    if whole {
        return whole_documents(documents, &texts);
    }
    let mut items = Vec::new();
    let mut used = 0;
    for hit in hits {
        if items.len() == MAX_PASSAGES {
            break;
        }
        let tokens = measure.tokens(&hit.text) + 16;
        if used + tokens > budget {
            continue;
        }
        used += tokens;
        items.push(Source {
            n: items.len() + 1,
            document_id: hit.document_id,
            document: hit.document,
            page: hit.page,
            heading: hit.heading,
            text: hit.text,
            whole: false,
        });
    }
    if items.is_empty() {
        return Given {
            system: None,
            question: None,
            sources: sources("passages", documents.len(), items),
        };
    }
    let mut block = String::from(
        "Passages from the documents the user attached, numbered. Answer from them where they hold the answer, and cite each passage you use as [n].\n",
    );
    // Numbered best first, written best last, next to the question: a small model reads what
    // is nearest best (the default model answers page 40's question right this way round, and
    // with another page's words the other).
    for s in items.iter().rev() {
        block.push_str(&format!("\n[{}] {}\n{}\n", s.n, label(s), s.text));
    }
    Given {
        system: None,
        question: Some(block),
        sources: sources("passages", documents.len(), items),
    }
}

fn whole_documents(documents: &[DocumentRow], texts: &[String]) -> Given {
    let mut block = String::from(
        "The user attached these documents, numbered. Answer from them where they hold the answer, and cite each document you use as [n].\n",
    );
    let mut items = Vec::new();
    for (i, (d, text)) in documents.iter().zip(texts).enumerate() {
        block.push_str(&format!("\n[{}] {}\n{}\n", i + 1, d.name, text));
        items.push(Source {
            n: i + 1,
            document_id: d.id.clone(),
            document: d.name.clone(),
            page: None,
            heading: None,
            text: text.chars().take(EXCERPT_CHARS).collect(),
            whole: true,
        });
    }
    Given {
        system: Some(block),
        question: None,
        sources: sources("whole", documents.len(), items),
    }
}

fn sources(path: &'static str, documents: usize, items: Vec<Source>) -> Value {
    serde_json::to_value(Sources {
        path,
        documents,
        items,
        ms: 0.0,
    })
    .unwrap_or(Value::Null)
}

/// Where a passage stands: its document, page and heading.
fn label(s: &Source) -> String {
    let mut label = s.document.clone();
    if let Some(page) = s.page {
        label.push_str(&format!(", page {page}"));
    }
    if let Some(heading) = &s.heading {
        label.push_str(&format!(", \"{heading}\""));
    }
    label
}

/// A document's text from its passages, each page and heading marked where it starts.
fn whole_text(passages: &[hearth_store::documents::PassageRow]) -> String {
    let mut text = String::new();
    let (mut page, mut heading) = (None, None);
    for p in passages {
        if p.page.is_some() && p.page != page {
            text.push_str(&format!("\n[page {}]\n", p.page.unwrap_or_default()));
        }
        if p.heading.is_some() && p.heading != heading {
            text.push_str(&format!(
                "\n# {}\n",
                p.heading.as_deref().unwrap_or_default()
            ));
        }
        (page, heading) = (p.page, p.heading.clone());
        text.push_str(&p.text);
        text.push('\n');
    }
    text.trim().to_owned()
}

/// The passages in the order a reranker loaded on this node scores them against the question,
/// and its name; as they are (BM25's order) when none is loaded, or it fails (said in the log).
async fn rerank(state: &AppState, question: &str, hits: Vec<Hit>) -> (Vec<Hit>, Option<String>) {
    let host = state.router.host();
    let Some(model) = host
        .loaded_models()
        .into_iter()
        .find(|m| host.model_info(m).is_some_and(|i| i.reranker))
    else {
        return (hits, None);
    };
    let Some((engine, _in_use)) = host.embedding(&model) else {
        return (hits, None);
    };
    let texts: Vec<String> = hits.iter().map(|h| h.text.clone()).collect();
    match engine.rerank(question, &texts).await {
        Ok(ranking) if ranking.scores.len() == hits.len() => {
            let mut scored: Vec<(f32, Hit)> = ranking.scores.into_iter().zip(hits).collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            (
                scored.into_iter().map(|(_, h)| h).collect(),
                Some(model.to_string()),
            )
        }
        Ok(_) => (hits, None),
        Err(e) => {
            tracing::warn!(%model, error = %e, "the reranker could not order a turn's passages");
            (hits, None)
        }
    }
}

/// When no passage holds a word of the question ("summarize it"): each document's first ones.
async fn first_passages(
    state: &AppState,
    documents: &[DocumentRow],
) -> Result<Vec<Hit>, ApiFailure> {
    let mut hits = Vec::new();
    for d in documents {
        let passages = state.store.document_passages(d.id.clone()).await?;
        hits.extend(passages.into_iter().take(MAX_PASSAGES).map(|p| Hit {
            document_id: d.id.clone(),
            document: d.name.clone(),
            seq: p.seq,
            page: p.page,
            heading: p.heading,
            text: p.text,
            rank: 0.0,
        }));
    }
    Ok(hits)
}

/// Put what a turn is given into its prompt: whole documents after the system prompt (one is
/// made when there is none), passages before the newest user message's words.
pub(super) fn apply(given: &Given, prompt: &mut Vec<ChatMessage>) {
    if let Some(block) = &given.system {
        match prompt.first_mut() {
            Some(m) if m.role == "system" => {
                m.content = format!("{}\n\n{block}", m.content);
            }
            _ => prompt.insert(0, ChatMessage::new("system", block.clone())),
        }
    }
    if let Some(block) = &given.question {
        if let Some(m) = prompt.iter_mut().rev().find(|m| m.role == "user") {
            m.content = format!("{block}\nQuestion: {}", m.content);
        }
    }
}
