//! `POST /api/auth/register`: a client registers its public key and learns its `clientId`
//! (keys, ids and verification: `hearth_auth::clients`). Answers in the document's shape:
//! 200 `{"success":true,"clientId","message"}`, else `{"success":false,"error","code"}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_protocol::auth_ws::register::{
    parse_registration, RegisterCode, RegisterReply, Registration as Request,
};

use crate::state::AppState;
use hearth_auth::clients::{self, ClientKey};
use hearth_store::clients::{KeyRow, Registration};

fn register_error(status: StatusCode, code: RegisterCode, message: impl Into<String>) -> Response {
    (status, Json(RegisterReply::refused(code, message))).into_response()
}

pub(crate) async fn register(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            return register_error(
                e.status(),
                RegisterCode::InvalidRequest,
                crate::error::body_rejection_text(&e),
            )
        }
    };
    let Request {
        name,
        public_key,
        signature_algorithm: algorithm,
    } = match parse_registration(&body) {
        Ok(r) => r,
        Err(e) => return register_error(StatusCode::BAD_REQUEST, e.code, e.message),
    };
    let key = match ClientKey::parse(&public_key) {
        Ok(k) => k,
        Err(e @ clients::KeyError::Unsupported(_)) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                RegisterCode::InvalidKey,
                e.to_string(),
            )
        }
        Err(e) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                RegisterCode::InvalidKey,
                format!("Invalid public key format: {e}"),
            )
        }
    };
    if let Some(a) = algorithm.as_deref() {
        if !key.algorithm().accepts(a) {
            let expected = match key.algorithm() {
                clients::Algorithm::Ed25519 => "Ed25519",
                clients::Algorithm::RsaSha256 => "SHA256",
            };
            return register_error(
                StatusCode::BAD_REQUEST,
                RegisterCode::InvalidKey,
                format!(
                    "signatureAlgorithm {a} is not supported with this {} key; use {expected}",
                    key.algorithm()
                ),
            );
        }
    }
    let row = KeyRow {
        client_id: key.client_id(),
        algorithm: key.algorithm().as_str().to_owned(),
        der: key.der().to_vec(),
    };
    match state.store.register_client(name, row).await {
        Ok(Registration::Created(c)) => {
            tracing::info!(client_id = %c.client_id, name = %c.name, algorithm = %c.algorithm, "registered a client");
            (
                StatusCode::OK,
                Json(RegisterReply::registered(
                    c.client_id,
                    "Client registered successfully",
                )),
            )
                .into_response()
        }
        Ok(Registration::Existing(c)) => (
            StatusCode::OK,
            Json(RegisterReply::registered(
                c.client_id,
                "Client already registered",
            )),
        )
            .into_response(),
        Ok(Registration::Revoked(c)) => register_error(
            StatusCode::FORBIDDEN,
            RegisterCode::ClientRevoked,
            format!(
                "client {} was revoked on this node; remove it (hearth-node clients remove {}) to register this key again, or use a new key",
                c.client_id, c.client_id
            ),
        ),
        Err(e) => {
            tracing::error!(error = %e, "registering a client failed");
            register_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                RegisterCode::InternalError,
                "the client could not be stored",
            )
        }
    }
}
