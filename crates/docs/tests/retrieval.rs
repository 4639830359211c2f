//! Retrieval by words alone (SQLite FTS5, BM25): a fixed set of questions over a fixed set of
//! documents (the 300-page manual and the kitchen notes, made by reportlab and python-docx),
//! each with the page or section its answer is in; the right passage must be in the top 5 for
//! at least 90 % of them. The figures are printed (`--nocapture`).

mod common;

use common::file;
use hearth_docs::{passages, read, Limits, PASSAGE_WORDS};
use hearth_store::documents::{Added, NewDocument, NewPassage};
use hearth_store::Store;

async fn keep(store: &Store, conversation: &str, name: &str) -> usize {
    let bytes = file(name);
    let doc = read(name, &bytes, &Limits::default()).unwrap();
    let parts = passages(&doc, PASSAGE_WORDS);
    let n = parts.len();
    let new = NewDocument {
        conversation_id: conversation.to_owned(),
        name: name.to_owned(),
        kind: doc.kind.as_str().to_owned(),
        digest: format!("{name}-{}", bytes.len()),
        bytes: bytes.len() as u64,
        pages: Some(doc.pages.len() as u32),
        passages: parts
            .into_iter()
            .map(|p| NewPassage {
                page: p.page,
                heading: p.heading,
                text: p.text,
            })
            .collect(),
        within: Some((20, 200 << 20)),
    };
    let added = store.add_document(new.clone()).await.unwrap();
    assert!(matches!(added, Added::New(_)), "{added:?}");
    let again = store.add_document(new).await.unwrap();
    assert!(
        matches!(again, Added::Kept(_)),
        "the same file is kept once"
    );
    n
}

#[tokio::test]
async fn the_right_passage_is_in_the_top_5_for_nine_questions_in_ten() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let conv = store.create_conversation("docs".into()).await.unwrap().id;
    let pages = keep(&store, &conv, "manual.pdf").await;
    let notes = keep(&store, &conv, "notes.docx").await;
    assert!(pages >= 300, "{pages} passages of the manual");
    // Questions with the page (manual) or heading (notes) their answer is under.
    let mut questions: Vec<(String, Result<u32, &str>)> =
        [3u32, 17, 40, 58, 99, 101, 137, 150, 199, 222, 256, 300]
            .iter()
            .map(|n| (format!("What is the code word of page {n}?"), Ok(*n)))
            .collect();
    for n in [12u32, 75, 181] {
        questions.push((format!("Which code word does page {n} give?"), Ok(n)));
    }
    for (q, heading) in [
        ("How long should the dough be kneaded?", "Bread"),
        ("How long does bread need to rise?", "Bread"),
        ("What should simmer gently?", "Soup"),
        ("How much water goes in the soup?", "Soup"),
        ("How much salt?", "Soup"),
    ] {
        questions.push((q.to_owned(), Err(heading)));
    }
    let mut found = 0;
    for (q, want) in &questions {
        let hits = store
            .search_passages(conv.clone(), q.clone(), 5)
            .await
            .unwrap();
        let ok = hits.iter().any(|h| match want {
            Ok(page) => h.document == "manual.pdf" && h.page == Some(*page),
            Err(heading) => h.document == "notes.docx" && h.heading.as_deref() == Some(*heading),
        });
        if ok {
            found += 1;
        } else {
            println!(
                "missed: {q} -> {:?}",
                hits.iter()
                    .map(|h| (&h.document, h.page, &h.heading))
                    .collect::<Vec<_>>()
            );
        }
    }
    let share = f64::from(found) / questions.len() as f64;
    println!(
        "retrieval by words: {found} of {} questions have their passage in the top 5 ({:.0} %); {pages} + {notes} passages",
        questions.len(),
        share * 100.0
    );
    assert!(share >= 0.9, "{found} of {}", questions.len());
    // Gone with the conversation.
    assert!(store.delete_conversation(conv.clone()).await.unwrap());
    assert!(store.documents(conv.clone()).await.unwrap().is_empty());
    assert!(store
        .search_passages(conv, "code word".into(), 5)
        .await
        .unwrap()
        .is_empty());
}
