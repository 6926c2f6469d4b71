//! A `floodgate serve --envoy-ratelimit-env` process on a runtime directory laid out as
//! envoyproxy/ratelimit's (`<root>/ratelimit/config/*.yaml`), for the tests that run the
//! environment mode with real redis-servers (`envoy_upstream_integration`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running environment-mode process, killed on drop.
pub struct EnvMode {
    child: Child,
    /// `name` of each "listening on ADDR (name)" line -> `http://ADDR`.
    listeners: BTreeMap<String, String>,
    log: PathBuf,
}

impl EnvMode {
    /// Starts the binary with exactly `vars` as its environment and `serve
    /// --envoy-ratelimit-env <args>`, and reads its three listening lines (API, gRPC, debug).
    pub fn start(vars: &BTreeMap<String, String>, args: &[&str], log: PathBuf) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["serve", "--envoy-ratelimit-env"])
            .args(args)
            .env_clear()
            .envs(vars)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start floodgate");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut listeners = BTreeMap::new();
        // Bounded: the process prints these right after binding, or exits (EOF).
        while listeners.len() < 3 {
            let Some(Ok(line)) = lines.next() else {
                panic!(
                    "floodgate exited before listening:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            };
            if let Some(rest) = line.strip_prefix("floodgate: listening on ") {
                let (addr, name) = rest.split_once(' ').unwrap();
                let name = name.trim_matches(['(', ')']).to_string();
                listeners.insert(name, format!("http://{addr}"));
            }
        }
        Self {
            child,
            listeners,
            log,
        }
    }

    /// `http://ADDR` of the listener whose name starts with `listener` (`API`, `gRPC`, `debug`).
    pub fn url(&self, listener: &str) -> &str {
        self.listeners
            .iter()
            .find(|(name, _)| name.starts_with(listener))
            .map(|(_, url)| url.as_str())
            .unwrap_or_else(|| panic!("no {listener} listener in {:?}", self.listeners))
    }

    /// What the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for EnvMode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A runtime directory `<root>/ratelimit/config/` holding `files`.
pub struct Runtime {
    pub dir: tempfile::TempDir,
}

impl Runtime {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ratelimit/config");
        std::fs::create_dir_all(&config).unwrap();
        for (name, text) in files {
            std::fs::write(config.join(name), text).unwrap();
        }
        Self { dir }
    }

    /// The path of `name` in the config folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join("ratelimit/config").join(name)
    }

    /// The folder for logs and other files of the test.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// upstream's integration settings (`defaultSettings()`: `RUNTIME_SUBDIRECTORY=ratelimit`,
    /// tcp sockets, no statsd) on free ports of 127.0.0.1, with a 5 s Redis timeout (exact
    /// counts on a loaded host need a patient store) and the `rl_` key prefix; `REDIS_URL` is
    /// the caller's to set.
    pub fn vars(&self) -> BTreeMap<String, String> {
        let mut vars: BTreeMap<String, String> = [
            ("USE_STATSD", "false"),
            ("LOG_LEVEL", "info"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_APPDIRECTORY", "config"),
            ("HOST", "127.0.0.1"),
            ("PORT", "0"),
            ("GRPC_HOST", "127.0.0.1"),
            ("GRPC_PORT", "0"),
            ("DEBUG_HOST", "127.0.0.1"),
            ("DEBUG_PORT", "0"),
            ("CACHE_KEY_PREFIX", "rl_"),
            ("REDIS_TIMEOUT", "5s"),
            ("REDIS_PERSECOND_TIMEOUT", "5s"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        vars.insert("RUNTIME_ROOT".into(), self.dir.path().display().to_string());
        vars
    }
}
