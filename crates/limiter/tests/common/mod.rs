//! Shared helpers: a [`RateLimiter`] over a MemoryStore with a frozen ManualClock, and the
//! counters a test recorded.
#![allow(dead_code)]

pub mod lease;

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_limiter::{RateLimiter, RuleSet};
use floodgate_store::{MemoryStore, Store};

pub const T0: u64 = 1_700_000_000_000_000;

pub fn gcra(quota: &str) -> Policy {
    Policy::new(AlgorithmKind::Gcra, quota.parse().unwrap()).unwrap()
}

pub struct Harness<S> {
    pub clock: ManualClock,
    pub limiter: RateLimiter<S>,
}

/// A limiter over a fresh MemoryStore at T0.
pub fn harness(rules: RuleSet) -> Harness<MemoryStore> {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    with_store(clock, store, rules)
}

pub fn with_store<S: Store>(clock: ManualClock, store: Arc<S>, rules: RuleSet) -> Harness<S> {
    Harness {
        clock,
        limiter: RateLimiter::new(store, rules),
    }
}

/// A counter's name, labels and value.
pub type Counted = (String, Vec<(String, String)>, u64);

/// Every counter `recorder` holds (a snapshot drains the recorder: take one).
pub fn counters(recorder: &metrics_util::debugging::DebuggingRecorder) -> Vec<Counted> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => Some((
                key.key().name().to_string(),
                key.key()
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect(),
                n,
            )),
            _ => None,
        })
        .collect()
}

/// Every counter recorded while `f` ran on a current-thread runtime with a local recorder.
pub fn with_metrics<F: std::future::Future<Output = ()>>(f: impl FnOnce() -> F) -> Vec<Counted> {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f());
    });
    counters(&recorder)
}

/// The sum of counter `name` over the series whose labels include every pair of `labels`.
pub fn counted(recorded: &[Counted], name: &str, labels: &[(&str, &str)]) -> u64 {
    recorded
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.contains(&((*k).into(), (*v).into())))
        })
        .map(|(_, _, n)| *n)
        .sum()
}
