//! Time as the algorithms see it: [`Timestamp`] is `u64` microseconds since the Unix epoch.
//!
//! Algorithms never read a clock; the caller passes `now`. Microseconds (about 1.8 x 10^15 in
//! 2026) stay below 2^53, so the same values are exact in Redis Lua scripts, whose numbers are
//! doubles. Nanoseconds since the epoch would not be.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Microseconds since the Unix epoch (1970-01-01T00:00:00Z).
pub type Timestamp = u64;

/// A span of time in microseconds.
pub type Micros = u64;

/// Microseconds in one second.
pub const MICROS_PER_SECOND: Micros = 1_000_000;

/// A source of [`Timestamp`]s.
///
/// Implementations must be cheap and thread-safe; the stores call `now` once per decision.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in microseconds since the Unix epoch.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock (`SystemTime`), in microseconds since the Unix epoch.
///
/// A reading before the epoch (a badly set clock) is reported as 0; the algorithms then treat it
/// as "no time passed" for every key that has state.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    fn now(&self) -> Timestamp {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros().min(u128::from(u64::MAX)) as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: for tests, documentation and `floodgate simulate`.
///
/// Clones share one time, so a test can hold one handle and give another to a store.
///
/// ```
/// use floodgate_core::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// let shared = clock.clone();
/// clock.advance(500);
/// assert_eq!(shared.now(), 1_500);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start` microseconds since the epoch.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Moves the clock forward by `micros` (saturating at `u64::MAX`).
    pub fn advance(&self, micros: Micros) {
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(micros))
            });
    }

    /// Sets the clock to `now`, which may be earlier than the current reading (to test stale
    /// readings).
    pub fn set(&self, now: Timestamp) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_after_2020() {
        // 2020-01-01T00:00:00Z in microseconds.
        assert!(SystemClock.now() > 1_577_836_800_000_000);
    }

    #[test]
    fn manual_clock_set_can_go_backwards() {
        let c = ManualClock::new(10);
        c.set(3);
        assert_eq!(c.now(), 3);
        c.advance(u64::MAX);
        assert_eq!(c.now(), u64::MAX);
    }
}
