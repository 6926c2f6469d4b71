//! Metric handles of a [`RuleSet`](crate::RuleSet), taken once and kept.
//!
//! `metrics::counter!("floodgate_decisions_total", "rule" => ..., "outcome" => ...)` builds a
//! key (an allocated label list), hashes it and looks it up in the recorder's registry on every
//! call; on the decision path that is more work than the decision itself. A [`RuleSet`](crate::RuleSet) keeps
//! the handles instead: each `(rule, outcome)` counter is registered the first time it is
//! counted (exactly when the macro would have registered it, so `/metrics` shows the same series
//! at the same moments), then reused, as is the `floodgate_decision_duration_seconds` histogram.
//! Handles come from the recorder in force when the rule set first counts, which is the global
//! recorder in a server (installed before any request), or the thread's local recorder in
//! tests, since a rule set is built and used inside one test.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::metrics::{Counter, Histogram};

/// The `outcome` label of `floodgate_decisions_total{rule, outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// An enforcing rule admitted the request and its units were charged.
    Allowed,
    /// An enforcing rule would have admitted the request, but another rule of the same request
    /// refused it, so nothing was charged here (all-or-nothing).
    NotCharged,
    /// An enforcing rule denied the request.
    Denied,
    /// A new key was refused because the store is full of live keys.
    StoreFull,
    /// A shadow rule would have admitted the request.
    ShadowAllowed,
    /// A shadow rule would have denied the request.
    ShadowDenied,
    /// The rule's key source was absent from the request.
    Skipped,
    /// The store failed and the rule fails open.
    ErrorOpen,
    /// The store failed and the rule fails closed.
    ErrorClosed,
    /// The request's cost exceeds what the rule can ever admit.
    CostExceedsCapacity,
    /// The request's cost header is not a positive whole number (answered 400).
    InvalidCost,
    /// The rule counts by client IP but the request has no peer address: the app is served
    /// without one (answered 500).
    NoClientAddress,
    /// The request carries a header the rule counts by more than once (answered 400).
    AmbiguousKey,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 13] = [
        Outcome::Allowed,
        Outcome::NotCharged,
        Outcome::Denied,
        Outcome::StoreFull,
        Outcome::ShadowAllowed,
        Outcome::ShadowDenied,
        Outcome::Skipped,
        Outcome::ErrorOpen,
        Outcome::ErrorClosed,
        Outcome::CostExceedsCapacity,
        Outcome::InvalidCost,
        Outcome::NoClientAddress,
        Outcome::AmbiguousKey,
    ];

    /// The label value: `allowed`, `not_charged`, `denied`, `store_full`, `shadow_allowed`, `shadow_denied`,
    /// `skipped`, `error_open`, `error_closed`, `cost_exceeds_capacity`, `invalid_cost`, `no_client_address` or `ambiguous_key`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::NotCharged => "not_charged",
            Outcome::Denied => "denied",
            Outcome::StoreFull => "store_full",
            Outcome::ShadowAllowed => "shadow_allowed",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Skipped => "skipped",
            Outcome::ErrorOpen => "error_open",
            Outcome::ErrorClosed => "error_closed",
            Outcome::CostExceedsCapacity => "cost_exceeds_capacity",
            Outcome::InvalidCost => "invalid_cost",
            Outcome::NoClientAddress => "no_client_address",
            Outcome::AmbiguousKey => "ambiguous_key",
        }
    }
}

/// One rule's counters: the name they were registered for, and one lazily registered counter
/// per outcome.
#[derive(Debug)]
struct RuleCounters {
    name: Arc<str>,
    outcomes: [OnceLock<Counter>; Outcome::ALL.len()],
}

/// The cached handles of one rule set. A clone starts empty (the clone's rules may be changed).
#[derive(Debug, Default)]
pub(crate) struct MetricCache {
    rules: OnceLock<Box<[RuleCounters]>>,
    duration: OnceLock<Histogram>,
}

impl Clone for MetricCache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl MetricCache {
    /// Adds 1 to `floodgate_decisions_total{rule = name_of(index), outcome}`, for a rule set
    /// of `len` rules named `name_of(0..len)`.
    pub(crate) fn count<'a>(
        &self,
        len: usize,
        name_of: impl Fn(usize) -> &'a Arc<str>,
        index: usize,
        outcome: Outcome,
    ) {
        let cache = self.rules.get_or_init(|| {
            (0..len)
                .map(|i| RuleCounters {
                    name: Arc::clone(name_of(i)),
                    outcomes: Default::default(),
                })
                .collect()
        });
        let name = name_of(index);
        match cache.get(index) {
            // The rules of a set in use never change; the pointer check keeps a set whose
            // public fields were edited after its first count correct anyway.
            Some(c) if Arc::ptr_eq(&c.name, name) => c.outcomes[outcome as usize]
                .get_or_init(|| counter(name, outcome))
                .increment(1),
            _ => counter(name, outcome).increment(1),
        }
    }

    /// Records one store batch round trip in `floodgate_decision_duration_seconds`.
    pub(crate) fn record_duration(&self, elapsed: Duration) {
        self.duration
            .get_or_init(|| ::metrics::histogram!("floodgate_decision_duration_seconds"))
            .record(elapsed.as_secs_f64());
    }
}

/// The counter of `(rule, outcome)` from the recorder in force.
pub(crate) fn counter(rule: &Arc<str>, outcome: Outcome) -> Counter {
    // Sharing the rule's Arc<str> as the label value avoids copying the name.
    ::metrics::counter!(
        "floodgate_decisions_total",
        "rule" => Arc::clone(rule),
        "outcome" => outcome.as_str()
    )
}

/// Adds 1 to `floodgate_descriptor_decisions_total{rule, descriptor, outcome}`: a decision
/// also counted under the label its item carries ([`crate::ItemOptions::label`]; the caller
/// bounds the labels).
pub(crate) fn count_labelled(rule: &Arc<str>, label: &Arc<str>, outcome: Outcome) {
    ::metrics::counter!(
        "floodgate_descriptor_decisions_total",
        "rule" => Arc::clone(rule),
        "descriptor" => Arc::clone(label),
        "outcome" => outcome.as_str()
    )
    .increment(1);
}
