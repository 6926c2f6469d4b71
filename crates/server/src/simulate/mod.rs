//! `floodgate simulate`: replay deterministic traffic through the algorithms on a simulated clock
//! and show what each one really admits.
//!
//! The pipeline is pure and reusable (`bench` and `audit` can call it):
//!
//! 1. [`traffic`]: a [`Traffic`] from a built-in scenario ([`Boundary`], [`CalmSpike`],
//!    [`Flood`]) or a trace file ([`trace::read_trace`]);
//! 2. [`engine::run_in_memory`] (or [`engine::simulate`] with any [`setup::CounterStore`]):
//!    one [`engine::Outcome`] per request and an [`engine::Summary`] with totals, per-column
//!    counts and the true rate (the most units admitted in any window of length `period`);
//! 3. [`table`], [`json`] or [`svg`] render a [`Report`].
//!
//! Nothing sleeps and nothing reads the wall clock: simulation time 0 is mapped to a
//! period-aligned epoch ([`engine::epoch_base`]), so `k x period` is a window edge.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use floodgate_core::{AlgorithmKind, Micros, Quota, MICROS_PER_SECOND};

pub mod engine;
pub mod json;
pub mod redis;
pub mod setup;
pub mod svg;
pub mod table;
pub mod trace;
pub mod traffic;

use engine::Run;
use setup::{Balance, CounterMode, Setup, StoreSpec};
use traffic::{parse_duration, parse_rate, Boundary, CalmSpike, Flood, Traffic};

const EXAMPLES: &str = "\
Examples:
  # 100 requests at 0.95 s and 100 at 1.05 s against 100/s, every algorithm:
  floodgate simulate --preset clock-boundary
  # 200 at the end of a window, 200 at the start of the next (the Redis measurement):
  floodgate simulate --preset redis-boundary
  # The same traffic by hand:
  floodgate simulate --scenario boundary --limit 100/s --requests 200 --before 130ms \\
      --after 10ms --spread 14ms
  # 3 instances each with its own counter vs one shared counter, 10 per 10 s:
  floodgate simulate --scenario flood --algorithm fixed_window --instances 3 --counter local
  floodgate simulate --scenario flood --algorithm fixed_window --instances 3 --counter shared
  # A calm client and a sudden 15, as an SVG chart:
  floodgate simulate --scenario calm-spike --format svg --output calm.svg
  # Your own traffic (CSV t_ms,key,cost or JSON lines):
  floodgate simulate --trace requests.csv --limit 100/min --algorithm sliding_window";

