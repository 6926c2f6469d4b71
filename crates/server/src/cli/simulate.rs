//! `floodgate simulate`: the command line of the simulation engine in `floodgate-simulate`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use floodgate_core::{Micros, Quota};
use floodgate_simulate::setup::{Balance, CounterMode, StoreSpec};
use floodgate_simulate::traffic::{parse_duration, parse_rate};
use floodgate_simulate::{
    build_report, render, AlgorithmChoice, Format, Preset, ScenarioName, Spec, TraceInput,
    DEFAULT_MAX_REQUESTS,
};

use super::choice;

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
  # Queue instead of reject: the calm client and the spike wait up to 2 s for a slot:
  floodgate simulate --scenario calm-spike --max-wait 2s
  # 8 job runners sharing 10,000 units a day (search 100, list 1), units spent per hour:
  floodgate simulate --scenario daily-jobs --algorithm fixed_window
  # Your own traffic (CSV t_ms,key,cost or JSON lines):
  floodgate simulate --trace requests.csv --limit 100/min --algorithm sliding_window";

/// Flags of `floodgate simulate`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub(crate) struct Args {
    /// Built-in traffic to replay.
    #[arg(long, default_value = "boundary", value_parser = choice::<ScenarioName>())]
    pub(crate) scenario: ScenarioName,

    /// A boundary case from the source documents: sets the scenario, the limit (100/s) and the
    /// traffic flags; flags given explicitly still win.
    #[arg(long, value_parser = choice::<Preset>())]
    pub(crate) preset: Option<Preset>,

    /// Replay the requests in FILE instead of a scenario: one per line, CSV `t_ms,key,cost`
    /// (header optional, cost defaults to 1) or JSON `{"t_ms":950,"key":"a","cost":1}`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["scenario", "preset"])]
    pub(crate) trace: Option<PathBuf>,

    /// The algorithm, several to compare side by side (`-a fixed_window,token_bucket` or
    /// `-a` repeated; each runs once), or `all` to compare the six on the same traffic:
    /// fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra.
    #[arg(long, short, default_value = "all", value_parser = parse_algorithms, action = clap::ArgAction::Append)]
    pub(crate) algorithm: Vec<AlgorithmChoice>,

    /// The declared limit as LIMIT/PERIOD, e.g. 100/s, 10/10s, 5/min
    /// [default: 10/10s as in the documents' chart; 100/s with a preset].
    #[arg(long, short, value_name = "LIMIT/PERIOD")]
    pub(crate) limit: Option<Quota>,

    /// Most units the bucket algorithms (token bucket, leaky bucket, GCRA) admit at once
    /// [default: the limit]. The window algorithms ignore it.
    #[arg(long)]
    pub(crate) burst: Option<u64>,

    /// Number of service instances behind the load balancer.
    #[arg(long, default_value_t = 1, help_heading = "Setup")]
    pub(crate) instances: usize,

    /// Where each instance's counter lives.
    #[arg(long, default_value = "local", value_parser = choice::<CounterMode>(), help_heading = "Setup")]
    pub(crate) counter: CounterMode,

    /// How the load balancer spreads requests over the instances, in arrival order.
    #[arg(long, default_value = "round-robin", value_parser = choice::<Balance>(), help_heading = "Setup")]
    pub(crate) balance: Balance,

    /// Where the counters live: `memory` (in this process) or `redis://HOST:PORT` (a Redis
    /// server, deciding at the simulated time with the scripts `serve` runs; every run uses
    /// fresh keys).
    #[arg(long, default_value = "memory", help_heading = "Setup")]
    pub(crate) store: StoreSpec,

    /// Requests per burst (boundary) [default: the limit; 200 with redis-boundary] or in the
    /// spike (calm-spike) [default: 1.5 x the limit].
    #[arg(long, help_heading = "Traffic")]
    pub(crate) requests: Option<u64>,

    /// How long each burst or spike lasts, its requests evenly spaced, e.g. 14ms [default: 0,
    /// all at one instant].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub(crate) spread: Option<Micros>,

    /// boundary: the first burst starts this long before the window edge at 1 x period
    /// [default: period / 20, i.e. 0.95 s at 1/s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub(crate) before: Option<Micros>,

    /// boundary: the second burst starts this long after the window edge
    /// [default: period / 20, i.e. 1.05 s at 1/s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub(crate) after: Option<Micros>,

    /// calm-spike: when the spike arrives [default: 0.45 x period, 4.5 s at 10/10s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub(crate) at: Option<Micros>,

    /// calm-spike: interval between the calm client's requests [default: period / limit, 1 s
    /// at 10/10s].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub(crate) every: Option<Micros>,

    /// flood: demand as COUNT/DURATION, e.g. 1000/s [default: 10 x the limit].
    #[arg(long, value_parser = parse_rate, value_name = "COUNT/DURATION", help_heading = "Traffic")]
    pub(crate) rate: Option<(u64, Micros)>,

    /// calm-spike and flood: how long the traffic lasts [default: 2 periods for calm-spike, 1
    /// period for flood].
    #[arg(long, value_parser = parse_duration, help_heading = "Traffic")]
    pub(crate) duration: Option<Micros>,

    /// Refuse to generate more requests than this (counted before generating anything). Every
    /// request costs about 0.5 KB of memory with all six algorithms (more with --format json),
    /// so the default keeps a run to about half a gigabyte.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REQUESTS, help_heading = "Traffic")]
    pub(crate) max_requests: u64,

    /// The rate-limit key of the scenario's requests.
    #[arg(long, default_value = "client", help_heading = "Traffic")]
    pub(crate) key: String,

    /// daily-jobs: the number of job runners sharing the quota [default: 8].
    #[arg(long, help_heading = "Traffic")]
    pub(crate) runners: Option<u64>,

    /// Count the limit per calendar day of this IANA time zone, e.g. America/Los_Angeles: the
    /// run starts at local midnight and a day across a daylight-saving change is 23 or 25
    /// hours. Needs --algorithm fixed_window or sliding_window and a N/day limit.
    #[arg(long, value_name = "ZONE", help_heading = "Setup")]
    pub(crate) calendar: Option<String>,

    /// Requests wait up to this long for a slot instead of being rejected, e.g. 2s (a
    /// reservation, as `POST /v1/check` with `max_wait_ms`); the totals then compare queueing
    /// with rejecting on the same traffic. Memory counters only.
    #[arg(long, value_parser = parse_duration, help_heading = "Setup")]
    pub(crate) max_wait: Option<Micros>,

    /// table: per-second table, terminal chart and totals. json: every decision plus the
    /// summary. svg: a chart (one panel per algorithm).
    #[arg(long, short, default_value = "table", value_parser = choice::<Format>(), help_heading = "Output")]
    pub(crate) format: Format,

    /// Write to FILE instead of standard output.
    #[arg(long, short, value_name = "FILE", help_heading = "Output")]
    pub(crate) output: Option<PathBuf>,

    /// Width of one chart column / table row, e.g. 1s, 100ms [default: 1s; 100 ms or so when
    /// the traffic spans under 10 s; wider to keep at most 80 columns].
    #[arg(long, value_parser = parse_duration, help_heading = "Output")]
    pub(crate) column: Option<Micros>,
}

