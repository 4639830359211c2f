//! Safe defaults at the door (DESIGN.md §6), as one middleware in front of every route:
//! - `Host` must be a loopback name, an IP address (the machine's LAN address is one) or a
//!   configured name ([`Exposure`], which `AppState` holds), so a hostile web page cannot reach
//!   the node through DNS rebinding;
//! - WebSocket upgrades must come with no `Origin`, the node's own origin, a loopback origin or
//!   the desktop app's (`tauri://localhost`); those origins also get CORS on HTTP (tower-http's
//!   `CorsLayer`, [`cors`], inside this guard);
//! - a request that changes state or generates (any method but GET, HEAD and OPTIONS) from a
//!   page must come from one of those origins: browsers send "simple" cross-site POSTs
//!   (`text/plain`, forms) without a preflight, so CORS alone would let any web page the user
//!   opens unload the model or create an API key. A request without `Origin` is a program, not
//!   a page (browsers send `Origin` on every cross-site POST), and passes;
//! - while the node is exposed to the LAN, a request from a non-loopback address needs an API
//!   key (`Authorization: Bearer …` or `?token=…`): 401 on HTTP, a close with 1008 on WebSockets.
//!   The signed-challenge socket on `/` too: its challenge proves the client's key on top of
//!   the API key. The web UI's static files stay public; everything they call does not. A key
//!   of scope `use` reaches the model doors only ([`is_model_door`]): anything else is 403;
//! - no page of the node may be framed by another site (`X-Frame-Options`, CSP
//!   `frame-ancestors`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::ws::{close_code, CloseFrame, Message, WebSocketUpgrade};
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::caller::Caller;
use crate::state::exposure::strip_port;
pub use crate::state::exposure::Exposure;
use crate::state::AppState;
use hearth_store::KeyScope;

/// Origins of the desktop app's webview (Linux/macOS, and Windows' form).
const DESKTOP_ORIGINS: [&str; 3] = [
    "tauri://localhost",
    "http://tauri.localhost",
    "https://tauri.localhost",
];

/// Whether a browser at `origin` may open a WebSocket to (or, for the desktop, call) a node
/// reached as `host`.
pub(crate) fn origin_allowed(origin: &str, host: Option<&str>) -> bool {
    if DESKTOP_ORIGINS.contains(&origin) {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let origin_host = strip_port(rest).to_ascii_lowercase();
    // The node's own pages, however it was reached.
    if host.is_some_and(|h| h.eq_ignore_ascii_case(rest)) {
        return true;
    }
    // Pages served from this machine (the UI's dev server, a local tool).
    origin_host == "localhost"
        || origin_host.ends_with(".localhost")
        || origin_host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A key from `Authorization: Bearer …` or `?token=…`.
fn presented_key(req: &Request) -> Option<String> {
    presented_key_in(req.headers(), req.uri())
}

/// The API key a request presents: `x-api-key: KEY` (Anthropic's header), `Authorization:
/// Bearer KEY`, or `?token=KEY` (browsers' WebSockets can set no header).
pub(crate) fn presented_key_in(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    // Anthropic's clients (Claude Code) send their key as `x-api-key`.
    if let Some(k) = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        return Some(k.to_owned());
    }
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(k) = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
        {
            return Some(k.trim().to_owned());
        }
    }
    uri.query().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| v.to_owned())
    })
}

/// What a LAN client may reach without a key: the web UI's own files, and the WebSocket at
/// `/`, whose signed-challenge protocol authenticates clients itself.
fn is_public(method: &Method, path: &str, upgrade: bool) -> bool {
    if upgrade {
        // Workers present the hub token, which the hub door checks itself.
        return path == "/node";
    }
    method == Method::GET
        && !path.starts_with("/api/")
        && !path.starts_with("/v1/")
        && path != "/generate"
        && path != "/metrics"
}

fn error(status: StatusCode, path: &str, code: &'static str, message: &str) -> Response {
    // Each door keeps its own error shape.
    let body = if super::anthropic::owns(path) {
        json!(hearth_protocol::anthropic::ErrorBody::for_status(
            status.as_u16(),
            message
        ))
    } else if path.starts_with("/v1/") {
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}})
    } else if super::ollama::PATHS.contains(&path) {
        json!({ "error": message })
    } else if path == "/api/auth/register" {
        json!({"success": false, "error": message, "code": code})
    } else {
        json!({"error": {"message": message, "code": code}})
    };
    (status, Json(body)).into_response()
}

