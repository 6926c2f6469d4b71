//! What every algorithm shares: the [`Algorithm`] trait, the [`AlgorithmKind`] names and the
//! integer helpers of the bucket algorithms' reservations. A leaf below the six algorithm modules
//! and the run-time [`Policy`](super::Policy), so none of them imports its parent.

use std::fmt;
use std::str::FromStr;

use crate::decision::{Decision, Reservation};
use crate::error::{CheckError, QuotaError};
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

/// A rate-limiting algorithm prepared for one [`Quota`].
///
/// Implementations are deterministic and read no clock: the same `(state, now, cost)` always
/// gives the same decision and the same next state. A `now` earlier than the time the state last
/// moved to (a stale clock reading) is treated as "no time passed": it never refills, never
/// opens a new window and never moves state backwards.
pub trait Algorithm: Clone + fmt::Debug + Send + Sync + 'static {
    /// The per-key state. Small and `Clone`; the sliding log's grows with the limit.
    type State: Clone + fmt::Debug + PartialEq + Send + Sync + 'static;

    /// Which algorithm this is.
    const KIND: AlgorithmKind;

    /// Prepares the algorithm for `quota`.
    ///
    /// # Errors
    /// [`QuotaError::NotExact`] when the quota needs arithmetic this algorithm cannot do exactly
    /// within [`MAX_EXACT`](crate::quota::MAX_EXACT) (for example the sliding window counter's
    /// `limit x period`).
    fn new(quota: Quota) -> Result<Self, QuotaError>;

    /// The quota this algorithm enforces.
    fn quota(&self) -> &Quota;

    /// The most units one request can ever be admitted for: `burst` for the bucket algorithms,
    /// `limit` for the window algorithms. A larger cost is [`CheckError::InsufficientCapacity`].
    fn capacity(&self) -> u64;

    /// The state of a key that has never been seen (or whose state expired).
    fn initial_state(&self) -> Self::State;

    /// Decides a request of `cost` units at `now`, where `1 <= cost <= capacity()` or `cost == 0`
    /// (a peek of the current remaining). When `consume` is true and the request is allowed,
    /// `state` is updated; otherwise `state` is left exactly as it was.
    ///
    /// Callers normally use [`Algorithm::check`] or [`Algorithm::peek`], which validate `cost`.
    /// The decision for `cost > capacity()` is unspecified.
    fn decide(&self, state: &mut Self::State, now: Timestamp, cost: u64, consume: bool)
        -> Decision;

    /// Checks a request of `cost` units at `now` and consumes them if admitted. Cost 0 is a
    /// peek: always allowed, consumes nothing, reports `remaining`.
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`; `state` is unchanged.
    // Always inlined: a check is a few nanoseconds, so a call and a `Decision` written to
    // memory would be a large part of it, and inlined the fields a caller ignores cost nothing.
    #[inline(always)]
    fn check(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        self.validate_cost(cost)?;
        Ok(self.decide(state, now, cost, cost > 0))
    }

    /// Decides a request of `cost` units at `now` without consuming anything.
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`.
    fn peek(&self, state: &Self::State, now: Timestamp, cost: u64) -> Result<Decision, CheckError> {
        self.validate_cost(cost)?;
        Ok(self.decide(&mut state.clone(), now, cost, false))
    }

    /// `Ok(())` when a request of `cost` units could ever be admitted.
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`.
    #[inline]
    fn validate_cost(&self, cost: u64) -> Result<(), CheckError> {
        validate_cost(cost, self.capacity())
    }

    /// The longest wait a reservation is scheduled for, in microseconds: a larger `max_wait`
    /// is clamped to it. The time a full burst refills (`burst x T`, rounded down) for the
    /// bucket algorithms, one period for the windows. It bounds the debt a key can hold.
    fn max_wait(&self) -> Micros;

    /// Reserves `cost` units for the scheduled time `now + wait` (the effective `now`; `wait` at
    /// most [`Algorithm::max_wait`]) if they fit at that time, consuming them now: the state
    /// then holds them as if they had been admitted at the scheduled time, and every later
    /// request sees them (first come, first served). `None` when they do not fit then (or
    /// `wait` is beyond the bound), with `state` unchanged. With `wait = 0` it is exactly a
    /// check that admits. Cost 0 consumes nothing. `1 <= cost <= capacity()` or `cost == 0`.
    ///
    /// A store reserving a batch of items for one common time uses it directly; single
    /// requests use [`Algorithm::reserve`].
    fn reserve_at(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation>;

    /// Decides a reservation of `cost` units at `now` with the wait bound `max_wait`
    /// (microseconds, clamped to [`Algorithm::max_wait`]): granted for the earliest time the
    /// units fit (a check's `retry_after`, 0 when it admits) when that is within the bound;
    /// otherwise denied with the check's decision, `state` unchanged. `max_wait = 0` decides
    /// exactly as a check.
    ///
    /// Callers normally use [`Algorithm::reserve`], which validates `cost`.
    fn decide_reserve(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
        max_wait: Micros,
    ) -> Reservation {
        let peek = self.decide(&mut state.clone(), now, cost, false);
        let wait = peek.retry_after.unwrap_or(0);
        if wait <= max_wait.min(self.max_wait()) {
            if let Some(granted) = self.reserve_at(state, now, cost, wait) {
                return granted;
            }
        }
        Reservation::denied(peek)
    }

    /// Settles a reservation of `reserved` units scheduled at `scheduled_at` whose actual cost
    /// was `actual`: `actual < reserved` gives back the difference (never beyond what the state
    /// can hold), `actual > reserved` charges it unconditionally (up to the bounded debt), at
    /// `now`. Returns the standing after it (a cost-0 peek). See `docs/spec/reservations.md`.
    fn decide_settle(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision;

    /// Reserves `cost` units at `now` if they are admitted within `max_wait` microseconds (see
    /// [`Algorithm::decide_reserve`]).
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`; `state` is unchanged.
    fn reserve(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
        max_wait: Micros,
    ) -> Result<Reservation, CheckError> {
        self.validate_cost(cost)?;
        Ok(self.decide_reserve(state, now, cost, max_wait))
    }

    /// Settles a reservation (see [`Algorithm::decide_settle`]). A give-back to a fresh key
    /// (never seen, or expired: a store no longer holds it) changes nothing.
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `reserved > capacity()` (no reservation was
    /// ever that large); `state` is unchanged.
    fn settle(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Result<Decision, CheckError> {
        self.validate_cost(reserved)?;
        if actual <= reserved && *state == self.initial_state() {
            return Ok(self.decide(&mut state.clone(), now, 0, false));
        }
        Ok(self.decide_settle(state, now, scheduled_at, reserved, actual))
    }
}

/// The name of an algorithm, as written in configuration, JSON, metrics and the CLI
/// (`fixed_window`, `sliding_log`, `sliding_window`, `token_bucket`, `leaky_bucket`, `gcra`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlgorithmKind {
    /// [`FixedWindow`](super::FixedWindow).
    FixedWindow,
    /// [`SlidingLog`](super::SlidingLog).
    SlidingLog,
    /// [`SlidingWindow`](super::SlidingWindow) (the sliding window counter).
    SlidingWindow,
    /// [`TokenBucket`](super::TokenBucket).
    TokenBucket,
    /// [`LeakyBucket`](super::LeakyBucket) (as a meter).
    LeakyBucket,
    /// [`Gcra`](super::Gcra).
    Gcra,
}

