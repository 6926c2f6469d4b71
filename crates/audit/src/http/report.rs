//! What the HTTP probe found ([`HttpReport`]) and the tallies and units its parts share.

use std::collections::BTreeMap;

use serde::Serialize;

use super::headers::DeclaredLimit;
use super::options::US;
use super::probe::{Outcome, Sample};
use crate::verdict::Verdict;

/// Admitted, denied and failed requests in one 100 ms column (by the time the answer came).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Column {
    /// Start of the column, microseconds since the probe began.
    pub start_us: u64,
    /// Answers that admitted.
    pub admitted: u64,
    /// Answers that denied (429, or 403/503 with `Retry-After` or nothing remaining).
    pub denied: u64,
    /// Other answers and transport errors.
    pub errors: u64,
}

/// One phase of the probe: when it ran and what it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseSummary {
    /// `discovery`, `multiplication`, `edge_search`, `edge_before`, `edge_after`,
    /// `multiplication_again`, `retry_early`, `retry_exhaust`, `retry_on_time`.
    pub phase: &'static str,
    /// First request sent, microseconds since the start.
    pub start_us: u64,
    /// Last answer, microseconds since the start.
    pub end_us: u64,
    /// Requests sent.
    pub sent: u64,
    /// Admitted.
    pub admitted: u64,
    /// Denied.
    pub denied: u64,
    /// Errors.
    pub errors: u64,
}

/// Everything the probe found.
#[derive(Debug, Clone, Serialize)]
pub struct HttpReport {
    /// The URL probed.
    pub url: String,
    /// The declared limit tested against.
    pub declared: DeclaredLimit,
    /// `true` when the limit came from `--limit`, not from the endpoint.
    pub limit_given: bool,
    /// Requests sent.
    pub sent: u64,
    /// Admitted, denied, errors in all.
    pub admitted: u64,
    /// Denied in all.
    pub denied: u64,
    /// Errors in all.
    pub errors: u64,
    /// Microseconds from the first request to the last answer.
    pub duration_us: u64,
    /// Connections: `concurrency` and whether each request had its own.
    pub concurrency: usize,
    /// Each request on a new connection.
    pub new_connections: bool,
    /// The verdicts, in the order above.
    pub verdicts: Vec<Verdict>,
    /// The phases.
    pub phases: Vec<PhaseSummary>,
    /// Per 100 ms: admitted, denied, errors.
    pub columns: Vec<Column>,
}

impl HttpReport {
    /// `true` when any verdict is a danger (the command then exits with status 1).
    pub fn has_danger(&self) -> bool {
        self.verdicts.iter().any(Verdict::is_danger)
    }

    /// The JSON document of `--format json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

pub(super) fn secs(us: u64) -> String {
    let s = us as f64 / US as f64;
    if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.2} s")
    }
}

pub(super) fn ms(us: u64) -> String {
    format!("{} ms", (us + 500) / 1000)
}

/// Admitted, denied, errors and the span of a set of samples.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Tally {
    pub(super) sent: u64,
    pub(super) admitted: u64,
    pub(super) denied: u64,
    pub(super) errors: u64,
    pub(super) first_sent_us: u64,
    pub(super) last_done_us: u64,
}

impl Tally {
    pub(super) fn of<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Self {
        let mut t = Tally {
            first_sent_us: u64::MAX,
            ..Tally::default()
        };
        for s in samples {
            t.sent += 1;
            match s.outcome {
                Outcome::Admitted => t.admitted += 1,
                Outcome::Denied => t.denied += 1,
                Outcome::Error => t.errors += 1,
            }
            t.first_sent_us = t.first_sent_us.min(s.sent_us);
            t.last_done_us = t.last_done_us.max(s.done_us);
        }
        if t.sent == 0 {
            t.first_sent_us = 0;
        }
        t
    }

    pub(super) fn span_us(&self) -> u64 {
        self.last_done_us.saturating_sub(self.first_sent_us)
    }
}

/// `" (most of them 503: if that is how it denies, add --deny-status 503)"`, for the most
/// common error status, or empty.
pub(super) fn error_hint(samples: &[Sample]) -> String {
    let mut by: BTreeMap<u16, u64> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.outcome == Outcome::Error && s.status != 0)
    {
        *by.entry(s.status).or_default() += 1;
    }
    match by.iter().max_by_key(|(_, n)| **n) {
        Some((status, n)) => {
            format!(" ({n} of them {status}: if that is how it denies, add --deny-status {status})")
        }
        None => String::new(),
    }
}

/// Column width of the series: 100 ms.
pub const COLUMN_US: u64 = 100_000;
