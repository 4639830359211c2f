//! The hub's unit tests: joining with a token, placing tasks and routing their frames,
//! superseding and leaving workers, and the bounded queue.

use hearth_protocol::worker::MAX_HUB_TASK_ID;
use hearth_protocol::ModelId;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Hub;
use crate::config::{HubConfig, QUEUE_CAPACITY};
use crate::tasks::{Route, TaskEvent};
use crate::workers::WorkerJoin;

fn join(name: &str, slots: usize, hearth: bool) -> WorkerJoin {
    WorkerJoin {
        model: "SmolLM2-135M-Instruct.Q4_1".into(),
        name: name.into(),
        max_concurrency: slots,
        hearth,
        vision: false,
        addr: "127.0.0.1:9".parse().unwrap(),
        peer: false,
    }
}

fn hub() -> Hub {
    Hub::new(HubConfig::new("t".into(), false))
}

#[tokio::test]
async fn placement_reserves_slots_and_routes_frames() {
    let hub = hub();
    let lan: std::net::IpAddr = "192.168.1.20".parse().unwrap();
    let here: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    assert!(hub.token_matches("t", lan));
    assert!(!hub.token_matches("T", lan));
    // This node's own workers' token: from this machine only.
    hub.admit_own_workers("own", "192.168.1.5".parse().unwrap());
    assert!(hub.token_matches("own", here));
    assert!(hub.token_matches("own", "192.168.1.5".parse().unwrap()));
    assert!(!hub.token_matches("own", lan));
    assert!(hub.token_matches("t", lan));
    let (out, mut out_rx) = mpsc::channel(8);
    let w = hub.register(join("a", 1, true), out, CancellationToken::new(), None);
    let model = ModelId("SmolLM2-135M-Instruct.Q4_1".into());
    assert_eq!(
        hub.serves("SmolLM2-135M-Instruct.Q4_1.gguf"),
        Some(model.clone())
    );
    assert_eq!(hub.serves("other"), None);
    let c = hub.candidates(&model);
    assert_eq!((c.len(), c[0].free_slots, c[0].continues), (1, 1, true));
    let r = hub.reserve(w).expect("a free slot");
    assert_eq!(r.worker, w);
    assert!(r.task.0 >= 1 && r.task.0 <= MAX_HUB_TASK_ID);
    assert!(hub.reserve(w).is_none(), "one slot only");
    assert_eq!(hub.candidates(&model)[0].free_slots, 0);
    assert_eq!(hub.snapshot().workers[0].in_flight, 1);
    let Route::Live(tx) = hub.route(w, r.task) else {
        panic!("live")
    };
    tx.send(TaskEvent::Text("hi".into())).unwrap();
    drop(tx);
    assert!(matches!(hub.finish(w, r.task), Route::Live(_)));
    assert!(matches!(hub.route(w, r.task), Route::Unknown));
    let mut events = r.events;
    assert!(matches!(events.recv().await, Some(TaskEvent::Text(t)) if t == "hi"));
    assert!(events.recv().await.is_none(), "route dropped after the end");
    assert_eq!(hub.snapshot().workers[0].completed, 1);
    // A stopped task's late frames are expected.
    let r2 = hub.reserve(w).expect("the slot is free again");
    hub.retire(w, r2.task);
    assert!(matches!(hub.route(w, r2.task), Route::Retired));
    assert!(matches!(hub.finish(w, r2.task), Route::Retired));
    assert!(
        out_rx.try_recv().is_err(),
        "the hub itself sends nothing here"
    );
}

#[tokio::test]
async fn superseding_and_leaving_drop_routes() {
    let hub = hub();
    let (out, _keep) = mpsc::channel(8);
    let kick = CancellationToken::new();
    let first = hub.register(join("a", 2, false), out.clone(), kick.clone(), None);
    let model = ModelId("SmolLM2-135M-Instruct.Q4_1".into());
    let r = hub.reserve(first).expect("placed");
    assert!(!hub.candidates(&model)[0].continues, "not a Hearth worker");
    let second = hub.register(
        join("a", 2, false),
        out.clone(),
        CancellationToken::new(),
        None,
    );
    assert_ne!(first, second);
    assert!(kick.is_cancelled(), "the old connection is told to close");
    let mut events = r.events;
    assert!(events.recv().await.is_none(), "its task is lost");
    assert_eq!(hub.snapshot().workers.len(), 1);
    hub.unregister(first); // already gone: nothing happens
    assert_eq!(hub.snapshot().workers.len(), 1);
    hub.unregister(second);
    assert!(hub.snapshot().workers.is_empty());
    assert!(hub.candidates(&model).is_empty());
}

#[test]
fn queue_is_bounded() {
    let hub = hub();
    let slots: Vec<_> = (0..QUEUE_CAPACITY)
        .map(|_| hub.enter_queue().unwrap())
        .collect();
    assert!(hub.enter_queue().is_none());
    assert!(!hub.queue_has_room());
    drop(slots);
    assert!(hub.queue_has_room());
    assert_eq!(hub.snapshot().waiting, 0);
}
