//! GCRA, the generic cell rate algorithm: one theoretical arrival time per key.
//!
//! Source: ATM Forum Traffic Management Specification 4.0 (af-tm-0056.000, 1996), annex C,
//! "virtual scheduling" form; the same algorithm as redis-cell and the governor crate. The
//! documents behind Floodgate call it the *funnel*. It is the leaky bucket as a meter kept in one
//! number: `tat` is the time at which the bucket would be empty again.
//!
//! With emission interval `T = period / limit` and delay variation tolerance `tau = burst x T`,
//! a request of `cost` units at `now` is admitted when
//!
//! ```text
//! now     = max(now, last_update)            -- a stale `now`: no time passed
//! new_tat = max(tat, now) + cost x T        new_tat - now <= tau
//! ```
//!
//! All arithmetic is in ticks of `1 / denominator` microseconds, where
//! `T = numerator / denominator` in lowest terms, so fractional intervals are exact. See
//! `docs/spec/gcra.md` for every formula and bound.
//!
//! ```
//! use floodgate_core::{Algorithm, Gcra, Quota};
//! let gcra = Gcra::new("2/s".parse().unwrap()).unwrap();
//! let mut state = gcra.initial_state();
//! let t0 = 1_700_000_000_000_000;
//! assert!(gcra.check(&mut state, t0, 1).unwrap().allowed);
//! assert!(gcra.check(&mut state, t0, 1).unwrap().allowed);
//! let denied = gcra.check(&mut state, t0, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(500_000)); // one emission interval
//! ```

use crate::algorithm::base::{
    latest_scheduled, settle_give_back, still_ahead, Algorithm, AlgorithmKind,
};
use crate::decision::{Decision, Reservation};
use crate::div::Divisor;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

/// GCRA prepared for one quota: `limit / period` with `burst` units at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    quota: Quota,
    /// Emission interval in ticks (`numerator`).
    interval: u64,
    /// Ticks per microsecond (`denominator`).
    ticks_per_us: u64,
    /// Delay variation tolerance in ticks: `burst x interval`.
    tau: u64,
    /// `floor(tau / ticks_per_us)`: tau in whole microseconds.
    tau_us: u64,
    /// `ceil(tau / ticks_per_us)`: the time a full burst takes to refill, the longest
    /// reservation wait.
    horizon_us: u64,
    /// `tau + horizon_us x ticks_per_us` (`< 2 tau + ticks_per_us`): the most a state ever holds
    /// ahead of its `last_update` (a full burst, plus what reservations and settles may add:
    /// the bounded debt), in ticks.
    span: u64,
    /// `floor(span / ticks_per_us)` and `span % ticks_per_us`.
    span_us: u64,
    span_rem: u64,
    /// `interval` and `ticks_per_us` as multiply-and-shift divisors: the three divisions of a
    /// decision were most of its cost.
    interval_div: Divisor,
    ticks_div: Divisor,
    /// `interval` as whole microseconds plus ticks (`interval / ticks_per_us`,
    /// `interval % ticks_per_us`): a cost-1 admission adds it to the arrival time without a
    /// division.
    interval_us: u64,
    interval_rem: u64,
}

/// GCRA state of one key: the theoretical arrival time `tat + tat_ticks / denominator` us, and
/// the time the state last moved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct GcraState {
    /// Whole microseconds of the theoretical arrival time (since the Unix epoch).
    pub tat: Timestamp,
    /// The fraction of a microsecond beyond `tat`, in ticks (`0 <= tat_ticks < denominator`).
    pub tat_ticks: u64,
    /// The effective `now` of the last admission (microseconds since the Unix epoch; 0 for a
    /// fresh key): a stale `now` before it is read as it, "no time passed", exactly as the
    /// leaky bucket reads one before its `last_leak`. The annex C continuous-state form calls
    /// it the last conformance time.
    pub last_update: Timestamp,
    /// The scheduled time of the latest reservation made for later (microseconds since the
    /// Unix epoch), while it lies after `last_update`; 0 otherwise. A settle gives back nothing
    /// that an admission scheduled up to it stands on (`docs/spec/reservations.md`).
    pub last_scheduled_at: Timestamp,
}

