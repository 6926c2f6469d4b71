//! A circuit breaker, so that a dead or saturated Redis costs callers nothing but a branch.
//!
//! Closed: every call goes to Redis. After `failure_threshold` consecutive failures (errors or
//! timeouts) it opens: calls fail at once with [`StoreError::Unavailable`] for `cool_down`.
//! Then it lets exactly one call through as a probe (half-open): success closes it, failure
//! opens it for another `cool_down`. Time comes from the store's [`Clock`], so tests drive it
//! with a `ManualClock`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use floodgate_core::{Clock, Micros, Timestamp};

use crate::StoreError;

/// The breaker's state, shared by every call of one store. Lock-free.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Micros,
    consecutive_failures: AtomicU32,
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
    pub(crate) fn new(threshold: u32, cool_down: Micros) -> Self {
        Self {
            threshold: threshold.max(1),
            cool_down,
            consecutive_failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// `Ok` when a call may go to Redis now, else the fail-fast error.
    pub(crate) fn permit(&self, clock: &dyn Clock) -> Result<Permit, StoreError> {
        if self.consecutive_failures.load(Ordering::Acquire) < self.threshold {
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
            reason: "redis circuit breaker open after consecutive failures; failing fast".into(),
        })
    }

    /// Records the outcome of a permitted call.
    pub(crate) fn record(&self, permit: Permit, ok: bool, clock: &dyn Clock) {
        if ok {
            if self.consecutive_failures.swap(0, Ordering::AcqRel) >= self.threshold {
                tracing::info!("redis store recovered: circuit breaker closed");
            }
            self.probing.store(false, Ordering::Release);
            metrics::gauge!("floodgate_store_breaker_open").set(0.0);
            return;
        }
        let failures = self.consecutive_failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures >= self.threshold {
            // Opening (or re-opening after a failed probe) starts a fresh cool-down.
            if failures == self.threshold || permit == Permit::Probe {
                self.open_until.store(
                    clock.now().saturating_add(self.cool_down),
                    Ordering::Release,
                );
                if failures == self.threshold {
                    tracing::warn!(
                        failures,
                        cool_down_ms = self.cool_down / 1000,
                        "redis store failing: circuit breaker open"
                    );
                }
                metrics::gauge!("floodgate_store_breaker_open").set(1.0);
            }
            if permit == Permit::Probe {
                self.probing.store(false, Ordering::Release);
            }
        }
    }

    /// `true` while calls fail fast (open, or half-open with a probe in flight).
    pub(crate) fn is_open(&self) -> bool {
        self.consecutive_failures.load(Ordering::Acquire) >= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ManualClock;

    #[test]
    fn opens_after_threshold_fails_fast_then_probes_once() {
        let clock = ManualClock::new(1_000_000);
        let b = Breaker::new(3, 500_000);
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
        let b = Breaker::new(2, 1);
        b.record(Permit::Normal, false, &clock);
        b.record(Permit::Normal, true, &clock);
        b.record(Permit::Normal, false, &clock);
        assert!(!b.is_open());
    }
}
