//! # floodgate-conformance
//!
//! Golden vectors for every Floodgate algorithm, and a runner that plays them against any
//! [`Backend`]: the reference implementation in `floodgate-core` ([`CoreBackend`]), the memory
//! store ([`MemoryBackend`]), the Redis scripts (`RedisBackend`, feature `redis`). The vectors (`vectors/<algorithm>.toml` in this crate, see
//! [`vectors_dir`]) are hand-checked against the integer formulas of `docs/spec/`; a backend
//! conforms when it returns exactly the same [`Decision`] (or error) at every step.
//!
//! A vector file holds one algorithm and a list of cases; each case starts every key fresh and
//! plays its steps in order:
//!
//! ```toml
//! algorithm = "gcra"
//! [[case]]
//! name = "burst_then_exact_retry"
//! quota = "2/s"                # Quota text form; burst via "2/s burst 5"
//! start_us = 1700000000000000  # optional base added to every at_us (default 0)
//! [[case.step]]
//! at_us = 0
//! cost = 1
//! allowed = true
//! remaining = 1
//! reset_after_us = 500000
//! # retry_after_us = 5         # only on denials
//! # peek = true                # peek instead of check
//! # max_wait_us = 300000       # a reservation instead of a check; then
//! # wait_us = 250000           #   the wait when granted (absent when denied)
//! # settle_actual = 2          # a settle instead: `cost` units reserved for
//! # scheduled_at_us = 250000   #   this time (offset like at_us) actually cost 2; the
//! #                            #   decision expected is the standing after it
//! # error = "insufficient_capacity"   # expect that error instead of a decision
//! # key = "a"                  # default "k": independent state per key
//! ```
//!
//! ```
//! use floodgate_conformance::{run_vector, CoreBackend, Vector};
//! let vector = Vector::parse(r#"
//!     algorithm = "gcra"
//!     [[case]]
//!     name = "one"
//!     quota = "1/s"
//!     [[case.step]]
//!     at_us = 0
//!     cost = 1
//!     allowed = true
//!     remaining = 0
//!     reset_after_us = 1000000
//! "#).unwrap();
//! let report = run_vector(&mut CoreBackend::default(), &vector);
//! assert!(report.is_ok(), "{report}");
//! ```

use std::path::{Path, PathBuf};

use floodgate_core::{AlgorithmKind, CheckError, Decision, Policy, Quota, Timestamp};
use serde::Deserialize;

mod backend;
pub mod calendar;
#[cfg(feature = "redis")]
pub mod redis;
mod report;
mod shared;

pub use crate::backend::{
    reserve_reply, settle_reply, store_failure, Backend, BackendFailure, CoreBackend,
    MemoryBackend, Reply, ReserveReply,
};
#[cfg(feature = "redis")]
pub use crate::redis::RedisBackend;
pub use crate::report::{Failure, Report};
pub use crate::shared::{vectors_dir, Expected, LoadError, DEFAULT_KEY};

/// One vector file: cases for one algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    /// The algorithm's snake_case name, e.g. `"gcra"` (see [`AlgorithmKind`]).
    pub algorithm: String,
    /// The cases, in file order (`[[case]]`).
    #[serde(rename = "case", default)]
    pub cases: Vec<Case>,
}

/// A sequence of requests against fresh state, under one quota.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// A unique snake_case name, used in failure labels.
    pub name: String,
    /// The quota in its text form (`"2/s"`, `"3/20s burst 5"`), parsed by [`Quota`]'s `FromStr`.
    pub quota: String,
    /// Added to every step's `at_us`; microseconds since the Unix epoch. Default 0.
    #[serde(default)]
    pub start_us: Timestamp,
    /// The requests, in order (`[[case.step]]`).
    #[serde(rename = "step", default)]
    pub steps: Vec<Step>,
}

