//! What a simulation is asked to do: the [`Spec`], its choices and its bounds.

use std::path::PathBuf;

use floodgate_core::{AlgorithmKind, Micros, Quota};

use crate::choice::Choice;
use crate::error::Error;
use crate::setup::{Balance, CounterMode, StoreSpec};

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
    /// Width of one chart column, microseconds [default: see [`column_width`](crate::column_width)].
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
/// column width): [`build_report`](crate::build_report) refuses a `--column` drawing more, and widens an automatic
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
pub(crate) fn check_request_count(count: u128, max: u64, what: &str) -> Result<(), Error> {
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

/// How a [`Report`](crate::Report) is written ([`render`](crate::render)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Per-second table, terminal chart, totals.
    Table,
    /// Every decision and the summary, as one JSON document.
    Json,
    /// An SVG chart.
    Svg,
}

/// `--algorithm`: one algorithm, several of them (`-a fixed_window,token_bucket` or a repeated
/// `-a`, each run once) or all six. The page's comparison of a subset is this choice too
/// (`/v1/simulate`'s `algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmChoice {
    /// Every algorithm, in [`AlgorithmKind::ALL`] order.
    All,
    /// One algorithm.
    One(AlgorithmKind),
    /// Two to five algorithms, run in [`AlgorithmKind::ALL`] order.
    Several(AlgorithmSet),
}

/// A set of algorithms (each at most once), iterated in [`AlgorithmKind::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlgorithmSet {
    /// Bit `i` set: `AlgorithmKind::ALL[i]` is in the set.
    bits: u8,
}

impl AlgorithmSet {
    /// The set with `kind` added.
    #[must_use]
    pub fn with(self, kind: AlgorithmKind) -> Self {
        let i = AlgorithmKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_default();
        Self {
            bits: self.bits | 1 << i,
        }
    }

    /// The algorithms in the set, in [`AlgorithmKind::ALL`] order.
    pub fn kinds(self) -> Vec<AlgorithmKind> {
        AlgorithmKind::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, k)| *k)
            .collect()
    }
}

impl AlgorithmChoice {
    /// The algorithms to run, each once, in [`AlgorithmKind::ALL`] order.
    pub fn kinds(self) -> Vec<AlgorithmKind> {
        match self {
            AlgorithmChoice::All => AlgorithmKind::ALL.to_vec(),
            AlgorithmChoice::One(kind) => vec![kind],
            AlgorithmChoice::Several(set) => set.kinds(),
        }
    }

    /// The choice that runs the algorithms of both (a repeated `-a`).
    #[must_use]
    pub fn union(self, other: AlgorithmChoice) -> AlgorithmChoice {
        let set = other
            .kinds()
            .into_iter()
            .fold(self.set(), AlgorithmSet::with);
        Self::of(set)
    }

    fn set(self) -> AlgorithmSet {
        self.kinds()
            .into_iter()
            .fold(AlgorithmSet::default(), AlgorithmSet::with)
    }

    /// `set` as the smallest choice that names it: one algorithm, several, or all.
    fn of(set: AlgorithmSet) -> AlgorithmChoice {
        match set.kinds().as_slice() {
            [one] => AlgorithmChoice::One(*one),
            kinds if kinds.len() == AlgorithmKind::ALL.len() => AlgorithmChoice::All,
            _ => AlgorithmChoice::Several(set),
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

    /// `all` (any case), an algorithm name, or a comma-separated list of them
    /// (`fixed_window,token_bucket`; a name given twice runs once). An empty item is an error.
    fn from_str(text: &str) -> Result<Self, String> {
        let mut set = AlgorithmSet::default();
        for item in text.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(format!(
                    "empty algorithm name in {text:?}; give names separated by commas, e.g. \
                     fixed_window,token_bucket"
                ));
            }
            if item.eq_ignore_ascii_case("all") {
                return Ok(AlgorithmChoice::All);
            }
            set = set.with(item.parse()?);
        }
        Ok(AlgorithmChoice::of(set))
    }
}

#[cfg(test)]
mod algorithm_choice_tests {
    use super::*;

    fn choice(text: &str) -> Result<Vec<&'static str>, String> {
        text.parse::<AlgorithmChoice>()
            .map(|c| c.kinds().into_iter().map(AlgorithmKind::as_str).collect())
    }

    #[test]
    fn lists_run_each_algorithm_once_in_the_usual_order() {
        assert_eq!(
            choice("token_bucket,fixed_window,token-bucket"),
            Ok(vec!["fixed_window", "token_bucket"])
        );
        assert_eq!(choice(" gcra "), Ok(vec!["gcra"]));
        assert_eq!(choice("gcra,ALL").unwrap().len(), 6);
        let every = "fixed_window,sliding_log,sliding_window,token_bucket,leaky_bucket,gcra";
        assert_eq!(
            every.parse::<AlgorithmChoice>().unwrap(),
            AlgorithmChoice::All
        );
        assert!(choice("gcra,,fixed_window").unwrap_err().contains("empty"));
        assert!(choice("gcra,nope").unwrap_err().contains("\"nope\""));
        let a: AlgorithmChoice = "gcra".parse().unwrap();
        let b: AlgorithmChoice = "fixed_window,gcra".parse().unwrap();
        assert_eq!(
            a.union(b).kinds(),
            vec![AlgorithmKind::FixedWindow, AlgorithmKind::Gcra]
        );
        assert_eq!(a.union(a), a);
    }
}