impl Gcra {
    /// The earliest time consistent with `state`, in whole microseconds: `tat - span` rounded
    /// up (0 for a fresh state). No state is ever more than `span` ahead of its last update.
    #[inline]
    fn earliest(&self, state: GcraState) -> Timestamp {
        // tat + tat_ticks/d - (span_us + span_rem/d), rounded up, without forming tat x d.
        let whole = state.tat.saturating_sub(self.span_us);
        if state.tat_ticks > self.span_rem && state.tat >= self.span_us {
            whole + 1
        } else {
            whole
        }
    }

    /// Ticks from `now` up to `tat` (0 when `tat <= now`). Callers guarantee
    /// `now >= earliest(state)`, so the result is at most `2 tau` (< 2^53).
    ///
    /// (`earliest` never binds for a state this algorithm wrote: its `last_update` is at or
    /// after it. It bounds the arithmetic for a hand-made state, or one stored by a version
    /// without `last_update`.)
    #[inline]
    fn ticks_after(&self, state: GcraState, now: Timestamp) -> u64 {
        if state.tat < now {
            0
        } else {
            (state.tat - now) * self.ticks_per_us + state.tat_ticks
        }
    }
}

impl Gcra {
    /// The `now` a decision at `now` is made at: `max(now, last_update, earliest)`.
    #[inline]
    fn effective_now(&self, state: GcraState, now: Timestamp) -> Timestamp {
        now.max(state.last_update).max(self.earliest(state))
    }

    /// Sets `state` to `ahead` ticks ahead of `now` (the effective now), updated at `now`.
    fn set_ahead(&self, state: &mut GcraState, now: Timestamp, ahead: u64) {
        let (whole, ticks) = self.ticks_div.div_rem(ahead);
        state.tat = now.saturating_add(whole);
        state.tat_ticks = ticks;
        state.last_update = now;
    }

    /// The standing of a key `ahead` ticks ahead of the effective now: a cost-0 decision.
    fn standing(&self, ahead: u64) -> Decision {
        Decision {
            allowed: true,
            limit: self.quota.burst(),
            remaining: self.interval_div.div(self.tau.saturating_sub(ahead)),
            reset_after: self.ticks_div.div_ceil(ahead),
            retry_after: None,
        }
    }
}

impl Algorithm for Gcra {
    type State = GcraState;
    const KIND: AlgorithmKind = AlgorithmKind::Gcra;

    /// # Errors
    /// [`QuotaError::BurstTooSmall`] for a rate finer than 1 us per unit whose burst cannot
    /// hold one microsecond's refill ([`Quota::check_bucket_exact`]).
    fn new(quota: Quota) -> Result<Self, QuotaError> {
        quota.check_bucket_exact()?;
        let (interval, ticks_per_us) = quota.emission_interval();
        // Quota::with_burst already bounds burst x interval by MAX_EXACT.
        let tau = quota.burst() * interval;
        Ok(Self {
            quota,
            interval,
            ticks_per_us,
            tau,
            tau_us: tau / ticks_per_us,
            horizon_us: tau.div_ceil(ticks_per_us),
            span: tau + tau.div_ceil(ticks_per_us) * ticks_per_us,
            span_us: (tau + tau.div_ceil(ticks_per_us) * ticks_per_us) / ticks_per_us,
            span_rem: (tau + tau.div_ceil(ticks_per_us) * ticks_per_us) % ticks_per_us,
            interval_div: Divisor::new(interval),
            ticks_div: Divisor::new(ticks_per_us),
            interval_us: interval / ticks_per_us,
            interval_rem: interval % ticks_per_us,
        })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.quota.burst()
    }

    fn initial_state(&self) -> GcraState {
        GcraState::default()
    }

