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

use floodgate_core::{AlgorithmKind, Micros, Quota, MICROS_PER_SECOND};

mod build;
pub mod calendar;
mod choice;
pub mod engine;
mod error;
pub mod json;
#[cfg(feature = "redis")]
pub mod redis;
pub mod setup;
mod spec;
pub mod svg;
pub mod table;
pub mod trace;
pub mod traffic;

pub use build::build_traffic;
pub use choice::Choice;
use engine::Run;
pub use error::Error;
use setup::{Balance, Setup, StoreSpec};
pub use spec::{
    AlgorithmChoice, AlgorithmSet, Format, Preset, ScenarioName, Spec, TraceInput,
    DEFAULT_MAX_REQUESTS, MAX_COLUMNS,
};
use traffic::Traffic;

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
    /// `--calendar`: the time zone whose days the limit counts, and the local date the run
    /// starts on (at its midnight).
    pub calendar: Option<(String, String)>,
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
        calendar: calendar.as_ref().map(|c| {
            let start = c.local_date(engine::epoch_base(quota.period()));
            (c.zone().to_string(), start.unwrap_or_default())
        }),
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
