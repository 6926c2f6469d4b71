//! [`RedisServer`]: one `redis-server` or `valkey-server` process, and its [`Flavor`].

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;

use super::certs::TestCerts;
use super::process::{cli, free_port, missing_binary, raw_command, wait_until};
use super::process::{DIR_COUNTER, VALKEY_SERVER_ENV};

/// Which server implementation a test starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `redis-server`.
    Redis,
    /// `valkey-server` (Valkey, the Linux Foundation's fork of Redis 7.2).
    Valkey,
}

impl Flavor {
    /// Both flavors, Redis first.
    pub const ALL: [Flavor; 2] = [Flavor::Redis, Flavor::Valkey];

    /// The server binary: `redis-server`, or for Valkey the path in `FLOODGATE_VALKEY_SERVER`
    /// (else `valkey-server`).
    pub fn binary(self) -> String {
        match self {
            Flavor::Redis => "redis-server".into(),
            Flavor::Valkey => std::env::var(VALKEY_SERVER_ENV)
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "valkey-server".into()),
        }
    }

    /// `"redis"` or `"valkey"`, for test messages.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Redis => "redis",
            Flavor::Valkey => "valkey",
        }
    }
}

/// A `redis-server` (or `valkey-server`) process owned by the test; killed (and its folder
/// removed) on drop.
#[derive(Debug)]
pub struct RedisServer {
    pub(super) port: u16,
    /// The TLS port, for a server started with [`RedisServer::start_tls`].
    pub(super) tls_port: Option<u16>,
    pub(super) dir: PathBuf,
    pub(super) cluster: bool,
    pub(super) flavor: Flavor,
    /// Extra server arguments, kept for [`RedisServer::restart`].
    pub(super) extra: Vec<String>,
    pub(super) child: Option<Child>,
}

impl RedisServer {
    /// Starts a standalone server on a free port and waits until it answers `PING`.
    ///
    /// # Errors
    /// When `redis-server` is missing (the message names `scripts/test`), cannot start, or does
    /// not become ready within 10 s.
    pub fn start() -> io::Result<Self> {
        Self::start_with(Flavor::Redis, false, &[])
    }

    /// Like [`RedisServer::start`] on the server of `flavor`.
    ///
    /// # Errors
    /// As [`RedisServer::start`] (a missing `valkey-server` names `FLOODGATE_VALKEY_SERVER`).
    pub fn start_flavor(flavor: Flavor) -> io::Result<Self> {
        Self::start_with(flavor, false, &[])
    }

    /// Like [`RedisServer::start`] with extra `redis-server` arguments (e.g.
    /// `["--maxmemory-policy", "allkeys-lru"]`).
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start_with_args(args: &[&str]) -> io::Result<Self> {
        Self::start_with(Flavor::Redis, false, args)
    }

    /// Like [`RedisServer::start_with_args`] on the server of `flavor`.
    ///
    /// # Errors
    /// As [`RedisServer::start_flavor`].
    pub fn start_flavor_with_args(flavor: Flavor, args: &[&str]) -> io::Result<Self> {
        Self::start_with(flavor, false, args)
    }

    /// A standalone Redis that also listens with TLS on [`tls_port`](Self::tls_port), with the
    /// server certificate of `certs`; with `client_certs`, TLS clients must present a
    /// certificate signed by its CA (mutual TLS). The plain port stays open for the harness
    /// and `redis-cli`.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start_tls(certs: &TestCerts, client_certs: bool) -> io::Result<Self> {
        Self::start_tls_node(certs, client_certs, false)
    }

    pub(super) fn start_tls_node(
        certs: &TestCerts,
        client_certs: bool,
        cluster: bool,
    ) -> io::Result<Self> {
        // With --tls-cluster the bus listens on the TLS port + 10000, which must be free too.
        let tls_port = free_port(cluster)?;
        let mut args = certs.server_args(tls_port, client_certs);
        if cluster {
            args.extend(["--tls-cluster".into(), "yes".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut server = Self::start_with(Flavor::Redis, cluster, &args)?;
        server.tls_port = Some(tls_port);
        Ok(server)
    }

    pub(super) fn start_with(flavor: Flavor, cluster: bool, args: &[&str]) -> io::Result<Self> {
        let port = free_port(cluster)?;
        let dir = std::env::temp_dir().join(format!(
            "floodgate-redis-{}-{}-{port}",
            std::process::id(),
            DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            port,
            tls_port: None,
            dir,
            cluster,
            flavor,
            extra: args.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> io::Result<()> {
        let extra = self.extra.clone();
        // Fail early with a clear message when the server is not installed.
        let binary = self.flavor.binary();
        Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| missing_binary(&binary, e))?;
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let mut args: Vec<&str> = vec!["--port", &port, "--bind", "127.0.0.1", "--save", ""];
        args.extend([
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--dir",
            &dir,
        ]);
        if self.cluster {
            args.extend([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ]);
            // 5 s: on a loaded shared test host a node may not answer the cluster bus for
            // 2 s, and its peers then mark the cluster down in the middle of a reshard.
            args.extend(["--cluster-node-timeout", "5000"]);
        }
        args.extend(extra.iter().map(String::as_str));
        // A watchdog shell owns the server and kills it when its stdin (a pipe from this
        // process) closes: on drop, and also when the test process dies without running
        // destructors (a panic in a static, a killed test binary), so no server outlives it.
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"b=$1; shift; "$b" "$@" >/dev/null 2>&1 & r=$!; read _; kill -9 $r; wait $r"#)
            .arg("sh")
            .arg(&binary)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| missing_binary("sh", e))?;
        self.child = Some(child);
        let p = self.port;
        wait_until(&format!("{binary} on port {p}"), || {
            // -NOAUTH: it answers, and asks for the `--requirepass` it was given.
            raw_command(p, "PING").is_ok_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
        })?;
        // The server answering is the one asked for (Valkey reports `valkey_version`).
        let info = raw_command(p, "INFO server")?;
        if info.contains("valkey_version:") != (self.flavor == Flavor::Valkey) {
            return Err(io::Error::other(format!(
                "{binary} on port {p} is not a {} server",
                self.flavor.name()
            )));
        }
        Ok(())
    }

    /// Which server this is.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TLS port of a server started with [`RedisServer::start_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:<tls port>` (an address the test server certificate names), for a
    /// server started with [`RedisServer::start_tls`].
    ///
    /// # Panics
    /// When the server has no TLS port.
    pub fn tls_url(&self) -> String {
        format!(
            "rediss://127.0.0.1:{}",
            self.tls_port.expect("a server started with start_tls")
        )
    }

    /// The server's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the process (SIGKILL) and waits for it to exit. The port stays reserved for
    /// [`RedisServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Closing the watchdog's stdin makes it SIGKILL the server and reap it.
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port(s) and with the same arguments (after
    /// [`RedisServer::kill`]), empty.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }

    /// Runs `redis-cli -p <port> <args>` and returns its standard output, trimmed.
    ///
    /// # Errors
    /// When redis-cli is missing or exits with an error.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        cli(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
