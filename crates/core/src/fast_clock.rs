//! Clocks cheaper to read than [`SystemClock`]: [`QuantaClock`] (the CPU's time-stamp counter)
//! and [`CoarseClock`] (one relaxed atomic load, refreshed by a background thread).
//!
//! A rate-limit check is a clock read plus a few integer operations, so the clock read is most
//! of its cost: on the reference machine (2 vCPU AMD EPYC Zen 4, clocksource `tsc`)
//! `SystemTime::now` costs about 23 ns, the time-stamp counter about 10 ns and a coarse clock
//! about 1 ns (measured by `cargo bench -p floodgate-core --bench clock`).
//!
//! Both clocks report [`Timestamp`]s (microseconds since the Unix epoch) *anchored* once to the
//! wall clock when they are created and then advanced by a monotonic source, so they never jump
//! backwards when the wall clock is stepped, and they may drift from it by as much as the system's
//! clock adjustments over the life of the process (NTP slews at most 500 ppm, about 43 s a day in
//! the worst case; typically far less).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::time::{Clock, SystemClock, Timestamp};

/// The time-stamp counter (via the `quanta` crate), scaled to microseconds and anchored to the
/// wall clock at creation.
///
/// About 2.4x cheaper to read than [`SystemClock`] on x86-64 with a TSC clocksource (it skips
/// the vDSO's sequence lock and conversion). Where no usable TSC exists, `quanta` falls back to
/// the OS monotonic clock, and it is as fast as that. Exact to the microsecond; monotonic.
///
/// ```
/// use floodgate_core::{Clock, QuantaClock, SystemClock};
/// let clock = QuantaClock::new();
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// assert!(a.abs_diff(SystemClock.now()) < 1_000_000); // anchored to the wall clock
/// ```
#[derive(Clone)]
pub struct QuantaClock {
    clock: quanta::Clock,
    /// `clock.raw()` at creation.
    start_raw: u64,
    /// Wall-clock microseconds since the epoch at creation.
    start_epoch: Timestamp,
    /// Microseconds per raw unit as a 0.64 fixed-point fraction, derived once from quanta's own
    /// calibration: a reading is then one multiply (the high half of a 64 x 64-bit product)
    /// instead of quanta's scaling to nanoseconds and a division by 1,000. `None` for a raw
    /// unit longer than a microsecond (no real counter), which takes quanta's path.
    us_per_raw: Option<u64>,
}

/// Raw units over which [`QuantaClock`] measures quanta's scale: large enough that the
/// derived rate is exact to about one part in 10^15.
const CALIBRATION_SPAN: u64 = 1 << 52;

impl QuantaClock {
    /// Calibrates the counter (the first clock in a process takes a few milliseconds for that;
    /// later ones reuse the calibration) and anchors it to [`SystemClock`].
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let start_raw = clock.raw();
        let start_epoch = SystemClock.now();
        // quanta's nanoseconds for CALIBRATION_SPAN raw units, as microseconds per raw unit
        // scaled by 2^64.
        let nanos = clock.delta_as_nanos(0, CALIBRATION_SPAN);
        let scaled = (u128::from(nanos) << 64) / (1_000 * u128::from(CALIBRATION_SPAN));
        Self {
            clock,
            start_raw,
            start_epoch,
            us_per_raw: u64::try_from(scaled).ok().filter(|&m| m > 0),
        }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for QuantaClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuantaClock")
            .field("start_epoch", &self.start_epoch)
            .finish_non_exhaustive()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Timestamp {
        // A raw reading before the anchor counts as the anchor, so a counter that is not
        // perfectly synchronised between cores never yields a time before it (quanta's
        // delta_as_nanos does the same).
        let raw = self.clock.raw().saturating_sub(self.start_raw);
        let elapsed = match self.us_per_raw {
            Some(m) => ((u128::from(raw) * u128::from(m)) >> 64) as u64,
            None => self.clock.delta_as_nanos(0, raw) / 1_000,
        };
        self.start_epoch + elapsed
    }
}

