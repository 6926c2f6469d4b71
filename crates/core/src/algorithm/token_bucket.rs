//! The token bucket: a bucket of `burst` tokens refilled continuously at `limit / period`.
//!
//! Source: the classic token bucket as used by the IETF traffic meters (RFC 2697 "A Single Rate
//! Three Color Marker", section 3: a bucket of size CBS filled at CIR, a packet of size B
//! conforms when at least B tokens are present, then B tokens are removed); Spring Cloud
//! Gateway's `replenishRate` / `burstCapacity` / `requestedTokens` are the same three knobs. A
//! request of `cost` units at `now` is admitted when
//!
//! ```text
//! tokens(now) = min(capacity, tokens + (now - last_refill) x rate)     tokens(now) >= cost
//! ```
//!
//! Tokens are counted in ticks of `1 / denominator` microseconds of refill time, where the
//! emission interval `T = period / limit = numerator / denominator` us in lowest terms: one token
//! is `numerator` ticks and one microsecond refills `denominator` ticks, so 7 per second refills
//! exactly and never drifts. With identical inputs it gives exactly the decisions of
//! [`Gcra`](crate::Gcra) (its `tat` is `last_refill + (capacity - tokens) x T`). See
//! `docs/spec/token_bucket.md` for every formula and bound.
//!
//! ```
//! use floodgate_core::{Algorithm, Quota, TokenBucket};
//! let bucket = TokenBucket::new("2/s burst 3".parse::<Quota>().unwrap()).unwrap();
//! let mut state = bucket.initial_state(); // full: 3 tokens
//! let t0 = 1_700_000_000_000_000;
//! assert_eq!(bucket.check(&mut state, t0, 3).unwrap().remaining, 0);
//! let denied = bucket.check(&mut state, t0 + 100_000, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(400_000)); // a token every 500 ms, 100 ms already passed
//! assert!(bucket.check(&mut state, t0 + 500_000, 1).unwrap().allowed);
//! ```

use crate::algorithm::base::{
    latest_scheduled, settle_give_back, still_ahead, Algorithm, AlgorithmKind,
};
use crate::decision::{Decision, Reservation};
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

/// The token bucket prepared for one quota: capacity `burst`, refill `limit / period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    quota: Quota,
    /// Ticks per token: the emission interval's `numerator`.
    interval: u64,
    /// Ticks refilled per microsecond: the emission interval's `denominator`.
    ticks_per_us: u64,
    /// Capacity in ticks: `burst x interval` (at most `MAX_EXACT`).
    capacity_ticks: u64,
    /// Microseconds that refill an empty bucket completely: `ceil(capacity_ticks / ticks_per_us)`.
    fill_us: u64,
}

/// Token bucket state of one key.
///
/// A fresh key is a full bucket ([`Algorithm::initial_state`]). Every field stays below 2^53.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucketState {
    /// Tokens in the bucket at `last_refill`, in ticks (one token = the emission interval's
    /// `numerator` ticks); `-(fill time x denominator) <= tokens <= burst x numerator` (the
    /// fill time is `ceil(burst x numerator / denominator)` us). Negative while units are
    /// reserved for later, or after a settle charged more: the bounded debt.
    pub tokens: i64,
    /// When `tokens` was last brought up to date, in microseconds since the Unix epoch.
    pub last_refill: Timestamp,
    /// The scheduled time of the latest reservation made for later (microseconds since the
    /// Unix epoch), while it lies after `last_refill`; 0 otherwise. A settle gives back no
    /// token that an admission scheduled up to it stands on (`docs/spec/reservations.md`).
    pub last_scheduled_at: Timestamp,
}

impl TokenBucket {
    /// Tokens in ticks at `now >= state.last_refill`. Elapsed time is capped at `2 fill_us`
    /// (the most a bucket in debt takes to fill) before multiplying, so the product stays below
    /// `2 (capacity_ticks + ticks_per_us)` (<= 2^53) however long the key was idle.
    #[inline]
    fn tokens_at(&self, state: &TokenBucketState, now: Timestamp) -> i64 {
        let elapsed = (now - state.last_refill).min(2 * self.fill_us);
        (state.tokens + (elapsed * self.ticks_per_us) as i64).min(self.capacity_ticks as i64)
    }

