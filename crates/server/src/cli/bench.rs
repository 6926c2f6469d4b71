//! `floodgate bench`: the command line of the measurements in `floodgate-bench`.

use std::process::ExitCode;

use floodgate_bench::{ClockChoice, Options, What};
use floodgate_core::AlgorithmKind;

use super::choice_of;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Aligned pipe tables (valid Markdown).
    Table,
    /// One JSON document: `{machine, sections: [{id, title, columns, rows, notes}]}`.
    Json,
}

const FORMATS: &[(Format, &str, &str)] = &[
    (
        Format::Table,
        "table",
        "Aligned pipe tables (valid Markdown)",
    ),
    (
        Format::Json,
        "json",
        "One JSON document: `{machine, sections: [{id, title, columns, rows, notes}]}`",
    ),
];

/// `floodgate bench` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// What to measure.
    #[arg(long, default_value = "cpu", value_parser = choice_of(What::ALL))]
    pub(crate) what: What,

    /// Output format.
    #[arg(long, default_value = "table", value_parser = choice_of(FORMATS))]
    pub(crate) format: Format,

    /// Algorithms to measure, comma separated [default: all six].
    #[arg(long, value_delimiter = ',', value_parser = parse_kind, value_name = "ALGORITHMS")]
    pub(crate) algorithms: Vec<AlgorithmKind>,

    /// cpu: seconds of measurement per case.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(crate) seconds: f64,

    /// cpu: the clock every check reads.
    #[arg(long, default_value = "quanta", value_parser = choice_of(ClockChoice::ALL))]
    pub(crate) clock: ClockChoice,

    /// memory: keys to fill.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) keys: usize,

    /// memory: the quota is LIMIT per minute; the sliding log is also measured holding LIMIT
    /// requests per key, so its growth with the limit shows.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) limit: u64,

    /// redis: the Redis store to measure, `redis://127.0.0.1:6379`.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,

    /// http and redis: most requests per case (each case also stops after --http-seconds).
    #[arg(long, default_value_t = 200_000)]
    pub(crate) requests: u64,

    /// http and redis: most seconds per case.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    http_seconds: f64,

    /// http: concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    pub(crate) connections: usize,

    /// Internal: run one memory probe in this process and print its JSON result.
    #[arg(long, hide = true, value_name = "TARGET")]
    memory_probe: Option<String>,

    /// Internal: consuming checks per key in a memory probe.
    #[arg(long, hide = true, default_value_t = 1)]
    pub(crate) fill: u64,
}

fn parse_kind(s: &str) -> Result<AlgorithmKind, String> {
    s.parse()
}

/// Runs `floodgate bench`: the measurements, then the report on standard output.
///
/// # Errors
/// A measurement that cannot run here (no /proc for memory, no Redis store, ...).
pub(crate) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(target) = &args.memory_probe {
        let r = floodgate_bench::memory::probe(target, args.keys, args.limit, args.fill)?;
        println!("{}", serde_json::to_string(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let options = Options {
        what: args.what,
        algorithms: args.algorithms,
        seconds: args.seconds,
        clock: args.clock,
        keys: args.keys,
        limit: args.limit,
        store: args.store,
        requests: args.requests,
        http_seconds: args.http_seconds,
        connections: args.connections,
    };
    let report = floodgate_bench::run(&options)?;
    match args.format {
        Format::Table => super::write_stdout(&report.to_table())?,
        Format::Json => super::write_stdout(&format!("{}\n", report.to_json()))?,
    }
    Ok(ExitCode::SUCCESS)
}