/// Flags of `floodgate simulate`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct Args {
    /// Built-in traffic to replay.
    #[arg(long, value_enum, default_value_t = ScenarioName::Boundary)]
    pub scenario: ScenarioName,

    /// A boundary case from the source documents: sets the scenario, the limit (100/s) and the
    /// traffic flags; flags given explicitly still win.
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,

    /// Replay the requests in FILE instead of a scenario: one per line, CSV `t_ms,key,cost`
    /// (header optional, cost defaults to 1) or JSON `{"t_ms":950,"key":"a","cost":1}`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["scenario", "preset"])]
    pub trace: Option<PathBuf>,

    /// The algorithm, or `all` to compare the six on the same traffic: fixed_window,
    /// sliding_log, sliding_window, token_bucket, leaky_bucket, gcra.
    #[arg(long, short, default_value = "all", value_parser = parse_algorithms)]
    pub algorithm: AlgorithmChoice,

    /// The declared limit as LIMIT/PERIOD, e.g. 100/s, 10/10s, 5/min
    /// [default: 10/10s as in the documents' chart; 100/s with a preset].
    #[arg(long, short, value_name = "LIMIT/PERIOD")]
    pub limit: Option<Quota>,

    /// Most units the bucket algorithms (token bucket, leaky bucket, GCRA) admit at once
    /// [default: the limit]. The window algorithms ignore it.
    #[arg(long)]
    pub burst: Option<u64>,

    /// Number of service instances behind the load balancer.
    #[arg(long, default_value_t = 1, help_heading = "Setup")]
    pub instances: usize,

    /// Where each instance's counter lives.
    #[arg(long, value_enum, default_value_t = CounterMode::Local, help_heading = "Setup")]
    pub counter: CounterMode,

    /// How the load balancer spreads requests over the instances, in arrival order.
    #[arg(long, value_enum, default_value_t = Balance::RoundRobin, help_heading = "Setup")]
    pub balance: Balance,

    /// Where the counters live: `memory` (in this process) or `redis://HOST:PORT` (a Redis
    /// server, deciding at the simulated time with the scripts `serve` runs; every run uses
    /// fresh keys).
    #[arg(long, default_value = "memory", help_heading = "Setup")]
    pub store: StoreSpec,

    /// Requests per burst (boundary) [default: the limit; 200 with redis-boundary] or in the
    /// spike (calm-spike) [default: 1.5 x the limit].
    #[arg(long, help_heading = "Traffic")]
    pub requests: Option<u64>,

    /// How long each burst or spike lasts, its requests evenly spaced, e.g. 14ms [default: 0,
    /// all at one instant].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub spread: Option<Micros>,

    /// boundary: the first burst starts this long before the window edge at 1 x period
    /// [default: period / 20, i.e. 0.95 s at 1/s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub before: Option<Micros>,

    /// boundary: the second burst starts this long after the window edge
    /// [default: period / 20, i.e. 1.05 s at 1/s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub after: Option<Micros>,

    /// calm-spike: when the spike arrives [default: 0.45 x period, 4.5 s at 10/10s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub at: Option<Micros>,

    /// calm-spike: interval between the calm client's requests [default: period / limit, 1 s
    /// at 10/10s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub every: Option<Micros>,

    /// flood: demand as COUNT/DURATION, e.g. 1000/s [default: 10 x the limit].
    #[arg(long, value_parser = parse_rate, value_name = "COUNT/DURATION", help_heading = "Traffic")]
    pub rate: Option<(u64, Micros)>,

    /// calm-spike and flood: how long the traffic lasts [default: 2 periods for calm-spike, 1
    /// period for flood].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub duration: Option<Micros>,

    /// Refuse to generate more requests than this (counted before generating anything). Every
    /// request costs about 0.5 KB of memory with all six algorithms (more with --format json),
    /// so the default keeps a run to about half a gigabyte.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REQUESTS, help_heading = "Traffic")]
    pub max_requests: u64,

    /// The rate-limit key of the scenario's requests.
    #[arg(long, default_value = "client", help_heading = "Traffic")]
    pub key: String,

    /// table: per-second table, terminal chart and totals. json: every decision plus the
    /// summary. svg: a chart (one panel per algorithm).
    #[arg(long, short, value_enum, default_value_t = Format::Table, help_heading = "Output")]
    pub format: Format,

    /// Write to FILE instead of standard output.
    #[arg(long, short, value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,

    /// Width of one chart column / table row, e.g. 1s, 100ms [default: 1s; 100 ms or so when
    /// the traffic spans under 10 s; wider to keep at most 80 columns].
    #[arg(long, value_parser = parse_duration, help_heading = "Output")]
    pub column: Option<Micros>,
}

/// Default of `--max-requests`: the most requests one simulation generates or replays.
///
/// Each request is kept once as traffic (about 90 bytes) and once per algorithm as an outcome
/// (about 70 bytes), so one million requests through all six algorithms take about half a
/// gigabyte. Without a bound, `--limit 1000000000000/1us` or `--rate 100000000/1us` asked for
/// trillions of requests and ran until memory ran out.
pub const DEFAULT_MAX_REQUESTS: u64 = 1_000_000;

/// Refuses traffic of `count` requests when it is above `max` (`--max-requests`).
fn check_request_count(count: u128, max: u64, what: &str) -> anyhow::Result<()> {
    if count > u128::from(max) {
        bail!(
            "{what} would generate {count} requests, more than --max-requests {max}; \
             lower the limit, --rate, --requests or --duration, or raise --max-requests \
             (each request takes about 0.5 KB of memory with all six algorithms)"
        );
    }
    Ok(())
}

/// The built-in traffic patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioName {
    /// Two bursts around the first window edge (at 1 x period), `--requests` each.
    Boundary,
    /// A calm client at one request per `--every` plus a sudden spike of `--requests`, same key.
    CalmSpike,
    /// Sustained demand well above the limit: `--rate` (default 10 x the limit).
    Flood,
}

/// Named cases from the source documents (limit 100/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// 100 requests at 0.95 s and 100 at 1.05 s, simulated clock.
    ClockBoundary,
    /// 200 requests at the end of one window and 200 at the start of the next: each burst takes
    /// 14 ms (200 Redis round trips), starting at 0.87 s and 1.01 s.
    RedisBoundary,
}

impl Preset {
    /// The preset's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::ClockBoundary => "clock-boundary",
            Preset::RedisBoundary => "redis-boundary",
        }
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Per-second table, terminal chart, totals.
    Table,
    /// Every decision and the summary, as one JSON document.
    Json,
    /// An SVG chart.
    Svg,
}

