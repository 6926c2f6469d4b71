//! [`FallbackStore`]: the `local` failure mode. When the shared store (Redis) fails, decide in
//! an in-process [`MemoryStore`] with each limit divided by the number of instances, instead of
//! admitting everything (`open`) or nothing (`closed`).
//!
//! `N` is either configured ([`FallbackStore::new`]) or discovered: the number of processes
//! announced in Redis when this one last looked ([`FallbackStore::discovered`], fed by
//! [`RedisStore::live_instances`](crate::redis::RedisStore::live_instances)). A change of `N`
//! gives the local rules new policies, so their local counters start fresh.
//!
//! With `N` instances behind a balanced load balancer, each enforcing `limit / N` locally, the
//! fleet admits about `limit` in total while Redis is down; with skewed balancing it admits
//! less than `limit` for the busy key (never more than `limit` overall). The local state is not
//! copied back to Redis when it recovers, so a key may get up to one extra allowance around
//! the switch (as rate-limiter-flexible's insurance limiter documents). Every degraded decision
//! is counted in `floodgate_store_degraded_total{mode="local"}`.
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::{AlgorithmKind, ManualClock, Policy};
//! use floodgate_store::{CheckItem, MemoryStore, Store, fallback::FallbackStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
//! // Any primary store; a MemoryStore here, a RedisStore in production.
//! let store = FallbackStore::new(MemoryStore::with_clock(clock.clone()), 4, clock);
//! let policy = Policy::new(AlgorithmKind::FixedWindow, "100/10s".parse().unwrap()).unwrap();
//! let item = CheckItem { rule: "r", policy: &policy, key: "k", cost: 1 };
//! assert!(store.check(&[item]).await.unwrap().allowed);
//! # });
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use floodgate_core::{Clock, Decision, Policy, Quota};

use crate::{BatchDecision, CheckItem, MemoryStore, Store, StoreError};

/// Which rules fall back to the local store (see [`FallbackStore::only_rules`]).
type RulePredicate = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A [`Store`] that asks `primary` and, when it fails with [`StoreError::Unavailable`] or
/// [`StoreError::Timeout`], decides locally with every limit divided by `instances`.
pub struct FallbackStore<S> {
    primary: S,
    local: MemoryStore,
    /// The configured count (`new`), or the count used before one was discovered.
    instances: u64,
    /// The discovered count (0: none seen yet), when discovered.
    live: Option<Arc<AtomicU64>>,
    /// `None`: every rule falls back. `Some(p)`: a failed batch falls back only when `p` holds
    /// for every item's rule; otherwise the primary's error is returned (and the caller's
    /// open/closed failure mode applies).
    only: Option<RulePredicate>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for FallbackStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackStore")
            .field("primary", &self.primary)
            .field("instances", &self.instances())
            .field("discovered", &self.live.is_some())
            .field("every_rule", &self.only.is_none())
            .finish_non_exhaustive()
    }
}

impl<S> FallbackStore<S> {
    /// The instance count each limit is divided by now (at least 1).
    pub fn instances(&self) -> u64 {
        match &self.live {
            Some(live) => match live.load(Ordering::Acquire) {
                0 => self.instances,
                n => n,
            },
            None => self.instances,
        }
    }
}

