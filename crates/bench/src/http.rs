//! `--what http`: throughput and latency of `floodgate serve`, driven by a built-in load
//! generator over loopback.
//!
//! Every server under test is a `floodgate serve` child process (this same executable) on
//! `127.0.0.1:0`; the bench reads the address it prints. The load generator (2 tokio workers in
//! this process) runs `--connections` keep-alive HTTP/1.1 connections in a closed loop: each
//! sends its next request as soon as the previous answer is read. A run is a warm-up (the
//! first 10% of `--http-seconds`, at most 0.5 s and `--requests / 5` requests, not counted)
//! then a measurement of `--requests` answers or `--http-seconds`, whichever comes first.
//! Latency is measured per request from the write to the end of the answer.
//!
//! Cases:
//! - the baseline: `POST /v1/bench/bare` of a `floodgate serve --bench-baseline` child, a bare
//!   axum handler behind the same server stack that reads the same body and answers a fixed
//!   JSON of the same size as a `/v1/check` answer;
//! - the decision endpoint `POST /v1/check` over 1,000 keys (GCRA), same body;
//! - a hello upstream alone (an in-process axum server in this process: the proxies' upstream);
//! - the reverse proxy with no rule, and with one per-client-IP rule of each algorithm (a
//!   quota nothing reaches, so every request is admitted and forwarded).
//!
//! The cases run in [`ROUNDS`] interleaved rounds (every case once per round, in the order
//! above), since the machine's CPUs are shared with the load generator and whatever else runs:
//! the table gives each case's median requests/s with every round's figure, the ratio to its
//! baseline (the decision endpoint to the bare handler, a proxy rule to the proxy without
//! rule), and the server's CPU time per request (all its threads, from
//! `/proc/PID/task/*/schedstat`), which is steadier than requests/s on a busy machine.

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
use super::{Options, Progress};

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
fn start_server(
    name: &str,
    config: &str,
    upstream: Option<SocketAddr>,
    extra: &[&str],
) -> anyhow::Result<Server> {
    let file = tempfile_like::TempFile::new(name, config).context("writing the bench config")?;
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--config")
        .arg(&file.0)
        .args(["--listen", "127.0.0.1:0", "--watch-interval", "0"])
        .args(extra)
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

/// Result of one measured load run.
pub(crate) struct Load {
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) elapsed: Duration,
    /// Latencies in microseconds.
    pub(crate) latencies: Vec<u32>,
    /// CPU time the server process spent during the measurement (all threads), when known.
    pub(crate) server_cpu: Option<Duration>,
}

impl Load {
    pub(crate) fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// The `p` quantile of sorted latencies.
pub(crate) fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i])
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// CPU time used so far by every thread of process `pid` (the first field of each
/// `/proc/PID/task/TID/schedstat`, in nanoseconds); `None` where /proc has no such file.
pub(crate) fn process_cpu(pid: u32) -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread may end between the listing and the read: it is simply not counted.
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
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

/// One closed-loop pass: `connections` connections to `addr` send requests (`make(i)` gives
/// request `i`'s bytes) until `max_requests` answers or `max_time`; returns the latencies and
/// the non-2xx count.
#[allow(clippy::disallowed_methods)] // a load generator measures elapsed time
async fn drive(
    addr: SocketAddr,
    connections: usize,
    max_requests: u64,
    max_time: Duration,
    make: &Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>,
) -> anyhow::Result<(Vec<u32>, u64, Duration)> {
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let issued = Arc::clone(&issued);
        let make = Arc::clone(make);
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
    Ok((latencies, errors, start.elapsed()))
}

/// How much load one run offers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) connections: usize,
    pub(crate) requests: u64,
    pub(crate) time: Duration,
}

