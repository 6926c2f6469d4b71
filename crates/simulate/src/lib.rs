//! # floodgate-simulate
//!
//! Replays deterministic traffic through the algorithms on a simulated clock and shows what each
//! one really admits: the engine behind `floodgate simulate` and the service's
//! `POST /v1/simulate`, so the terminal, the SVG and the web page can never disagree.
//!
//! The pipeline is pure (no I/O but the optional Redis counters, no terminal code):
//!
//! 1. a [`Spec`] (scenario, policy, setup) becomes a [`Traffic`] ([`build_traffic`]): a built-in
//!    scenario ([`traffic::Boundary`], [`traffic::CalmSpike`], [`traffic::Flood`]) or a trace
//!    ([`trace::parse_trace`]);
//! 2. [`engine::run_in_memory`] (or [`engine::run_with`] with any [`setup::CounterStore`]):
//!    one [`engine::Outcome`] per request and an [`engine::Summary`] with totals, per-column
//!    counts and the true rate (the most units admitted in any window of length `period`);
//! 3. [`render`] writes a [`Report`] as a [`Format`]: [`table`], [`json`] or [`svg`].
//!
//! Nothing sleeps and nothing reads the wall clock: simulation time 0 is mapped to a
//! period-aligned epoch ([`engine::epoch_base`]), so `k x period` is a window edge.
//!
//! ```
//! use floodgate_simulate::{build_report, AlgorithmChoice, Spec};
//!
//! // The documents' boundary case at 100/s: 100 requests at 0.95 s, 100 at 1.05 s.
//! let spec = Spec {
//!     limit: Some("100/s".parse().unwrap()),
//!     algorithm: AlgorithmChoice::One("fixed_window".parse().unwrap()),
//!     ..Spec::default()
//! };
//! let report = build_report(&spec).unwrap();
//! assert_eq!(report.runs[0].summary.admitted, 200); // 2x the limit within 0.1 s
//! ```

use std::path::PathBuf;

use floodgate_core::{AlgorithmKind, Micros, Quota, MICROS_PER_SECOND};

mod build;
pub mod calendar;
pub mod engine;
pub mod json;
#[cfg(feature = "redis")]
pub mod redis;
pub mod setup;
pub mod svg;
pub mod table;
pub mod trace;
pub mod traffic;

pub use build::build_traffic;
use engine::Run;
use setup::{Balance, CounterMode, Setup, SetupError, StoreSpec};
use trace::TraceError;
use traffic::Traffic;

/// Why a simulation could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A part of the [`Spec`] that is invalid or does not apply to the rest; `field` is the
    /// [`Spec`] field at fault (`floodgate simulate` spells it as the flag `--field-name`).
    #[error("{message}")]
    Invalid {
        /// The [`Spec`] field.
        field: &'static str,
        /// What is wrong, naming the flags involved.
        message: String,
    },
    /// The trace could not be read or has a bad line (the error names the file and line).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The setup cannot be built for the quota (e.g. a split leaving an instance with 0).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The counter store failed (a Redis server that does not answer): the run stopped.
    #[error("{0}")]
    Store(String),
    /// Running one algorithm failed.
    #[error("cannot run {kind}: {source}")]
    Run {
        /// The algorithm.
        kind: AlgorithmKind,
        /// Why.
        source: Box<Error>,
    },
}

impl Error {
    fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Error::Invalid {
            field,
            message: message.into(),
        }
    }

    /// The [`Spec`] field at fault, when one is: for [`Error::Invalid`], `"trace"` for a bad
    /// trace, `"instances"` for a setup the quota cannot be split over.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Error::Invalid { field, .. } => Some(field),
            Error::Trace(_) => Some("trace"),
            Error::Setup(_) => Some("instances"),
            Error::Store(_) => None,
            Error::Run { source, .. } => source.field(),
        }
    }
}

