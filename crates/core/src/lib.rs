//! # floodgate-core
//!
//! Exact, deterministic rate-limiting algorithms with one integer specification shared by every
//! store: fixed window, sliding log, sliding window counter, token bucket, leaky bucket (as a
//! meter) and GCRA. No I/O, no clock reads, no floating point in any decision.
//!
//! - Time is [`Timestamp`]: `u64` microseconds since the Unix epoch, passed in by the caller.
//!   [`ManualClock`] drives tests and simulations; [`SystemClock`] is the system clock, monotonic
//!   within a process and anchored once to the wall clock.
//! - A [`Quota`] is `limit` units per `period` with an optional `burst`, validated so that every
//!   computation is exact (below 2^53, the integer limit of the Redis Lua scripts).
//! - Each algorithm implements [`Algorithm`]: a pure function of `(state, now, cost)` giving a
//!   [`Decision`] and, when admitted, the next state. [`Policy`] picks one at run time.
//! - A request whose cost exceeds what the policy can ever admit is
//!   [`CheckError::InsufficientCapacity`], never a silent forever-deny.
//!
//! ```
//! use floodgate_core::{Algorithm, Clock, ManualClock, Quota, TokenBucket};
//!
//! let clock = ManualClock::new(1_700_000_000_000_000);
//! let bucket = TokenBucket::new("10/10s".parse::<Quota>().unwrap()).unwrap();
//! let mut state = bucket.initial_state();
//! for _ in 0..10 {
//!     assert!(bucket.check(&mut state, clock.now(), 1).unwrap().allowed);
//! }
//! let denied = bucket.check(&mut state, clock.now(), 1).unwrap();
//! assert!(!denied.allowed);
//! assert_eq!(denied.retry_after, Some(1_000_000)); // one token per second
//! clock.advance(1_000_000);
//! assert!(bucket.check(&mut state, clock.now(), 1).unwrap().allowed);
//! ```
//!
//! The formulas, rounding directions and bounds of each algorithm are written down in
//! `docs/spec/` of the repository.

pub mod algorithm;
pub mod calendar;
mod calendar_policy;
pub mod decision;
mod div;
pub mod error;
pub mod fast_clock;
pub mod quota;
pub mod time;

pub use algorithm::{
    Algorithm, AlgorithmKind, FixedWindow, FixedWindowState, Gcra, GcraState, LeakyBucket,
    LeakyBucketState, Policy, SlidingLog, SlidingLogState, SlidingWindow, SlidingWindowState,
    State, TokenBucket, TokenBucketState,
};
pub use decision::{Decision, Reservation};
pub use error::{CheckError, QuotaError};
pub use fast_clock::{CoarseClock, QuantaClock};
pub use quota::Quota;
pub use time::{Clock, ManualClock, Micros, SystemClock, Timestamp, MICROS_PER_SECOND};
