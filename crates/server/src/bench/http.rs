//! `--what http`: throughput and latency of `floodgate serve`, driven by a built-in load
//! generator over loopback.
//!
//! Every case starts a fresh `floodgate serve` child process (this same executable) on
//! `127.0.0.1:0`, reads the address it prints, and runs `--connections` keep-alive HTTP/1.1
//! connections, each sending its next request as soon as the previous answer is read, until
//! `--requests` answers or `--http-seconds` have passed, whichever comes first. Latency is
//! measured per request from the write to the end of the answer.
//!
//! Cases: the upstream alone (the ceiling: a small in-process hello server), the reverse proxy
//! with no rule, the proxy with one per-client-IP rule of each algorithm (a quota nothing
//! reaches, so every request is admitted and forwarded), and the decision endpoint
//! `POST /v1/check` over 1,000 keys. The load generator, the server and the upstream share
//! this machine's CPUs.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use floodgate_core::AlgorithmKind;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::report::{num, Section};
use super::{BenchArgs, Progress};

/// A `floodgate serve` child, killed on drop.
struct Server {
    child: Child,
    /// Where requests go: the proxy listener, or the API listener without an upstream.
    addr: SocketAddr,
    _config: tempfile_like::TempFile,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file in the system temp directory, removed on drop.
mod tempfile_like {
    use std::path::PathBuf;

    pub struct TempFile(pub PathBuf);

