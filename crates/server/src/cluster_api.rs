//! `/api/cluster`: the Cluster page's view of the LAN cluster (this node, the peers connected
//! with their latest figures and measured speed, the addresses kept, the known ones) and what
//! it changes: peers added or removed by address (kept in `hearth.db` and reconnected with
//! backoff), the passcode and TealeNet compatibility. Changes only from this machine.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::api::{json_body, local_only, ApiFailure};
use crate::state::AppState;
use hearth_cluster::dial::Dialer;
use hearth_cluster::{SETTING_COMPAT, SETTING_PASSCODE};

/// The longest passcode taken (it is typed by people).
const MAX_PASSCODE_CHARS: usize = 256;
/// The longest `HOST:PORT` taken.
const MAX_ADDRESS_CHARS: usize = 260;

fn dialer(state: &AppState) -> Result<Arc<Dialer>, ApiFailure> {
    state.dialer().ok_or_else(|| {
        ApiFailure::new(
            StatusCode::CONFLICT,
            "cluster_off",
            "this node runs without a cluster",
        )
    })
}

pub(crate) async fn get(State(state): State<Arc<AppState>>) -> Result<Response, ApiFailure> {
    let dialer = dialer(&state)?;
    let rules = dialer.me().rules();
    let speeds = state
        .router
        .hub()
        .map(hearth_hub::Hub::peer_speeds)
        .unwrap_or_default();
    let peers: Vec<serde_json::Value> = state
        .cluster
        .peers
        .list()
        .into_iter()
        .map(|p| {
            let tps = p
                .addr
                .parse()
                .ok()
                .and_then(|a| speeds.get(&a).copied())
                .unwrap_or(0.0);
            let mut v = serde_json::to_value(&p).unwrap_or_default();
            v["tokens_per_s"] = json!(tps);
            v
        })
        .collect();
    Ok(Json(json!({
        "name": state.node_name,
        "device_id": state.identity.device_id(),
        "port": state.cluster.port,
        "passcode_set": rules.passcode_hash.is_some(),
        "tealenet_compat": rules.compat,
        "dialing": dialer.addresses(),
        "known": state.store.known_peers().await?,
        "peers": peers,
        // Model bytes this node has sent to peers since it started.
        "model_bytes_served": state.sharing.served_bytes(),
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewPeer {
    address: String,
}

/// `HOST:PORT` with a port, as typed (surrounding spaces dropped).
fn address(raw: &str) -> Result<String, ApiFailure> {
    let a = raw.trim();
    let bad = || {
        ApiFailure::bad_request(format!(
            "address must be HOST:PORT (for example 192.168.1.20:8421), got '{}'",
            a.chars().take(80).collect::<String>()
        ))
    };
    if a.is_empty() || a.chars().count() > MAX_ADDRESS_CHARS || a.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    let (host, port) = a.rsplit_once(':').ok_or_else(bad)?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 && !host.is_empty() => Ok(a.to_owned()),
        _ => Err(bad()),
    }
}

pub(crate) async fn add_peer(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let dialer = dialer(&state)?;
    let body: NewPeer = json_body(body)?;
    let address = address(&body.address)?;
    state.store.add_known_peer(address.clone()).await?;
    dialer.add(&address);
    Ok((StatusCode::CREATED, Json(json!({"address": address}))).into_response())
}

pub(crate) async fn remove_peer(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(address): Path<String>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let dialer = dialer(&state)?;
    let known = state.store.remove_known_peer(address.clone()).await?;
    if dialer.remove(&address) || known {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiFailure::not_found("peer address"))
    }
}

/// `passcode`: a string sets it, `null` clears it, absent keeps it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterPatch {
    #[serde(default, deserialize_with = "present")]
    passcode: Option<Option<String>>,
    tealenet_compat: Option<bool>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

pub(crate) async fn patch(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let me = dialer(&state)?.me().clone();
    let body: ClusterPatch = json_body(body)?;
    let now = me.rules();
    let passcode = match body.passcode.clone() {
        None => state.store.node_setting(SETTING_PASSCODE).await?,
        Some(None) => None,
        Some(Some(p)) if p.is_empty() || p.chars().count() > MAX_PASSCODE_CHARS => {
            return Err(ApiFailure::bad_request(format!(
                "passcode must be 1 to {MAX_PASSCODE_CHARS} characters, or null to clear it"
            )))
        }
        Some(Some(p)) => Some(p),
    };
    // A passcode given on the command line stays in force when none is stored.
    let passcode_in_force =
        passcode.is_some() || (body.passcode.is_none() && now.passcode_hash.is_some());
    let compat = body.tealenet_compat.unwrap_or(now.compat);
    if compat && !passcode_in_force && state.exposure.is_exposed() {
        return Err(ApiFailure::new(
            StatusCode::CONFLICT,
            "passcode_required",
            "TealeNet compatibility on the LAN needs a cluster passcode: its traffic is plain text",
        ));
    }
    if let Some(p) = &body.passcode {
        state
            .store
            .set_node_setting(SETTING_PASSCODE, p.clone())
            .await?;
    }
    if let Some(c) = body.tealenet_compat {
        state
            .store
            .set_node_setting(SETTING_COMPAT, Some(c.to_string()))
            .await?;
    }
    if body.passcode.is_some() {
        me.set_rules(passcode, compat).await;
        // On the LAN only with a passcode: the listener moves (and discovery with it).
        state.cluster_rebind.notify_one();
    } else {
        me.set_compat(compat);
    }
    // Whatever waits to reconnect tries at once, under the new rules.
    dialer(&state)?.nudge();
    get(State(state)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        assert_eq!(address(" 10.0.0.2:8421 ").unwrap(), "10.0.0.2:8421");
        assert_eq!(address("studio.local:8421").unwrap(), "studio.local:8421");
        assert_eq!(address("[fe80::1]:8421").unwrap(), "[fe80::1]:8421");
        for bad in [
            "",
            "10.0.0.2",
            "10.0.0.2:",
            ":8421",
            "h:0",
            "h:70000",
            "a b:1",
        ] {
            assert!(address(bad).is_err(), "{bad}");
        }
    }
}
