//! A circuit breaker, so that a dead or saturated Redis costs callers nothing but a branch.
//!
//! # Rule
//! Closed: every call goes to Redis. It opens when **both** hold:
//! - at least `failure_threshold` calls have failed (errors or timeouts) since the last
//!   success, and
//! - no call has succeeded for `window` (default 250 ms): Redis has produced no success
//!   recently.
//!
//! Open: calls fail at once with [`StoreError::Unavailable`] for `cool_down`. Then it lets
//! exactly one call through as a probe (half-open): success closes it, failure opens it for
//! another `cool_down`. Time comes from the store's [`Clock`], so tests drive it with a
//! `ManualClock`.
//!
//! # Why not "N consecutive failures" alone
//! With many calls in flight on one multiplexed connection, one slow moment (a scheduling
//! stall on a loaded host, a Redis fork) times out every in-flight call at once: 64 callers
//! produce 64 "consecutive" failures from a single hiccup, and a count-only breaker then fails
//! everything for a whole cool-down although Redis is healthy. Counting failures alone cannot
//! tell "many callers saw one stall" from "Redis is dead"; time can. A dead Redis produces no
//! success at all, so the breaker still opens `window` after the last success (plus at most
//! one call timeout). A stall shorter than `window` opens nothing. Others also ask for a
//! minimum of evidence over time: resilience4j's sliding-window breaker judges a failure rate
//! only after `minimumNumberOfCalls` in its (count or time) window; Envoy's outlier detection
//! judges success rates per `interval` above a minimum request volume (its `consecutive_5xx`
//! ejects at once, like the old rule here). A failure *ratio* would still read a stall's burst
//! (64 failures, few successes) as an outage; "no success for `window`" cannot be met by a
//! healthy Redis, whatever the concurrency. `window = 0` restores the plain
//! consecutive-failures rule.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use floodgate_core::{Clock, Micros, Timestamp};

use crate::StoreError;

/// The breaker's state, shared by every call of one store. Lock-free.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Micros,
    /// Minimum time without any success before failures may open the breaker (µs).
    window: Micros,
    /// Failures since the last success.
    consecutive_failures: AtomicU32,
    /// Time of the last success (0: none yet, so a Redis dead from the start opens at once).
    last_success: AtomicU64,
    /// Open or half-open: calls fail fast except the one probe.
    open: AtomicBool,
    /// While open: the time from which a probe may go.
    open_until: AtomicU64,
    /// A probe is in flight (half-open): other calls keep failing fast.
    probing: AtomicBool,
}

/// Permission to call Redis; report the outcome with [`Breaker::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// The breaker is closed.
    Normal,
    /// The one probe of a half-open breaker.
    Probe,
}

impl Breaker {
    /// `threshold` failures (at least 1) with no success for `window` µs open it for
    /// `cool_down` µs.
    pub(crate) fn new(threshold: u32, cool_down: Micros, window: Micros) -> Self {
        Self {
            threshold: threshold.max(1),
            cool_down,
            window,
            consecutive_failures: AtomicU32::new(0),
            last_success: AtomicU64::new(0),
            open: AtomicBool::new(false),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// `Ok` when a call may go to Redis now, else the fail-fast error.
    pub(crate) fn permit(&self, clock: &dyn Clock) -> Result<Permit, StoreError> {
        if !self.open.load(Ordering::Acquire) {
            return Ok(Permit::Normal);
        }
        let now: Timestamp = clock.now();
        if now >= self.open_until.load(Ordering::Acquire)
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Permit::Probe);
        }
        Err(StoreError::Unavailable {
            reason: "redis circuit breaker open (repeated failures and no success recently); \
                     failing fast"
                .into(),
        })
    }