    impl TempFile {
        pub fn new(name: &str, text: &str) -> std::io::Result<Self> {
            let path = std::env::temp_dir().join(format!(
                "floodgate-bench-{}-{name}.toml",
                std::process::id()
            ));
            std::fs::write(&path, text)?;
            Ok(Self(path))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Starts `floodgate serve` with `config` (and `upstream` for the proxy); waits for the
/// address it prints.
fn start_server(name: &str, config: &str, upstream: Option<SocketAddr>) -> anyhow::Result<Server> {
    let file = tempfile_like::TempFile::new(name, config).context("writing the bench config")?;
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--config")
        .arg(&file.0)
        .args(["--listen", "127.0.0.1:0", "--watch-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(up) = upstream {
        cmd.args(["--upstream", &format!("http://{up}")])
            .args(["--admin-listen", "127.0.0.1:0"]);
    }
    let mut child = cmd.spawn().context("starting floodgate serve")?;
    let stdout = child.stdout.take().context("serve stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // The first "listening on" line is the proxy listener with an upstream, the API otherwise.
    let addr = loop {
        let Some(line) = lines.next() else {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
            }
            bail!(
                "floodgate serve exited before listening ({name}): {}",
                err.trim()
            );
        };
        let line = line?;
        if let Some(rest) = line.strip_prefix("floodgate: listening on ") {
            let addr = rest.split_whitespace().next().unwrap_or_default();
            break addr.parse().with_context(|| format!("parsing {addr:?}"))?;
        }
    };
    // Keep draining stdout and stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
    }
    Ok(Server {
        child,
        addr,
        _config: file,
    })
}

/// Result of one load run.
struct Load {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    /// Sorted latencies in microseconds.
    latencies: Vec<u32>,
}

impl Load {
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        f64::from(self.latencies[i])
    }
}

/// Reads one HTTP/1.1 answer (Content-Length or chunked) from `stream` into `buf`; returns
/// the status code.
async fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<u16> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..header_end]).context("non-UTF-8 head")?;
    let status: u16 = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .context("no status code")?;
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match length {
        Some(len) => {
            while buf.len() < header_end + len {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    bail!("connection closed in the body");
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        None if lower.contains("transfer-encoding: chunked") => {
            while find(&buf[header_end..], b"0\r\n\r\n").is_none() {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    bail!("connection closed in a chunked body");
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        None => {}
    }
    Ok(status)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Runs the load: `connections` connections to `addr`, `make(i)` gives request `i`'s bytes.
#[allow(clippy::disallowed_methods)] // a load generator measures elapsed time
async fn load(
    addr: SocketAddr,
    connections: usize,
    max_requests: u64,
    max_time: Duration,
    make: Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>,
) -> anyhow::Result<Load> {
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let issued = Arc::clone(&issued);
        let make = Arc::clone(&make);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut buf = Vec::with_capacity(16 * 1024);
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                if i >= max_requests || start.elapsed() >= max_time {
                    break;
                }
                let req = make(i);
                let t = Instant::now();
                stream.write_all(&req).await?;
                let status = read_answer(&mut stream, &mut buf).await?;
                lat.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                if !(200..300).contains(&status) {
                    errors += 1;
                }
            }
            anyhow::Ok((lat, errors))
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await??;
        latencies.extend(lat);
        errors += e;
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    Ok(Load {
        requests: latencies.len() as u64,
        errors,
        elapsed,
        latencies,
    })
}

/// A tiny upstream for the proxy cases: answers every request with 200 and `hello`.
async fn upstream() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(|| async { "hello" });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

fn rule_config(kind: AlgorithmKind) -> String {
    // A quota no bench reaches, so every request is admitted and the case measures the
    // limiter's overhead on the forwarded request: 10 million per second, or for the sliding
    // log (whose limit the config caps at 10,000 entries) 10,000 per 100 ms.
    let (limit, period) = if kind == AlgorithmKind::SlidingLog {
        (10_000, "100ms")
    } else {
        (10_000_000, "1s")
    };
    format!(
        "[[rules]]\nname = \"per-ip\"\nalgorithm = \"{}\"\nlimit = {limit}\n\
         period = \"{period}\"\nkey = \"client_ip\"\n",
        kind.as_str()
    )
}

/// Measures the cases; see the module docs.
///
/// # Errors
/// A server that does not start, or a load run that fails.
pub fn run(
    kinds: &[AlgorithmKind],
    args: &BenchArgs,
    progress: &Progress,
) -> anyhow::Result<Section> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let max_time = Duration::from_secs_f64(args.http_seconds.clamp(0.1, 600.0));
    let connections = args.connections.clamp(1, 1_024);
    let mut section = Section::new(
        "http",
        format!("HTTP: floodgate serve over loopback, {connections} keep-alive connections"),
        &[
            "case",
            "requests",
            "non-2xx",
            "requests/s",
            "p50 (us)",
            "p99 (us)",
            "p99.9 (us)",
        ],
    );
    let upstream = rt.block_on(upstream())?;
    let get: Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync> =
        Arc::new(|_| b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec());
    let row = |section: &mut Section, name: String, l: Load| {
        section.row(vec![
            Value::from(name),
            Value::from(l.requests),
            Value::from(l.errors),
            num(l.requests as f64 / l.elapsed.as_secs_f64(), 0),
            num(l.percentile(0.5), 0),
            num(l.percentile(0.99), 0),
            num(l.percentile(0.999), 0),
        ]);
    };

    progress.step("http: upstream alone".to_string());
    let l = rt.block_on(load(
        upstream,
        connections,
        args.requests,
        max_time,
        get.clone(),
    ))?;
    row(&mut section, "upstream alone (ceiling)".into(), l);

    let mut cases: Vec<(String, String)> = vec![("proxy, no rule".into(), String::new())];
    for &kind in kinds {
        cases.push((format!("proxy, {kind} per client IP"), rule_config(kind)));
    }
    for (name, config) in cases {
        progress.step(format!("http: {name}"));
        let server = start_server(&name.replace([' ', ','], "_"), &config, Some(upstream))?;
        let l = rt.block_on(load(
            server.addr,
            connections,
            args.requests,
            max_time,
            get.clone(),
        ))?;
        row(&mut section, name, l);
    }

    progress.step("http: POST /v1/check".to_string());
    let config = "[[rules]]\nname = \"per-user\"\nalgorithm = \"gcra\"\nlimit = 10000000\n\
                  period = \"1s\"\nkey = \"client_ip\"\n";
    let server = start_server("decision", config, None)?;
    let check: Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync> = Arc::new(|i| {
        let body = format!(
            "{{\"rule\":\"per-user\",\"key\":\"user:{:06}\",\"cost\":1}}",
            i % 1_000
        );
        format!(
            "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let l = rt.block_on(load(
        server.addr,
        connections,
        args.requests,
        max_time,
        check,
    ))?;
    row(&mut section, "POST /v1/check, gcra, 1,000 keys".into(), l);
    drop(server);

    section.note(format!(
        "Each case: a fresh `floodgate serve` child on 127.0.0.1, {connections} keep-alive \
         HTTP/1.1 connections from the built-in load generator (2 tokio workers), at most {} \
         requests or {} s. The upstream is an in-process axum hello server. Rules use a quota \
         of 10,000,000/s per client IP (sliding log: 10,000 per 100 ms), so every request is \
         admitted. Server, upstream and \
         load generator share this machine's CPUs.",
        args.requests,
        max_time.as_secs_f64()
    ));
    Ok(section)
}
