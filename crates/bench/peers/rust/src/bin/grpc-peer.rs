//! One load run against a gRPC decision service for `scripts/peers`: Floodgate's Envoy rate
//! limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, `floodgate
//! serve --grpc-listen`) or throttlecrab-server's `throttlecrab.RateLimiter/Throttle`
//! (`throttlecrab-server --grpc`), driven by the same closed loop.
//!
//! ```text
//! grpc-peer TARGET URL CONNECTIONS WARMUP_SECONDS SECONDS SERVER_PID
//!   TARGET          floodgate (domain `bench`, descriptor key `user`) or throttlecrab
//!   URL             http://127.0.0.1:PORT
//!   CONNECTIONS     HTTP/2 connections (one tonic channel each), one closed loop on each:
//!                   it sends its next request when the previous answer is in
//!   WARMUP_SECONDS  a first pass on the same connections, not counted
//!   SECONDS         length of the measured pass
//!   SERVER_PID      the server process, whose user + system time is read from
//!                   /proc/<pid>/stat around the measured pass
//! ```
//!
//! Both targets get GCRA at 10,000,000 per second per key (every request admitted; anything
//! else counts as `not_ok`) over the keys `user:000000`..`user:000999`, one shared counter
//! picking the next key. Prints one JSON line: `{"decisions": n, "seconds": s, "p50_us": ..,
//! "p99_us": .., "not_ok": n, "server_cpu_s": .., "client_cpu_s": .., "request_bytes": ..,
//! "answer_bytes": ..}` (`client_cpu_s`: this process over the measured pass; `decisions`
//! counts every answer, `not_ok` included; the sizes: protobuf encodings of one request and
//! its answer, without gRPC and HTTP/2 framing).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message as _;
use throttlecrab_server::grpc::rate_limiter_client::RateLimiterClient;
use throttlecrab_server::grpc::ThrottleRequest;
use tonic::transport::{Channel, Endpoint};

/// Distinct keys, visited in turn.
const KEYS: u64 = 1_000;
/// Per second per key: far above what one key sees, so every request is admitted.
const RATE: i32 = 10_000_000;

/// One connection's client of either service.
#[derive(Clone)]
enum Client {
    Floodgate(RateLimitServiceClient<Channel>),
    Throttlecrab(RateLimiterClient<Channel>),
}

impl Client {
    /// One decision on key `i % KEYS`: `true` when the service admitted it.
    async fn decide(&mut self, i: u64) -> bool {
        self.call(i, false)
            .await
            .is_some_and(|(allowed, ..)| allowed)
    }

    /// One decision on key `i % KEYS`: whether the service admitted it and, when `sizes`,
    /// the protobuf sizes of the request and the answer in bytes (else 0, 0); `None` when the
    /// call failed.
    async fn call(&mut self, i: u64, sizes: bool) -> Option<(bool, usize, usize)> {
        let len = |n: usize| if sizes { n } else { 0 };
        let key = format!("user:{:06}", i % KEYS);
        match self {
            Client::Floodgate(c) => {
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "user".into(),
                            value: key,
                        }],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 0, // as Envoy sends it: one hit
                };
                let size = len(request.encoded_len());
                let answer = c.should_rate_limit(request).await.ok()?.into_inner();
                Some((
                    answer.overall_code == Code::Ok as i32,
                    size,
                    len(answer.encoded_len()),
                ))
            }
            Client::Throttlecrab(c) => {
                let request = ThrottleRequest {
                    key,
                    max_burst: RATE,
                    count_per_period: RATE,
                    period: 1,
                    quantity: 1,
                };
                let size = len(request.encoded_len());
                let answer = c.throttle(request).await.ok()?.into_inner();
                Some((answer.allowed, size, len(answer.encoded_len())))
            }
        }
    }
}

/// One pass: every client loops until `seconds` are over; latencies in microseconds, the
/// count of answers that did not admit, and the pass's wall time.
#[allow(clippy::disallowed_methods)] // a load generator measures elapsed time
async fn pass(clients: &[Client], seconds: f64) -> anyhow::Result<(Vec<u32>, u64, Duration)> {
    let next = Arc::new(AtomicU64::new(0));
    let length = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(clients.len());
    for client in clients {
        let mut client = client.clone();
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 16);
            let mut not_ok = 0u64;
            while start.elapsed() < length {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let ok = client.decide(i).await;
                latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                not_ok += u64::from(!ok);
            }
            (latencies, not_ok)
        }));
    }
    let mut latencies = Vec::new();
    let mut not_ok = 0;
    for task in tasks {
        let (l, n) = task.await?;
        latencies.extend(l);
        not_ok += n;
    }
    Ok((latencies, not_ok, start.elapsed()))
}

/// utime + stime of process `pid` ("self" for this one), in seconds (USER_HZ = 100).
fn cpu_seconds(pid: &str) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("no ')' in /proc/<pid>/stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |n: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(n)
            .context("short /proc/<pid>/stat")?
            .parse::<u64>()? as f64)
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [target, url, connections, warmup, seconds, server_pid] = args.as_slice() else {
        bail!("usage: grpc-peer floodgate|throttlecrab URL CONNECTIONS WARMUP_SECONDS SECONDS SERVER_PID");
    };
    let connections: usize = connections.parse().context("CONNECTIONS")?;
    let warmup: f64 = warmup.parse().context("WARMUP_SECONDS")?;
    let seconds: f64 = seconds.parse().context("SECONDS")?;
    let server_pid: u32 = server_pid.parse().context("SERVER_PID")?;
    if connections == 0 {
        bail!("CONNECTIONS is at least 1");
    }
    if !matches!(target.as_str(), "floodgate" | "throttlecrab") {
        bail!("TARGET is floodgate or throttlecrab, not {target:?}");
    }
    // As wrk -t2 in the HTTP row: two client threads on this 2-core machine.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let endpoint = Endpoint::from_shared(url.clone()).context("URL")?;
        let mut clients = Vec::with_capacity(connections);
        for _ in 0..connections {
            // One `connect` per client: its own HTTP/2 connection.
            let channel = endpoint
                .connect()
                .await
                .with_context(|| format!("connecting to {url}"))?;
            clients.push(match target.as_str() {
                "floodgate" => Client::Floodgate(RateLimitServiceClient::new(channel)),
                _ => Client::Throttlecrab(RateLimiterClient::new(channel)),
            });
        }
        pass(&clients, warmup).await?;
        let (_, request_bytes, answer_bytes) = clients[0]
            .clone()
            .call(0, true)
            .await
            .context("one call for the message sizes failed")?;
        let pid = server_pid.to_string();
        let (server_before, client_before) = (cpu_seconds(&pid)?, cpu_seconds("self")?);
        let (mut latencies, not_ok, elapsed) = pass(&clients, seconds).await?;
        let (server_after, client_after) = (cpu_seconds(&pid)?, cpu_seconds("self")?);
        latencies.sort_unstable();
        println!(
            "{}",
            serde_json::json!({
                "decisions": latencies.len(),
                "seconds": elapsed.as_secs_f64(),
                "p50_us": percentile(&latencies, 0.50),
                "p99_us": percentile(&latencies, 0.99),
                "not_ok": not_ok,
                "server_cpu_s": server_after - server_before,
                "client_cpu_s": client_after - client_before,
                "request_bytes": request_bytes,
                "answer_bytes": answer_bytes,
            })
        );
        anyhow::Ok(())
    })
}