/// `--algorithm`: one algorithm or all six.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmChoice {
    /// Every algorithm, in [`AlgorithmKind::ALL`] order.
    All,
    /// One algorithm.
    One(AlgorithmKind),
}

impl AlgorithmChoice {
    /// The algorithms to run.
    pub fn kinds(self) -> Vec<AlgorithmKind> {
        match self {
            AlgorithmChoice::All => AlgorithmKind::ALL.to_vec(),
            AlgorithmChoice::One(kind) => vec![kind],
        }
    }
}

fn parse_algorithms(text: &str) -> Result<AlgorithmChoice, String> {
    if text.trim().eq_ignore_ascii_case("all") {
        Ok(AlgorithmChoice::All)
    } else {
        text.parse().map(AlgorithmChoice::One)
    }
}

/// Everything a renderer needs: the traffic, the policy, the setup and one run per algorithm.
#[derive(Debug, Clone)]
pub struct Report {
    /// The replayed traffic.
    pub traffic: Traffic,
    /// The declared quota.
    pub quota: Quota,
    /// The deployment.
    pub setup: Setup,
    /// The preset used, if any.
    pub preset: Option<Preset>,
    /// One run per algorithm, in [`AlgorithmKind::ALL`] order.
    pub runs: Vec<Run>,
}

impl Report {
    /// The most requests (admitted, rejected or impossible) in any one column of any run, at
    /// least 1: the vertical scale every chart shares, in the table and in the SVG.
    pub fn chart_scale(&self) -> u64 {
        self.runs
            .iter()
            .flat_map(|r| r.summary.columns.iter())
            .map(|c| c.admitted + c.rejected + c.impossible)
            .max()
            .unwrap_or(0)
            .max(1)
    }
}

/// The 100/s limit of the documents' boundary measurements.
fn preset_quota() -> Quota {
    Quota::per_second(100).expect("100/s is a valid quota")
}

/// Builds the traffic the flags describe.
///
/// # Errors
/// A flag that does not apply to the chosen scenario, an unreadable or bad trace, or traffic
/// parameters that make no sense (e.g. `--before` longer than the first window).
pub fn build_traffic(args: &Args, quota: &Quota) -> anyhow::Result<Traffic> {
    let scenario = match args.preset {
        Some(_) => ScenarioName::Boundary,
        None => args.scenario,
    };
    let only =
        |present: bool, flag: &str, wanted: ScenarioName, name: &str| -> anyhow::Result<()> {
            if present && (args.trace.is_some() || scenario != wanted) {
                bail!("{flag} applies only to --scenario {name}");
            }
            Ok(())
        };
    only(
        args.before.is_some(),
        "--before",
        ScenarioName::Boundary,
        "boundary",
    )?;
    only(
        args.after.is_some(),
        "--after",
        ScenarioName::Boundary,
        "boundary",
    )?;
    only(
        args.at.is_some(),
        "--at",
        ScenarioName::CalmSpike,
        "calm-spike",
    )?;
    only(
        args.every.is_some(),
        "--every",
        ScenarioName::CalmSpike,
        "calm-spike",
    )?;
    only(args.rate.is_some(), "--rate", ScenarioName::Flood, "flood")?;
    if args.trace.is_some() {
        for (present, flag) in [
            (args.requests.is_some(), "--requests"),
            (args.spread.is_some(), "--spread"),
            (args.duration.is_some(), "--duration"),
        ] {
            if present {
                bail!("{flag} does not apply to --trace (the trace gives every request)");
            }
        }
    }
    if let Some(path) = &args.trace {
        // A trace is already in memory as text; its size is the file's, not generated.
        let traffic = trace::read_trace(path)?;
        check_request_count(
            traffic.requests.len() as u128,
            args.max_requests,
            "the trace",
        )?;
        return Ok(traffic);
    }
    // Every scenario's size is computed arithmetically and checked before anything is
    // generated.
    let max = args.max_requests;
    let traffic = match scenario {
        ScenarioName::Boundary => {
            let mut b = Boundary::for_quota(quota);
            if args.preset == Some(Preset::RedisBoundary) {
                // Measured on Redis: each burst of 200 took about 14 ms (~14,000 checks/s), the
                // first ended about 0.13 s before the edge, the second began just after it.
                b.requests = 2 * quota.limit();
                b.before = 130_000;
                b.after = 10_000;
                b.spread = 14_000;
            }
            b.requests = args.requests.unwrap_or(b.requests);
            b.before = args.before.unwrap_or(b.before);
            b.after = args.after.unwrap_or(b.after);
            b.spread = args.spread.unwrap_or(b.spread);
            b.key.clone_from(&args.key);
            if args.duration.is_some() {
                bail!("--duration does not apply to --scenario boundary (it covers two periods)");
            }
            check_request_count(b.count(), max, "--scenario boundary")?;
            b.traffic()
        }
        ScenarioName::CalmSpike => {
            let mut c = CalmSpike::for_quota(quota);
            c.requests = args.requests.unwrap_or(c.requests);
            c.spread = args.spread.unwrap_or(c.spread);
            c.at = args.at.unwrap_or(c.at);
            c.every = args.every.unwrap_or(c.every);
            c.duration = args.duration.unwrap_or(c.duration);
            c.key.clone_from(&args.key);
            check_request_count(c.count(), max, "--scenario calm-spike")?;
            c.traffic()
        }
        ScenarioName::Flood => {
            if args.requests.is_some() || args.spread.is_some() {
                bail!("--requests and --spread do not apply to --scenario flood (use --rate)");
            }
            let mut f = Flood::for_quota(quota);
            if let Some((units, per)) = args.rate {
                (f.units, f.per) = (units, per);
            }
            f.duration = args.duration.unwrap_or(f.duration);
            f.key.clone_from(&args.key);
            check_request_count(f.count(), max, "--scenario flood")?;
            f.traffic()
        }
    };
    traffic.map_err(anyhow::Error::msg)
}

