//! A hot machine slows down and hands its work on: with `--thermal-zone` pointed at a sensor
//! file the test writes (the kernel's millidegree format), a critical temperature throttles
//! the engine to 0 (requests wait, nothing decodes) and a cool one gives full speed back; a
//! hot hub places requests on its workers instead of its own engine.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::hub::{greedy, hub_status, start_hub_with, start_worker, wait_workers};
use common::{user, TestNode};
use serde_json::json;

fn set_temperature(zone: &Path, celsius: u32) {
    std::fs::write(zone, format!("{}\n", celsius * 1000)).unwrap();
}

/// The throttle and thermal level the node reports, once they are `want` (the sampler reads
/// the zone once a second).
async fn wait_for_throttle(t: &TestNode, want: u64, level: u64) {
    common::wait_for(
        async || {
            let throttle = t.status().await["throttle"].as_u64();
            let metrics = t.metrics().await;
            throttle == Some(want) && metrics.contains(&format!("\nhearth_thermal_level {level}\n"))
        },
        &format!("throttle {want} and thermal level {level}"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_temperature_pauses_decoding_and_a_cool_one_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("temp");
    set_temperature(&zone, 99);
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.thermal_zone = Some(zone.clone());
    })
    .await;
    wait_for_throttle(&t, 0, 3).await;
    // A request waits while the machine is critical...
    let answer = {
        let url = t.url("/v1/chat/completions");
        tokio::spawn(async move {
            common::client()
                .post(url)
                .json(&json!({"messages": user("Hi"), "max_tokens": 4, "ignore_eos": true}))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!answer.is_finished(), "answered while critical");
    assert_eq!(t.status().await["tokens_generated"], 0);
    // ...and is answered once it cools down.
    set_temperature(&zone, 40);
    wait_for_throttle(&t, 100, 0).await;
    let v = answer.await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    // Fair (72 °C of 100) allows three quarters.
    set_temperature(&zone, 72);
    wait_for_throttle(&t, 75, 1).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_hub_places_requests_on_its_worker_instead_of_its_own_engine() {
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("temp");
    set_temperature(&zone, 97);
    let hub = start_hub_with(1, true, |c| c.thermal_zone = Some(zone.clone())).await;
    let worker = start_worker(&hub, "cool", 1).await;
    wait_workers(&hub, 1).await;
    wait_for_throttle(&hub, 0, 3).await;
    for _ in 0..3 {
        let v = hub.chat(greedy("Say hi.", 4)).await;
        assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    }
    let workers = hub_status(&hub).await["workers"].clone();
    assert_eq!(workers[0]["completed"], 3, "{workers}");
    assert_eq!(
        hub.status().await["tokens_generated"],
        0,
        "the hot hub's own engine generated nothing"
    );
    worker.stop().await;
    hub.stop().await;
}