/// One request and the answer expected for it.
///
/// Either `error` is set, or `allowed`, `remaining` and `reset_after_us` are (and
/// `retry_after_us` exactly when `allowed` is false).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// When the request is made: microseconds after the case's `start_us`.
    pub at_us: u64,
    /// Units the request costs (0 = peek of what remains).
    pub cost: u64,
    /// The key; [`DEFAULT_KEY`] when absent. Keys never share state.
    #[serde(default)]
    pub key: Option<String>,
    /// `true`: a peek (decide without consuming) instead of a check.
    #[serde(default)]
    pub peek: bool,
    /// Expected [`Decision::allowed`].
    #[serde(default)]
    pub allowed: Option<bool>,
    /// Expected [`Decision::remaining`].
    #[serde(default)]
    pub remaining: Option<u64>,
    /// Expected [`Decision::reset_after`], microseconds.
    #[serde(default)]
    pub reset_after_us: Option<u64>,
    /// Expected [`Decision::retry_after`], microseconds; absent means `None`.
    #[serde(default)]
    pub retry_after_us: Option<u64>,
    /// Expected error instead of a decision; only `"insufficient_capacity"` exists.
    #[serde(default)]
    pub error: Option<String>,
    /// A reservation with this wait bound (microseconds) instead of a check.
    #[serde(default)]
    pub max_wait_us: Option<u64>,
    /// Expected wait of a granted reservation; absent when it is denied.
    #[serde(default)]
    pub wait_us: Option<u64>,
    /// A settle instead of a check: the reservation of `cost` units for `scheduled_at_us`
    /// actually cost this many.
    #[serde(default)]
    pub settle_actual: Option<u64>,
    /// The settled reservation's scheduled time, microseconds after the case's `start_us`.
    #[serde(default)]
    pub scheduled_at_us: Option<u64>,
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A check (or, with `peek`, a peek).
    Check {
        /// Decide without consuming.
        peek: bool,
    },
    /// A reservation with a wait bound.
    Reserve {
        /// The wait bound, microseconds.
        max_wait: u64,
    },
    /// A settle of a reservation of `cost` units.
    Settle {
        /// The reservation's scheduled time (absolute, microseconds since the epoch).
        scheduled_at: Timestamp,
        /// The actual cost.
        actual: u64,
    },
}

impl Step {
    /// The step's key, or [`DEFAULT_KEY`].
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_KEY)
    }

    /// What the step does, with times made absolute by `start_us`.
    ///
    /// # Errors
    /// A message when the step mixes a peek, a reservation and a settle, or half a settle.
    pub fn operation(&self, start_us: Timestamp) -> Result<Operation, String> {
        match (
            self.peek,
            self.max_wait_us,
            self.settle_actual,
            self.scheduled_at_us,
        ) {
            (peek, None, None, None) => Ok(Operation::Check { peek }),
            (false, Some(max_wait), None, None) => Ok(Operation::Reserve { max_wait }),
            (false, None, Some(actual), Some(at)) => Ok(Operation::Settle {
                scheduled_at: start_us
                    .checked_add(at)
                    .ok_or("start_us + scheduled_at_us overflows")?,
                actual,
            }),
            _ => Err(
                "a step is a check, a peek, a reservation (max_wait_us) or a settle \
                      (settle_actual with scheduled_at_us)"
                    .into(),
            ),
        }
    }

    /// The expected answer under `policy`.
    ///
    /// # Errors
    /// A message when the step is malformed: an unknown `error`, an error together with decision
    /// fields, missing decision fields, or `retry_after_us` that does not match `allowed`.
    pub fn expected(&self, policy: &Policy) -> Result<Expected, String> {
        if let Some(error) = &self.error {
            if error != "insufficient_capacity" {
                return Err(format!(
                    "unknown error {error:?} (expected \"insufficient_capacity\")"
                ));
            }
            if self.allowed.is_some()
                || self.remaining.is_some()
                || self.reset_after_us.is_some()
                || self.retry_after_us.is_some()
            {
                return Err("a step expecting an error has no decision fields".into());
            }
            return Ok(Expected::InsufficientCapacity);
        }
        let (Some(allowed), Some(remaining), Some(reset_after)) =
            (self.allowed, self.remaining, self.reset_after_us)
        else {
            return Err("a step needs allowed, remaining and reset_after_us (or error)".into());
        };
        if allowed == self.retry_after_us.is_some() {
            return Err("retry_after_us is given exactly when allowed = false".into());
        }
        Ok(Expected::Decision(Decision {
            allowed,
            limit: policy.capacity(),
            remaining,
            reset_after,
            retry_after: self.retry_after_us,
        }))
    }
}