    /// Records the outcome of a permitted call.
    pub(crate) fn record(&self, permit: Permit, ok: bool, clock: &dyn Clock) {
        let now: Timestamp = clock.now();
        if ok {
            self.consecutive_failures.store(0, Ordering::Release);
            self.last_success.fetch_max(now, Ordering::AcqRel);
            self.probing.store(false, Ordering::Release);
            if self.open.swap(false, Ordering::AcqRel) {
                tracing::info!("redis store recovered: circuit breaker closed");
                metrics::gauge!("floodgate_store_breaker_open").set(0.0);
            }
            return;
        }
        let failures = self
            .consecutive_failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        if permit == Permit::Probe {
            // A failed probe: another full cool-down.
            self.open_until
                .store(now.saturating_add(self.cool_down), Ordering::Release);
            self.probing.store(false, Ordering::Release);
            return;
        }
        let quiet_for = now.saturating_sub(self.last_success.load(Ordering::Acquire));
        if failures >= self.threshold
            && quiet_for >= self.window
            && !self.open.load(Ordering::Acquire)
        {
            // Set the cool-down before opening, so that no caller sees "open" with a stale
            // `open_until` and probes at once.
            self.open_until
                .store(now.saturating_add(self.cool_down), Ordering::Release);
            if self
                .open
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                tracing::warn!(
                    failures,
                    no_success_for_ms = quiet_for / 1000,
                    cool_down_ms = self.cool_down / 1000,
                    "redis store failing: circuit breaker open"
                );
                metrics::gauge!("floodgate_store_breaker_open").set(1.0);
            }
        }
    }

    /// A permitted call ended without an outcome (its future was dropped: the caller gave up,
    /// e.g. the HTTP client disconnected). A probe that never reports would leave the breaker
    /// half-open with "a probe in flight" for ever, failing every call: let the next one probe.
    pub(crate) fn abandon(&self, permit: Permit) {
        if permit == Permit::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    /// `true` while calls fail fast (open, or half-open with a probe in flight).
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ManualClock;

    #[test]
    fn opens_after_threshold_fails_fast_then_probes_once() {
        let clock = ManualClock::new(1_000_000);
        let b = Breaker::new(3, 500_000, 0);
        for _ in 0..2 {
            let p = b.permit(&clock).unwrap();
            b.record(p, false, &clock);
        }
        assert!(!b.is_open());
        let p = b.permit(&clock).unwrap();
        b.record(p, false, &clock);
        assert!(b.is_open());
        assert!(b.permit(&clock).is_err());
        clock.advance(499_999);
        assert!(b.permit(&clock).is_err());
        clock.advance(1);
        assert_eq!(b.permit(&clock).unwrap(), Permit::Probe);
        // only one probe at a time
        assert!(b.permit(&clock).is_err());
        // failed probe: another full cool-down
        b.record(Permit::Probe, false, &clock);
        clock.advance(499_999);
        assert!(b.permit(&clock).is_err());
        clock.advance(1);
        let p = b.permit(&clock).unwrap();
        b.record(p, true, &clock);
        assert!(!b.is_open());
        assert_eq!(b.permit(&clock).unwrap(), Permit::Normal);
    }

    #[test]
    fn a_success_resets_the_count() {
        let clock = ManualClock::new(0);
        let b = Breaker::new(2, 1, 0);
        b.record(Permit::Normal, false, &clock);
        b.record(Permit::Normal, true, &clock);
        b.record(Permit::Normal, false, &clock);
        assert!(!b.is_open());
    }

    /// 64 calls in flight when Redis stalls for 60 ms: every one times out at about the same
    /// moment (64 "consecutive" failures), then Redis answers again. A count-only breaker
    /// would open for a whole cool-down; this one does not, because Redis succeeded 60 ms ago.
    #[test]
    fn a_burst_of_simultaneous_timeouts_then_successes_does_not_open() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        let p = b.permit(&clock).unwrap();
        b.record(p, true, &clock);
        let permits: Vec<Permit> = (0..64).map(|_| b.permit(&clock).unwrap()).collect();
        clock.advance(60_000);
        for p in permits {
            b.record(p, false, &clock);
        }
        assert!(!b.is_open());
        assert_eq!(b.permit(&clock).unwrap(), Permit::Normal);
        b.record(Permit::Normal, true, &clock);
        // Another stall 200 ms later: still well within the window after the last success.
        clock.advance(200_000);
        for _ in 0..64 {
            b.record(Permit::Normal, false, &clock);
        }
        assert!(!b.is_open());
    }

    /// A dead Redis: every call fails. The breaker stays closed while the last success is
    /// less than the window old, and opens at the first failure once it is.
    #[test]
    fn a_dead_redis_opens_once_no_success_for_the_window() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        b.record(Permit::Normal, true, &clock);
        for _ in 0..10 {
            clock.advance(20_000);
            b.record(Permit::Normal, false, &clock);
        }
        // 200 ms of failures only.
        assert!(!b.is_open());
        clock.advance(49_999);
        b.record(Permit::Normal, false, &clock);
        assert!(!b.is_open());
        clock.advance(1);
        b.record(Permit::Normal, false, &clock);
        assert!(b.is_open());
        assert!(b.permit(&clock).is_err());
        clock.advance(1_000_000);
        assert_eq!(b.permit(&clock).unwrap(), Permit::Probe);
        b.record(Permit::Probe, true, &clock);
        assert!(!b.is_open());
    }

    /// Fewer failures than the threshold never open it, however long Redis has been quiet.
    #[test]
    fn the_threshold_still_applies_after_the_window() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        b.record(Permit::Normal, true, &clock);
        clock.advance(10_000_000);
        for _ in 0..4 {
            b.record(Permit::Normal, false, &clock);
        }
        assert!(!b.is_open());
        b.record(Permit::Normal, false, &clock);
        assert!(b.is_open());
    }

    /// A Redis that never answered (down at startup) has no last success: the threshold alone
    /// opens the breaker.
    #[test]
    fn no_success_yet_opens_at_the_threshold() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        for _ in 0..5 {
            b.record(Permit::Normal, false, &clock);
        }
        assert!(b.is_open());
    }

    /// A probe whose caller went away (future dropped) must not block every later probe.
    #[test]
    fn an_abandoned_probe_lets_the_next_call_probe() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(1, 1_000_000, 0);
        b.record(Permit::Normal, false, &clock);
        clock.advance(1_000_000);
        let p = b.permit(&clock).unwrap();
        assert_eq!(p, Permit::Probe);
        assert!(b.permit(&clock).is_err());
        b.abandon(p);
        assert_eq!(b.permit(&clock).unwrap(), Permit::Probe);
    }
}