/// What a key of scope `use` reaches: the OpenAI door, Ollama's (but its model management)
/// and the WebSocket protocols (signed challenge, streaming, batch) with the registration of
/// the signed-challenge door's clients. Nothing of the owner's data or settings.
fn is_model_door(path: &str, upgrade: bool) -> bool {
    if upgrade {
        return matches!(path, "/" | "/generate" | "/ws" | "/api/ws");
    }
    path.starts_with("/v1/")
        || path == "/rerank"
        || path == "/api/auth/register"
        || (super::ollama::PATHS.contains(&path)
            && !super::ollama::MANAGEMENT_PATHS.contains(&path))
}

/// Methods that only read: everything else changes state or generates.
fn is_safe_method(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// What a LAN request's key turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyCheck {
    Valid,
    Missing,
    Invalid,
    /// A `use` key on something beyond the model doors.
    OutOfScope,
}

impl KeyCheck {
    fn message(self) -> &'static str {
        match self {
            KeyCheck::Missing => "this node is shared on the LAN: send an API key (Authorization: Bearer <key>, x-api-key: <key>, or ?token=<key>)",
            KeyCheck::OutOfScope => "this API key may use the models only (scope 'use'); the node's data and settings need a key of scope 'manage'",
            _ => "invalid API key",
        }
    }
}

/// Headers on every answer: no other site may frame the node's pages.
fn add_frame_guard(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'self'"),
    );
}

pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match &host {
        Some(h) if state.exposure.host_allowed(h) => {}
        _ => {
            return error(
                StatusCode::FORBIDDEN,
                &path,
                "forbidden_host",
                "this Host is not one this node answers to (use its IP address, localhost, or a name given with --allow-host)",
            )
        }
    }
    let origin = req.headers().get(header::ORIGIN).cloned();
    let origin_ok = origin
        .as_ref()
        .and_then(|o| o.to_str().ok())
        .map(|o| origin_allowed(o, host.as_deref()));
    let upgrade = is_upgrade(req.headers());
    if upgrade && origin_ok == Some(false) {
        return error(
            StatusCode::FORBIDDEN,
            &path,
            "forbidden_origin",
            "WebSocket connections from this origin are not allowed",
        );
    }
    // Cross-site request forgery: a foreign page's POST (whatever its content type).
    if !is_safe_method(req.method()) && origin_ok == Some(false) {
        tracing::info!(%peer, %path, origin = ?origin, "refused a request from a foreign origin");
        return error(
            StatusCode::FORBIDDEN,
            &path,
            "forbidden_origin",
            "requests from this origin are not allowed: only the node's own pages, pages on this machine and the desktop app may use it",
        );
    }
    // A CORS preflight from an allowed origin carries no credentials: `cors` answers it.
    if req.method() == Method::OPTIONS && origin_ok == Some(true) {
        return next.run(req).await;
    }
    let needs_key = state.exposure.is_exposed()
        && !peer.ip().to_canonical().is_loopback()
        && !is_public(req.method(), &path, upgrade);
    let mut verified = None;
    if needs_key {
        let check = match presented_key(&req) {
            Some(k) => match state.store.verify_key(k).await {
                Ok(Some(key)) if key.scope == KeyScope::Use && !is_model_door(&path, upgrade) => {
                    KeyCheck::OutOfScope
                }
                Ok(Some(key)) => {
                    verified = Some(VerifiedKey(key.id));
                    KeyCheck::Valid
                }
                Ok(None) => KeyCheck::Invalid,
                Err(e) => {
                    tracing::error!(error = %e, "checking an API key failed");
                    KeyCheck::Invalid
                }
            },
            None => KeyCheck::Missing,
        };
        if check != KeyCheck::Valid {
            tracing::info!(%peer, %path, ?check, "refused a LAN request without a valid API key");
            if upgrade {
                return refuse_websocket(req, check).await;
            }
            if check == KeyCheck::OutOfScope {
                return error(
                    StatusCode::FORBIDDEN,
                    &path,
                    "forbidden_scope",
                    check.message(),
                );
            }
            let mut resp = error(
                StatusCode::UNAUTHORIZED,
                &path,
                "unauthorized",
                check.message(),
            );
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    }
    let mut req = req;
    let caller = match &verified {
        Some(VerifiedKey(id)) => Caller::Key(id.clone()),
        None if peer.ip().to_canonical().is_loopback() => Caller::Owner,
        None => Caller::Host(peer.ip().to_canonical()),
    };
    req.extensions_mut().insert(caller);
    if let Some(v) = verified {
        req.extensions_mut().insert(v);
    }
    let mut resp = next.run(req).await;
    add_frame_guard(&mut resp);
    resp
}

/// The id of the API key this request presented and [`guard`] checked (a request from
/// another machine); handlers that keep something per caller read it.
#[derive(Debug, Clone)]
pub(crate) struct VerifiedKey(pub(crate) String);

