//! Golden vectors for the calendar windows (`vectors/calendar/*.toml`, `docs/spec/calendar.md`)
//! and a runner for any [`CalendarBackend`].
//!
//! A case names its algorithm (`fixed_window` or `sliding_window`), `limit`, `unit` (`day`,
//! `week`, `month`), IANA `zone` and optional `week_start`; a step's `at` is an RFC 3339 instant
//! (`"2027-03-14T23:59:59.999999-07:00"`). The other step fields are those of [`crate::Step`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use floodgate_core::calendar::{
    parse_weekday, Calendar, CalendarCheckError, CalendarQuota, CalendarUnit,
};
use floodgate_core::{
    AlgorithmKind, CheckError, Decision, FixedWindowState, SlidingWindowState, Timestamp,
};
use serde::Deserialize;

use crate::backend::BackendFailure;
use crate::report::{Failure, Report};
use crate::shared::{vectors_dir, Expected, LoadError, DEFAULT_KEY};

/// The folder of the calendar vector files.
pub fn calendar_vectors_dir() -> PathBuf {
    vectors_dir().join("calendar")
}

/// One calendar vector file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarVector {
    /// The cases, in file order.
    #[serde(rename = "case", default)]
    pub cases: Vec<CalendarCase>,
}

/// A sequence of requests against fresh state under one calendar quota.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarCase {
    /// A unique snake_case name.
    pub name: String,
    /// `fixed_window` or `sliding_window`.
    pub algorithm: String,
    /// Units per period.
    pub limit: u64,
    /// `day`, `week` or `month`.
    pub unit: String,
    /// An IANA time zone name.
    pub zone: String,
    /// The first day of a week (default Monday).
    #[serde(default)]
    pub week_start: Option<String>,
    /// The requests.
    #[serde(rename = "step", default)]
    pub steps: Vec<CalendarStep>,
}

/// A step: an RFC 3339 instant, the request and the answer expected (as in [`crate::Step`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarStep {
    /// When, as an RFC 3339 instant with microseconds.
    pub at: String,
    /// Units the request costs (0 = peek of what remains).
    pub cost: u64,
    /// The key; [`DEFAULT_KEY`] when absent.
    #[serde(default)]
    pub key: Option<String>,
    /// A peek instead of a check.
    #[serde(default)]
    pub peek: bool,
    /// Expected `allowed`.
    #[serde(default)]
    pub allowed: Option<bool>,
    /// Expected `remaining`.
    #[serde(default)]
    pub remaining: Option<u64>,
    /// Expected `reset_after`.
    #[serde(default)]
    pub reset_after_us: Option<u64>,
    /// Expected `retry_after` (denials only).
    #[serde(default)]
    pub retry_after_us: Option<u64>,
    /// `"insufficient_capacity"` instead of a decision.
    #[serde(default)]
    pub error: Option<String>,
}

impl CalendarStep {
    /// The expected answer.
    ///
    /// # Errors
    /// A message when the fields do not make one answer.
    pub fn expected(&self, limit: u64) -> Result<Expected, String> {
        match (
            &self.error,
            self.allowed,
            self.remaining,
            self.reset_after_us,
        ) {
            (Some(e), None, None, None) if e == "insufficient_capacity" => {
                Ok(Expected::InsufficientCapacity)
            }
            (None, Some(allowed), Some(remaining), Some(reset_after))
                if allowed != self.retry_after_us.is_some() =>
            {
                Ok(Expected::Decision(Decision {
                    allowed,
                    limit,
                    remaining,
                    reset_after,
                    retry_after: self.retry_after_us,
                }))
            }
            _ => Err(
                "a step needs allowed, remaining, reset_after_us (retry_after_us exactly \
                 when denied), or error = \"insufficient_capacity\" alone"
                    .into(),
            ),
        }
    }
}

