//! The recent error rate of a store's calls, for readiness.
//!
//! The readiness probe (`INFO stats` on every master) and the breaker both miss a partial
//! outage: on a cluster with a master dead and `cluster-require-full-coverage no`, every live
//! node answers the probe, and the calls for the live slots succeed between the failed ones,
//! so the breaker never opens; `/readyz` said `"up"` while a third of the checks were 503
//! (issue 30). So readiness also asks whether decisions are being made: the calls of the last
//! [`WINDOW_SECONDS`] seconds (store clock), counted per second in a ring of buckets. Not
//! ready when at least [`MIN_CALLS`] calls were made and at least [`MAX_FAILED_PERCENT`] %
//! of them failed. A bounded, fixed-size structure: ten buckets, whatever the traffic.

use floodgate_core::Timestamp;

/// How far back readiness looks at the calls' outcomes (seconds of the store clock).
pub const WINDOW_SECONDS: u64 = 10;
/// Fewer calls than this in the window say nothing (an idle store is ready).
pub const MIN_CALLS: u64 = 20;
/// At least this share of failed calls (percent) in the window makes the store not ready.
pub const MAX_FAILED_PERCENT: u64 = 10;

/// One second's calls: `(second, calls, failed)`.
type Bucket = (u64, u64, u64);

/// Calls and failures per second over the last [`WINDOW_SECONDS`].
#[derive(Debug, Default)]
pub(crate) struct Health {
    buckets: parking_lot::Mutex<[Bucket; WINDOW_SECONDS as usize]>,
}

impl Health {
    /// Counts one call that ended at `now` (µs).
    pub(crate) fn record(&self, now: Timestamp, ok: bool) {
        let second = now / 1_000_000;
        let mut buckets = self.buckets.lock();
        let bucket = &mut buckets[(second % WINDOW_SECONDS) as usize];
        if bucket.0 != second {
            *bucket = (second, 0, 0);
        }
        bucket.1 += 1;
        bucket.2 += u64::from(!ok);
    }

    /// `(failed, calls)` in the window ending at `now`.
    pub(crate) fn recent(&self, now: Timestamp) -> (u64, u64) {
        let second = now / 1_000_000;
        let buckets = self.buckets.lock();
        buckets
            .iter()
            .filter(|b| b.0 <= second && second - b.0 < WINDOW_SECONDS)
            .fold((0, 0), |(f, c), b| (f + b.2, c + b.1))
    }

    /// `Some((failed, calls))` when the window's failures make the store not ready.
    pub(crate) fn failing(&self, now: Timestamp) -> Option<(u64, u64)> {
        let (failed, calls) = self.recent(now);
        (calls >= MIN_CALLS && failed * 100 >= calls * MAX_FAILED_PERCENT)
            .then_some((failed, calls))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn a_third_failing_is_not_ready_until_the_window_passes() {
        let h = Health::default();
        let t0 = 1_700_000_000 * S;
        for i in 0..30 {
            h.record(t0 + i * 10_000, i % 3 != 0);
        }
        assert_eq!(h.failing(t0 + S), Some((10, 30)));
        assert_eq!(h.failing(t0 + 9 * S), Some((10, 30)));
        // Ten seconds later those calls are out of the window.
        assert_eq!(h.failing(t0 + 10 * S), None);
        assert_eq!(h.recent(t0 + 10 * S), (0, 0));
    }

    #[test]
    fn few_calls_or_few_failures_are_ready() {
        let h = Health::default();
        let t0 = 1_700_000_000 * S;
        for _ in 0..19 {
            h.record(t0, false);
        }
        assert_eq!(h.failing(t0), None, "19 calls say nothing");
        let h = Health::default();
        for i in 0..100 {
            h.record(t0 + i * 50_000, i % 20 != 0);
        }
        assert_eq!(h.recent(t0 + 5 * S), (5, 100));
        assert_eq!(h.failing(t0 + 5 * S), None, "5 % failed");
        // A clock that goes back does not count the future's buckets.
        assert_eq!(h.recent(t0 - 20 * S), (0, 0));
    }
}
