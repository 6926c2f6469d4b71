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
//!
//! Recovery does not wait for the window: once at least [`MIN_CALLS`] calls in a row have
//! succeeded and the last failure is [`RECOVERED_AFTER_SECONDS`] old, decisions are being made
//! again and the store (or shard) is ready, though the window still holds the outage's
//! failures. Under steady traffic a promoted replica made `/readyz` wait 8 to 9 s after every
//! call was answered again (issue 30); a store still failing one call in ten keeps failing
//! within any 2 s, so it stays not ready.

use floodgate_core::Timestamp;

/// How far back readiness looks at the calls' outcomes (seconds of the store clock).
pub const WINDOW_SECONDS: u64 = 10;
/// Fewer calls than this in the window say nothing (an idle store is ready).
pub const MIN_CALLS: u64 = 20;
/// At least this share of failed calls (percent) in the window makes the store not ready.
pub const MAX_FAILED_PERCENT: u64 = 10;
/// With at least [`MIN_CALLS`] successes in a row since, a failure this old (seconds) no
/// longer makes the store not ready.
pub const RECOVERED_AFTER_SECONDS: u64 = 2;

/// One second's calls: `(second, calls, failed)`.
type Bucket = (u64, u64, u64);

/// Calls and failures per second over the last [`WINDOW_SECONDS`].
#[derive(Debug, Default)]
pub(crate) struct Health {
    state: parking_lot::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    buckets: [Bucket; WINDOW_SECONDS as usize],
    /// When the last failed call ended (µs), and the calls that succeeded since.
    last_failed: Option<Timestamp>,
    ok_since: u64,
}

impl Health {
    /// Counts one call that ended at `now` (µs).
    pub(crate) fn record(&self, now: Timestamp, ok: bool) {
        let second = now / 1_000_000;
        let mut state = self.state.lock();
        let bucket = &mut state.buckets[(second % WINDOW_SECONDS) as usize];
        if bucket.0 != second {
            *bucket = (second, 0, 0);
        }
        bucket.1 += 1;
        bucket.2 += u64::from(!ok);
        if ok {
            state.ok_since = state.ok_since.saturating_add(1);
        } else {
            state.last_failed = Some(now);
            state.ok_since = 0;
        }
    }

    /// `(failed, calls)` in the window ending at `now`.
    pub(crate) fn recent(&self, now: Timestamp) -> (u64, u64) {
        let second = now / 1_000_000;
        let state = self.state.lock();
        state
            .buckets
            .iter()
            .filter(|b| b.0 <= second && second - b.0 < WINDOW_SECONDS)
            .fold((0, 0), |(f, c), b| (f + b.2, c + b.1))
    }

    /// `Some((failed, calls))` when the window's failures make the store not ready (and it
    /// has not recovered since: see the [module docs](self)).
    pub(crate) fn failing(&self, now: Timestamp) -> Option<(u64, u64)> {
        let (failed, calls) = self.recent(now);
        let failing = calls >= MIN_CALLS && failed * 100 >= calls * MAX_FAILED_PERCENT;
        (failing && !self.recovered(now)).then_some((failed, calls))
    }

    /// At least [`MIN_CALLS`] successes in a row since the last failure, which ended at least
    /// [`RECOVERED_AFTER_SECONDS`] before `now`.
    fn recovered(&self, now: Timestamp) -> bool {
        let state = self.state.lock();
        state.ok_since >= MIN_CALLS
            && state
                .last_failed
                .is_some_and(|at| now.saturating_sub(at) >= RECOVERED_AFTER_SECONDS * 1_000_000)
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
    fn twenty_successes_in_a_row_two_seconds_after_the_last_failure_are_ready() {
        let h = Health::default();
        let t0 = 1_700_000_000 * S;
        for i in 0..40 {
            h.record(t0 + i * 10_000, false);
        }
        let last_failure = t0 + 39 * 10_000;
        // 19 successes: not yet.
        for i in 1..20 {
            h.record(last_failure + i * 10_000, true);
        }
        assert_eq!(h.failing(last_failure + 3 * S), Some((40, 59)));
        h.record(last_failure + 20 * 10_000, true);
        // 20 successes, but the last failure is not 2 s old yet.
        assert!(h.failing(last_failure + S).is_some());
        assert_eq!(h.failing(last_failure + 2 * S), None);
        // One more failure and it is not ready again.
        h.record(last_failure + 2 * S, false);
        assert_eq!(h.failing(last_failure + 2 * S), Some((41, 61)));
    }

    #[test]
    fn one_call_in_ten_failing_never_recovers_early() {
        let h = Health::default();
        let t0 = 1_700_000_000 * S;
        for i in 0..400 {
            // 40 calls a second, every tenth failing.
            h.record(t0 + i * 25_000, i % 10 != 0);
            if i >= 100 {
                assert!(h.failing(t0 + i * 25_000).is_some(), "call {i}");
            }
        }
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