    /// The standing of a bucket holding `tokens` ticks: a cost-0 decision.
    fn standing(&self, tokens: i64) -> Decision {
        Decision {
            allowed: true,
            limit: self.quota.burst(),
            remaining: tokens.max(0) as u64 / self.interval,
            reset_after: (self.capacity_ticks as i64 - tokens)
                .unsigned_abs()
                .div_ceil(self.ticks_per_us),
            retry_after: None,
        }
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;
    const KIND: AlgorithmKind = AlgorithmKind::TokenBucket;

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
            fill_us: capacity_ticks.div_ceil(ticks_per_us),
        })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.quota.burst()
    }

    fn initial_state(&self) -> TokenBucketState {
        TokenBucketState {
            tokens: self.capacity_ticks as i64,
            last_refill: 0,
            last_scheduled_at: 0,
        }
    }

    // Always inlined so that a caller reading only `allowed` pays for nothing else.
    #[inline(always)]
    fn decide(
        &self,
        state: &mut TokenBucketState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        // A stale `now` (before the last refill) means no time passed: it never refills.
        let now = now.max(state.last_refill);
        let tokens = self.tokens_at(state, now);
        // <= capacity_ticks <= 2^51, since cost <= burst
        let needed = (cost * self.interval) as i64;
        // Cost 0 is a peek, allowed even while reservations hold the bucket in debt.
        let allowed = cost == 0 || tokens >= needed;
        let tokens_after = if allowed && consume {
            state.tokens = tokens - needed;
            state.last_refill = now;
            tokens - needed
        } else {
            tokens
        };
        Decision {
            allowed,
            limit: self.quota.burst(),
            remaining: tokens_after.max(0) as u64 / self.interval,
            // tokens_after <= capacity_ticks: the difference is never negative.
            reset_after: (self.capacity_ticks as i64 - tokens_after)
                .unsigned_abs()
                .div_ceil(self.ticks_per_us),
            retry_after: (!allowed)
                .then(|| (needed - tokens).unsigned_abs().div_ceil(self.ticks_per_us)),
        }
    }

    /// The time an empty bucket takes to fill.
    fn max_wait(&self) -> Micros {
        self.fill_us
    }

    fn reserve_at(
        &self,
        state: &mut TokenBucketState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        if wait > self.fill_us {
            return None;
        }
        let now = now.max(state.last_refill);
        let tokens = self.tokens_at(state, now);
        if cost == 0 {
            return Some(Reservation::granted_at(self.standing(tokens), now, wait));
        }
        // Into debt: the tokens an admission at the scheduled time leaves, seen from now (the
        // bucket refills to exactly that by then). At least -fill_us x d.
        let cap = self.capacity_ticks as i64;
        let shift = (wait * self.ticks_per_us) as i64;
        let level = (cap - tokens).max(shift) + (cost * self.interval) as i64;
        if level - shift > cap {
            return None;
        }
        *state = TokenBucketState {
            tokens: cap - level,
            last_refill: now,
            last_scheduled_at: latest_scheduled(state.last_scheduled_at, now, wait),
        };
        Some(Reservation::granted_at(
            self.standing(cap - level),
            now,
            wait,
        ))
    }

    fn decide_settle(
        &self,
        state: &mut TokenBucketState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        let now = now.max(state.last_refill);
        let cap = self.capacity_ticks as i64;
        let tokens = self.tokens_at(state, now);
        let latest = now.max(state.last_scheduled_at);
        let tokens = if actual <= reserved {
            // What the reservation still holds, never what a later admission stands on, and
            // never above the burst.
            let give = settle_give_back(
                self.interval,
                self.ticks_per_us,
                self.fill_us,
                latest,
                scheduled_at,
                reserved,
                actual,
            );
            (tokens + give as i64).min(cap)
        } else {
            // Charged unconditionally, down to the bounded debt (a full fill time).
            let floor = -((self.fill_us * self.ticks_per_us) as i64);
            let charge = (actual - reserved)
                .saturating_mul(self.interval)
                .min(2 * self.capacity_ticks + self.ticks_per_us);
            (tokens - charge as i64).max(floor)
        };
        *state = TokenBucketState {
            tokens,
            last_refill: now,
            last_scheduled_at: still_ahead(state.last_scheduled_at, now),
        };
        self.standing(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = 1_700_000_000_000_000;

    fn bucket(quota: &str) -> TokenBucket {
        TokenBucket::new(quota.parse().unwrap()).unwrap()
    }

    #[test]
    fn fresh_bucket_is_full_and_refills_at_the_exact_rate() {
        // 7/s: one token per 1,000,000/7 = 142,857.142857... us, i.e. 1,000,000 ticks of 1/7 us.
        let b = bucket("7/s");
        let mut s = b.initial_state();
        let d = b.check(&mut s, T0, 7).unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.reset_after),
            (true, 0, 1_000_000)
        );
        // The first token is back at ceil(1,000,000 / 7) = 142,858 us.
        let d = b.check(&mut s, T0 + 142_857, 1).unwrap();
        assert_eq!(d.retry_after, Some(1));
        assert!(b.check(&mut s, T0 + 142_858, 1).unwrap().allowed);
        // Left: 7 x 142,858 - 1,000,000 = 6 ticks; the next token needs 999,994 more ticks,
        // ceil(999,994 / 7) = 142,857 us (the second token at ceil(2,000,000 / 7) = 285,715 us).
        let d = b.check(&mut s, T0 + 142_858, 1).unwrap();
        assert_eq!(d.retry_after, Some(142_857));
        assert_eq!(s.tokens, 6);
    }

    #[test]
    fn stale_now_is_treated_as_last_refill() {
        let b = bucket("1/s");
        let mut s = b.initial_state();
        assert!(b.check(&mut s, T0, 1).unwrap().allowed);
        let before = s;
        // Half a second before the last refill: no refill, times relative to T0.
        let d = b.check(&mut s, T0 - 500_000, 1).unwrap();
        assert_eq!(
            (d.allowed, d.retry_after, d.reset_after),
            (false, Some(1_000_000), 1_000_000)
        );
        assert_eq!(s, before);
    }

    #[test]
    fn years_idle_refills_to_capacity_without_overflow() {
        let b = bucket("1000000/day burst 1000000");
        let mut s = b.initial_state();
        assert!(b.check(&mut s, 0, 1_000_000).unwrap().allowed);
        let d = b.peek(&s, (1 << 53) - 1, 0).unwrap();
        assert_eq!((d.remaining, d.reset_after), (1_000_000, 0));
    }
}
