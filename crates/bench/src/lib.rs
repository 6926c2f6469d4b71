//! # floodgate-bench
//!
//! `floodgate bench`: measures this build on this machine and prints tables (or JSON) with the
//! machine, the date and the command, and the peer (governor) measured in the same run where
//! one applies. Nothing here is a constant: every figure is measured when the command runs.
//!
//! - `--what cpu`: nanoseconds per check for each algorithm: direct, and through the
//!   `MemoryStore` on 1 and 2 threads ([`cpu`]).
//! - `--what memory`: bytes per key at `--keys` keys (default 1M) for each algorithm, the sliding
//!   log at `--limit` remembered requests, and the "1M users" projection beside the source
//!   documents' figures ([`memory`]).
//! - `--what redis`: decisions per second through the Redis store at `--store redis://...`, one
//!   sequential client and 64 concurrent ones, `MEMORY USAGE` per key, and `redis-benchmark`
//!   beside when installed ([`redis`]).
//! - `--what http`: throughput and latency of `floodgate serve` from a built-in, bounded,
//!   loopback-only load generator ([`http`]).
//! - `--what grpc`: decisions per second and latency of Envoy's `ShouldRateLimit` from a
//!   built-in gRPC client, beside `POST /v1/check` measured the same way ([`grpc`]).

use std::time::Duration;

use anyhow::Context;
use floodgate_core::{AlgorithmKind, CoarseClock, QuantaClock, SystemClock};
use indicatif::{ProgressBar, ProgressStyle};

pub mod cpu;
pub mod grpc;
pub mod http;
pub mod memory;
pub mod redis;
mod redis_hot;
pub mod report;

use report::Machine;
pub use report::Report;

/// What `floodgate bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// Nanoseconds per check, each algorithm, direct and through the memory store.
    Cpu,
    /// Bytes per key at `keys` keys, each algorithm.
    Memory,
    /// Decisions per second through the Redis store (`store`).
    Redis,
    /// Throughput and latency of `floodgate serve` on a loopback port.
    Http,
    /// Envoy's `ShouldRateLimit` over gRPC beside `POST /v1/check`.
    Grpc,
    /// cpu, memory, http, grpc (and redis when `store` is given).
    All,
}

impl What {
    /// Every value with its name and description (the choices of `--what`).
    pub const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            What::Cpu,
            "cpu",
            "Nanoseconds per check, each algorithm, direct and through the memory store",
        ),
        (
            What::Memory,
            "memory",
            "Bytes per key at `--keys` keys, each algorithm",
        ),
        (
            What::Redis,
            "redis",
            "Decisions per second through the Redis store (`--store redis://...`)",
        ),
        (
            What::Http,
            "http",
            "Throughput and latency of `floodgate serve` on a loopback port",
        ),
        (
            What::Grpc,
            "grpc",
            "Envoy's ShouldRateLimit over gRPC beside POST /v1/check, same load",
        ),
        (
            What::All,
            "all",
            "cpu, memory, http, then grpc (and redis when `--store` is given)",
        ),
    ];
}

/// The clock the checks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockChoice {
    /// The time-stamp counter (`QuantaClock`): exact, about 10 ns per read.
    Quanta,
    /// A 1 ms coarse clock (`CoarseClock`): about 1 ns per read.
    Coarse,
    /// The OS wall clock (`SystemClock`, `SystemTime::now`).
    System,
}

impl ClockChoice {
    /// Every value with its name and description (the choices of `--clock`).
    pub const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            ClockChoice::Quanta,
            "quanta",
            "The time-stamp counter (`QuantaClock`): exact, about 10 ns per read",
        ),
        (
            ClockChoice::Coarse,
            "coarse",
            "A 1 ms coarse clock (`CoarseClock`): about 1 ns per read",
        ),
        (
            ClockChoice::System,
            "system",
            "The OS wall clock (`SystemClock`, `SystemTime::now`)",
        ),
    ];

    /// The name printed in the table title.
    fn name(self) -> &'static str {
        match self {
            ClockChoice::Quanta => "quanta (TSC)",
            ClockChoice::Coarse => "coarse 1 ms",
            ClockChoice::System => "system (SystemTime::now)",
        }
    }
}