impl CalendarCase {
    /// The quota the case runs under.
    ///
    /// # Errors
    /// A message naming the field that is wrong.
    pub fn quota(&self) -> Result<CalendarQuota, String> {
        let kind: AlgorithmKind = self.algorithm.parse()?;
        let unit = CalendarUnit::from_period_text(&self.unit)
            .ok_or_else(|| format!("unit {:?}: day, week or month", self.unit))?;
        let week_start = match &self.week_start {
            Some(day) => Some(parse_weekday(day).map_err(|e| e.to_string())?),
            None => None,
        };
        let calendar = Calendar::new(&self.zone, unit, week_start).map_err(|e| e.to_string())?;
        CalendarQuota::new(kind, self.limit, calendar).map_err(|e| e.to_string())
    }
}

/// Parses an RFC 3339 instant into microseconds since the epoch.
///
/// # Errors
/// A message when it is not an instant after 1970.
pub fn parse_instant(text: &str) -> Result<Timestamp, String> {
    let ts: jiff::Timestamp = text.parse().map_err(|e| format!("at {text:?}: {e}"))?;
    u64::try_from(ts.as_microsecond()).map_err(|_| format!("at {text:?}: before 1970"))
}

/// Something that decides calendar requests: the core, the memory store, the Redis script.
pub trait CalendarBackend {
    /// `"core"`, `"memory"`, `"redis"`.
    fn name(&self) -> &str;

    /// Makes every key fresh.
    ///
    /// # Errors
    /// A [`BackendFailure`] when the state cannot be cleared.
    fn reset(&mut self) -> Result<(), BackendFailure>;

    /// A check (or a peek) of `cost` units for `key` at `now_us` under `quota`, `now_us` used
    /// as given. `Ok(Err(_))` is the core's cost error.
    ///
    /// # Errors
    /// A [`BackendFailure`] when the backend itself failed.
    fn check(
        &mut self,
        quota: &CalendarQuota,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Result<Result<Decision, CheckError>, BackendFailure>;
}

/// The reference: `floodgate_core::calendar` over a map of states.
#[derive(Debug, Default)]
pub struct CoreCalendarBackend {
    fixed: HashMap<String, FixedWindowState>,
    sliding: HashMap<String, SlidingWindowState>,
}

/// Maps a calendar check error to the reply of a backend.
///
/// # Errors
/// A [`BackendFailure`] for anything but a cost error.
pub fn calendar_reply(
    result: Result<Decision, CalendarCheckError>,
) -> Result<Result<Decision, CheckError>, BackendFailure> {
    match result {
        Ok(d) => Ok(Ok(d)),
        Err(CalendarCheckError::Check(e)) => Ok(Err(e)),
        Err(e) => Err(e.to_string().into()),
    }
}

impl CalendarBackend for CoreCalendarBackend {
    fn name(&self) -> &str {
        "core"
    }

    fn reset(&mut self) -> Result<(), BackendFailure> {
        self.fixed.clear();
        self.sliding.clear();
        Ok(())
    }

    fn check(
        &mut self,
        quota: &CalendarQuota,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Result<Result<Decision, CheckError>, BackendFailure> {
        let result = if quota.kind() == AlgorithmKind::FixedWindow {
            let state = self.fixed.entry(key.to_string()).or_default();
            if peek {
                quota.peek_fixed(state, now_us, cost)
            } else {
                quota.check_fixed(state, now_us, cost)
            }
        } else {
            let state = self.sliding.entry(key.to_string()).or_default();
            if peek {
                quota.peek_sliding(state, now_us, cost)
            } else {
                quota.check_sliding(state, now_us, cost)
            }
        };
        calendar_reply(result)
    }
}

/// Loads every `*.toml` in `dir`.
///
/// # Errors
/// [`LoadError`] naming the file.
pub fn load_calendar_dir(dir: &Path) -> Result<Vec<(PathBuf, CalendarVector)>, LoadError> {
    let io = |source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
                path: path.clone(),
                source,
            })?;
            let vector = toml::from_str(&text).map_err(|e| LoadError::Parse {
                path: path.clone(),
                message: e.to_string(),
            })?;
            Ok((path, vector))
        })
        .collect()
}

