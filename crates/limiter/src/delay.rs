//! The delay mode's bookkeeping ([`RateLimiter::admit`](crate::RateLimiter::admit)): how many
//! requests hold a slot, and the timer they wait on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{Clock, Micros, Timestamp};

/// Default of [`RateLimiter::with_max_delayed`](crate::RateLimiter::with_max_delayed): 1,024
/// requests held at once.
pub const DEFAULT_MAX_DELAYED: usize = 1024;

/// How held requests wait for their slot.
#[derive(Debug, Clone)]
pub(crate) enum DelayTimer {
    /// `tokio::time::sleep` for the wait (the real clock).
    Tokio,
    /// Until this clock reads the scheduled time, looked at every [`CLOCK_POLL`].
    Clock(Arc<dyn Clock>),
}

/// How often a [`DelayTimer::Clock`] is read.
const CLOCK_POLL: Duration = Duration::from_millis(5);

/// The delay mode of one limiter and its clones: at most `max` requests hold a slot at once.
#[derive(Debug)]
pub(crate) struct Delays {
    pub(crate) max: usize,
    /// Slots taken: requests being decided in the delay mode or held.
    slots: AtomicUsize,
    /// Requests held now (waiting for their scheduled time).
    holding: AtomicUsize,
    pub(crate) timer: DelayTimer,
}

impl Delays {
    pub(crate) fn new(max: usize, timer: DelayTimer) -> Self {
        Self {
            max,
            slots: AtomicUsize::new(0),
            holding: AtomicUsize::new(0),
            timer,
        }
    }

    pub(crate) fn holding(&self) -> usize {
        self.holding.load(Ordering::Relaxed)
    }

    /// A slot, unless `max` are taken.
    pub(crate) fn take(self: &Arc<Self>) -> Option<DelaySlot> {
        self.slots
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| DelaySlot {
                delays: Arc::clone(self),
                holding: false,
            })
    }
}

/// One taken slot of [`Delays`], given back on drop.
#[derive(Debug)]
pub(crate) struct DelaySlot {
    delays: Arc<Delays>,
    /// Counted in `holding` and the `floodgate_requests_waiting` gauge.
    holding: bool,
}

impl DelaySlot {
    pub(crate) fn hold(&mut self) {
        self.holding = true;
        self.delays.holding.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("floodgate_requests_waiting").increment(1.0);
    }
}

impl Drop for DelaySlot {
    fn drop(&mut self) {
        if self.holding {
            self.delays.holding.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("floodgate_requests_waiting").decrement(1.0);
        }
        self.delays.slots.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Adds 1 to `floodgate_requests_delayed_total{outcome}`.
pub(crate) fn count_delayed(outcome: &'static str) {
    metrics::counter!("floodgate_requests_delayed_total", "outcome" => outcome).increment(1);
}

impl DelayTimer {
    /// Waits until a reservation granted with `wait` microseconds to go, scheduled at
    /// `scheduled` (when known), may be used: `wait` on tokio's timer, or until the clock reads
    /// the scheduled time.
    pub(crate) async fn wait(&self, wait: Micros, scheduled: Option<Timestamp>) {
        match self {
            DelayTimer::Tokio => tokio::time::sleep(Duration::from_micros(wait)).await,
            DelayTimer::Clock(clock) => {
                let until = scheduled.unwrap_or_else(|| clock.now().saturating_add(wait));
                while clock.now() < until {
                    tokio::time::sleep(CLOCK_POLL).await;
                }
            }
        }
    }
}
