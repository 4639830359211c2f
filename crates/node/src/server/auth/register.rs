//! `POST /api/auth/register`: a client registers its public key and learns its `clientId`
//! (keys, ids and verification: `crate::auth::clients`). Answers in the document's shape:
//! 200 `{"success":true,"clientId","message"}`, else `{"success":false,"error","code"}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::auth::clients::{self, ClientKey};
use crate::server::AppState;
use crate::store::clients::Registration;

fn register_error(status: StatusCode, code: &'static str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"success": false, "error": message.into(), "code": code})),
    )
        .into_response()
}

pub(crate) async fn register(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return register_error(e.status(), "invalid_request", e.body_text()),
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("the body must be JSON: {e}"),
            )
        }
    };
    let Value::Object(o) = value else {
        return register_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body must be a JSON object with name and publicKey",
        );
    };
    let name = match o.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.trim().chars().count() <= 200 => {
            s.trim().to_owned()
        }
        Some(Value::String(_)) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name must be 1 to 200 characters",
            )
        }
        None | Some(Value::Null) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name is required",
            )
        }
        Some(_) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name must be a string",
            )
        }
    };
    let public_key = match o.get("publicKey") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                "publicKey is required",
            )
        }
        Some(_) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                "publicKey must be a string (PEM)",
            )
        }
    };
    let algorithm = match o.get("signatureAlgorithm") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "signatureAlgorithm must be a string",
            )
        }
    };
    let key = match ClientKey::parse(public_key) {
        Ok(k) => k,
        Err(e @ clients::KeyError::Unsupported(_)) => {
            return register_error(StatusCode::BAD_REQUEST, "invalid_key", e.to_string())
        }
        Err(e) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                format!("Invalid public key format: {e}"),
            )
        }
    };
    if let Some(a) = algorithm {
        if !key.algorithm().accepts(a) {
            let expected = match key.algorithm() {
                clients::Algorithm::Ed25519 => "Ed25519",
                clients::Algorithm::RsaSha256 => "SHA256",
            };
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                format!(
                    "signatureAlgorithm {a} is not supported with this {} key; use {expected}",
                    key.algorithm()
                ),
            );
        }
    }
    match state.store.register_client(name, key).await {
        Ok(Registration::Created(c)) => {
            tracing::info!(client_id = %c.client_id, name = %c.name, algorithm = %c.algorithm, "registered a client");
            (
                StatusCode::OK,
                Json(json!({"success": true, "clientId": c.client_id, "message": "Client registered successfully"})),
            )
                .into_response()
        }
        Ok(Registration::Existing(c)) => (
            StatusCode::OK,
            Json(json!({"success": true, "clientId": c.client_id, "message": "Client already registered"})),
        )
            .into_response(),
        Ok(Registration::Revoked(c)) => register_error(
            StatusCode::FORBIDDEN,
            "client_revoked",
            format!(
                "client {} was revoked on this node; remove it (hearth-node clients remove {}) to register this key again, or use a new key",
                c.client_id, c.client_id
            ),
        ),
        Err(e) => {
            tracing::error!(error = %e, "registering a client failed");
            register_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the client could not be stored",
            )
        }
    }
}
