//! The door's `status` and `error` messages, and the error kind and recovery action each
//! engine failure or refused submission maps to.

use hearth_engine::{Failure, FailureKind, SubmitError};
use hearth_protocol::streaming::{self as sw, ErrorKind, RecoveryAction, ServerMessage};
use hearth_protocol::ModelId;

/// An error message, with the request it concerns.
pub(super) fn error(
    kind: ErrorKind,
    message: impl Into<String>,
    recoverable: bool,
    action: RecoveryAction,
    request_id: Option<String>,
) -> ServerMessage {
    ServerMessage::Error(sw::ErrorMessage {
        error: kind,
        message: message.into(),
        recoverable,
        recovery_action: action,
        request_id,
    })
}

/// The model this socket waits for (or asked for) failed to load: not retryable as is.
pub(super) fn load_failed(model: &ModelId, message: &str) -> ServerMessage {
    error(
        ErrorKind::ModelLoadingError,
        format!("model {model} failed to load: {message}"),
        false,
        RecoveryAction::None,
        None,
    )
}

pub(super) fn invalid(message: impl Into<String>) -> ServerMessage {
    error(
        ErrorKind::InvalidRequest,
        message,
        true,
        RecoveryAction::FixRequest,
        None,
    )
}

pub(super) fn status(
    operation: &str,
    progress: u8,
    message: impl Into<String>,
    eta: Option<f64>,
) -> ServerMessage {
    ServerMessage::Status(sw::Status {
        operation: operation.into(),
        progress,
        message: message.into(),
        eta_seconds: eta,
    })
}

pub(super) fn failure(f: &Failure, request_id: String) -> ServerMessage {
    match f.kind {
        FailureKind::ShuttingDown => error(
            ErrorKind::ServerShutdown,
            f.message.clone(),
            true,
            RecoveryAction::Reconnect,
            Some(request_id),
        ),
        FailureKind::Unloaded => error(
            ErrorKind::ModelLoadingError,
            f.message.clone(),
            true,
            RecoveryAction::RetryLater,
            Some(request_id),
        ),
        FailureKind::Decode => error(
            ErrorKind::InternalError,
            f.message.clone(),
            true,
            RecoveryAction::Retry,
            Some(request_id),
        ),
        FailureKind::Invalid => error(
            ErrorKind::InvalidRequest,
            f.message.clone(),
            true,
            RecoveryAction::FixRequest,
            Some(request_id),
        ),
    }
}

pub(super) fn submit_error(e: &SubmitError) -> ServerMessage {
    let message = e.to_string();
    match e {
        SubmitError::ContextLengthExceeded { .. } => error(
            ErrorKind::ContextLengthExceeded,
            message,
            true,
            RecoveryAction::ReducePrompt,
            None,
        ),
        SubmitError::QueueFull { .. } => error(
            ErrorKind::RateLimited,
            message,
            true,
            RecoveryAction::RetryLater,
            None,
        ),
        SubmitError::ModelLoading { .. } => error(
            ErrorKind::ModelLoadingError,
            message,
            true,
            RecoveryAction::RetryLater,
            None,
        ),
        SubmitError::LoadFailed { .. } => error(
            ErrorKind::ModelLoadingError,
            message,
            false,
            RecoveryAction::None,
            None,
        ),
        SubmitError::Prompt(_) => error(
            ErrorKind::InvalidRequest,
            message,
            true,
            RecoveryAction::FixRequest,
            None,
        ),
        SubmitError::NoModel | SubmitError::Unavailable { .. } => error(
            ErrorKind::ModelLoadingError,
            message,
            true,
            RecoveryAction::RetryLater,
            None,
        ),
        SubmitError::ShuttingDown => error(
            ErrorKind::ServerShutdown,
            message,
            true,
            RecoveryAction::Reconnect,
            None,
        ),
    }
}
