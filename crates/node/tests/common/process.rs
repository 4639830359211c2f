//! A real `hearth-node serve` process for tests that need one of their own (signals, file
//! descriptor limits, a second node on one data dir): started on a free port with a temp
//! data dir, its URL read from its first line, killed on drop even when the test panics.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

pub struct NodeProcess {
    pub child: Child,
    pub url: String,
    pub addr: String,
    /// The lines after the first (the ready line, ...).
    pub lines: Lines<BufReader<ChildStdout>>,
    /// Where the node's stderr goes.
    pub log: std::path::PathBuf,
}

impl NodeProcess {
    /// `hearth-node serve --port 0 --data-dir DATA --model <default model> ARGS`, run through
    /// `sh -c "ulimit -n N; exec ..."` when `open_files` is given. Waits for the ready line.
    pub fn start(data_dir: &Path, args: &[&str], open_files: Option<u32>) -> Self {
        let model = super::model_path();
        let bin = env!("CARGO_BIN_EXE_hearth-node");
        let log = data_dir.with_extension("log");
        let mut cmd = match open_files {
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.args(["serve", "--port", "0", "--key-storage", "file"])
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--model")
            .arg(&model)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"));
        let mut child = cmd.spawn().expect("starting hearth-node");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("the node printed nothing: {}", read(&log)));
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_owned();
        let ready = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(ready.contains("is ready"), "{ready}: {}", read(&log));
        let addr = url.trim_start_matches("http://").to_owned();
        Self {
            child,
            url,
            addr,
            lines,
            log,
        }
    }

    /// What the node wrote to stderr so far.
    pub fn stderr(&self) -> String {
        read(&self.log)
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
