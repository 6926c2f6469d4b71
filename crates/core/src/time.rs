//! Time as the algorithms see it: [`Timestamp`] is `u64` microseconds since the Unix epoch.
//!
//! Algorithms never read a clock; the caller passes `now`. [`SystemClock`] is monotonic within a
//! process, anchored once to the wall clock. Microseconds (about 1.8 x 10^15 in
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

/// The system clock as a monotonic source anchored once to the wall clock: microseconds since
/// the Unix epoch that never go backwards within a process.
///
/// The first reading in a process (of any `SystemClock`) takes the wall clock (`SystemTime`)
/// and the monotonic clock (`Instant`) together; every reading is then that wall-clock time
/// plus the monotonic time elapsed since. So a wall clock stepped back (by NTP, an operator or a
/// virtual machine's resume) cannot move a decision's time backwards inside one process, and
/// the readings stay microseconds since the Unix epoch, comparable with the Redis server's
/// `TIME` and with other processes. The price: a step of the wall clock after the anchor (either
/// way) is not followed until the process restarts; NTP's gradual slewing is, since the
/// monotonic clock is slewed alike.
///
/// A wall clock before the epoch at the anchor (a badly set clock) anchors at 0; the algorithms
/// then treat such readings as "no time passed" for every key that has state.
///
/// ```
/// use floodgate_core::{Clock, SystemClock};
/// let (a, b) = (SystemClock.now(), SystemClock.now());
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The process's anchor: a monotonic instant and the wall-clock time read with it.
static ANCHOR: std::sync::OnceLock<(std::time::Instant, Timestamp)> = std::sync::OnceLock::new();

impl SystemClock {
    /// The wall clock (`SystemTime`) in microseconds since the Unix epoch, 0 before it. Used
    /// once, for the anchor.
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    fn wall() -> Timestamp {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros().min(u128::from(u64::MAX)) as u64)
            .unwrap_or(0)
    }

    /// The wall-clock time this process's readings are anchored to, in microseconds since the
    /// Unix epoch (taken at the first reading).
    pub fn anchor() -> Timestamp {
        Self::anchored().1
    }

    #[allow(clippy::disallowed_methods)] // the monotonic clock, read with the wall clock once
    fn anchored() -> (std::time::Instant, Timestamp) {
        *ANCHOR.get_or_init(|| (std::time::Instant::now(), Self::wall()))
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the monotonic clock: this is the clock module
    fn now(&self) -> Timestamp {
        let (instant, wall) = Self::anchored();
        let elapsed = std::time::Instant::now().saturating_duration_since(instant);
        wall.saturating_add(elapsed.as_micros().min(u128::from(u64::MAX)) as u64)
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

    /// Issue 17: readings come from the monotonic clock after one wall-clock anchor, so they
    /// never decrease, and stay close to the wall clock they were anchored to.
    #[test]
    fn system_clock_is_monotonic_and_anchored_to_the_wall_clock() {
        let mut last = SystemClock.now();
        assert!(last >= SystemClock::anchor());
        for _ in 0..100_000 {
            let t = SystemClock.now();
            assert!(t >= last, "{t} < {last}");
            last = t;
        }
        // Within a minute of the wall clock (the test process has not run that long, and the
        // machine's clock is not stepped while it runs).
        assert!(last.abs_diff(SystemClock::wall()) < 60_000_000);
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
