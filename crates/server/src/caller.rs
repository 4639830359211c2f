//! Who is asking: the caller the door guard (`security`) names for every request, which
//! whatever the node keeps per caller is keyed by (the prompt cache's owner). Apart from the
//! guard so that the doors that read it import no module that imports them.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

/// Who is asking, as the guard found it (and only it: no header or field a client sends
/// names another caller): this machine's owner (loopback, the desktop app), an API key a LAN request
/// presented, or a LAN address where the node asks for no key. Whatever the node keeps per
/// caller (the prompt cache's entries: [`Caller::cache_owner`]) is keyed by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Caller {
    Owner,
    Key(String),
    Host(IpAddr),
}

impl Caller {
    /// The caller's prompt cache owner on this node.
    pub(crate) fn cache_owner(&self) -> hearth_engine::CacheOwner {
        let name = match self {
            Self::Owner => "owner".to_owned(),
            Self::Key(id) => format!("key {id}"),
            Self::Host(ip) => format!("host {ip}"),
        };
        hearth_engine::CacheOwner::caller(&name)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    /// The guard sets it on every request; a route outside the guard has no caller, and says
    /// so rather than guess one.
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "this route is outside the node's guard: its caller is unknown",
            )
                .into_response()
        })
    }
}