impl Vector {
    /// Parses the TOML text of a vector file.
    ///
    /// # Errors
    /// [`LoadError::Parse`] with the TOML error's line and column.
    pub fn parse(text: &str) -> Result<Self, LoadError> {
        toml::from_str(text).map_err(|e| LoadError::Parse {
            path: PathBuf::from("<text>"),
            message: e.to_string(),
        })
    }

    /// Reads and parses one vector file.
    ///
    /// # Errors
    /// [`LoadError::Io`] or [`LoadError::Parse`], naming the file.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| LoadError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }
}

/// Every `*.toml` file in `dir`, sorted by file name, parsed.
///
/// # Errors
/// The first file (or the folder) that cannot be read or parsed.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, Vector)>, LoadError> {
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
        .map(|p| Vector::load(&p).map(|v| (p, v)))
        .collect()
}

/// Plays every case of `vector` against `backend`, resetting it before each case.
pub fn run_vector(backend: &mut dyn Backend, vector: &Vector) -> Report {
    let mut report = Report::default();
    let prefix = format!("{}/{}", vector.algorithm, backend.name());
    let kind = match vector.algorithm.parse::<AlgorithmKind>() {
        Ok(kind) => kind,
        Err(message) => {
            report.failures.push(Failure {
                label: prefix,
                message,
            });
            return report;
        }
    };
    for case in &vector.cases {
        report.cases += 1;
        let case_label = format!("{prefix}/{}", case.name);
        let policy = match case
            .quota
            .parse::<Quota>()
            .and_then(|q| Policy::new(kind, q))
        {
            Ok(policy) => policy,
            Err(e) => {
                report.failures.push(Failure {
                    label: case_label,
                    message: format!("quota {:?}: {e}", case.quota),
                });
                continue;
            }
        };
        if let Err(e) = backend.reset() {
            report.failures.push(Failure {
                label: case_label,
                message: format!("reset failed: {e}"),
            });
            continue;
        }
        for (i, step) in case.steps.iter().enumerate() {
            report.steps += 1;
            let label = format!("{case_label}#{}", i + 1);
            if let Some(message) = run_step(backend, &policy, case.start_us, step) {
                report.failures.push(Failure { label, message });
            }
        }
    }
    report
}

/// `Some(message)` when the step does not conform.
fn run_step(
    backend: &mut dyn Backend,
    policy: &Policy,
    start_us: Timestamp,
    step: &Step,
) -> Option<String> {
    let expected = match step.expected(policy) {
        Ok(expected) => expected,
        Err(message) => return Some(format!("malformed step: {message}")),
    };
    let Some(now) = start_us.checked_add(step.at_us) else {
        return Some("malformed step: start_us + at_us overflows".into());
    };
    let operation = match step.operation(start_us) {
        Ok(op) => op,
        Err(message) => return Some(format!("malformed step: {message}")),
    };
    let what = format!(
        "{} cost {} key {:?} at start + {} us",
        match operation {
            Operation::Check { peek: true } => "peek".to_string(),
            Operation::Check { peek: false } => "check".to_string(),
            Operation::Reserve { max_wait } => format!("reserve (max_wait {max_wait} us)"),
            Operation::Settle { actual, .. } => format!("settle (actual {actual})"),
        },
        step.cost,
        step.key(),
        step.at_us
    );
    let (reply, wait) = match operation {
        Operation::Check { peek } => (
            backend.check(policy, step.key(), now, step.cost, peek),
            None,
        ),
        Operation::Reserve { max_wait } => {
            match backend.reserve(policy, step.key(), now, step.cost, max_wait) {
                ReserveReply::Answer(Ok((d, wait))) => (Reply::Answer(Ok(d)), Some(wait)),
                ReserveReply::Answer(Err(e)) => (Reply::Answer(Err(e)), None),
                ReserveReply::Failed(e) => (Reply::Failed(e), None),
            }
        }
        Operation::Settle {
            scheduled_at,
            actual,
        } => (
            backend.settle(policy, step.key(), now, scheduled_at, step.cost, actual),
            None,
        ),
    };
    if let Some(wait) = wait {
        if wait != step.wait_us {
            return Some(format!(
                "{what}: expected wait_us {:?}, got {wait:?}",
                step.wait_us
            ));
        }
    } else if step.wait_us.is_some() {
        return Some(format!("{what}: wait_us is only for reservations"));
    }
    match (expected, reply) {
        (_, Reply::Failed(e)) => Some(format!("{what}: backend failed: {e}")),
        (Expected::Decision(want), Reply::Answer(Ok(got))) if want == got => None,
        (
            Expected::InsufficientCapacity,
            Reply::Answer(Err(CheckError::InsufficientCapacity { .. })),
        ) => None,
        (want, Reply::Answer(got)) => Some(format!(
            "{what}: expected {}, got {}",
            show_expected(&want),
            show_answer(&got)
        )),
    }
}