/// A warm-up pass (not counted: fresh connections, cold caches, lazily created state), then
/// the measured pass, with the CPU time `server` (when given) spent during the latter.
pub(crate) async fn load(
    addr: SocketAddr,
    server: Option<u32>,
    budget: Budget,
    make: &Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>,
) -> anyhow::Result<Load> {
    let warm_time = (budget.time / 10).min(Duration::from_millis(500));
    let warm_requests = (budget.requests / 5).max(1);
    drive(addr, budget.connections, warm_requests, warm_time, make).await?;
    let cpu_before = server.and_then(process_cpu);
    let (latencies, errors, elapsed) =
        drive(addr, budget.connections, budget.requests, budget.time, make).await?;
    let server_cpu = match (cpu_before, server.and_then(process_cpu)) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(Load {
        requests: latencies.len() as u64,
        errors,
        elapsed,
        latencies,
        server_cpu,
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

/// Interleaved rounds per case (see the module docs).
pub const ROUNDS: usize = 3;

/// A `POST` of `body` to `path`.
pub(crate) fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The body of decision request `i`: one of 1,000 keys, 48 bytes.
pub(crate) fn check_body(i: u64) -> String {
    format!(
        "{{\"rule\":\"per-user\",\"key\":\"user:{:06}\",\"cost\":1}}",
        i % 1_000
    )
}

/// One case: where its requests go, which process serves them, what they are, and what its
/// ratio is taken against.
struct Case {
    name: String,
    addr: SocketAddr,
    /// The serving child's pid (`None` for the in-process upstream).
    pid: Option<u32>,
    make: Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>,
    /// Index of the case this one's requests/s is divided by.
    baseline: Option<usize>,
    runs: Vec<Load>,
}

/// Measures the cases; see the module docs.
///
/// # Errors
/// A server that does not start, or a load run that fails.
// Over 120 lines: the servers start once, then every round measures every case on those same
// processes (see the comment below); servers, rounds and results share one scope.
pub fn run(
    kinds: &[AlgorithmKind],
    args: &Options,
    progress: &Progress,
) -> anyhow::Result<Section> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let budget = Budget {
        connections: args.connections.clamp(1, 1_024),
        requests: args.requests.max(1),
        time: Duration::from_secs_f64(args.http_seconds.clamp(0.1, 600.0)),
    };
    let connections = budget.connections;
    let mut section = Section::new(
        "http",
        format!(
            "HTTP: floodgate serve over loopback, {connections} keep-alive connections, \
             median of {ROUNDS} interleaved rounds"
        ),
        &[
            "case",
            "requests",
            "non-2xx",
            "requests/s",
            "rounds (requests/s)",
            "ratio to baseline",
            "server CPU (us/request)",
            "p50 (us)",
            "p99 (us)",
            "p99.9 (us)",
        ],
    );

    // Every server starts before the first round and lives until the end, so that each round
    // measures the same processes.
    let rule = "[[rules]]\nname = \"per-user\"\nalgorithm = \"gcra\"\nlimit = 10000000\n\
                period = \"1s\"\nkey = \"client_ip\"\n";
    let mut servers = Vec::new();
    let mut cases = Vec::new();
    let bare = start_server("bare", rule, None, &["--bench-baseline"])?;
    cases.push(Case {
        name: "bare axum handler (baseline of /v1/check)".into(),
        addr: bare.addr,
        pid: Some(bare.child.id()),
        make: Arc::new(|i| post("/v1/bench/bare", &check_body(i))),
        baseline: None,
        runs: Vec::new(),
    });
    servers.push(bare);
    let decision = start_server("decision", rule, None, &[])?;
    cases.push(Case {
        name: "POST /v1/check, gcra, 1,000 keys".into(),
        addr: decision.addr,
        pid: Some(decision.child.id()),
        make: Arc::new(|i| post("/v1/check", &check_body(i))),
        baseline: Some(0),
        runs: Vec::new(),
    });
    servers.push(decision);
    let upstream = rt.block_on(upstream())?;
    let get: Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync> =
        Arc::new(|_| b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec());
    cases.push(Case {
        name: "hello upstream alone (in-process)".into(),
        addr: upstream,
        pid: None,
        make: Arc::clone(&get),
        baseline: None,
        runs: Vec::new(),
    });
    let no_rule = cases.len();
    let mut proxies: Vec<(String, String)> = vec![("proxy, no rule".into(), String::new())];
    for &kind in kinds {
        proxies.push((format!("proxy, {kind} per client IP"), rule_config(kind)));
    }
    for (i, (name, config)) in proxies.into_iter().enumerate() {
        let server = start_server(&name.replace([' ', ','], "_"), &config, Some(upstream), &[])?;
        cases.push(Case {
            name,
            addr: server.addr,
            pid: Some(server.child.id()),
            make: Arc::clone(&get),
            baseline: (i > 0).then_some(no_rule),
            runs: Vec::new(),
        });
        servers.push(server);
    }

    for round in 1..=ROUNDS {
        for case in &mut cases {
            progress.step(format!("http: {} (round {round} of {ROUNDS})", case.name));
            let l = rt.block_on(load(case.addr, case.pid, budget, &case.make))?;
            case.runs.push(l);
        }
    }
    drop(servers);

    let medians: Vec<f64> = cases
        .iter()
        .map(|c| median(&c.runs.iter().map(Load::rate).collect::<Vec<_>>()))
        .collect();
    for (case, &rate) in cases.iter().zip(&medians) {
        let mut latencies: Vec<u32> = case
            .runs
            .iter()
            .flat_map(|l| l.latencies.iter().copied())
            .collect();
        latencies.sort_unstable();
        let rounds = case
            .runs
            .iter()
            .map(|l| format!("{:.0}", l.rate()))
            .collect::<Vec<_>>()
            .join(" / ");
        let cpu: Vec<f64> = case
            .runs
            .iter()
            .filter_map(|l| {
                let cpu = l.server_cpu?;
                (l.requests > 0).then(|| cpu.as_secs_f64() * 1e6 / l.requests as f64)
            })
            .collect();
        section.row(vec![
            Value::from(case.name.clone()),
            Value::from(case.runs.iter().map(|l| l.requests).sum::<u64>()),
            Value::from(case.runs.iter().map(|l| l.errors).sum::<u64>()),
            num(rate, 0),
            Value::from(rounds),
            case.baseline
                .map_or(Value::Null, |b| num(rate / medians[b], 3)),
            num(median(&cpu), 1),
            num(percentile(&latencies, 0.5), 0),
            num(percentile(&latencies, 0.99), 0),
            num(percentile(&latencies, 0.999), 0),
        ]);
    }

    section.note(format!(
        "Each server is a `floodgate serve` child on 127.0.0.1 (the hello upstream excepted: an \
         axum hello server inside the load generator's process, the proxies' upstream). Load: \
         {connections} keep-alive HTTP/1.1 connections from the built-in closed-loop load \
         generator (2 tokio workers), per run a warm-up that is not counted, then at most {} \
         requests or {} s; {ROUNDS} rounds, every case once per round, interleaved. \
         requests/s is the median of the rounds; latency percentiles pool the rounds; server \
         CPU is the serving process's CPU time (all threads) per answered request, median of \
         the rounds. The baseline of POST /v1/check is `floodgate serve --bench-baseline`'s \
         `POST /v1/bench/bare`: a bare axum handler on the same server stack that reads the \
         same 48-byte body and answers a fixed JSON of the same size as a /v1/check answer, \
         without parsing, deciding, metrics or RateLimit headers. The baseline of a proxy rule \
         is the proxy without rule. Rules use a quota of 10,000,000/s per client IP (sliding \
         log: 10,000 per 100 ms), so every request is admitted. Servers, upstream and load \
         generator share this machine's CPUs.",
        budget.requests,
        budget.time.as_secs_f64()
    ));
    Ok(section)
}
