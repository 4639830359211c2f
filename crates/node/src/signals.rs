//! The signals that ask a node to stop: Ctrl-C (SIGINT) everywhere, and SIGTERM on Unix (a
//! `kill`, a service manager, the session ending at logout). `hearth-node serve` and the desktop
//! app both stop gracefully on them, as on their own Quit.

/// Resolves when this process is asked to stop.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