/// A closed set of named values: the choices of a flag or of a JSON field, each with a one-line
/// description (what `--help` lists).
pub trait Choice: Sized + Copy + PartialEq + 'static {
    /// Every value with its name and description, in the order they are listed.
    const ALL: &'static [(Self, &'static str, &'static str)];

    /// The value's name.
    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(v, _, _)| *v == self)
            .map_or("", |(_, name, _)| name)
    }

    /// The value named `text` (exactly), if any.
    fn from_name(text: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(_, name, _)| *name == text)
            .map(|(v, _, _)| *v)
    }
}

/// The traffic a simulation replays: a built-in scenario or a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceInput {
    /// A trace file (CSV `t_ms,key,cost` or JSON lines), read when the report is built.
    File(PathBuf),
    /// A trace already in memory (pasted or uploaded), named `name` in errors.
    Text {
        /// What errors call it (e.g. `trace`).
        name: String,
        /// The trace itself.
        text: String,
    },
}

/// Everything a simulation needs: the traffic, the policy and the setup. The defaults are those
/// of `floodgate simulate` without flags (the documents' chart: 10 per 10 s, the boundary
/// scenario, all six algorithms, one instance).
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Built-in traffic to replay (ignored with a [`Spec::trace`]).
    pub scenario: ScenarioName,
    /// A boundary case from the source documents: sets the scenario, the limit (100/s) and the
    /// traffic parameters; parameters given explicitly still win.
    pub preset: Option<Preset>,
    /// Replay these requests instead of a scenario.
    pub trace: Option<TraceInput>,
    /// The algorithm, or all six on the same traffic.
    pub algorithm: AlgorithmChoice,
    /// The declared limit [default: 10/10s; 100/s with a preset].
    pub limit: Option<Quota>,
    /// Most units the bucket algorithms admit at once [default: the limit].
    pub burst: Option<u64>,
    /// Number of service instances behind the load balancer (at least 1).
    pub instances: usize,
    /// Where each instance's counter lives.
    pub counter: CounterMode,
    /// How the load balancer spreads requests over the instances.
    pub balance: Balance,
    /// Where the counters live.
    pub store: StoreSpec,
    /// Requests per burst (boundary) or in the spike (calm-spike).
    pub requests: Option<u64>,
    /// How long each burst or spike lasts, microseconds.
    pub spread: Option<Micros>,
    /// boundary: the first burst starts this long before the window edge, microseconds.
    pub before: Option<Micros>,
    /// boundary: the second burst starts this long after the window edge, microseconds.
    pub after: Option<Micros>,
    /// calm-spike: when the spike arrives, microseconds.
    pub at: Option<Micros>,
    /// calm-spike: interval between the calm client's requests, microseconds.
    pub every: Option<Micros>,
    /// flood: demand as (count, per microseconds).
    pub rate: Option<(u64, Micros)>,
    /// calm-spike and flood: how long the traffic lasts, microseconds.
    pub duration: Option<Micros>,
    /// Refuse to generate more requests than this (counted before generating anything).
    pub max_requests: u64,
    /// The rate-limit key of the scenario's requests.
    pub key: String,
    /// Width of one chart column, microseconds [default: see [`column_width`]].
    pub column: Option<Micros>,
    /// Requests wait up to this long (microseconds) for a slot instead of being rejected
    /// (`--max-wait`; a reservation, see `docs/reservations.md`); each run then also reports
    /// what the same traffic gets without waiting (queue vs reject). Memory counters only.
    pub max_wait: Option<Micros>,
    /// daily-jobs: the number of job runners [default: 8].
    pub runners: Option<u64>,
    /// Count the limit per calendar day of this IANA time zone (`--calendar
    /// America/Los_Angeles`): the run starts at local midnight, and a day across a
    /// daylight-saving change is 23 or 25 hours. Needs one window algorithm and a `N/day` limit.
    pub calendar: Option<String>,
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            scenario: ScenarioName::Boundary,
            preset: None,
            trace: None,
            algorithm: AlgorithmChoice::All,
            limit: None,
            burst: None,
            instances: 1,
            counter: CounterMode::Local,
            balance: Balance::RoundRobin,
            store: StoreSpec::Memory,
            requests: None,
            spread: None,
            before: None,
            after: None,
            at: None,
            every: None,
            rate: None,
            duration: None,
            max_requests: DEFAULT_MAX_REQUESTS,
            key: "client".to_string(),
            column: None,
            max_wait: None,
            runners: None,
            calendar: None,
        }
    }
}

