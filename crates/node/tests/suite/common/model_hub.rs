//! `tests/hub_server.py`, a Hugging Face-style hub on loopback written from the hub's documented
//! HTTP surface (file listings, downloads with ranges, the model search), as a test's child:
//! started with the files its repository holds, stopped when dropped.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// The hub, stopped (its stdin closed, then killed) when dropped.
pub struct ModelHub {
    child: Child,
    pub url: String,
}

impl ModelHub {
    /// A hub whose repository `repo` holds `files` (each its path there, and the file), with
    /// `more` arguments of the fixture's (other repositories its search lists).
    pub fn serving(repo: &str, files: &[(&str, PathBuf)], more: &[&str]) -> Self {
        let mut cmd = Command::new(super::process::venv_python());
        cmd.arg(super::process::repo_root().join("tests/hub_server.py"))
            .args(["--repo", repo])
            .args(more);
        for (path, file) in files {
            cmd.args(["--path", path, "--file"]).arg(file);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the hub server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the hub's first line: {line:?}"));
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    pub async fn control(&self, faults: Value) {
        let r = super::client()
            .post(format!("{}/_control", self.url))
            .json(&faults)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }

    /// Every request the hub logged: file requests (`path`, `range`) and searches (`search`).
    pub async fn log(&self) -> Vec<Value> {
        super::get_json_at(format!("{}/_log", self.url))
            .await
            .as_array()
            .unwrap()
            .clone()
    }

    /// The Range header of each file request, in order.
    pub async fn ranges(&self) -> Vec<Option<String>> {
        self.log()
            .await
            .iter()
            .filter(|e| e.get("path").is_some())
            .map(|e| e["range"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for ModelHub {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
