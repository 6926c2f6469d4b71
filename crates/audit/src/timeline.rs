//! Time for the HTTP probe: when to send, and what time a response came back.
//!
//! The probe never reads a clock itself. [`RealTime`] is the wall of the machine (monotonic
//! time since the probe began, waiting with tokio's timer); a test can pass its own
//! [`Timeline`] that moves a manual clock instead (e.g. `floodgate serve --manual-clock`'s
//! `POST /v1/debug/clock/advance`), so that window edges and `Retry-After` are probed without
//! waiting.

use std::future::Future;
use std::time::Duration;

/// Microseconds since the probe began, and a way to wait for a later one.
pub trait Timeline: Send + Sync {
    /// Microseconds since the probe began.
    fn now_us(&self) -> u64;
    /// Returns once [`Timeline::now_us`] is at least `t_us` (at once when it already is).
    fn wait_until(&self, t_us: u64) -> impl Future<Output = ()> + Send;
}

/// Real time: monotonic microseconds since [`RealTime::start`], waits on tokio's timer.
#[derive(Debug, Clone, Copy)]
pub struct RealTime {
    start: tokio::time::Instant,
}

impl RealTime {
    /// Starts the timeline now.
    pub fn start() -> Self {
        // The one place the audit reads the machine's clock: a monotonic instant, never the
        // wall clock (a clock step must not bend the measured intervals).
        Self {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Timeline for RealTime {
    fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn wait_until(&self, t_us: u64) -> impl Future<Output = ()> + Send {
        let at = self.start + Duration::from_micros(t_us);
        tokio::time::sleep_until(at)
    }
}