/// Most chart columns one run draws (the traffic's span plus `--max-wait`, divided by the
/// column width): [`build_report`] refuses a `--column` drawing more, and widens an automatic
/// one, before anything runs.
pub const MAX_COLUMNS: u64 = 10_000;

/// Default of `--max-requests`: the most requests one simulation generates or replays.
///
/// Each request is kept once as traffic (about 90 bytes) and once per algorithm as an outcome
/// (about 70 bytes), so one million requests through all six algorithms take about half a
/// gigabyte. Without a bound, `--limit 1000000000000/1us` or `--rate 100000000/1us` asked for
/// trillions of requests and ran until memory ran out.
pub const DEFAULT_MAX_REQUESTS: u64 = 1_000_000;

/// Refuses traffic of `count` requests when it is above `max` (`--max-requests`).
fn check_request_count(count: u128, max: u64, what: &str) -> Result<(), Error> {
    if count > u128::from(max) {
        return Err(Error::invalid(
            "max_requests",
            format!(
                "{what} would generate {count} requests, more than --max-requests {max}; \
                 lower the limit, --rate, --requests or --duration, or raise --max-requests \
                 (each request takes about 0.5 KB of memory with all six algorithms)"
            ),
        ));
    }
    Ok(())
}

/// The built-in traffic patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScenarioName {
    /// Two bursts around the first window edge (at 1 x period), `--requests` each.
    Boundary,
    /// A calm client at one request per `--every` plus a sudden spike of `--requests`, same key.
    CalmSpike,
    /// Sustained demand well above the limit: `--rate` (default 10 x the limit).
    Flood,
    /// `--runners` jobs (default 8) sharing one daily quota (default 10000/d) with weighted
    /// costs: a search costs 100 units, a list call 1.
    DailyJobs,
}

/// Named cases from the source documents (limit 100/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// 100 requests at 0.95 s and 100 at 1.05 s, simulated clock.
    ClockBoundary,
    /// 200 requests at the end of one window and 200 at the start of the next: each burst takes
    /// 14 ms (200 Redis round trips), starting at 0.87 s and 1.01 s.
    RedisBoundary,
}

impl Choice for ScenarioName {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            ScenarioName::Boundary,
            "boundary",
            "Two bursts around the first window edge (at 1 x period), `--requests` each",
        ),
        (
            ScenarioName::CalmSpike,
            "calm-spike",
            "A calm client at one request per `--every` plus a sudden spike of `--requests`, \
             same key",
        ),
        (
            ScenarioName::Flood,
            "flood",
            "Sustained demand well above the limit: `--rate` (default 10 x the limit)",
        ),
        (
            ScenarioName::DailyJobs,
            "daily-jobs",
            "`--runners` jobs (default 8) sharing one daily quota (default 10000/d), each \
             calling every `--every` (default 10 min): a search (100 units) every 10th call, \
             list calls (1 unit) otherwise",
        ),
    ];
}

impl Choice for Preset {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            Preset::ClockBoundary,
            "clock-boundary",
            "100 requests at 0.95 s and 100 at 1.05 s, simulated clock",
        ),
        (
            Preset::RedisBoundary,
            "redis-boundary",
            "200 requests at the end of one window and 200 at the start of the next: each \
             burst takes 14 ms (200 Redis round trips), starting at 0.87 s and 1.01 s",
        ),
    ];
}

impl Preset {
    /// The preset's name on the command line.
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

/// How a [`Report`] is written ([`render`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Choice for Format {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            Format::Table,
            "table",
            "Per-second table, terminal chart, totals",
        ),
        (
            Format::Json,
            "json",
            "Every decision and the summary, as one JSON document",
        ),
        (Format::Svg, "svg", "An SVG chart"),
    ];
}