impl<S: Store> FallbackStore<S> {
    /// Wraps `primary`; the local store reads `clock`. `instances` (at least 1) is the number of
    /// processes sharing the limits.
    pub fn new(primary: S, instances: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            primary,
            local: MemoryStore::with_clock(clock),
            instances: instances.max(1),
            live: None,
            only: None,
        }
    }

    /// Wraps `primary`, dividing by the live instance count `live` last seen (shared with its
    /// source, e.g. [`RedisStore::live_instances`](crate::redis::RedisStore::live_instances));
    /// while it is 0 (never seen), by `until_seen` (at least 1).
    pub fn discovered(
        primary: S,
        live: Arc<AtomicU64>,
        until_seen: u64,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            live: Some(live),
            ..Self::new(primary, until_seen, clock)
        }
    }

    /// Falls back only for batches whose every item's rule satisfies `is_local` (the rules
    /// configured with failure mode `local`); a failed batch with any other rule returns the
    /// primary's error, so that rule's open/closed mode applies to the request.
    pub fn only_rules(mut self, is_local: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.only = Some(Arc::new(is_local));
        self
    }

    /// The primary store.
    pub fn primary(&self) -> &S {
        &self.primary
    }

    /// The local store used while the primary fails.
    pub fn local(&self) -> &MemoryStore {
        &self.local
    }

    /// `policy` with its limit and burst divided by the instance count (at least 1 each).
    /// When the bucket algorithms refuse that quota (a sub-microsecond emission interval the
    /// divided burst cannot hold exactly), the limit is rounded down to the nearest one they
    /// accept with that burst, never above the share; `None` when there is none (that rule
    /// then follows its failure mode: the primary's error is returned). Undivided, each of
    /// `N` instances would admit the whole limit during an outage.
    pub fn local_policy(&self, policy: &Policy) -> Option<Policy> {
        let q = policy.quota();
        let n = self.instances();
        let (limit, burst) = ((q.limit() / n).max(1), (q.burst() / n).max(1));
        let divided = |limit| {
            Quota::with_burst(limit, q.period(), burst)
                .and_then(|quota| Policy::new(policy.kind(), quota))
                .ok()
                .and_then(|local| crate::calendar::keep_calendar(policy, local))
        };
        divided(limit).or_else(|| divided(exact_limit_below(limit, q.period(), burst)?))
    }

    fn degraded(
        &self,
        items: &[CheckItem<'_>],
        error: StoreError,
        commit: bool,
    ) -> Result<BatchDecision, StoreError> {
        if !matches!(
            error,
            StoreError::Unavailable { .. } | StoreError::Timeout { .. }
        ) {
            return Err(error);
        }
        if let Some(is_local) = &self.only {
            if !items.iter().all(|i| is_local(i.rule)) {
                return Err(error);
            }
        }
        let Some(policies) = items
            .iter()
            .map(|i| self.local_policy(i.policy))
            .collect::<Option<Vec<Policy>>>()
        else {
            // No divided quota at or below the share: the caller's failure mode applies.
            return Err(error);
        };
        let local_items: Vec<CheckItem<'_>> = items
            .iter()
            .zip(&policies)
            .map(|(i, p)| CheckItem { policy: p, ..*i })
            .collect();
        let result = if commit {
            self.local.check_now(&local_items)
        } else {
            self.local.peek_now(&local_items)
        };
        match result {
            Ok(d) => {
                metrics::counter!("floodgate_store_degraded_total", "mode" => "local").increment(1);
                Ok(d)
            }
            // A cost above the divided capacity cannot be decided locally: report the
            // primary's failure and let the caller's failure mode apply.
            Err(_) => Err(error),
        }
    }
}

impl<S: Store> Store for FallbackStore<S> {
    async fn check(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        match self.primary.check(items).await {
            Err(e) => self.degraded(items, e, true),
            ok => ok,
        }
    }

    async fn peek(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        match self.primary.peek(items).await {
            Err(e) => self.degraded(items, e, false),
            ok => ok,
        }
    }

    /// The local decision [`Store::check`] makes when the primary fails with `error`.
    fn fallback_check(
        &self,
        items: &[CheckItem<'_>],
        error: StoreError,
    ) -> Result<BatchDecision, StoreError> {
        self.degraded(items, error, true)
    }

    /// Resets the key in the primary and in the local store (whose state is kept under the
    /// divided policy, [`FallbackStore::local_policy`]).
    async fn reset(&self, rule: &str, policy: &Policy, key: &str) -> Result<bool, StoreError> {
        let local = self.local.reset_key(rule, key);
        Ok(self.primary.reset(rule, policy, key).await? || local)
    }

    /// The primary's reservation. There is no local fallback for reservations: a reservation
    /// granted by a local store with divided limits could not be settled on the primary, so a
    /// primary failure is the caller's (its failure mode applies).
    async fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: floodgate_core::Micros,
    ) -> Result<crate::BatchReservation, StoreError> {
        self.primary.reserve(items, max_wait).await
    }

    /// The primary's settle (no local fallback either, as for `reserve`).
    async fn settle(&self, items: &[crate::SettleItem<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.primary.settle(items).await
    }

    /// The primary's claim, with no local fallback: claims made in one process's memory
    /// would let a reservation be settled once per process while the primary is down.
    async fn claim(&self, id: &str, ttl: floodgate_core::Micros) -> Result<bool, StoreError> {
        self.primary.claim(id, ttl).await
    }

    /// The primary's (the local fallback's store keeps no caps per rule).
    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        self.primary.set_rule_max_keys(rule, max_keys)
    }

