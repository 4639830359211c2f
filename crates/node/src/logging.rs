//! The log both programs write, `hearth-node` and the desktop app: `tracing` to standard
//! error, filtered by `RUST_LOG` (info by default, llama.cpp's own chatter at warn), coloured
//! only for a terminal.

use tracing_subscriber::EnvFilter;

/// Start logging; once per process, before anything logs.
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,llama_cpp_2=warn,llama-cpp-2=warn")),
        )
        .with_writer(std::io::stderr)
        // Colours only for a terminal: a log file gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
