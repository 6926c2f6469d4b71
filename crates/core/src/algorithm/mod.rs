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

use crate::decision::{Decision, Reservation};
use crate::error::{CheckError, QuotaError};
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

pub(crate) mod base;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub(crate) use base::validate_cost;
pub use base::{Algorithm, AlgorithmKind};
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use token_bucket::{TokenBucket, TokenBucketState};

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

#[cfg(test)]
mod settle_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
