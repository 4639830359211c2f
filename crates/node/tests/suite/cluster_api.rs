//! `/api/cluster`, what the Cluster page uses, against real nodes on loopback: a peer added by
//! address is connected and kept (in `hearth.db`, reconnected after a restart), removed again;
//! a bad address is refused in the API's error shape; a passcode set while running closes the
//! connections, which come back only between nodes with the same one; TealeNet compatibility
//! on the LAN without a passcode is refused.

use crate::common;

use common::{client, TestNode};
use serde_json::{json, Value};

fn cluster(c: &mut hearth_node::NodeConfig) {
    c.cluster = common::cluster_config(Vec::new());
}

async fn get(t: &TestNode) -> Value {
    t.get_json("/api/cluster").await
}

async fn patch(t: &TestNode, body: Value) -> (u16, Value) {
    let r = client()
        .patch(t.url("/api/cluster"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn names(v: &Value) -> Vec<String> {
    v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_names(t: &TestNode, want: &[&str], what: &str) {
    common::wait_for(async || names(&get(t).await) == want, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_added_by_address_is_connected_kept_and_removed() {
    let a = TestNode::start_with(|c| {
        c.name = "node-a".into();
        cluster(c);
    })
    .await;
    let a_addr = a.node().cluster_addr().unwrap().to_string();
    let data = tempfile::tempdir().unwrap();
    let b_dir = data.path().join("b");
    let start_b = || {
        let dir = b_dir.clone();
        TestNode::start_with(move |c| {
            c.name = "node-b".into();
            c.data_dir = dir;
            cluster(c);
        })
    };
    let b = start_b().await;
    let view = get(&b).await;
    assert_eq!(view["name"], "node-b");
    assert_eq!(view["passcode_set"], false);
    assert_eq!(view["peers"], json!([]));
    // Bad addresses: the API's own error shape.
    for bad in [
        json!({"address": "no-port"}),
        json!({"address": 5}),
        json!({}),
    ] {
        let r = b.post("/api/cluster/peers", &bad).await;
        assert_eq!(r.status(), 400, "{bad}");
        let e: Value = r.json().await.unwrap();
        assert!(e["error"]["message"].is_string(), "{e}");
    }
    let r = b
        .post("/api/cluster/peers", &json!({"address": a_addr}))
        .await;
    assert_eq!(r.status(), 201);
    wait_names(&b, &["node-a"], "b connected to a").await;
    let view = get(&b).await;
    assert_eq!(view["dialing"], json!([a_addr]));
    assert_eq!(view["known"][0]["address"], a_addr.as_str());
    assert_eq!(view["peers"][0]["kind"], "hearth");
    // Known across a restart: b connects again by itself.
    b.stop().await;
    wait_names(&a, &[], "a noticing b left").await;
    let b = start_b().await;
    wait_names(&b, &["node-a"], "b reconnecting after its restart").await;
    // Removed: the connection closes and stays closed.
    let r = client()
        .delete(b.url(&format!("/api/cluster/peers/{a_addr}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    wait_names(&b, &[], "b dropping a").await;
    assert_eq!(get(&b).await["known"], json!([]));
    let r = client()
        .delete(b.url(&format!("/api/cluster/peers/{a_addr}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passcode_set_while_running_closes_connections_until_both_have_it() {
    let a = TestNode::start_with(|c| {
        c.name = "node-a".into();
        cluster(c);
    })
    .await;
    let a_addr = a.node().cluster_addr().unwrap().to_string();
    let b = TestNode::start_with(|c| {
        c.name = "node-b".into();
        cluster(c);
        c.cluster.as_mut().unwrap().peers = vec![a_addr];
    })
    .await;
    wait_names(&b, &["node-a"], "b connected to a").await;
    let (status, view) = patch(&a, json!({"passcode": "kitchen table"})).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["passcode_set"], true);
    // b has none: the connection closed, and b's attempts fail the handshake.
    wait_names(&a, &[], "a closing b's connection").await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(names(&get(&a).await), Vec::<String>::new());
    let (status, _) = patch(&b, json!({"passcode": "kitchen table"})).await;
    assert_eq!(status, 200);
    // b's keeper retries with backoff (at most ~30 s apart).
    common::wait_for_secs(
        40,
        async || names(&get(&b).await) == ["node-a"],
        "b back with the same passcode",
    )
    .await;
    // Bad values are refused.
    let (status, e) = patch(&a, json!({"passcode": ""})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, _) = patch(&a, json!({"tealenet_compat": "yes"})).await;
    assert_eq!(status, 400);
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tealenet_compatibility_on_the_lan_without_a_passcode_is_refused() {
    let t = TestNode::start_with(|c| {
        c.lan = true;
        cluster(c);
    })
    .await;
    let (status, e) = patch(&t, json!({"tealenet_compat": true})).await;
    assert_eq!(status, 409, "{e}");
    assert_eq!(e["error"]["code"], "passcode_required");
    assert_eq!(get(&t).await["tealenet_compat"], false);
    let (status, view) = patch(&t, json!({"passcode": "p", "tealenet_compat": true})).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["tealenet_compat"], true);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throttle_cap_is_applied_announced_to_peers_and_kept() {
    let data = tempfile::tempdir().unwrap();
    let a_dir = data.path().join("a");
    let start_a = || {
        let dir = a_dir.clone();
        TestNode::start_with(move |c| {
            c.name = "node-a".into();
            c.data_dir = dir;
            cluster(c);
        })
    };
    let a = start_a().await;
    let a_addr = a.node().cluster_addr().unwrap().to_string();
    let b = TestNode::start_with(|c| {
        c.name = "node-b".into();
        cluster(c);
        c.cluster.as_mut().unwrap().peers = vec![a_addr];
    })
    .await;
    wait_names(&b, &["node-a"], "b connected to a").await;
    let set = |cap: Value| {
        let url = a.url("/api/node");
        async move {
            let r = client().patch(url).json(&cap).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    for bad in [
        json!({"throttle_cap": 101}),
        json!({"throttle_cap": "x"}),
        json!({"cap": 5}),
    ] {
        let (status, e) = set(bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {e}");
        assert!(e["error"]["message"].is_string(), "{e}");
    }
    let (status, v) = set(json!({"throttle_cap": 25})).await;
    assert_eq!((status, v["throttle"].as_u64()), (200, Some(25)), "{v}");
    let s = a.status().await;
    assert_eq!(
        (s["throttle"].as_u64(), s["throttle_cap"].as_u64()),
        (Some(25), Some(25))
    );
    // b hears it in a's next heartbeat.
    common::wait_for_secs(
        10,
        async || get(&b).await["peers"][0]["throttle"] == 25,
        "a's heartbeat with its new throttle",
    )
    .await;
    // Kept across a restart.
    b.stop().await;
    a.stop().await;
    let a = start_a().await;
    assert_eq!(a.status().await["throttle_cap"], 25);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passcode_set_while_shared_moves_the_cluster_onto_the_lan_and_back() {
    let t = TestNode::start_with(|c| {
        c.lan = true;
        cluster(c);
    })
    .await;
    // None only for the moment it moves.
    let at = || t.node().cluster_addr().map(|a| a.ip());
    assert!(at().unwrap().is_loopback(), "no passcode: loopback only");
    let (status, _) = patch(&t, json!({"passcode": "hallway"})).await;
    assert_eq!(status, 200);
    common::wait_for(
        async || at().is_some_and(|ip| ip.is_unspecified()),
        "the cluster on the LAN",
    )
    .await;
    let (status, _) = patch(&t, json!({"passcode": null})).await;
    assert_eq!(status, 200);
    common::wait_for(
        async || at().is_some_and(|ip| ip.is_loopback()),
        "the cluster back on loopback",
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_setting_never_keeps_the_node_from_starting() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("n");
    let start = |lan: bool| {
        let dir = dir.clone();
        TestNode::start_with(move |c| {
            c.lan = lan;
            c.data_dir = dir;
            cluster(c);
        })
    };
    // Compatibility on while not shared: allowed.
    let t = start(false).await;
    let (status, v) = patch(&t, json!({"tealenet_compat": true})).await;
    assert_eq!(
        (status, v["tealenet_compat"].as_bool()),
        (200, Some(true)),
        "{v}"
    );
    t.stop().await;
    // Shared on the LAN without a passcode the stored setting is left off; the node starts.
    let t = start(true).await;
    assert_eq!(get(&t).await["tealenet_compat"], false);
    t.stop().await;
    // Not shared, it is on again.
    let t = start(false).await;
    assert_eq!(get(&t).await["tealenet_compat"], true);
    t.stop().await;
}
