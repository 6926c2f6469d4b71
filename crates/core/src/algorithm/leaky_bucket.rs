//! The leaky bucket as a meter: a water level that rises by each admitted cost and drains
//! continuously at `limit / period`.
//!
//! Source: ATM Forum Traffic Management Specification 4.0 (af-tm-0056.000, 1996), annex C,
//! "continuous-state leaky bucket" form of the GCRA: the bucket holds the level `X` as of the
//! last conforming cell `LCT`; a cell at `t` sees `X' = X - (t - LCT)`, is conforming when
//! `X' <= L` (the tolerance) and then sets `X = max(0, X') + I`. Floodgate tests before adding
//! instead (admit when `level(now) + cost <= capacity`), which is the same rule with
//! `L = capacity - I` and lets a request of several units be decided at once:
//!
//! ```text
//! level(now) = max(0, level - (now - last_leak) x rate)     level(now) + cost <= capacity
//! ```
//!
//! Annex C proves the continuous-state leaky bucket and the virtual-scheduling GCRA equivalent;
//! here too, identical inputs give exactly the decisions of [`Gcra`](crate::Gcra) (its `tat` is
//! `last_leak + level x T`). The level is counted in ticks of `1 / denominator` microseconds,
//! where the emission interval `T = period / limit = numerator / denominator` us in lowest terms:
//! one unit is `numerator` ticks and one microsecond drains `denominator` ticks. This is the
//! meter, not the queue: a request that does not fit is denied, not delayed. See
//! `docs/spec/leaky_bucket.md` for every formula and bound.
//!
//! ```
//! use floodgate_core::{Algorithm, LeakyBucket, Quota};
//! let bucket = LeakyBucket::new("10/s".parse::<Quota>().unwrap()).unwrap();
//! let mut state = bucket.initial_state(); // empty
//! let t0 = 1_700_000_000_000_000;
//! assert!(bucket.check(&mut state, t0, 10).unwrap().allowed); // full now
//! let denied = bucket.check(&mut state, t0 + 30_000, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(70_000)); // one unit drains every 100 ms
//! ```

use crate::algorithm::base::{
    latest_scheduled, settle_give_back, still_ahead, Algorithm, AlgorithmKind,
};
use crate::decision::{Decision, Reservation};
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

/// The leaky bucket (meter) prepared for one quota: capacity `burst`, leak `limit / period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    quota: Quota,
    /// Ticks per unit: the emission interval's `numerator`.
    interval: u64,
    /// Ticks drained per microsecond: the emission interval's `denominator`.
    ticks_per_us: u64,
    /// Capacity in ticks: `burst x interval` (at most `MAX_EXACT`).
    capacity_ticks: u64,
    /// Microseconds that drain a full bucket completely: `ceil(capacity_ticks / ticks_per_us)`.
    drain_us: u64,
}

/// Leaky bucket state of one key.
///
/// A fresh key is an empty bucket ([`Algorithm::initial_state`], also `Default`). Every field
/// stays below 2^53.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct LeakyBucketState {
    /// The water level at `last_leak`, in ticks (one unit = the emission interval's `numerator`
    /// ticks); `0 <= level <= capacity + drain time x denominator` (below twice the capacity
    /// plus a microsecond; above the capacity while units are reserved for later, or after a
    /// settle charged more: the bounded debt).
    pub level: u64,
    /// When `level` was last brought up to date, in microseconds since the Unix epoch.
    pub last_leak: Timestamp,
    /// The scheduled time of the latest reservation made for later (microseconds since the
    /// Unix epoch), while it lies after `last_leak`; 0 otherwise. A settle takes out no level
    /// that an admission scheduled up to it stands on (`docs/spec/reservations.md`).
    pub last_scheduled_at: Timestamp,
}

impl LeakyBucket {
    /// The level in ticks at `now >= state.last_leak`. Elapsed time is capped at `2 drain_us`
    /// (the most a level ever takes to drain) before multiplying, so the product stays below
    /// `2 (capacity_ticks + ticks_per_us)` (<= 2^53) however long the key was idle.
    #[inline]
    fn level_at(&self, state: &LeakyBucketState, now: Timestamp) -> u64 {
        let elapsed = (now - state.last_leak).min(2 * self.drain_us);
        state.level.saturating_sub(elapsed * self.ticks_per_us)
    }

