//! `--what grpc`: decisions per second and latency of Envoy's rate limit service
//! (`ShouldRateLimit`, gRPC over HTTP/2) beside `POST /v1/check` (HTTP/1.1), measured the same
//! way on the same server.
//!
//! One `floodgate serve --grpc-listen` child serves both, with one rule (GCRA, a quota nothing
//! reaches, so every decision admits and is charged) that has a domain and descriptor, so both
//! front ends decide with the same rule over 1,000 keys. The built-in clients run
//! `--connections` closed loops each: for gRPC one HTTP/2 connection per loop (a tonic
//! channel), for HTTP one keep-alive HTTP/1.1 connection per loop (the `--what http` load
//! generator); each loop sends its next request when the previous answer is in. Warm-up,
//! budget (`--requests`, `--http-seconds`) and [`ROUNDS`] interleaved rounds as in
//! [`crate::http`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::Value;

use super::http::{check_body, load, median, percentile, post, process_cpu, Budget, Load};
use super::report::{num, Section};
use super::{Options, Progress};

/// Interleaved rounds per case.
pub const ROUNDS: usize = 3;

const RULE: &str = "[[rules]]\nname = \"per-user\"\nalgorithm = \"gcra\"\nlimit = 10000000\n\
                    period = \"1s\"\ndomain = \"bench\"\ndescriptors = [{ key = \"user\" }]\n";

/// A `floodgate serve` child with an API and a gRPC listener, killed on drop.
struct Server {
    child: std::process::Child,
    api: std::net::SocketAddr,
    grpc: std::net::SocketAddr,
    config: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

fn start() -> anyhow::Result<Server> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let config =
        std::env::temp_dir().join(format!("floodgate-bench-{}-grpc.toml", std::process::id()));
    std::fs::write(&config, RULE).context("writing the bench config")?;
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut child = Command::new(exe)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .args(["--watch-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting floodgate serve")?;
    let stdout = child.stdout.take().context("serve stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let (mut api, mut grpc) = (None, None);
    while api.is_none() || grpc.is_none() {
        let Some(line) = lines.next() else {
            let _ = child.kill();
            anyhow::bail!("floodgate serve exited before listening");
        };
        let line = line?;
        let Some(rest) = line.strip_prefix("floodgate: listening on ") else {
            continue;
        };
        let addr: std::net::SocketAddr = rest
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .parse()
            .with_context(|| format!("parsing {line:?}"))?;
        if line.ends_with("(gRPC)") {
            grpc = Some(addr);
        } else if line.ends_with("(API)") {
            api = Some(addr);
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Ok(Server {
        child,
        api: api.context("no API address")?,
        grpc: grpc.context("no gRPC address")?,
        config,
    })
}

/// The request of decision `i`: one of 1,000 keys, as `check_body(i)`.
fn request(i: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: format!("user:{:06}", i % 1_000),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// One closed-loop pass over `connections` HTTP/2 connections; latencies in microseconds and
/// the count of answers that are not `OK`.
#[allow(clippy::disallowed_methods)] // a load generator measures elapsed time
async fn drive(
    url: &str,
    connections: usize,
    max_requests: u64,
    max_time: Duration,
) -> anyhow::Result<(Vec<u32>, u64, Duration)> {
    let issued = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        clients.push(RateLimitServiceClient::connect(url.to_string()).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut client in clients {
        let issued = Arc::clone(&issued);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                if i >= max_requests || start.elapsed() >= max_time {
                    break;
                }
                let t = Instant::now();
                let answer = client.should_rate_limit(request(i)).await;
                lat.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                match answer {
                    Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => {}
                    _ => errors += 1,
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

/// Warm-up (not counted), then the measured pass with the server's CPU time.
async fn load_grpc(url: &str, pid: u32, budget: Budget) -> anyhow::Result<Load> {
    let warm_time = (budget.time / 10).min(Duration::from_millis(500));
    let warm_requests = (budget.requests / 5).max(1);
    drive(url, budget.connections, warm_requests, warm_time).await?;
    let before = process_cpu(pid);
    let (latencies, errors, elapsed) =
        drive(url, budget.connections, budget.requests, budget.time).await?;
    let server_cpu = match (before, process_cpu(pid)) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b)),
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

/// Measures both cases; see the module docs.
///
/// # Errors
/// A server that does not start, or a load run that fails.
pub fn run(args: &Options, progress: &Progress) -> anyhow::Result<Section> {
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
    let server = start()?;
    let pid = server.child.id();
    let url = format!("http://{}", server.grpc);
    let check: Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync> =
        Arc::new(|i| post("/v1/check", &check_body(i)));
    let names = [
        "gRPC ShouldRateLimit, 1 descriptor, gcra, 1,000 keys",
        "POST /v1/check, gcra, 1,000 keys (same rule, same server)",
    ];
    let mut runs: [Vec<Load>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=ROUNDS {
        progress.step(format!("grpc: {} (round {round} of {ROUNDS})", names[0]));
        runs[0].push(rt.block_on(load_grpc(&url, pid, budget))?);
        progress.step(format!("grpc: {} (round {round} of {ROUNDS})", names[1]));
        runs[1].push(rt.block_on(load(server.api, Some(pid), budget, &check))?);
    }
    drop(server);
    let mut section = Section::new(
        "grpc",
        format!(
            "gRPC: Envoy's ShouldRateLimit beside POST /v1/check, one floodgate serve over \
             loopback, {connections} connections each, median of {ROUNDS} interleaved rounds"
        ),
        &[
            "case",
            "decisions",
            "not OK",
            "decisions/s",
            "rounds (decisions/s)",
            "server CPU (us/decision)",
            "p50 (us)",
            "p99 (us)",
        ],
    );
    for (name, runs) in names.iter().zip(&runs) {
        let rate = median(&runs.iter().map(Load::rate).collect::<Vec<_>>());
        let mut latencies: Vec<u32> = runs
            .iter()
            .flat_map(|l| l.latencies.iter().copied())
            .collect();
        latencies.sort_unstable();
        let cpu: Vec<f64> = runs
            .iter()
            .filter_map(|l| {
                let cpu = l.server_cpu?;
                (l.requests > 0).then(|| cpu.as_secs_f64() * 1e6 / l.requests as f64)
            })
            .collect();
        section.row(vec![
            Value::from(*name),
            Value::from(runs.iter().map(|l| l.requests).sum::<u64>()),
            Value::from(runs.iter().map(|l| l.errors).sum::<u64>()),
            num(rate, 0),
            Value::from(
                runs.iter()
                    .map(|l| format!("{:.0}", l.rate()))
                    .collect::<Vec<_>>()
                    .join(" / "),
            ),
            num(median(&cpu), 1),
            num(percentile(&latencies, 0.5), 0),
            num(percentile(&latencies, 0.99), 0),
        ]);
    }
    section.note(format!(
        "One `floodgate serve --grpc-listen` child on 127.0.0.1 serves both cases with one rule \
         (GCRA, 10,000,000/s, domain `bench`, descriptor key `user`, 1,000 keys), so every \
         decision admits and is charged. gRPC: {connections} tonic channels (one HTTP/2 \
         connection each), one closed loop per channel, one descriptor per request. HTTP: \
         {connections} keep-alive HTTP/1.1 connections of the `--what http` load generator, \
         the same 48-byte `/v1/check` body. Per run a warm-up that is not counted, then at most \
         {} requests or {} s; {ROUNDS} rounds, the two cases interleaved. Both clients run in \
         this process on 2 tokio workers and share the machine's CPUs with the server.",
        budget.requests,
        budget.time.as_secs_f64()
    ));
    Ok(section)
}
