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

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use floodgate_core::{AlgorithmKind, CoarseClock, QuantaClock, SystemClock};
use indicatif::{ProgressBar, ProgressStyle};

pub mod cpu;
pub mod http;
pub mod memory;
pub mod redis;
pub mod report;

use report::{Machine, Report};

/// What `floodgate bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// Nanoseconds per check, each algorithm, direct and through the memory store.
    Cpu,
    /// Bytes per key at `--keys` keys, each algorithm.
    Memory,
    /// Decisions per second through the Redis store (`--store redis://...`).
    Redis,
    /// Throughput and latency of `floodgate serve` on a loopback port.
    Http,
    /// cpu, memory, then http (and redis when `--store` is given).
    All,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned pipe tables (valid Markdown).
    Table,
    /// One JSON document: `{machine, sections: [{id, title, columns, rows, notes}]}`.
    Json,
}

/// The clock the checks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClockChoice {
    /// The time-stamp counter (`QuantaClock`): exact, about 10 ns per read.
    Quanta,
    /// A 1 ms coarse clock (`CoarseClock`): about 1 ns per read.
    Coarse,
    /// The OS wall clock (`SystemClock`, `SystemTime::now`).
    System,
}

impl ClockChoice {
    /// The name printed in the table title.
    fn name(self) -> &'static str {
        match self {
            ClockChoice::Quanta => "quanta (TSC)",
            ClockChoice::Coarse => "coarse 1 ms",
            ClockChoice::System => "system (SystemTime::now)",
        }
    }
}

/// `floodgate bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = What::Cpu)]
    pub what: What,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Algorithms to measure, comma separated [default: all six].
    #[arg(long, value_delimiter = ',', value_parser = parse_kind, value_name = "ALGORITHMS")]
    pub algorithms: Vec<AlgorithmKind>,

    /// cpu: seconds of measurement per case.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub seconds: f64,

    /// cpu: the clock every check reads.
    #[arg(long, value_enum, default_value_t = ClockChoice::Quanta)]
    pub clock: ClockChoice,

    /// memory: keys to fill.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: usize,

    /// memory: the quota is LIMIT per minute; the sliding log is also measured holding LIMIT
    /// requests per key, so its growth with the limit shows.
    #[arg(long, default_value_t = 1_000)]
    pub limit: u64,

    /// redis: the Redis store to measure, `redis://127.0.0.1:6379`.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// http and redis: most requests per case (each case also stops after --http-seconds).
    #[arg(long, default_value_t = 200_000)]
    pub requests: u64,

    /// http and redis: most seconds per case.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub http_seconds: f64,

    /// http: concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,

    /// Internal: run one memory probe in this process and print its JSON result.
    #[arg(long, hide = true, value_name = "TARGET")]
    pub memory_probe: Option<String>,

    /// Internal: consuming checks per key in a memory probe.
    #[arg(long, hide = true, default_value_t = 1)]
    pub fill: u64,
}

fn parse_kind(s: &str) -> Result<AlgorithmKind, String> {
    s.parse()
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

/// Runs `floodgate bench`.
///
/// # Errors
/// A measurement that cannot run here (no /proc for memory, no Redis store, ...).
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(target) = &args.memory_probe {
        let r = memory::probe(target, args.keys, args.limit, args.fill)?;
        println!("{}", serde_json::to_string(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
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
        What::All => (true, true, true, args.store.is_some()),
    };
    let cases = u64::from(cpu) * (3 * n + 3)
        + u64::from(mem) * (n + 2)
        + u64::from(http) * (n + 4) * http::ROUNDS as u64
        + u64::from(redis) * n;
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
        sections.push(http::run(&kinds, &args, &progress).context("http bench")?);
    }
    if redis {
        sections.push(redis::run(&kinds, &args, &progress).context("redis bench")?);
    }
    progress.finish();
    let report = Report { machine, sections };
    match args.format {
        Format::Table => print!("{}", report.to_table()),
        Format::Json => println!("{}", report.to_json()),
    }
    Ok(ExitCode::SUCCESS)
}
