//! Images across nodes: a request with an image goes to the peer or hub worker whose copy of
//! the model sees (their heartbeats and join say so), whole, and gives the answer that place
//! gives itself; the UI's chat refuses pictures for a peer's model that cannot see.

use crate::common;
use crate::images::{b64, model_with_projector, openai_answer, refused};

use common::{
    cluster_config, dark, image_url_part, png_uri, stripes, ui_turn, wait_for, TestNode, MODEL_ID,
};
use serde_json::json;

/// Node b has the model without its projector, peer a has both: b's requests with images go
/// to a (its heartbeats say its copy sees them), whole.
#[tokio::test]
async fn an_image_goes_to_the_peer_whose_model_sees_it() {
    let (dir, model) = model_with_projector();
    let a = TestNode::start_with(|c| {
        c.name = "peer-a".into();
        c.parallel = 1;
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.cluster = cluster_config(Vec::new());
    })
    .await;
    let at = a.node().cluster_addr().unwrap().to_string();
    let b = TestNode::start_with(|c| {
        c.name = "node-b".into();
        c.parallel = 1;
        c.cluster = cluster_config(vec![at]);
    })
    .await;
    assert_eq!(b.status().await["model"]["vision"], false);
    wait_for(
        async || b.get_json("/api/cluster").await["peers"][0]["loaded_models"][0] == MODEL_ID,
        "b seeing a's model",
    )
    .await;
    let here = openai_answer(&a, &stripes()).await;
    let via_b = openai_answer(&b, &stripes()).await;
    assert_eq!(
        via_b["choices"][0]["message"]["content"], here["choices"][0]["message"]["content"],
        "the image did not cross to the peer whole"
    );
    let other = openai_answer(&b, &dark()).await;
    assert_ne!(
        other["choices"][0]["message"]["content"],
        here["choices"][0]["message"]["content"]
    );
    // A damaged image (its header whole, its pixels cut) is judged on the peer that decodes
    // it: still the client's 400 in each door's shape, never a server error, never retried.
    let mut cut = stripes();
    cut.truncate(cut.len() / 2);
    for (door, body) in [
        (
            "/v1/chat/completions",
            json!({"model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": [
                image_url_part(&cut),
                {"type": "text", "text": "What is it?"}]}]}),
        ),
        (
            "/api/chat",
            json!({"model": MODEL_ID, "stream": false, "messages": [
                {"role": "user", "content": "What is it?", "images": [b64(&cut)]}]}),
        ),
    ] {
        let text = refused(&b, door, &body, "a damaged PNG file").await;
        assert!(
            text.contains("peer-a"),
            "{door}: where it was judged: {text}"
        );
    }
    assert!(b
        .chat(json!({"model": MODEL_ID, "max_tokens": 2, "messages": [
        {"role": "user", "content": "Hi"}]}))
        .await["choices"][0]["message"]["content"]
        .is_string());
    b.stop().await;
    a.stop().await;
}

/// The UI's chat on a node whose model is a peer's copy that cannot see: a picture is refused
/// at once, saying so, and nothing of the message is kept (the peer's heartbeats say its copy
/// sees nothing), instead of a message kept with pictures that every later turn resends.
#[tokio::test]
async fn the_ui_chat_refuses_pictures_for_a_peers_model_that_cannot_see() {
    let (a, b, _empty) = common::model_on_a_peer().await;
    let conv = b.new_conversation("pictures").await;
    refused(
        &b,
        &format!("/api/conversations/{conv}/chat"),
        &json!({"content": "What is it?", "images": [png_uri(&dark())]}),
        "cannot see images",
    )
    .await;
    let detail = b.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(detail["messages"], json!([]), "{detail}");
    // Words alone go to the peer and are answered.
    let answer = ui_turn(&b, &conv, json!({"content": "Hi"})).await;
    assert!(!answer.is_empty());
    b.stop().await;
    a.stop().await;
}

/// In hub mode a Hearth worker says (`vision=1`) when its model sees: images go to it, never
/// to a worker whose model cannot see, even one with more free slots.
#[tokio::test]
async fn an_image_goes_to_the_hub_worker_whose_model_sees_it() {
    use common::hub::{start_hub, start_worker, wait_workers, TOKEN};
    let hub = start_hub(1, false).await;
    let _blind = start_worker(&hub, "blind", 4).await;
    let (dir, model) = model_with_projector();
    let url = format!("{}/node", hub.ws_base);
    let sees = TestNode::start_with(|c| {
        c.parallel = 1;
        c.name = "sees".into();
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.join = Some(hearth_route::join::JoinConfig {
            url,
            token: TOKEN.into(),
            name: "sees".into(),
            max_concurrency: None,
        });
    })
    .await;
    wait_workers(&hub, 2).await;
    // Whole, through the worker protocol: the answer the worker's own door gives, and another
    // for another picture.
    let here = &openai_answer(&sees, &stripes()).await["choices"][0]["message"]["content"];
    for _ in 0..3 {
        let answer = openai_answer(&hub, &stripes()).await;
        assert_eq!(&answer["choices"][0]["message"]["content"], here);
    }
    let other = openai_answer(&hub, &dark()).await;
    assert_ne!(&other["choices"][0]["message"]["content"], here);
    // Words still go to either.
    assert!(hub
        .chat(json!({"model": MODEL_ID, "max_tokens": 2, "messages": [
            {"role": "user", "content": "Hi"}]}))
        .await["choices"][0]["message"]["content"]
        .is_string());
    sees.stop().await;
}