/// CORS for the origins [`origin_allowed`] accepts (the desktop app's `fetch` above all):
/// preflights answered, responses marked for them.
pub(crate) fn cors() -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(|origin, parts| {
            let host = parts
                .headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok());
            origin.to_str().is_ok_and(|o| origin_allowed(o, host))
        }))
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            // Anthropic's browser clients.
            header::HeaderName::from_static("x-api-key"),
            header::HeaderName::from_static("anthropic-version"),
            header::HeaderName::from_static("anthropic-beta"),
            header::HeaderName::from_static("anthropic-dangerous-direct-browser-access"),
        ])
        .max_age(std::time::Duration::from_secs(600))
}

/// Complete the WebSocket handshake only to close it with 1008 (policy violation), as
/// WebSocket clients expect to learn why.
async fn refuse_websocket(req: Request, check: KeyCheck) -> Response {
    let (mut parts, _) = req.into_parts();
    let reason = match check {
        KeyCheck::Missing => "an API key is required (?token=<key>)",
        KeyCheck::OutOfScope => "this API key may use the models only",
        _ => "invalid API key",
    };
    match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws.on_upgrade(move |mut socket| async move {
            let _ = socket
                .send(Message::Close(Some(CloseFrame {
                    code: close_code::POLICY,
                    reason: reason.into(),
                })))
                .await;
        }),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_comes_as_x_api_key_bearer_or_token() {
        let uri: Uri = "/v1/messages?beta=true".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(presented_key_in(&h, &uri), None);
        h.insert("x-api-key", HeaderValue::from_static("k1"));
        assert_eq!(presented_key_in(&h, &uri).as_deref(), Some("k1"));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k2"));
        assert_eq!(presented_key_in(&h, &uri).as_deref(), Some("k2"));
        let uri: Uri = "/ws?token=k3".parse().unwrap();
        assert_eq!(
            presented_key_in(&HeaderMap::new(), &uri).as_deref(),
            Some("k3")
        );
    }

    #[tokio::test]
    async fn refusals_on_the_messages_door_are_in_anthropics_shape() {
        let r = error(
            StatusCode::UNAUTHORIZED,
            "/v1/messages",
            "unauthorized",
            "no key",
        );
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "no key"}})
        );
    }

    #[test]
    fn origins_desktop_same_and_loopback_pass() {
        let host = Some("192.168.1.20:8420");
        for ok in [
            "tauri://localhost",
            "http://tauri.localhost",
            "http://192.168.1.20:8420",
            "http://localhost:5173",
            "http://127.0.0.1:9999",
            "http://[::1]:3000",
        ] {
            assert!(origin_allowed(ok, host), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "http://192.168.1.20:9999",
            "null",
            "file://",
            "http://localhost.evil.example",
        ] {
            assert!(!origin_allowed(bad, host), "{bad}");
        }
    }

    #[test]
    fn ui_files_are_public_and_doors_are_not() {
        assert!(is_public(&Method::GET, "/", false));
        assert!(is_public(&Method::GET, "/assets/index.js", false));
        assert!(!is_public(&Method::GET, "/api/status", false));
        assert!(!is_public(&Method::POST, "/v1/chat/completions", false));
        assert!(!is_public(&Method::GET, "/generate", false));
        assert!(!is_public(&Method::GET, "/generate", true));
        assert!(!is_public(&Method::GET, "/api/events", true));
        assert!(
            !is_public(&Method::GET, "/anything", true),
            "only /node is a public WebSocket"
        );
        assert!(
            !is_public(&Method::GET, "/", true),
            "the signed-challenge socket needs a key from the LAN"
        );
        assert!(is_public(&Method::GET, "/node", true));
        assert!(!is_public(&Method::POST, "/api/auth/register", false));
    }

    #[test]
    fn a_use_key_reaches_the_model_doors_only() {
        for door in [
            "/v1/chat/completions",
            "/v1/models",
            "/v1/embeddings",
            "/v1/rerank",
            "/rerank",
            "/api/chat",
            "/api/generate",
            "/api/tags",
            "/api/show",
            "/api/embed",
            "/api/auth/register",
        ] {
            assert!(is_model_door(door, false), "{door}");
        }
        for (socket, door) in [
            ("/", true),
            ("/generate", true),
            ("/ws", true),
            ("/api/ws", true),
        ] {
            assert_eq!(is_model_door(socket, true), door, "{socket}");
        }
        for owners in [
            "/api/conversations",
            "/api/conversations/c1/messages",
            "/api/status",
            "/api/models",
            "/api/downloads",
            "/api/settings",
            "/api/keys",
            "/api/cluster",
            "/api/pull",
            "/api/delete",
            "/metrics",
        ] {
            assert!(!is_model_door(owners, false), "{owners}");
        }
        assert!(!is_model_door("/api/events", true));
    }
}
