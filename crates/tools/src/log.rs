//! A server's log as the user sees it: the last [`LOG_LINES`] lines of its stderr (and the
//! client's own notes about it: stdout lines that were not MCP, exits), each cut to
//! [`LOG_LINE_BYTES`], so a chatty or hostile server cannot grow the node's memory.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Lines kept per server.
pub const LOG_LINES: usize = 200;

/// The longest line kept; longer ones end in `…`.
pub const LOG_LINE_BYTES: usize = 2048;

/// How the client's own lines in a server's log begin.
pub(crate) const NOTE: &str = "[hearth] ";

/// A bounded ring of a server's recent log lines.
#[derive(Debug, Default)]
pub(crate) struct ServerLog {
    lines: Mutex<VecDeque<String>>,
}

impl ServerLog {
    pub(crate) fn push(&self, line: &str) {
        let line = line.trim_end_matches(['\r', '\n']);
        let kept = if line.len() > LOG_LINE_BYTES {
            let mut end = LOG_LINE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &line[..end])
        } else {
            line.to_owned()
        };
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == LOG_LINES {
            lines.pop_front();
        }
        lines.push_back(kept);
    }

    /// The kept lines, oldest first.
    pub(crate) fn lines(&self) -> Vec<String> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect()
    }

    /// The last line the server itself wrote (not one of [`NOTE`]'s), for an error message
    /// ("exited (code 1); it said: Error: ENOENT ...").
    pub(crate) fn last_said(&self) -> Option<String> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().rev().find(|l| !l.starts_with(NOTE)).cloned()
    }

    /// Adds the client's own note about the server, marked with [`NOTE`].
    pub(crate) fn note(&self, text: &str) {
        self.push(&format!("{NOTE}{text}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_lines_each_bounded() {
        let log = ServerLog::default();
        for i in 0..LOG_LINES + 5 {
            log.push(&format!("line {i}\n"));
        }
        let lines = log.lines();
        assert_eq!(lines.len(), LOG_LINES);
        assert_eq!(lines[0], "line 5");
        log.note("exited");
        assert_eq!(
            log.last_said().as_deref(),
            Some(&*format!("line {}", LOG_LINES + 4))
        );
        log.push(&"é".repeat(LOG_LINE_BYTES));
        let long = log.last_said().unwrap();
        assert!(long.len() <= LOG_LINE_BYTES + '…'.len_utf8() && long.ends_with('…'));
    }
}