/// The column width: `--column`, else one column per second, narrowed to a round sub-second
/// width giving at least 20 columns when the traffic spans under 10 s (so a boundary burst at
/// 0.95 s and one at 1.05 s fall in different columns), or widened to a round width keeping at
/// most 80 columns.
fn column_width(requested: Option<Micros>, span: Micros) -> Micros {
    if let Some(column) = requested {
        return column.max(1);
    }
    const NICE_SUB_SECOND: [u64; 9] = [
        500_000, 200_000, 100_000, 50_000, 20_000, 10_000, 5_000, 2_000, 1_000,
    ];
    const NICE_SECONDS: [u64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1_800, 3_600];
    if span < 10 * MICROS_PER_SECOND {
        return NICE_SUB_SECOND
            .into_iter()
            .find(|w| span.div_ceil(*w) >= 20)
            .unwrap_or(1_000);
    }
    NICE_SECONDS
        .iter()
        .map(|s| s * MICROS_PER_SECOND)
        .find(|w| span.div_ceil(*w) <= 80)
        .unwrap_or_else(|| span.div_ceil(80).max(1))
}

/// Builds the whole report the flags describe, without writing anything.
///
/// # Errors
/// Invalid flags, a bad trace, or a setup the quota cannot be split over.
pub fn build_report(args: &Args) -> anyhow::Result<Report> {
    let mut quota = args.limit.unwrap_or_else(|| match args.preset {
        Some(_) => preset_quota(),
        None => "10/10s".parse().expect("10/10s is a valid quota"),
    });
    if let Some(burst) = args.burst {
        quota = quota.burst_of(burst).context("invalid --burst")?;
    }
    if args.balance != Balance::RoundRobin && args.instances == 1 {
        // With one instance every request goes to it: the flag would silently change nothing.
        bail!(
            "--balance needs --instances > 1: with one instance every request goes to it, so \
             --balance {} changes nothing",
            args.balance.as_str()
        );
    }
    let setup = Setup {
        instances: args.instances,
        counter: args.counter,
        balance: args.balance,
    };
    let traffic = build_traffic(args, &quota)?;
    let column = column_width(args.column, traffic.span_us);
    if traffic.span_us.div_ceil(column) > 10_000 {
        bail!("--column {column} us would draw more than 10,000 columns; choose a wider one");
    }
    let runs = args
        .algorithm
        .kinds()
        .into_iter()
        .map(|kind| {
            match &args.store {
                StoreSpec::Memory => engine::run_in_memory(
                    &traffic.requests,
                    kind,
                    quota,
                    setup,
                    column,
                    traffic.span_us,
                ),
                StoreSpec::Redis(url) => engine::run_with(
                    &traffic.requests,
                    kind,
                    quota,
                    setup,
                    column,
                    traffic.span_us,
                    |setup| {
                        Ok(Box::new(redis::RedisCounters::new(
                            url, kind, quota, setup,
                        )?))
                    },
                ),
            }
            .with_context(|| format!("cannot run {kind}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Report {
        traffic,
        quota,
        setup,
        preset: args.preset,
        runs,
    })
}

/// Runs `floodgate simulate`: builds the report and writes it in the chosen format.
///
/// # Errors
/// As [`build_report`], plus failures writing the output.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = build_report(&args)?;
    let text = match args.format {
        Format::Table => table::render(&report),
        Format::Json => json::render(&report),
        Format::Svg => svg::render(&report),
    };
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .or_else(|e| match e.kind() {
                    // `floodgate simulate | head` is fine.
                    std::io::ErrorKind::BrokenPipe => Ok(()),
                    _ => Err(e),
                })
                .context("cannot write to standard output")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(line: &str) -> Args {
        Cli::try_parse_from(std::iter::once("simulate").chain(line.split_whitespace()))
            .unwrap()
            .args
    }

    #[test]
    fn column_width_keeps_at_most_80_columns() {
        assert_eq!(
            column_width(None, 20 * MICROS_PER_SECOND),
            MICROS_PER_SECOND
        );
        assert_eq!(
            column_width(None, 81 * MICROS_PER_SECOND),
            2 * MICROS_PER_SECOND
        );
        assert_eq!(
            column_width(None, 3_600 * MICROS_PER_SECOND),
            60 * MICROS_PER_SECOND
        );
        assert_eq!(
            column_width(Some(100_000), 3_600 * MICROS_PER_SECOND),
            100_000
        );
    }

    #[test]
    fn presets_set_limit_and_traffic_and_flags_win() {
        let report = build_report(&args("--preset redis-boundary -a gcra")).unwrap();
        assert_eq!(report.quota, preset_quota());
        assert_eq!(report.traffic.requests.len(), 400);
        assert_eq!(report.traffic.requests[0].t_us, 870_000);
        assert_eq!(report.traffic.requests[200].t_us, 1_010_000);
        let report = build_report(&args("--preset redis-boundary -a gcra --requests 3")).unwrap();
        assert_eq!(report.traffic.requests.len(), 6);
    }

    #[test]
    fn runaway_traffic_is_refused_before_generating_naming_max_requests() {
        // The walkthrough: 2 x 10^12 requests (boundary at the limit) grew memory until it ran
        // out, and 10^8 per microsecond for 10 s never finished. Both must fail at once.
        for (line, count) in [
            ("--limit 1000000000000/1us", "2000000000000"),
            ("--scenario flood --rate 100000000/1us", "1000000000000000"),
            (
                "--scenario calm-spike --every 1us --duration 1h",
                "3600000015",
            ),
        ] {
            let err = format!("{:#}", build_report(&args(line)).unwrap_err());
            assert!(err.contains("--max-requests 1000000"), "{line}: {err}");
            assert!(
                err.contains(&format!("generate {count} requests")),
                "{line}: {err}"
            );
        }
        // The bound is inclusive and can be moved: 20 requests fit 20, not 19.
        let line = "--scenario boundary --requests 10 --max-requests 20";
        assert_eq!(
            build_report(&args(line)).unwrap().traffic.requests.len(),
            20
        );
        let err = build_report(&args("--scenario boundary --requests 10 --max-requests 19"));
        assert!(format!("{:#}", err.unwrap_err()).contains("generate 20 requests"));
        // A trace is checked too.
        let dir = std::env::temp_dir().join(format!("floodgate-max-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.csv");
        std::fs::write(&file, "0,a\n1,a\n2,a\n").unwrap();
        let trace = |max: u64| {
            build_report(&args(&format!(
                "--trace {} --max-requests {max}",
                file.display()
            )))
        };
        assert_eq!(trace(3).unwrap().traffic.requests.len(), 3);
        assert!(format!("{:#}", trace(2).unwrap_err()).contains("--max-requests 2"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn balance_skewed_with_one_instance_is_an_error() {
        let err = build_report(&args("--counter split --balance skewed")).unwrap_err();
        assert!(
            format!("{err:#}").contains("--balance needs --instances > 1"),
            "{err:#}"
        );
        assert!(build_report(&args("--counter split --balance skewed --instances 2")).is_ok());
        // The default balance with one instance stays fine.
        assert!(build_report(&args("--counter split")).is_ok());
    }

    #[test]
    fn flags_that_do_not_apply_are_errors() {
        for line in [
            "--scenario flood --before 1s",
            "--scenario boundary --rate 5/s",
            "--scenario boundary --every 1s",
            "--scenario flood --requests 5",
            "--scenario boundary --duration 5s",
        ] {
            assert!(build_report(&args(line)).is_err(), "{line}");
        }
        let err = build_report(&args("--instances 11 --counter split")).unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot split limit 10 over 11 instances"),
            "{err:#}"
        );
    }
}