impl AlgorithmKind {
    /// All six, in the order tables list them.
    pub const ALL: [AlgorithmKind; 6] = [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::Gcra,
    ];

    /// The snake_case name used everywhere outside Rust.
    pub fn as_str(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::Gcra => "gcra",
        }
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AlgorithmKind {
    type Err = String;

    /// Accepts the snake_case names, with `-` for `_` too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        AlgorithmKind::ALL
            .into_iter()
            .find(|k| k.as_str() == norm)
            .ok_or_else(|| {
                format!(
                    "unknown algorithm {s:?}; expected one of fixed_window, sliding_log, \
                     sliding_window, token_bucket, leaky_bucket, gcra"
                )
            })
    }
}

/// The most a bucket algorithm (GCRA terms: ticks its theoretical arrival time may move back)
/// gives back when a reservation of `reserved` units scheduled at `scheduled_at` is settled
/// with `actual <= reserved` (`docs/spec/reservations.md`, "Settle never mints capacity"):
///
/// ```text
/// latest = max(now, last_scheduled_at)          -- no later admission is scheduled after it
/// give   = min((reserved - actual) x T, reserved x T - (latest - scheduled_at) x d)   (>= 0)
/// ```
///
/// The reservation occupies the bucket from its scheduled time for `reserved x T` ticks; what
/// refilled since then (up to `latest`) is no longer its own to give: later admissions stand
/// on it. `horizon_us x d >= burst x T` bounds the product below 2^53.
#[inline]
pub(crate) fn settle_give_back(
    interval: u64,
    ticks_per_us: u64,
    horizon_us: Micros,
    latest: Timestamp,
    scheduled_at: Timestamp,
    reserved: u64,
    actual: u64,
) -> u64 {
    let occupied = reserved * interval;
    let elapsed = latest.saturating_sub(scheduled_at).min(horizon_us + 1);
    ((reserved - actual) * interval).min(occupied.saturating_sub(elapsed * ticks_per_us))
}

