//! The six counting algorithms, each a pure function of `(state, now, cost)`.
//!
//! Every algorithm implements [`Algorithm`]: it is built from a [`Quota`] (validated so that all
//! arithmetic is exact), starts a key from [`Algorithm::initial_state`], and answers with
//! [`Algorithm::decide`]. The formulas are specified once in `docs/spec/<algorithm>.md`; the Redis
//! scripts implement the same formulas.
//!
//! | algorithm | state | bound on admitted units in any interval of length `t` |
//! |---|---|---|
//! | [`FixedWindow`] | window start, count | up to `2 x limit` across a window edge |
//! | [`SlidingLog`] | one entry per admitted timestamp | at most `limit` in any `period` (exact) |
//! | [`SlidingWindow`] | window start, count, previous count | close to `limit`, bounded excess at edges |
//! | [`TokenBucket`] | tokens, last refill | `burst + t x rate` |
//! | [`LeakyBucket`] | level, last leak | `burst + t x rate` |
//! | [`Gcra`] | theoretical arrival time | `burst + t x rate` |
//!
//! [`Policy`] and [`State`] wrap the six behind one closed enum for stores and services that pick
//! the algorithm at run time.

use std::fmt;
use std::str::FromStr;

use crate::decision::{Decision, Reservation};
use crate::error::{CheckError, QuotaError};
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use token_bucket::{TokenBucket, TokenBucketState};

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
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingLog`].
    SlidingLog,
    /// [`SlidingWindow`] (the sliding window counter).
    SlidingWindow,
    /// [`TokenBucket`].
    TokenBucket,
    /// [`LeakyBucket`] (as a meter).
    LeakyBucket,
    /// [`Gcra`].
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

macro_rules! dispatch {
    ($( $variant:ident => $alg:ident, $state:ident );* $(;)?) => {
        /// Any of the six algorithms, chosen at run time: what stores and the service hold.
        #[derive(Debug, Clone)]
        pub enum Policy {
            $(
                #[doc = concat!("[`", stringify!($alg), "`].")]
                $variant($alg),
            )*
        }

        /// The per-key state of any algorithm; pairs with [`Policy`].
        #[derive(Debug, Clone, PartialEq)]
        pub enum State {
            $(
                #[doc = concat!("[`", stringify!($state), "`].")]
                $variant($state),
            )*
        }

        impl Policy {
            /// Builds the `kind` algorithm for `quota`.
            ///
            /// # Errors
            /// As [`Algorithm::new`].
            pub fn new(kind: AlgorithmKind, quota: Quota) -> Result<Self, QuotaError> {
                Ok(match kind {
                    $( AlgorithmKind::$variant => Policy::$variant($alg::new(quota)?), )*
                })
            }

            /// Which algorithm this is.
            pub fn kind(&self) -> AlgorithmKind {
                match self {
                    $( Policy::$variant(_) => AlgorithmKind::$variant, )*
                }
            }

            /// The quota enforced.
            pub fn quota(&self) -> &Quota {
                match self {
                    $( Policy::$variant(a) => a.quota(), )*
                }
            }

            /// See [`Algorithm::capacity`].
            #[inline]
            pub fn capacity(&self) -> u64 {
                match self {
                    $( Policy::$variant(a) => a.capacity(), )*
                }
            }

            /// See [`Algorithm::initial_state`].
            pub fn initial_state(&self) -> State {
                match self {
                    $( Policy::$variant(a) => State::$variant(a.initial_state()), )*
                }
            }

            /// See [`Algorithm::max_wait`].
            pub fn max_wait(&self) -> Micros {
                match self {
                    $( Policy::$variant(a) => a.max_wait(), )*
                }
            }

            /// See [`Algorithm::decide_reserve`]; a `state` of another algorithm is replaced as
            /// in [`Policy::decide`].
            pub fn decide_reserve(&self, state: &mut State, now: Timestamp, cost: u64, max_wait: Micros) -> Reservation {
                match self {
                    $( Policy::$variant(a) => {
                        if !matches!(state, State::$variant(_)) {
                            *state = State::$variant(a.initial_state());
                        }
                        match state {
                            State::$variant(s) => a.decide_reserve(s, now, cost, max_wait),
                            _ => unreachable!("state was just replaced"),
                        }
                    } )*
                }
            }

            /// See [`Algorithm::reserve_at`]; a `state` of another algorithm is replaced as in
            /// [`Policy::decide`].
            pub fn reserve_at(&self, state: &mut State, now: Timestamp, cost: u64, wait: Micros) -> Option<Reservation> {
                match self {
                    $( Policy::$variant(a) => {
                        if !matches!(state, State::$variant(_)) {
                            *state = State::$variant(a.initial_state());
                        }
                        match state {
                            State::$variant(s) => a.reserve_at(s, now, cost, wait),
                            _ => unreachable!("state was just replaced"),
                        }
                    } )*
                }
            }

            /// See [`Algorithm::decide_settle`]; a `state` of another algorithm is replaced as
            /// in [`Policy::decide`].
            pub fn decide_settle(&self, state: &mut State, now: Timestamp, scheduled_at: Timestamp, reserved: u64, actual: u64) -> Decision {
                match self {
                    $( Policy::$variant(a) => {
                        if !matches!(state, State::$variant(_)) {
                            *state = State::$variant(a.initial_state());
                        }
                        match state {
                            State::$variant(s) => a.decide_settle(s, now, scheduled_at, reserved, actual),
                            _ => unreachable!("state was just replaced"),
                        }
                    } )*
                }
            }

            /// See [`Algorithm::decide`]. A `state` of another algorithm (left over after a
            /// configuration change) is replaced by this algorithm's initial state first.
            #[inline]
            pub fn decide(&self, state: &mut State, now: Timestamp, cost: u64, consume: bool) -> Decision {
                match self {
                    $( Policy::$variant(a) => {
                        if !matches!(state, State::$variant(_)) {
                            *state = State::$variant(a.initial_state());
                        }
                        match state {
                            State::$variant(s) => a.decide(s, now, cost, consume),
                            _ => unreachable!("state was just replaced"),
                        }
                    } )*
                }
            }
        }
    };
}

dispatch! {
    FixedWindow => FixedWindow, FixedWindowState;
    SlidingLog => SlidingLog, SlidingLogState;
    SlidingWindow => SlidingWindow, SlidingWindowState;
    TokenBucket => TokenBucket, TokenBucketState;
    LeakyBucket => LeakyBucket, LeakyBucketState;
    Gcra => Gcra, GcraState;
}

impl Policy {
    /// Builds the `kind` algorithm for the quota text `quota` (`"100/s"`, `"10/10s"`,
    /// `"600/min burst 200"`: see [`Quota`]'s `FromStr`).
    ///
    /// # Errors
    /// [`QuotaError`] when the text is not a quota or the algorithm refuses it.
    ///
    /// ```
    /// use floodgate_core::{AlgorithmKind, Policy};
    /// let policy = Policy::parse(AlgorithmKind::Gcra, "2/s burst 5").unwrap();
    /// assert_eq!(policy.capacity(), 5);
    /// assert!(Policy::parse(AlgorithmKind::Gcra, "2 per second").is_err());
    /// ```
    pub fn parse(kind: AlgorithmKind, quota: &str) -> Result<Self, QuotaError> {
        Self::new(kind, quota.parse()?)
    }

    /// See [`Algorithm::check`].
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`; `state` is unchanged.
    #[inline]
    pub fn check(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        self.validate_cost(cost)?;
        Ok(self.decide(state, now, cost, cost > 0))
    }

    /// See [`Algorithm::peek`].
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`.
    pub fn peek(&self, state: &State, now: Timestamp, cost: u64) -> Result<Decision, CheckError> {
        self.validate_cost(cost)?;
        Ok(self.decide(&mut state.clone(), now, cost, false))
    }

    /// See [`Algorithm::validate_cost`].
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`.
    #[inline]
    pub fn validate_cost(&self, cost: u64) -> Result<(), CheckError> {
        validate_cost(cost, self.capacity())
    }

    /// See [`Algorithm::reserve`].
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `cost > capacity()`; `state` is unchanged.
    pub fn reserve(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
        max_wait: Micros,
    ) -> Result<Reservation, CheckError> {
        self.validate_cost(cost)?;
        Ok(self.decide_reserve(state, now, cost, max_wait))
    }

    /// See [`Algorithm::settle`].
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] when `reserved > capacity()`; `state` is unchanged.
    pub fn settle(
        &self,
        state: &mut State,
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

/// Calendar periods for the two window algorithms (`Policy::with_calendar`), implemented by
/// `crate::calendar_policy`: a trait here so that the algorithms never import the calendar
/// module, which imports them. Same contracts as the [`Algorithm`] methods they stand in for.
pub(crate) trait CalendarWindows: fmt::Debug + Send + Sync + 'static {
    fn decide_fixed(
        &self,
        s: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision;
    fn decide_sliding(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision;
    fn reserve_fixed(
        &self,
        s: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation>;
    fn reserve_sliding(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation>;
    fn settle_fixed(
        &self,
        s: &mut FixedWindowState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision;
    fn settle_sliding(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision;
    /// The implementation, for `Policy::calendar`.
    fn as_any(&self) -> &dyn std::any::Any;
    /// The same calendar quota (zone, unit, first weekday, algorithm, limit).
    fn same(&self, other: &dyn CalendarWindows) -> bool;
}

/// A window algorithm's calendar, shared by the policy's clones.
#[derive(Debug, Clone)]
pub(crate) struct CalendarRef(pub(crate) std::sync::Arc<dyn CalendarWindows>);

impl PartialEq for CalendarRef {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0.same(&*other.0)
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

#[cfg(test)]
mod settle_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