    // Always inlined so that a caller reading only `allowed` pays for nothing else.
    #[inline(always)]
    fn decide(&self, state: &mut GcraState, now: Timestamp, cost: u64, consume: bool) -> Decision {
        // A stale `now` (before the last admission) means no time passed, as in the token and
        // leaky buckets: the three then decide identically whatever the order of `now`s.
        let now = now.max(state.last_update);
        // A `now` still before tat - 2 tau (rounded up), the earliest time consistent with the
        // state, is raised to it (only a state without `last_update` can get here): this keeps
        // every product below 2^53 (`ahead <= 2 tau`).
        //
        // The usual checks need no clamp, and are told apart by comparisons only, so that the
        // next check's state does not wait for the clamp's arithmetic (the chain from one
        // state to the next is what a check costs once the clock read is cheap):
        // - `tat < now`: the bucket is empty; `earliest <= tat + 1 <= now` (tau >= 1 tick).
        // - `tat - now < span_us`: `now >= tat - span_us + 1 >= earliest`.
        // `base` is max(tat, now) as whole microseconds and ticks: where a cost-1 admission
        // adds one interval.
        let (now, ahead, base, base_ticks) = if state.tat < now {
            (now, 0, now, 0)
        } else if state.tat - now < self.span_us {
            // (tat - now) x ticks_per_us < 2 tau: no overflow.
            let ahead = (state.tat - now) * self.ticks_per_us + state.tat_ticks;
            (now, ahead, state.tat, state.tat_ticks)
        } else {
            let now = now.max(self.earliest(*state));
            let ahead = self.ticks_after(*state, now); // <= 2 tau
            if state.tat >= now {
                (now, ahead, state.tat, state.tat_ticks)
            } else {
                (now, ahead, now, 0)
            }
        };
        let new_ahead = ahead + cost * self.interval; // <= 3 tau
                                                      // Cost 0 is a peek, allowed even while reservations hold the key beyond its burst.
        let allowed = cost == 0 || new_ahead <= self.tau;
        let ahead_after = if allowed && consume {
            if cost == 1 {
                // The usual request. The same result as the general branch, as a mixed-radix
                // addition: new tat = max(tat, now) + T, so the next check does not wait for a
                // division.
                let ticks = base_ticks + self.interval_rem;
                let carry = ticks >= self.ticks_per_us;
                // Saturating only matters for a `now` within 2^51 us of u64::MAX: never panic.
                state.tat = base.saturating_add(self.interval_us + u64::from(carry));
                state.tat_ticks = if carry {
                    ticks - self.ticks_per_us
                } else {
                    ticks
                };
            } else {
                let (whole, ticks) = self.ticks_div.div_rem(new_ahead);
                state.tat = now.saturating_add(whole);
                state.tat_ticks = ticks;
            }
            state.last_update = now;
            new_ahead
        } else {
            ahead
        };
        Decision {
            allowed,
            limit: self.quota.burst(),
            remaining: self.interval_div.div(self.tau.saturating_sub(ahead_after)),
            reset_after: self.ticks_div.div_ceil(ahead_after),
            retry_after: (!allowed).then(|| self.ticks_div.div_ceil(new_ahead - self.tau)),
        }
    }

    fn max_wait(&self) -> Micros {
        self.horizon_us
    }

    fn reserve_at(
        &self,
        state: &mut GcraState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        if wait > self.horizon_us {
            return None;
        }
        let now = self.effective_now(*state, now);
        let ahead = self.ticks_after(*state, now);
        if cost == 0 {
            return Some(Reservation::granted_at(self.standing(ahead), now, wait));
        }
        // The tat an admission at the scheduled time leaves, max(tat, now + wait) + cost x T:
        // scheduled on the theoretical arrival time. At most horizon_us x d + tau = span ticks
        // ahead of now.
        let shift = wait * self.ticks_per_us;
        let new_ahead = ahead.max(shift) + cost * self.interval;
        if new_ahead - shift > self.tau {
            return None;
        }
        self.set_ahead(state, now, new_ahead);
        state.last_scheduled_at = latest_scheduled(state.last_scheduled_at, now, wait);
        Some(Reservation::granted_at(self.standing(new_ahead), now, wait))
    }