    fn is_shared(&self) -> bool {
        self.primary.is_shared()
    }

    fn fallback_instances(&self) -> Option<u64> {
        Some(self.instances())
    }

    fn round_trip_deadline(&self) -> Option<std::time::Duration> {
        self.primary.round_trip_deadline()
    }

    async fn shared_secret(&self, candidate: &str) -> Result<Option<String>, StoreError> {
        self.primary.shared_secret(candidate).await
    }

    /// The primary's, where down is degraded: the local fallback decides meanwhile.
    async fn ready_state(&self) -> crate::ReadyState {
        let mut state = self.primary.ready_state().await;
        if let crate::Readiness::Down(why) = state.readiness {
            state.readiness = crate::Readiness::Degraded(why);
        }
        state
    }

    /// What the shared store holds: the local fallback's state is not the key's.
    fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Option<bool>, StoreError>> + Send {
        self.primary.holds(rule, policy, key)
    }

    async fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> Result<Decision, StoreError> {
        match self.primary.inspect(rule, policy, key).await {
            Err(e @ (StoreError::Unavailable { .. } | StoreError::Timeout { .. }))
                if self.only.as_ref().is_none_or(|is_local| is_local(rule)) =>
            {
                let Some(local) = self.local_policy(policy) else {
                    return Err(e);
                };
                metrics::counter!("floodgate_store_degraded_total", "mode" => "local").increment(1);
                Ok(self
                    .local
                    .inspect_at(rule, &local, key, self.local.clock().now()))
            }
            other => other,
        }
    }
}

/// The largest limit at most `limit` per `period` that a bucket of `burst` admits exactly
/// ([`Quota::min_exact_burst`]: `numerator - 1 + denominator <= burst x numerator` for the
/// reduced emission interval `numerator / denominator`). With `k` whole units per microsecond
/// and `k >= burst`, that is `burst` units per microsecond (a fractional rate needs a burst
/// above `k`). Otherwise the rate `k + 1/m` is exact with a burst of `k + 1` for every `m`
/// dividing `period`, so the nearest below is the one with the smallest such `m` whose
/// fraction does not exceed the share's. `None` when nothing is below (no fraction left).
fn exact_limit_below(limit: u64, period: u64, burst: u64) -> Option<u64> {
    let whole = limit / period;
    if whole >= burst {
        return Some(burst * period);
    }
    let rest = limit - whole * period;
    if rest == 0 {
        return None;
    }
    let m = smallest_divisor_at_least(period, period.div_ceil(rest))?;
    Some(whole * period + period / m)
}

/// The smallest divisor of `n` that is at least `at_least` (trial division to the square root:
/// at most 2^22.5 steps for the longest period, and only on a refused divided quota).
fn smallest_divisor_at_least(n: u64, at_least: u64) -> Option<u64> {
    let mut best: Option<u64> = None;
    let mut i = 1u64;
    while i.saturating_mul(i) <= n {
        if n.is_multiple_of(i) {
            for d in [i, n / i] {
                if d >= at_least && best.is_none_or(|b| d < b) {
                    best = Some(d);
                }
            }
        }
        i += 1;
    }
    best
}

#[cfg(test)]
mod exact_limit_tests {
    use super::*;

    /// Brute force: the largest limit at most `limit` that `Quota::with_burst` and the token
    /// bucket accept with `burst`.
    fn brute(limit: u64, period: u64, burst: u64) -> Option<u64> {
        (1..=limit).rev().find(|&l| {
            Quota::with_burst(l, period, burst).is_ok_and(|q| q.check_bucket_exact().is_ok())
        })
    }

    #[test]
    fn the_rounded_limit_is_the_nearest_exact_one_below() {
        for period in [1, 2, 6, 10, 12, 30] {
            for burst in 1..5 {
                for limit in 1..=period * 6 {
                    let q = Quota::with_burst(limit, period, burst).unwrap();
                    if q.check_bucket_exact().is_ok() {
                        continue;
                    }
                    assert_eq!(
                        exact_limit_below(limit, period, burst),
                        brute(limit, period, burst),
                        "{limit}/{period} burst {burst}"
                    );
                }
            }
        }
    }
}