impl std::str::FromStr for AlgorithmChoice {
    type Err = String;

    /// `all` (any case) or an algorithm name.
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("all") {
            Ok(AlgorithmChoice::All)
        } else {
            text.parse().map(AlgorithmChoice::One)
        }
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
    /// `--max-wait`, microseconds, when requests waited.
    pub max_wait: Option<Micros>,
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

/// The column width: [`Spec::column`] (`--column`), else one column per second, narrowed to a round sub-second
/// width giving at least 20 columns when the traffic spans under 10 s (so a boundary burst at
/// 0.95 s and one at 1.05 s fall in different columns), or widened to a round width keeping at
/// most 80 columns.
pub fn column_width(requested: Option<Micros>, span: Micros) -> Micros {
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

/// Builds the whole report a spec describes, without writing anything.
///
/// # Errors
/// As [`build_traffic`]; [`Error::Invalid`] for a burst the quota refuses, a balance that
/// cannot apply, or a `--column` drawing over [`MAX_COLUMNS`] columns (the span plus
/// `--max-wait`; an automatic width is widened instead); [`Error::Run`] when a setup
/// cannot be built for an algorithm or its store fails.
pub fn build_report(spec: &Spec) -> Result<Report, Error> {
    let daily_jobs =
        spec.trace.is_none() && spec.preset.is_none() && spec.scenario == ScenarioName::DailyJobs;
    let mut quota = spec.limit.unwrap_or_else(|| match spec.preset {
        Some(_) => preset_quota(),
        None if daily_jobs => "10000/d".parse().expect("10000/d is a valid quota"),
        None => "10/10s".parse().expect("10/10s is a valid quota"),
    });
    if spec.max_wait.is_some() && spec.store != StoreSpec::Memory {
        return Err(Error::invalid(
            "max_wait",
            "--max-wait needs --store memory: the Redis counters of the simulator do not \
             reserve yet",
        ));
    }
    if let Some(burst) = spec.burst {
        quota = quota
            .burst_of(burst)
            .map_err(|e| Error::invalid("burst", format!("invalid --burst: {e}")))?;
    }
    if spec.balance != Balance::RoundRobin && spec.instances == 1 {
        // With one instance every request goes to it: the flag would silently change nothing.
        return Err(Error::invalid(
            "balance",
            format!(
                "--balance needs --instances > 1: with one instance every request goes to it, \
                 so --balance {} changes nothing",
                spec.balance.as_str()
            ),
        ));
    }
    let setup = Setup {
        instances: spec.instances,
        counter: spec.counter,
        balance: spec.balance,
    };
    let calendar = calendar::calendar_of(spec, &quota)?;
    let traffic = build_traffic(spec, &quota)?;
    // The daily jobs' spending is read per hour.
    let requested_column = match spec.column {
        None if daily_jobs => Some(3_600 * MICROS_PER_SECOND),
        other => other,
    };
    // A request that waits runs up to `max_wait` after its arrival: the chart reaches that far,
    // and its columns are counted (and bounded) before anything runs.
    let reach = traffic.span_us.saturating_add(spec.max_wait.unwrap_or(0));
    let mut column = column_width(requested_column, traffic.span_us);
    if requested_column.is_none() && reach.div_ceil(column) > MAX_COLUMNS {
        column = column_width(None, reach);
    }
    if reach.div_ceil(column) > MAX_COLUMNS {
        let waits = match spec.max_wait {
            Some(max_wait) if traffic.span_us.div_ceil(column) <= MAX_COLUMNS => {
                format!(" once requests wait up to --max-wait {max_wait} us")
            }
            _ => String::new(),
        };
        return Err(Error::invalid(
            "column",
            format!(
                "--column {column} us would draw more than {MAX_COLUMNS} columns{waits}; choose \
                 a wider one"
            ),
        ));
    }
    let runs = spec
        .algorithm
        .kinds()
        .into_iter()
        .map(|kind| {
            match &calendar {
                Some(c) => calendar::run_one(&traffic, kind, quota, setup, column, c),
                None => run_one(spec, &traffic, kind, quota, setup, column),
            }
            .map_err(|e| Error::Run {
                kind,
                source: Box::new(e),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    // Requests that waited may run after the traffic's span: every run draws as many columns
    // as the longest.
    let mut runs = runs;
    let n_columns = runs
        .iter()
        .map(|r| r.summary.columns.len())
        .max()
        .unwrap_or(0);
    for run in &mut runs {
        let columns = &mut run.summary.columns;
        while columns.len() < n_columns {
            let start_us = columns.len() as u64 * column;
            columns.push(engine::Column {
                start_us,
                ..engine::Column::default()
            });
        }
    }
    Ok(Report {
        traffic,
        quota,
        setup,
        preset: spec.preset,
        runs,
        max_wait: spec.max_wait,
    })
}

/// One algorithm's run on the spec's store.
fn run_one(
    spec: &Spec,
    traffic: &Traffic,
    kind: AlgorithmKind,
    quota: Quota,
    setup: Setup,
    column: Micros,
) -> Result<Run, Error> {
    match &spec.store {
        StoreSpec::Memory => engine::run_in_memory_waiting(
            &traffic.requests,
            kind,
            quota,
            setup,
            column,
            traffic.span_us,
            spec.max_wait,
        ),
        #[cfg(feature = "redis")]
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
        #[cfg(not(feature = "redis"))]
        StoreSpec::Redis(_) => Err(Error::invalid(
            "store",
            "this build has no Redis counters (feature `redis` of floodgate-simulate)",
        )),
    }
}

/// Writes `report` as `format`: the terminal table and chart, the JSON document, or the SVG.
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Table => table::render(report),
        Format::Json => json::render(report),
        Format::Svg => svg::render(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message about one parameter names that field (`/v1/simulate` answered `at` for a
    /// zero `every`).
    #[test]
    fn a_traffic_error_names_its_own_field() {
        let spec = Spec {
            scenario: ScenarioName::CalmSpike,
            every: Some(0),
            ..Spec::default()
        };
        let err = build_report(&spec).unwrap_err();
        assert_eq!(err.field(), Some("every"), "{err}");
    }

    /// `limit 1/1day, rate 2/1ms, duration 1ms, max_wait 1day` once grew the chart to one
    /// column per millisecond up to the second request's slot a day later (86.4 million
    /// columns, 3 GiB): the process aborted allocating them.
    #[test]
    fn a_wait_of_a_day_after_a_millisecond_of_traffic_draws_bounded_columns() {
        let spec = Spec {
            scenario: ScenarioName::Flood,
            algorithm: AlgorithmChoice::One(AlgorithmKind::Gcra),
            limit: Some("1/1d".parse().unwrap()),
            rate: Some((2, 1_000)),
            duration: Some(1_000),
            max_wait: Some(86_400 * MICROS_PER_SECOND),
            ..Spec::default()
        };
        let report = build_report(&spec).unwrap();
        let summary = &report.runs[0].summary;
        assert_eq!((summary.admitted, summary.queued), (2, 1));
        assert!(summary.columns.len() as u64 <= MAX_COLUMNS);
        // The automatic width widened to cover the wait: the queued request's column exists.
        assert_eq!(summary.column_us, 1_800 * MICROS_PER_SECOND);
        let queued: u64 = summary.columns.iter().map(|c| c.queued).sum();
        assert_eq!(queued, 1);
        // A width asked for explicitly is refused, naming it, before anything runs.
        let narrow = Spec {
            column: Some(1_000),
            ..spec
        };
        let err = build_report(&narrow).unwrap_err();
        assert_eq!(err.field(), Some("column"), "{err}");
        assert!(err.to_string().contains("--max-wait"), "{err}");
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
}