fn parse_algorithms(text: &str) -> Result<AlgorithmChoice, String> {
    text.parse()
}

impl Args {
    /// The simulation the flags describe.
    pub(crate) fn spec(&self) -> Spec {
        Spec {
            scenario: self.scenario,
            preset: self.preset,
            trace: self.trace.clone().map(TraceInput::File),
            algorithm: self
                .algorithm
                .iter()
                .copied()
                .reduce(AlgorithmChoice::union)
                .unwrap_or(AlgorithmChoice::All),
            limit: self.limit,
            burst: self.burst,
            instances: self.instances,
            counter: self.counter,
            balance: self.balance,
            store: self.store.clone(),
            requests: self.requests,
            spread: self.spread,
            before: self.before,
            after: self.after,
            at: self.at,
            every: self.every,
            rate: self.rate,
            duration: self.duration,
            max_requests: self.max_requests,
            key: self.key.clone(),
            column: self.column,
            max_wait: self.max_wait,
            runners: self.runners,
            calendar: self.calendar.clone(),
        }
    }
}

/// Runs `floodgate simulate`: builds the report and writes it in the chosen format.
///
/// # Errors
/// As [`floodgate_simulate::build_report`], plus failures writing the output.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = build_report(&args.spec())?;
    let text = render(&report, args.format);
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => super::write_stdout(&text)?,
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

    fn args_spec(line: &str) -> Spec {
        args(line).spec()
    }

    fn args(line: &str) -> Args {
        Cli::try_parse_from(std::iter::once("simulate").chain(line.split_whitespace()))
            .unwrap()
            .args
    }

    #[test]
    fn presets_set_limit_and_traffic_and_flags_win() {
        let report = build_report(&args_spec("--preset redis-boundary -a gcra")).unwrap();
        assert_eq!(report.quota, "100/s".parse::<Quota>().unwrap());
        assert_eq!(report.traffic.requests.len(), 400);
        assert_eq!(report.traffic.requests[0].t_us, 870_000);
        assert_eq!(report.traffic.requests[200].t_us, 1_010_000);
        let report =
            build_report(&args_spec("--preset redis-boundary -a gcra --requests 3")).unwrap();
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
            let err = format!("{:#}", build_report(&args(line).spec()).unwrap_err());
            assert!(err.contains("--max-requests 1000000"), "{line}: {err}");
            assert!(
                err.contains(&format!("generate {count} requests")),
                "{line}: {err}"
            );
        }
        // The bound is inclusive and can be moved: 20 requests fit 20, not 19.
        let line = "--scenario boundary --requests 10 --max-requests 20";
        assert_eq!(
            build_report(&args(line).spec())
                .unwrap()
                .traffic
                .requests
                .len(),
            20
        );
        let err = build_report(&args_spec(
            "--scenario boundary --requests 10 --max-requests 19",
        ));
        assert!(format!("{:#}", err.unwrap_err()).contains("generate 20 requests"));
        // A trace is checked too.
        let dir = std::env::temp_dir().join(format!("floodgate-max-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.csv");
        std::fs::write(&file, "0,a\n1,a\n2,a\n").unwrap();
        let trace = |max: u64| {
            build_report(&args_spec(&format!(
                "--trace {} --max-requests {max}",
                file.display()
            )))
        };
        assert_eq!(trace(3).unwrap().traffic.requests.len(), 3);
        assert!(format!("{:#}", trace(2).unwrap_err()).contains("--max-requests 2"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn algorithms_as_a_list_or_a_repeated_flag_run_each_once() {
        let kinds = |line: &str| -> Vec<&str> {
            args_spec(line)
                .algorithm
                .kinds()
                .into_iter()
                .map(|k| k.as_str())
                .collect()
        };
        assert_eq!(kinds("").len(), 6);
        assert_eq!(
            kinds("-a token_bucket,fixed_window"),
            ["fixed_window", "token_bucket"]
        );
        assert_eq!(
            kinds("-a gcra --algorithm fixed_window -a gcra"),
            ["fixed_window", "gcra"]
        );
        assert_eq!(kinds("-a gcra -a all").len(), 6);
        let err = Cli::try_parse_from(["simulate", "-a", "gcra,token_bucket,nope"]).unwrap_err();
        assert!(
            err.to_string().contains("unknown algorithm \"nope\""),
            "{err}"
        );
    }

    #[test]
    fn balance_skewed_with_one_instance_is_an_error() {
        let err = build_report(&args_spec("--counter split --balance skewed")).unwrap_err();
        assert!(
            format!("{err:#}").contains("--balance needs --instances > 1"),
            "{err:#}"
        );
        assert!(build_report(&args_spec("--counter split --balance skewed --instances 2")).is_ok());
        // The default balance with one instance stays fine.
        assert!(build_report(&args_spec("--counter split")).is_ok());
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
            assert!(build_report(&args(line).spec()).is_err(), "{line}");
        }
        let err = build_report(&args_spec("--instances 11 --counter split")).unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot split limit 10 over 11 instances"),
            "{err:#}"
        );
    }
}