/// A bucket's `last_scheduled_at` after a reservation at `now + wait`: the later of the two
/// for a reservation made for later; left as it was for one at once (a check, which must
/// leave exactly a check's state), where `now` bounds its scheduled time anyway.
#[inline]
pub(crate) fn latest_scheduled(previous: Timestamp, now: Timestamp, wait: Micros) -> Timestamp {
    if wait == 0 {
        previous
    } else {
        previous.max(now.saturating_add(wait))
    }
}

/// A bucket's `last_scheduled_at` once it moved to `now`: kept only while it lies ahead.
#[inline]
pub(crate) fn still_ahead(latest: Timestamp, now: Timestamp) -> Timestamp {
    if latest > now {
        latest
    } else {
        0
    }
}

/// Calendar periods for a window algorithm whose per-key state is `S`
/// ([`crate::Policy::with_calendar`]), implemented by `crate::calendar_policy`: a trait here,
/// generic over the state, so that the algorithms never import the calendar module, which
/// imports them. Same contracts as the [`Algorithm`] methods they stand in for.
pub(crate) trait WindowCalendar<S>: fmt::Debug + Send + Sync + 'static {
    fn decide(&self, s: &mut S, now: Timestamp, cost: u64, consume: bool) -> Decision;
    fn reserve(&self, s: &mut S, now: Timestamp, cost: u64, wait: Micros) -> Option<Reservation>;
    fn settle(
        &self,
        s: &mut S,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision;
    /// The implementation, for `Policy::calendar`.
    fn as_any(&self) -> &dyn std::any::Any;
    /// The same calendar quota (zone, unit, first weekday, algorithm, limit) as `other`.
    fn same(&self, other: &dyn std::any::Any) -> bool;
}

/// A window's calendar, shared by the policy's clones.
#[derive(Debug)]
pub(crate) struct CalendarRef<S>(pub(crate) std::sync::Arc<dyn WindowCalendar<S>>);

impl<S: 'static> Clone for CalendarRef<S> {
    fn clone(&self) -> Self {
        Self(std::sync::Arc::clone(&self.0))
    }
}

impl<S: 'static> PartialEq for CalendarRef<S> {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0.same(other.0.as_any())
    }
}

/// `Ok(())` when `cost <= capacity`, else [`CheckError::InsufficientCapacity`].
#[inline]
pub(crate) fn validate_cost(cost: u64, capacity: u64) -> Result<(), CheckError> {
    if cost > capacity {
        Err(CheckError::InsufficientCapacity { cost, capacity })
    } else {
        Ok(())
    }
}