    /// The standing of a bucket at `level` ticks: a cost-0 decision.
    fn standing(&self, level: u64) -> Decision {
        Decision {
            allowed: true,
            limit: self.quota.burst(),
            remaining: self.capacity_ticks.saturating_sub(level) / self.interval,
            reset_after: level.div_ceil(self.ticks_per_us),
            retry_after: None,
        }
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;
    const KIND: AlgorithmKind = AlgorithmKind::LeakyBucket;

    /// # Errors
    /// [`QuotaError::BurstTooSmall`] for a rate finer than 1 us per unit whose burst cannot
    /// hold one microsecond's refill ([`Quota::check_bucket_exact`]).
    fn new(quota: Quota) -> Result<Self, QuotaError> {
        quota.check_bucket_exact()?;
        let (interval, ticks_per_us) = quota.emission_interval();
        // Quota::with_burst already bounds burst x interval by MAX_EXACT.
        let capacity_ticks = quota.burst() * interval;
        Ok(Self {
            quota,
            interval,
            ticks_per_us,
            capacity_ticks,
            drain_us: capacity_ticks.div_ceil(ticks_per_us),
        })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.quota.burst()
    }

    fn initial_state(&self) -> LeakyBucketState {
        LeakyBucketState::default()
    }

    // Always inlined so that a caller reading only `allowed` pays for nothing else.
    #[inline(always)]
    fn decide(
        &self,
        state: &mut LeakyBucketState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        // A stale `now` (before the last leak) means no time passed: nothing drains.
        let now = now.max(state.last_leak);
        let level = self.level_at(state, now);
        let new_level = level + cost * self.interval; // <= 3 x capacity_ticks < 2^53
                                                      // Cost 0 is a peek, allowed even while reservations hold the level above capacity.
        let allowed = cost == 0 || new_level <= self.capacity_ticks;
        let level_after = if allowed && consume {
            state.level = new_level;
            state.last_leak = now;
            new_level
        } else {
            level
        };
        Decision {
            allowed,
            limit: self.quota.burst(),
            remaining: self.capacity_ticks.saturating_sub(level_after) / self.interval,
            reset_after: level_after.div_ceil(self.ticks_per_us),
            retry_after: (!allowed)
                .then(|| (new_level - self.capacity_ticks).div_ceil(self.ticks_per_us)),
        }
    }

    /// The time a full bucket takes to drain.
    fn max_wait(&self) -> Micros {
        self.drain_us
    }

    fn reserve_at(
        &self,
        state: &mut LeakyBucketState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        if wait > self.drain_us {
            return None;
        }
        let now = now.max(state.last_leak);
        let level = self.level_at(state, now);
        if cost == 0 {
            return Some(Reservation::granted_at(self.standing(level), now, wait));
        }
        // The level an admission at the scheduled time leaves, seen from now: it drains to
        // exactly that by then. At most capacity + drain_us x d.
        let shift = wait * self.ticks_per_us;
        let new_level = level.max(shift) + cost * self.interval;
        if new_level - shift > self.capacity_ticks {
            return None;
        }
        *state = LeakyBucketState {
            level: new_level,
            last_leak: now,
            last_scheduled_at: latest_scheduled(state.last_scheduled_at, now, wait),
        };
        Some(Reservation::granted_at(self.standing(new_level), now, wait))
    }

    fn decide_settle(
        &self,
        state: &mut LeakyBucketState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        let now = now.max(state.last_leak);
        let level = self.level_at(state, now);
        let latest = now.max(state.last_scheduled_at);
        let level = if actual <= reserved {
            // What the reservation still holds, never what a later admission stands on.
            level.saturating_sub(settle_give_back(
                self.interval,
                self.ticks_per_us,
                self.drain_us,
                latest,
                scheduled_at,
                reserved,
                actual,
            ))
        } else {
            level
                .saturating_add((actual - reserved).saturating_mul(self.interval))
                .min(self.capacity_ticks + self.drain_us * self.ticks_per_us)
        };
        *state = LeakyBucketState {
            level,
            last_leak: now,
            last_scheduled_at: still_ahead(state.last_scheduled_at, now),
        };
        self.standing(level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = 1_700_000_000_000_000;

    fn bucket(quota: &str) -> LeakyBucket {
        LeakyBucket::new(quota.parse().unwrap()).unwrap()
    }

    #[test]
    fn level_rises_by_cost_and_drains_exactly() {
        // 3/20s: one unit per 20,000,000 / 3 us = 20,000,000 ticks of 1/3 us; capacity 3 units
        // = 60,000,000 ticks.
        let b = bucket("3/20s");
        let mut s = b.initial_state();
        let d = b.check(&mut s, T0, 2).unwrap();
        // Level 40,000,000 ticks: reset after 40,000,000 / 3 = 13,333,333.33 -> 13,333,334 us.
        assert_eq!(
            (d.allowed, d.remaining, d.reset_after),
            (true, 1, 13_333_334)
        );
        let d = b.check(&mut s, T0, 2).unwrap();
        // 40,000,000 + 40,000,000 - 60,000,000 = 20,000,000 ticks too many:
        // ceil(20,000,000 / 3) = 6,666,667 us.
        assert_eq!(d.retry_after, Some(6_666_667));
        assert!(!b.check(&mut s, T0 + 6_666_666, 2).unwrap().allowed);
        let d = b.check(&mut s, T0 + 6_666_667, 2).unwrap();
        assert!(d.allowed);
        // 40,000,000 - 3 x 6,666,667 = 19,999,999 ticks left, + 40,000,000 = 59,999,999.
        assert_eq!(s.level, 59_999_999);
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn stale_now_drains_nothing() {
        let b = bucket("1/s");
        let mut s = b.initial_state();
        assert!(b.check(&mut s, T0, 1).unwrap().allowed);
        let d = b.peek(&s, T0 - 1, 1).unwrap();
        assert_eq!((d.allowed, d.retry_after), (false, Some(1_000_000)));
    }

    #[test]
    fn years_idle_drains_to_empty_without_overflow() {
        let b = bucket("1000000/day");
        let mut s = b.initial_state();
        assert!(b.check(&mut s, 5, 1_000_000).unwrap().allowed);
        let d = b.check(&mut s, (1 << 53) - 1, 1).unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 999_999));
    }
}
