//! The answer to one check.

use crate::time::{Micros, Timestamp};

/// The outcome of a check or peek: whether the request is admitted and what the client may do
/// next. All times are microseconds relative to the `now` the check was made at.
///
/// Field names match the JSON API, the Redis scripts' return values and the `RateLimit` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// `true` when the request was admitted (and, for a check, its cost consumed).
    pub allowed: bool,
    /// Units the policy admits at once from a fresh state: the burst for token bucket, leaky
    /// bucket and GCRA, the limit for the window algorithms.
    pub limit: u64,
    /// Units that could be admitted right now, after this decision. A denied request consumed
    /// nothing, so on a denial this is what is left (less than the denied cost, possibly 0).
    /// Never more than `limit`.
    pub remaining: u64,
    /// Microseconds until the key holds no consumption at all (back to a fresh state); also the
    /// time-to-live of the key's state. 0 when the key is already fresh.
    pub reset_after: Micros,
    /// Microseconds until a request of this cost would be admitted; `None` when admitted.
    ///
    /// Exact: the same request made at `now + retry_after - 1` is denied and at
    /// `now + retry_after` is admitted, provided nothing else consumed in between.
    pub retry_after: Option<Micros>,
}

impl Decision {
    /// Whole seconds to send in a `Retry-After` header: `retry_after` rounded up, at least 1.
    /// `None` when the request was admitted.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|us| us.div_ceil(1_000_000).max(1))
    }

    /// Whole seconds until reset, rounded up, for the `RateLimit` header's `t` parameter.
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after.div_ceil(1_000_000)
    }
}

/// The answer to a reservation: a check that may wait (see `docs/spec/reservations.md`).
///
/// A reservation of `cost` units with a wait bound `max_wait` is granted when the units would be
/// admitted within `max_wait` microseconds: they are consumed at once for their scheduled time,
/// and the caller uses them `wait` microseconds later. Beyond `max_wait` it is denied exactly
/// as a check is, consuming nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reservation {
    /// The decision. `allowed` when the units were reserved (for now or for later); then
    /// `remaining` and `reset_after` describe the state after the reservation (`remaining` is 0
    /// while later units are reserved) and `retry_after` is `None`. When denied it is exactly
    /// the decision of a check.
    pub decision: Decision,
    /// When granted: microseconds from the effective `now` until the units may be used (0: at
    /// once). `None` when denied.
    pub wait: Option<Micros>,
    /// When granted: the scheduled time, effective `now + wait`, microseconds since the Unix
    /// epoch. A settle of this reservation passes it back. `None` when denied.
    pub scheduled_at: Option<Timestamp>,
}

impl Reservation {
    /// A denied reservation: the check's `decision`, nothing reserved.
    pub fn denied(decision: Decision) -> Self {
        Self {
            decision,
            wait: None,
            scheduled_at: None,
        }
    }

    /// A granted reservation: `decision` after it, the units usable `wait` microseconds after
    /// the effective `now`.
    pub(crate) fn granted_at(decision: Decision, now: Timestamp, wait: Micros) -> Self {
        Self {
            decision,
            wait: Some(wait),
            scheduled_at: Some(now.saturating_add(wait)),
        }
    }

    /// Whether the units were reserved.
    pub fn granted(&self) -> bool {
        self.decision.allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 1,
            remaining: 0,
            reset_after: retry,
            retry_after: Some(retry),
        }
    }

    #[test]
    fn retry_after_secs_rounds_up_and_is_at_least_one() {
        assert_eq!(denied(0).retry_after_secs(), Some(1));
        assert_eq!(denied(1).retry_after_secs(), Some(1));
        assert_eq!(denied(1_000_000).retry_after_secs(), Some(1));
        assert_eq!(denied(1_000_001).retry_after_secs(), Some(2));
        assert_eq!(denied(1_000_001).reset_after_secs(), 2);
    }
}