/// A clock read with one relaxed atomic load (about 1 ns), refreshed every `resolution` by a
/// background thread that reads a [`QuantaClock`].
///
/// **Trade-off:** a reading may be up to `resolution` old (more if the refresh thread is not
/// scheduled in time on a saturated machine). The algorithms treat a stale reading as "no time
/// passed", so a coarse clock never admits more than the quota: it can only deny a request that
/// arrives up to `resolution` after the moment it would first have been admitted, and report
/// `retry_after`/`reset_after` up to `resolution` too long. With the default 1 ms resolution that
/// is invisible for quotas of a few requests per second or slower; choose [`QuantaClock`] for
/// quotas finer than about 1,000 per second per key.
///
/// Clones share one refresh thread. The thread holds only a weak reference and stops within
/// one `resolution` after the last clone is dropped.
///
/// ```
/// use std::time::Duration;
/// use floodgate_core::{Clock, CoarseClock, SystemClock};
/// let clock = CoarseClock::new(Duration::from_millis(1));
/// // Valid immediately: the first reading is taken before `new` returns.
/// assert!(clock.now().abs_diff(SystemClock.now()) < 1_000_000);
/// assert_eq!(clock.resolution(), Duration::from_millis(1));
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    shared: Arc<CoarseShared>,
}

/// The cached reading sits alone on its cache line so that readers on other cores are only
/// disturbed by the refresh itself.
#[repr(align(64))]
struct CoarseShared {
    now: AtomicU64,
    resolution: Duration,
}

impl CoarseClock {
    /// Starts a refresh thread updating the reading every `resolution` (at least 1 µs; 1 ms is
    /// a good default, see [`CoarseClock::default`]).
    ///
    /// # Panics
    /// When the operating system refuses to start a thread.
    pub fn new(resolution: Duration) -> Self {
        let resolution = resolution.max(Duration::from_micros(1));
        let source = QuantaClock::new();
        let shared = Arc::new(CoarseShared {
            now: AtomicU64::new(source.now()),
            resolution,
        });
        let weak: Weak<CoarseShared> = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("floodgate-coarse-clock".into())
            .spawn(move || loop {
                match weak.upgrade() {
                    Some(shared) => {
                        // fetch_max: a reading never goes backwards even if two refreshes race
                        // (they cannot today; this keeps the invariant obvious).
                        shared.now.fetch_max(source.now(), Ordering::Relaxed);
                    }
                    _ => return,
                }
                // park_timeout rather than sleep: the same wait, and the workspace reserves
                // thread::sleep for nothing (clippy.toml).
                std::thread::park_timeout(resolution);
            })
            .expect("failed to start the coarse clock's refresh thread");
        Self { shared }
    }

    /// How often the reading is refreshed.
    pub fn resolution(&self) -> Duration {
        self.shared.resolution
    }
}

impl Default for CoarseClock {
    /// A 1 ms resolution.
    fn default() -> Self {
        Self::new(Duration::from_millis(1))
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("resolution", &self.shared.resolution)
            .field("now", &self.now())
            .finish()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Timestamp {
        self.shared.now.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quanta_clock_is_monotonic_and_near_the_wall_clock() {
        let clock = QuantaClock::new();
        let mut last = clock.now();
        for _ in 0..10_000 {
            let t = clock.now();
            assert!(t >= last);
            last = t;
        }
        // Anchored at creation: the gap is the time since then plus the anchor's rounding.
        assert!(last.abs_diff(SystemClock.now()) < 1_000_000);
    }

    #[test]
    fn coarse_clock_advances_and_clones_share_it() {
        let clock = CoarseClock::new(Duration::from_micros(50));
        let other = clock.clone();
        let start = clock.now();
        // Busy-wait (bounded at 5 s of wall time, never a sleep) until the refresh thread has
        // run at least once more; on an idle machine that is about 50 us.
        let quanta = QuantaClock::new();
        let deadline = quanta.now() + 5_000_000;
        while other.now() == start && quanta.now() < deadline {
            std::hint::spin_loop();
        }
        assert!(
            other.now() > start,
            "the refresh thread never advanced the clock"
        );
        assert_eq!(other.resolution(), Duration::from_micros(50));
    }
}
