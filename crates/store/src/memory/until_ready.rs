//! Waiting in process: [`KeyedLimiter::until_ready`] and [`KeyedLimiter::until_n_ready`], the
//! counterparts of governor's methods of the same names (feature `tokio`).
//!
//! Each round is one check; a denial sleeps (tokio's timer) for the decision's `retry_after`
//! plus an optional [`Jitter`], then checks again. As in governor the units are consumed only
//! when the check admits them, so a waiting task holds nothing and a task that is dropped while
//! it sleeps gives nothing back because it took nothing. Time is the store's clock: with a
//! `ManualClock` nothing advances it while tokio sleeps, so use these methods with the system
//! clock (the default).

use std::time::Duration;

use floodgate_core::{Decision, Micros};

use super::keyed::KeyedLimiter;
use crate::StoreError;

/// A random addition to each wait, so that tasks waiting on the same key do not all wake and
/// check at the same instant (a thundering herd): uniform in `[min, min + interval]`
/// microseconds (governor's `Jitter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Jitter {
    min: Micros,
    interval: Micros,
}

impl Jitter {
    /// No jitter: wake exactly at `retry_after`.
    pub const NONE: Jitter = Jitter {
        min: 0,
        interval: 0,
    };

    /// At least `min` and at most `min + interval` added to each wait.
    pub fn new(min: Duration, interval: Duration) -> Self {
        Self {
            min: micros(min),
            interval: micros(interval),
        }
    }

    /// Up to `max` added to each wait.
    pub fn up_to(max: Duration) -> Self {
        Self::new(Duration::ZERO, max)
    }

    /// One sample, in microseconds.
    fn sample(self) -> Micros {
        self.min.saturating_add(fastrand::u64(0..=self.interval))
    }
}

fn micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl KeyedLimiter {
    /// Waits until one unit for `key` is admitted and consumes it; returns the admitting
    /// decision. See [`KeyedLimiter::until_n_ready_with_jitter`].
    ///
    /// # Errors
    /// As [`KeyedLimiter::until_n_ready_with_jitter`] (never for a cost of 1 on a valid policy).
    pub async fn until_ready(&self, key: &str) -> Result<Decision, StoreError> {
        self.until_n_ready_with_jitter(key, 1, Jitter::NONE).await
    }

    /// [`KeyedLimiter::until_ready`] with `jitter` added to every wait.
    ///
    /// # Errors
    /// As [`KeyedLimiter::until_n_ready_with_jitter`].
    pub async fn until_ready_with_jitter(
        &self,
        key: &str,
        jitter: Jitter,
    ) -> Result<Decision, StoreError> {
        self.until_n_ready_with_jitter(key, 1, jitter).await
    }

    /// Waits until `n` units for `key` are admitted and consumes them.
    ///
    /// # Errors
    /// As [`KeyedLimiter::until_n_ready_with_jitter`].
    pub async fn until_n_ready(&self, key: &str, n: u64) -> Result<Decision, StoreError> {
        self.until_n_ready_with_jitter(key, n, Jitter::NONE).await
    }

    /// Waits until `n` units for `key` are admitted and consumes them: checks, and while
    /// denied sleeps the decision's `retry_after` (microseconds) plus one sample of `jitter`,
    /// then checks again. Returns the admitting decision. A store that is full for a new key
    /// is waited out the same way (its denial carries `full_retry_after`).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] at once when `n` exceeds the policy's capacity
    /// (it could never be admitted: waiting would never end).
    pub async fn until_n_ready_with_jitter(
        &self,
        key: &str,
        n: u64,
        jitter: Jitter,
    ) -> Result<Decision, StoreError> {
        loop {
            let decision = self.check(key, n)?;
            if decision.allowed {
                return Ok(decision);
            }
            // A denial always says when to retry; at least 1 µs, so the loop always sleeps.
            let wait = decision
                .retry_after
                .unwrap_or(1)
                .max(1)
                .saturating_add(jitter.sample());
            tokio::time::sleep(Duration::from_micros(wait)).await;
        }
    }
}

#[cfg(test)]
mod tests;