/// What to measure and how long (the flags of `floodgate bench`).
#[derive(Debug, Clone)]
pub struct Options {
    /// What to measure.
    pub what: What,
    /// Algorithms to measure; empty = all six.
    pub algorithms: Vec<AlgorithmKind>,
    /// cpu: seconds of measurement per case.
    pub seconds: f64,
    /// cpu: the clock every check reads.
    pub clock: ClockChoice,
    /// memory: keys to fill.
    pub keys: usize,
    /// memory: the quota is `limit` per minute; the sliding log is also measured holding
    /// `limit` requests per key.
    pub limit: u64,
    /// redis: the Redis store to measure, `redis://127.0.0.1:6379`.
    pub store: Option<String>,
    /// http and redis: most requests per case.
    pub requests: u64,
    /// http and redis: most seconds per case.
    pub http_seconds: f64,
    /// http: concurrent keep-alive connections.
    pub connections: usize,
}

/// A progress bar on stderr (hidden when stderr is not a terminal) counting measured cases.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(cases: u64) -> Self {
        let bar = ProgressBar::new(cases);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self { bar }
    }

    /// Marks the start of the next case.
    pub fn step(&self, what: String) {
        if self.bar.position() > 0 || !self.bar.message().is_empty() {
            self.bar.inc(1);
        }
        self.bar.set_message(what);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Runs the measurements `options` name and returns the report (the caller prints it with
/// [`Report::to_table`] or [`Report::to_json`]). The memory and http measurements start the
/// current executable as a child (`floodgate bench --memory-probe ...`, `floodgate serve ...`):
/// call it from the `floodgate` binary.
///
/// # Errors
/// A measurement that cannot run here (no /proc for memory, no Redis store, ...).
pub fn run(args: &Options) -> anyhow::Result<Report> {
    let kinds: Vec<AlgorithmKind> = if args.algorithms.is_empty() {
        AlgorithmKind::ALL.to_vec()
    } else {
        args.algorithms.clone()
    };
    let machine = Machine::detect();
    let n = kinds.len() as u64;
    let (cpu, mem, http, redis) = match args.what {
        What::Cpu => (true, false, false, false),
        What::Memory => (false, true, false, false),
        What::Http => (false, false, true, false),
        What::Redis => (false, false, false, true),
        What::Grpc => (false, false, false, false),
        What::All => (true, true, true, args.store.is_some()),
    };
    let grpc = matches!(args.what, What::Grpc | What::All);
    let cases = u64::from(cpu) * (3 * n + 3)
        + u64::from(mem) * (n + 2)
        + u64::from(http) * (n + 4) * http::ROUNDS as u64
        + u64::from(redis) * n
        + u64::from(grpc) * 2 * grpc::ROUNDS as u64;
    let progress = Progress::new(cases);
    let mut sections = Vec::new();
    if cpu {
        let time = Duration::from_secs_f64(args.seconds.clamp(0.01, 600.0));
        let name = args.clock.name();
        sections.push(match args.clock {
            ClockChoice::Quanta => cpu::run(&kinds, QuantaClock::new(), name, time, &progress),
            ClockChoice::Coarse => cpu::run(
                &kinds,
                CoarseClock::new(Duration::from_millis(1)),
                name,
                time,
                &progress,
            ),
            ClockChoice::System => cpu::run(&kinds, SystemClock, name, time, &progress),
        });
    }
    if mem {
        sections.push(memory::run(&kinds, args.keys, args.limit, &progress)?);
    }
    if http {
        sections.push(http::run(&kinds, args, &progress).context("http bench")?);
    }
    if grpc {
        sections.push(grpc::run(args, &progress).context("grpc bench")?);
    }
    if redis {
        sections.push(redis::run(&kinds, args, &progress).context("redis bench")?);
        if let Some(url) = &args.store {
            let time = std::time::Duration::from_secs_f64(args.http_seconds.clamp(0.1, 600.0));
            sections.push(redis_hot::run(url, time).context("redis hot-key bench")?);
        }
    }
    progress.finish();
    Ok(Report { machine, sections })
}
