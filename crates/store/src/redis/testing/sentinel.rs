//! [`RedisSentinel`]: a `redis-server --sentinel` watching one master.

use std::io;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::Ordering;

use super::process::{cli, free_port, raw_command, wait_until, watchdog, DIR_COUNTER};

/// A `redis-server --sentinel` process monitoring one master as `mymaster` (quorum 2,
/// `down-after-milliseconds` 1000, `failover-timeout` 10000), owned by the test; killed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    port: u16,
    /// Set by [`start_tls`](Self::start_tls).
    tls_port: Option<u16>,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisSentinel {
    /// The name the sentinels monitor the master under.
    pub const MASTER_NAME: &'static str = "mymaster";

    /// Starts a sentinel on a free port watching the master at `127.0.0.1:<master_port>`,
    /// and waits until it answers `PING`.
    ///
    /// # Errors
    /// As [`RedisServer::start`](super::RedisServer::start).
    pub fn start(master_port: u16) -> io::Result<Self> {
        Self::start_with(master_port, None, None, None)
    }

    /// Like [`start`](Self::start) for a master that needs `master_password` (`sentinel
    /// auth-pass`), the sentinel itself asking clients for `password` (`requirepass`) when
    /// given. Its [`cli`](Self::cli) then needs `-a <password>` among its arguments.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with_auth(
        master_port: u16,
        master_password: Option<&str>,
        password: Option<&str>,
    ) -> io::Result<Self> {
        Self::start_with(master_port, None, master_password, password)
    }

    /// Like [`start`](Self::start), and also listening with TLS (the server certificate of
    /// `certs`; with `client_certs`, TLS clients must present a certificate signed by its CA),
    /// and reaching the master over TLS (`tls-replication yes`, presenting the server
    /// certificate as its client certificate) at its TLS port `master_tls_port`. Clients use
    /// [`tls_url`](Self::tls_url); the plain port stays open for the harness.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_tls(
        master_tls_port: u16,
        certs: &super::TestCerts,
        client_certs: bool,
    ) -> io::Result<Self> {
        Self::start_with(master_tls_port, Some((certs, client_certs)), None, None)
    }

    fn start_with(
        master_port: u16,
        tls: Option<(&super::TestCerts, bool)>,
        master_password: Option<&str>,
        password: Option<&str>,
    ) -> io::Result<Self> {
        let port = free_port(false)?;
        let dir = std::env::temp_dir().join(format!(
            "floodgate-sentinel-{}-{}-{port}",
            std::process::id(),
            DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 10000\n\
                 sentinel parallel-syncs {name} 1\n{auth_pass}{requirepass}",
                dir.display(),
                name = Self::MASTER_NAME,
                auth_pass = master_password
                    .map(|p| format!("sentinel auth-pass {} {p}\n", Self::MASTER_NAME))
                    .unwrap_or_default(),
                requirepass = password
                    .map(|p| format!("requirepass {p}\n"))
                    .unwrap_or_default(),
            ),
        )?;
        let conf = conf.to_string_lossy().into_owned();
        let mut args = vec![conf, "--sentinel".to_string()];
        let tls_port = match tls {
            Some((certs, client_certs)) => {
                let tls_port = free_port(false)?;
                args.extend(certs.server_args(tls_port, client_certs));
                args.extend(["--tls-replication".into(), "yes".into()]);
                Some(tls_port)
            }
            None => None,
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = watchdog("redis-server", &args)?;
        let sentinel = Self {
            port,
            tls_port,
            dir,
            child: Some(child),
        };
        wait_until(&format!("redis-sentinel on port {port}"), || {
            // -NOAUTH: it answers, and asks for its password.
            raw_command(port, "PING")
                .is_ok_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
        })?;
        Ok(sentinel)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:<tls port>` of a sentinel made by [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    /// When the sentinel has no TLS port.
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("a sentinel started with start_tls");
        format!("rediss://127.0.0.1:{port}")
    }

    /// Runs `redis-cli` against this sentinel.
    ///
    /// # Errors
    /// As [`RedisServer::cli`](super::RedisServer::cli).
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        cli(self.port, args)
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