fn show_decision(d: &Decision) -> String {
    format!(
        "allowed={} limit={} remaining={} reset_after_us={} retry_after_us={}",
        d.allowed,
        d.limit,
        d.remaining,
        d.reset_after,
        d.retry_after.map_or("none".to_string(), |r| r.to_string())
    )
}

fn show_expected(e: &Expected) -> String {
    match e {
        Expected::Decision(d) => show_decision(d),
        Expected::InsufficientCapacity => "error insufficient_capacity".into(),
    }
}

fn show_answer(a: &Result<Decision, CheckError>) -> String {
    match a {
        Ok(d) => show_decision(d),
        Err(e) => format!("error: {e}"),
    }
}

/// Loads every vector file in `dir` and plays it against `backend`.
///
/// # Errors
/// A [`LoadError`] when a file cannot be read or parsed; nothing is run then.
pub fn run_dir(backend: &mut dyn Backend, dir: &Path) -> Result<Report, LoadError> {
    let mut report = Report::default();
    for (_, vector) in load_dir(dir)? {
        report.merge(run_vector(backend, &vector));
    }
    Ok(report)
}

/// One request of a differential run (see [`differential`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The key.
    pub key: String,
    /// Microseconds since the Unix epoch (may go backwards).
    pub now_us: Timestamp,
    /// Units asked for (may exceed the capacity: both backends must then answer the error).
    pub cost: u64,
    /// A peek instead of a check.
    pub peek: bool,
}

/// Plays the same `requests` under `policy` on two backends (after resetting both) and reports
/// every request where their answers differ, labelled `<algorithm>/<a>-vs-<b>/<name>#<n>`
/// (`n` counted from 1). Use it with random traffic (e.g. from proptest) to show that a store
/// decides exactly like [`CoreBackend`] beyond the golden vectors.
pub fn differential(
    a: &mut dyn Backend,
    b: &mut dyn Backend,
    policy: &Policy,
    name: &str,
    requests: &[Request],
) -> Report {
    let label = format!("{}/{}-vs-{}/{name}", policy.kind(), a.name(), b.name());
    let mut report = Report {
        cases: 1,
        ..Report::default()
    };
    for (backend, result) in [
        (a.name().to_string(), a.reset()),
        (b.name().to_string(), b.reset()),
    ] {
        if let Err(e) = result {
            report.failures.push(Failure {
                label: label.clone(),
                message: format!("{backend}: reset failed: {e}"),
            });
            return report;
        }
    }
    for (i, r) in requests.iter().enumerate() {
        report.steps += 1;
        let got_a = a.check(policy, &r.key, r.now_us, r.cost, r.peek);
        let got_b = b.check(policy, &r.key, r.now_us, r.cost, r.peek);
        let message = match (&got_a, &got_b) {
            (Reply::Answer(x), Reply::Answer(y)) if x == y => continue,
            (Reply::Answer(x), Reply::Answer(y)) => format!(
                "{} {} cost {} key {:?} at {} us: {} says {}, {} says {}",
                if r.peek { "peek" } else { "check" },
                i + 1,
                r.cost,
                r.key,
                r.now_us,
                a.name(),
                show_answer(x),
                b.name(),
                show_answer(y)
            ),
            (Reply::Failed(e), _) => format!("{} failed: {e}", a.name()),
            (_, Reply::Failed(e)) => format!("{} failed: {e}", b.name()),
        };
        report.failures.push(Failure {
            label: format!("{label}#{}", i + 1),
            message,
        });
    }
    report
}