/// Runs every case of `vector` on `backend`.
pub fn run_calendar_vector(backend: &mut dyn CalendarBackend, vector: &CalendarVector) -> Report {
    let mut report = Report::default();
    for case in &vector.cases {
        report.cases += 1;
        let label = format!("calendar/{}/{}", backend.name(), case.name);
        let fail = |report: &mut Report, label: String, message: String| {
            report.failures.push(Failure { label, message });
        };
        let quota = match case.quota() {
            Ok(quota) => quota,
            Err(message) => {
                fail(&mut report, label, message);
                continue;
            }
        };
        if let Err(e) = backend.reset() {
            fail(&mut report, label, format!("reset failed: {e}"));
            continue;
        }
        for (i, step) in case.steps.iter().enumerate() {
            report.steps += 1;
            if let Some(message) = run_step(backend, &quota, step) {
                fail(&mut report, format!("{label}#{}", i + 1), message);
            }
        }
    }
    report
}

fn run_step(
    backend: &mut dyn CalendarBackend,
    quota: &CalendarQuota,
    step: &CalendarStep,
) -> Option<String> {
    let now = match parse_instant(&step.at) {
        Ok(now) => now,
        Err(message) => return Some(format!("malformed step: {message}")),
    };
    let s = step;
    let expected = match s.expected(quota.limit()) {
        Ok(expected) => expected,
        Err(message) => return Some(format!("malformed step: {message}")),
    };
    let key = s.key.as_deref().unwrap_or(DEFAULT_KEY);
    let got = match backend.check(quota, key, now, s.cost, s.peek) {
        Ok(got) => got,
        Err(e) => return Some(format!("backend failed at {}: {e}", step.at)),
    };
    let matches = match (&expected, &got) {
        (Expected::Decision(want), Ok(d)) => want == d,
        (Expected::InsufficientCapacity, Err(CheckError::InsufficientCapacity { .. })) => true,
        _ => false,
    };
    (!matches).then(|| {
        format!(
            "cost {} at {}: expected {expected:?}, got {got:?}",
            s.cost, step.at
        )
    })
}

/// Runs every file of `dir`.
///
/// # Errors
/// [`LoadError`] when a file cannot be read or parsed.
pub fn run_calendar_dir(
    backend: &mut dyn CalendarBackend,
    dir: &Path,
) -> Result<Report, LoadError> {
    let mut report = Report::default();
    for (_, vector) in load_calendar_dir(dir)? {
        report.merge(run_calendar_vector(backend, &vector));
    }
    Ok(report)
}

/// The memory store's calendar table ([`floodgate_store::calendar::MemoryCalendar`]).
#[derive(Debug)]
pub struct MemoryCalendarBackend {
    store: floodgate_store::calendar::MemoryCalendar,
}

impl Default for MemoryCalendarBackend {
    fn default() -> Self {
        let clock = std::sync::Arc::new(floodgate_core::ManualClock::new(0));
        Self {
            store: floodgate_store::calendar::MemoryCalendar::new(clock, 10_000),
        }
    }
}

impl CalendarBackend for MemoryCalendarBackend {
    fn name(&self) -> &str {
        "memory"
    }

    fn reset(&mut self) -> Result<(), BackendFailure> {
        self.store.clear();
        Ok(())
    }

    fn check(
        &mut self,
        quota: &CalendarQuota,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Result<Result<Decision, CheckError>, BackendFailure> {
        let item = floodgate_store::calendar::CalendarItem {
            rule: "conformance",
            quota,
            key,
            cost,
        };
        match self.store.check_at(&[item], now_us, !peek) {
            Ok(batch) => Ok(Ok(batch.decisions[0])),
            Err(floodgate_store::StoreError::InsufficientCapacity { cost, capacity, .. }) => {
                Ok(Err(CheckError::InsufficientCapacity { cost, capacity }))
            }
            Err(e) => Err(Box::new(e)),
        }
    }
}