    fn decide_settle(
        &self,
        state: &mut GcraState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        let now = self.effective_now(*state, now);
        let ahead = self.ticks_after(*state, now);
        let latest = now.max(state.last_scheduled_at);
        let ahead = if actual <= reserved {
            // Back by what the reservation still occupies, never what a later admission stands
            // on, and never before now (an empty bucket holds nothing more).
            ahead.saturating_sub(settle_give_back(
                self.interval,
                self.ticks_per_us,
                self.horizon_us,
                latest,
                scheduled_at,
                reserved,
                actual,
            ))
        } else {
            // Charged unconditionally, up to the bounded debt (span).
            ahead
                .saturating_add((actual - reserved).saturating_mul(self.interval))
                .min(self.span)
        };
        self.set_ahead(state, now, ahead);
        state.last_scheduled_at = still_ahead(state.last_scheduled_at, now);
        self.standing(ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The cost-1 mixed-radix update gives exactly the state of the general formula
        /// `tat = now + new_ahead / d`, `tat_ticks = new_ahead % d`, including after stale and
        /// jumping clocks.
        #[test]
        fn cost_one_update_matches_the_general_formula(
            limit in 1u64..5_000,
            period in 1u64..10_000_000,
            burst in 1u64..50,
            steps in proptest::collection::vec((0u64..3_000_000, any::<bool>()), 1..200),
        ) {
            // Quotas finer than a microsecond whose burst cannot hold one microsecond's refill
            // are refused (Quota::check_bucket_exact): not a GCRA to test.
            let gcra = Gcra::new(Quota::with_burst(limit, period, burst).unwrap());
            prop_assume!(gcra.is_ok());
            let gcra = gcra.unwrap();
            let mut state = gcra.initial_state();
            let mut now = 1_700_000_000_000_000u64;
            for (delta, back) in steps {
                now = if back { now - delta / 4 } else { now + delta % (period + 2) };
                let before = state;
                let clamped = now.max(before.last_update).max(gcra.earliest(before));
                let new_ahead = gcra.ticks_after(before, clamped) + gcra.interval;
                let d = gcra.check(&mut state, now, 1).unwrap();
                prop_assert_eq!(d.allowed, new_ahead <= gcra.tau);
                if d.allowed {
                    prop_assert_eq!(state.tat, clamped + new_ahead / gcra.ticks_per_us);
                    prop_assert_eq!(state.tat_ticks, new_ahead % gcra.ticks_per_us);
                    prop_assert_eq!(state.last_update, clamped);
                } else {
                    prop_assert_eq!(state, before);
                }
            }
        }
    }

    /// Regression: the stale-`now` clamp used `tat - floor(tau)` us, up to one microsecond
    /// before the earliest consistent time, so `ahead` could exceed the bound and a peek of cost
    /// 0 was denied. (The clamp, now at `tat - 2 tau` since reservations may hold a key up to
    /// one burst beyond its tolerance, only serves states without `last_update`.)
    #[test]
    fn stale_peek_of_cost_zero_is_allowed() {
        // 7 per 2 us, burst 5: T = 2/7 us (2 ticks of 1/7 us), tau = 10 ticks, 2 tau = 20 ticks
        // = 2 us + 6 ticks.
        let gcra = Gcra::new(Quota::with_burst(7, 2, 5).unwrap()).unwrap();
        let mut s = gcra.initial_state();
        assert!(gcra.check(&mut s, 100, 3).unwrap().allowed);
        // tat = 100 us + 6 ticks = 706 ticks; earliest = 706 - 20 = 686 ticks -> 98 us.
        assert_eq!((s.tat, s.tat_ticks, s.last_update), (100, 6, 100));
        assert_eq!(gcra.earliest(s), 98);
        // As stored by a version without `last_update`: the earliest time bounds `now`.
        s.last_update = 0;
        let d = gcra.peek(&s, 50, 0).unwrap();
        assert!(d.allowed);
        // Relative to the effective now of 98 us: 20 ticks ahead -> 3 us to reset, nothing
        // free.
        assert_eq!((d.remaining, d.reset_after), (0, 3));
    }

    /// Regression: `now + new_ahead / d` overflowed (a panic in debug builds, a wrapped `tat`
    /// that admits everything in release builds) for a `now` within `tau` of `u64::MAX`.
    #[test]
    fn now_near_u64_max_does_not_panic() {
        let gcra = Gcra::new("1/h".parse().unwrap()).unwrap();
        let mut s = gcra.initial_state();
        assert!(gcra.check(&mut s, u64::MAX - 5, 1).unwrap().allowed);
        // `tat` saturates at u64::MAX: the key is limited up to the end of representable time.
        assert_eq!((s.tat, s.tat_ticks), (u64::MAX, 0));
        assert!(!gcra.check(&mut s, u64::MAX - 6, 1).unwrap().allowed);
    }
}
