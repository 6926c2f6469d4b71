//! How the client waits: the [`Sleeper`] it is given and tokio's by default.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use floodgate_core::Micros;

/// Sleeps for the client: tokio's timer by default ([`TokioSleeper`]). Tests on a manual
/// clock give one that advances the clocks instead.
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// Waits `micros` microseconds.
    fn sleep(&self, micros: Micros) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// [`Sleeper`] on `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, micros: Micros) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(Duration::from_micros(micros)))
    }
}

/// A `Duration` in whole microseconds, saturating.
pub(crate) fn micros_of(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
