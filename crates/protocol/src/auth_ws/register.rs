//! `POST /api/auth/register` of the signed-challenge protocol: the request body
//! ([`parse_registration`]: `name`, `publicKey`, optional `signatureAlgorithm`) and the
//! document's answers ([`RegisterReply`]). Checking the key itself is the node's.

use serde::Serialize;
use serde_json::{Map, Value};

/// Longest client name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A registration request, structurally valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Trimmed, 1 to [`MAX_NAME_CHARS`] characters.
    pub name: String,
    /// PEM, as sent.
    pub public_key: String,
    pub signature_algorithm: Option<String>,
}

/// The document's error codes for registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegisterCode {
    InvalidRequest,
    InvalidKey,
    ClientRevoked,
    InternalError,
}

/// Why a registration body was refused (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterError {
    pub code: RegisterCode,
    pub message: String,
}

fn refuse(code: RegisterCode, message: impl Into<String>) -> RegisterError {
    RegisterError {
        code,
        message: message.into(),
    }
}

pub fn parse_registration(body: &[u8]) -> Result<Registration, RegisterError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        refuse(
            RegisterCode::InvalidRequest,
            format!("the body must be JSON: {e}"),
        )
    })?;
    let Value::Object(o) = value else {
        return Err(refuse(
            RegisterCode::InvalidRequest,
            "the body must be a JSON object with name and publicKey",
        ));
    };
    Ok(Registration {
        name: name(&o)?,
        public_key: match o.get("publicKey") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => {
                return Err(refuse(RegisterCode::InvalidKey, "publicKey is required"))
            }
            Some(_) => {
                return Err(refuse(
                    RegisterCode::InvalidKey,
                    "publicKey must be a string (PEM)",
                ))
            }
        },
        signature_algorithm: match o.get("signatureAlgorithm") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(refuse(
                    RegisterCode::InvalidRequest,
                    "signatureAlgorithm must be a string",
                ))
            }
        },
    })
}

fn name(o: &Map<String, Value>) -> Result<String, RegisterError> {
    match o.get("name") {
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() || s.chars().count() > MAX_NAME_CHARS {
                Err(refuse(
                    RegisterCode::InvalidRequest,
                    format!("name must be 1 to {MAX_NAME_CHARS} characters"),
                ))
            } else {
                Ok(s.to_owned())
            }
        }
        None | Some(Value::Null) => Err(refuse(RegisterCode::InvalidRequest, "name is required")),
        Some(_) => Err(refuse(
            RegisterCode::InvalidRequest,
            "name must be a string",
        )),
    }
}

/// The answer: `{"success":true,"clientId","message"}` or `{"success":false,"error","code"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterReply {
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<RegisterCode>,
}

impl RegisterReply {
    pub fn registered(client_id: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            success: true,
            client_id: Some(client_id.into()),
            message: Some(message.into()),
            error: None,
            code: None,
        }
    }

    pub fn refused(code: RegisterCode, error: impl Into<String>) -> Self {
        Self {
            success: false,
            client_id: None,
            message: None,
            error: Some(error.into()),
            code: Some(code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_and_their_errors() {
        let ok = parse_registration(
            br#"{"name":" my-client ","publicKey":"PEM","signatureAlgorithm":"SHA256"}"#,
        )
        .unwrap();
        assert_eq!(ok.name, "my-client");
        assert_eq!(ok.signature_algorithm.as_deref(), Some("SHA256"));
        for (body, code, needle) in [
            ("nope", RegisterCode::InvalidRequest, "JSON"),
            ("[1]", RegisterCode::InvalidRequest, "object"),
            (
                r#"{"publicKey":"k"}"#,
                RegisterCode::InvalidRequest,
                "name is required",
            ),
            (
                r#"{"name":" ","publicKey":"k"}"#,
                RegisterCode::InvalidRequest,
                "1 to 200",
            ),
            (
                r#"{"name":5,"publicKey":"k"}"#,
                RegisterCode::InvalidRequest,
                "string",
            ),
            (
                r#"{"name":"a"}"#,
                RegisterCode::InvalidKey,
                "publicKey is required",
            ),
            (
                r#"{"name":"a","publicKey":1}"#,
                RegisterCode::InvalidKey,
                "PEM",
            ),
            (
                r#"{"name":"a","publicKey":"k","signatureAlgorithm":1}"#,
                RegisterCode::InvalidRequest,
                "signatureAlgorithm",
            ),
        ] {
            let e = parse_registration(body.as_bytes()).unwrap_err();
            assert_eq!(e.code, code, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }

    #[test]
    fn replies_have_the_documents_shapes() {
        assert_eq!(
            serde_json::to_value(RegisterReply::registered(
                "e3b0",
                "Client registered successfully"
            ))
            .unwrap(),
            serde_json::json!({"success": true, "clientId": "e3b0", "message": "Client registered successfully"})
        );
        assert_eq!(
            serde_json::to_value(RegisterReply::refused(
                RegisterCode::InvalidKey,
                "Invalid public key format"
            ))
            .unwrap(),
            serde_json::json!({"success": false, "error": "Invalid public key format", "code": "invalid_key"})
        );
    }
}
