//! Fixed window: one counter per key that resets at every window edge.
//!
//! Source: the classic fixed window counter, e.g. the "Pattern: Rate limiter" section of the
//! Redis `INCR` command documentation (`INCR` + `EXPIRE` per window). Time is cut into windows
//! `[k x period, (k + 1) x period)` counted from the Unix epoch, and each window admits `limit`
//! units. A request of `cost` units at `now` is admitted when
//!
//! ```text
//! window = now - now mod period
//! count' = (window == window_start) ? count : 0        cost <= limit - count'
//! ```
//!
//! Windows are aligned to multiples of `period` since the epoch, not to a key's first request:
//! every process and the Redis script then agree on the same edges from the clock alone, without
//! storing or exchanging a start time, and a state written by one store means the same thing to
//! every other. The price is the well-known edge burst: `limit` units at the end of one window
//! and `limit` more at the start of the next, so up to `2 x limit` in any interval of `period`.
//!
//! See `docs/spec/fixed_window.md` for every formula and bound.
//!
//! ```
//! use floodgate_core::{Algorithm, FixedWindow, Quota};
//! let window = FixedWindow::new("3/s".parse::<Quota>().unwrap()).unwrap();
//! let mut state = window.initial_state();
//! let t0 = 1_700_000_000_999_000; // 1 ms before a second boundary
//! for _ in 0..3 {
//!     assert!(window.check(&mut state, t0, 1).unwrap().allowed);
//! }
//! let denied = window.check(&mut state, t0, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(1_000)); // the next window opens in 1 ms
//! // ... and admits 3 more: the edge burst.
//! assert!(window.check(&mut state, t0 + 1_000, 3).unwrap().allowed);
//! ```

use crate::algorithm::base::{Algorithm, AlgorithmKind, CalendarRef};
use crate::decision::{Decision, Reservation};
use crate::div::Divisor;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

/// The fixed window counter prepared for one quota: `limit` units per aligned `period`
/// (`burst` is ignored).
#[derive(Debug, Clone, PartialEq)]
pub struct FixedWindow {
    quota: Quota,
    /// `period` as a multiply-and-shift divisor: `now mod period` without a hardware division.
    period_div: Divisor,
    /// Calendar periods of a time zone in place of epoch-aligned ones ([`crate::Policy::with_calendar`]).
    pub(crate) calendar: Option<CalendarRef<FixedWindowState>>,
}

/// Fixed window state of one key. The initial state is all zeros.
///
/// Field names are the Redis hash fields of the fixed window script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct FixedWindowState {
    /// Start of the window `count` belongs to, in microseconds since the Unix epoch; always a
    /// multiple of the period (0 for a fresh key).
    pub window_start: Timestamp,
    /// Units admitted in the window starting at `window_start` (`0 <= count <= 2 x limit`).
    /// Above `limit`, the window is closed and `count - limit` units are reserved in (or
    /// charged to) the next window (see `docs/spec/reservations.md`).
    pub count: u64,
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;
    const KIND: AlgorithmKind = AlgorithmKind::FixedWindow;

    /// Never fails: every value it computes is at most `limit` or `period`, both already bounded
    /// by [`Quota`].
    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self {
            quota,
            period_div: Divisor::new(quota.period()),
            calendar: None,
        })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> FixedWindowState {
        FixedWindowState::default()
    }

    // Always inlined so that a caller reading only `allowed` pays for nothing else.
    #[inline(always)]
    fn decide(
        &self,
        state: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        if let Some(calendar) = &self.calendar {
            return calendar.0.decide(state, now, cost, consume);
        }
        let (limit, period) = (self.quota.limit(), self.period_div.get());
        // A stale `now` (before the state's window) is read as the window's start: it must never
        // reopen an older window whose count we no longer know.
        let since = now.checked_sub(state.window_start);
        let (elapsed, window, count) = match since {
            Some(since) if since < period && self.period_div.divides(state.window_start) => {
                // The usual check: `now` lies in the state's (aligned) window, so its offset is
                // `since`, with no division, and the next check's state does not wait for one.
                (since, state.window_start, state.count)
            }
            _ => {
                let now = now.max(state.window_start);
                let elapsed = self.period_div.rem(now);
                let window = now - elapsed;
                let count = if window == state.window_start {
                    state.count
                } else if window == state.window_start.saturating_add(period) {
                    // what a closed window carried into this one
                    state.count.saturating_sub(limit)
                } else {
                    0
                };
                (elapsed, window, count)
            }
        };
        // `cost <= limit - count` rather than `count + cost <= limit`: no intermediate exceeds
        // `limit` (count can only exceed limit in a hand-made state; saturate then).
        let allowed = cost <= limit.saturating_sub(count);
        let count_after = if allowed && consume && cost > 0 {
            state.window_start = window;
            state.count = count + cost;
            state.count
        } else {
            count
        };
        let to_edge = period - elapsed;
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(count_after),
            reset_after: self.reset_after(count_after, to_edge),
            // The next window holds what this one carried over; the one after is empty.
            retry_after: (!allowed).then(|| {
                if count.saturating_sub(limit) + cost <= limit {
                    to_edge
                } else {
                    to_edge + period
                }
            }),
        }
    }

    fn max_wait(&self) -> Micros {
        if self.calendar.is_some() {
            return 0; // calendar periods: reservations only at once
        }
        self.period_div.get()
    }

    fn reserve_at(
        &self,
        state: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        if let Some(calendar) = &self.calendar {
            return calendar.0.reserve(state, now, cost, wait);
        }
        let (limit, period) = (self.quota.limit(), self.period_div.get());
        if wait > period {
            return None;
        }
        let now = now.max(state.window_start);
        let (window, count, to_edge) = self.window_at(state, now);
        if cost == 0 {
            return Some(Reservation::granted_at(
                self.standing(count, to_edge),
                now,
                wait,
            ));
        }
        let count = if wait < to_edge {
            // This window.
            if cost > limit.saturating_sub(count) {
                return None;
            }
            count + cost
        } else if wait < to_edge + period {
            // The next window: the units count there, and this window is closed (first come,
            // first served: a later request cannot take what is left here before they run).
            if count.saturating_sub(limit) + cost > limit {
                return None;
            }
            count.max(limit) + cost
        } else {
            return None;
        };
        *state = FixedWindowState {
            window_start: window,
            count,
        };
        Some(Reservation::granted_at(
            self.standing(count, to_edge),
            now,
            wait,
        ))
    }

    fn decide_settle(
        &self,
        state: &mut FixedWindowState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        if let Some(calendar) = &self.calendar {
            return calendar
                .0
                .settle(state, now, scheduled_at, reserved, actual);
        }
        let (limit, period) = (self.quota.limit(), self.period_div.get());
        let now = now.max(state.window_start);
        let (window, mut count, to_edge) = self.window_at(state, now);
        let reserved_window = scheduled_at - self.period_div.rem(scheduled_at);
        if actual <= reserved {
            let back = reserved - actual;
            if reserved_window == window && count <= limit {
                count -= back.min(count);
            } else if reserved_window == window.saturating_add(period) {
                count -= back.min(count.saturating_sub(limit));
            }
            // Else the window rolled (or was closed by a later reservation): nothing back.
        } else {
            // Charged unconditionally; beyond this window's limit it counts against the next
            // window, up to one window: the bounded debt.
            count = count.saturating_add(actual - reserved).min(2 * limit);
        }
        *state = FixedWindowState {
            window_start: window,
            count,
        };
        self.standing(count, to_edge)
    }
}

impl FixedWindow {
    /// The window `now` (at or after `window_start`) lies in, its count (what a closed
    /// previous window carried over, after a roll) and the microseconds to its end.
    fn window_at(&self, state: &FixedWindowState, now: Timestamp) -> (Timestamp, u64, Micros) {
        let (limit, period) = (self.quota.limit(), self.period_div.get());
        let elapsed = self.period_div.rem(now);
        let window = now - elapsed;
        let count = if window == state.window_start {
            state.count
        } else if window == state.window_start.saturating_add(period) {
            state.count.saturating_sub(limit)
        } else {
            0
        };
        (window, count, period - elapsed)
    }

    /// Microseconds until a window holding `count` units (`to_edge` from its end) is fresh.
    #[inline]
    fn reset_after(&self, count: u64, to_edge: Micros) -> Micros {
        if count > self.quota.limit() {
            to_edge + self.period_div.get()
        } else if count > 0 {
            to_edge
        } else {
            0
        }
    }

    /// The standing of a window holding `count` units: a cost-0 decision.
    fn standing(&self, count: u64, to_edge: Micros) -> Decision {
        let limit = self.quota.limit();
        Decision {
            allowed: true,
            limit,
            remaining: limit.saturating_sub(count),
            reset_after: self.reset_after(count, to_edge),
            retry_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::test_support::{
        assert_cost_above_capacity_changes_nothing, assert_remaining_and_reset_exact,
        assert_retry_after_exact, decision, xorshift, T0,
    };

    fn window(text: &str) -> FixedWindow {
        FixedWindow::new(text.parse().unwrap()).unwrap()
    }

    #[test]
    fn boundary_burst_admits_twice_the_limit() {
        let w = window("3/s");
        let mut s = w.initial_state();
        let late = T0 + 999_000;
        for remaining in [2, 1, 0] {
            assert_eq!(
                w.check(&mut s, late, 1).unwrap(),
                decision(3, true, remaining, 1_000, None)
            );
        }
        assert_eq!(
            w.check(&mut s, late, 1).unwrap(),
            decision(3, false, 0, 1_000, Some(1_000))
        );
        // 1 us before the edge: still the old window.
        assert_eq!(
            w.check(&mut s, T0 + 999_999, 1).unwrap(),
            decision(3, false, 0, 1, Some(1))
        );
        // At the edge: a fresh window.
        for remaining in [2, 1, 0] {
            assert_eq!(
                w.check(&mut s, T0 + 1_000_000, 1).unwrap(),
                decision(3, true, remaining, 1_000_000, None)
            );
        }
        assert_eq!(
            s,
            FixedWindowState {
                window_start: T0 + 1_000_000,
                count: 3
            }
        );
    }

    #[test]
    fn windows_are_aligned_to_the_epoch_not_to_the_first_request() {
        let w = window("3/10s");
        let mut s = w.initial_state();
        // T0 + 7 s lies in the window [T0, T0 + 10 s).
        let d = w.check(&mut s, T0 + 7_000_000, 1).unwrap();
        assert_eq!(d.reset_after, 3_000_000);
        assert_eq!(s.window_start, T0);
    }

    #[test]
    fn long_idle_starts_a_fresh_window() {
        let w = window("3/s");
        let mut s = w.initial_state();
        assert!(w.check(&mut s, T0, 3).unwrap().allowed);
        for idle in [86_400_000_000, 10 * 365 * 86_400_000_000] {
            let mut s2 = s;
            assert_eq!(
                w.check(&mut s2, T0 + idle + 5, 3).unwrap(),
                decision(3, true, 0, 999_995, None)
            );
            assert_eq!(s2.window_start, T0 + idle);
        }
    }

    #[test]
    fn backwards_time_never_reopens_an_older_window() {
        let w = window("3/s");
        let mut s = w.initial_state();
        assert!(w.check(&mut s, T0 + 1_000_000, 3).unwrap().allowed);
        let before = s;
        // 0.5 s earlier is the previous window; it is read as the state's window start.
        assert_eq!(
            w.check(&mut s, T0 + 500_000, 1).unwrap(),
            decision(3, false, 0, 1_000_000, Some(1_000_000))
        );
        assert_eq!(s, before);
    }

    #[test]
    fn cost_above_capacity_is_an_error_and_changes_nothing() {
        assert_cost_above_capacity_changes_nothing::<FixedWindow>(T0);
    }

    #[test]
    fn weighted_costs_and_peek() {
        let w = window("3/s");
        let mut s = w.initial_state();
        assert_eq!(
            w.check(&mut s, T0 + 100, 2).unwrap(),
            decision(3, true, 1, 999_900, None)
        );
        // Cost 2 does not fit in the 1 remaining; the denial reports the true remaining.
        assert_eq!(
            w.check(&mut s, T0 + 200, 2).unwrap(),
            decision(3, false, 1, 999_800, Some(999_800))
        );
        assert_eq!(
            w.peek(&s, T0 + 300, 1).unwrap(),
            decision(3, true, 1, 999_700, None)
        );
        assert_eq!(
            w.check(&mut s, T0 + 300, 0).unwrap(),
            decision(3, true, 1, 999_700, None)
        );
        assert_eq!(s.count, 2);
        // A peek on a fresh key reports the full limit and no reset.
        assert_eq!(
            w.peek(&w.initial_state(), T0, 3).unwrap(),
            decision(3, true, 3, 0, None)
        );
    }

    #[test]
    fn limit_one() {
        let w = window("1/min");
        let mut s = w.initial_state();
        let d = w.check(&mut s, T0 + 1, 1).unwrap();
        assert_eq!((d.allowed, d.limit, d.remaining), (true, 1, 0));
        let d = w.check(&mut s, T0 + 2, 1).unwrap();
        assert_eq!(d.retry_after, Some(60_000_000 - 2));
        assert!(w.check(&mut s, T0 + 60_000_000, 1).unwrap().allowed);
    }

    /// Brute force on small quotas: every denial's retry_after is the first microsecond at which
    /// the same request is admitted, and `remaining` is the largest admissible cost.
    #[test]
    fn retry_after_and_remaining_are_exact_by_brute_force() {
        for (limit, period) in [(1, 1), (1, 5), (3, 7), (4, 10)] {
            let w = FixedWindow::new(Quota::new(limit, period).unwrap()).unwrap();
            let mut s = w.initial_state();
            let mut rng = 0x2545_f491_4f6c_dd1d_u64;
            let mut now = 1_000;
            for _ in 0..2_000 {
                now += xorshift(&mut rng) % (period + 2);
                let cost = rng % (limit + 1);
                let before = s;
                let d = w.check(&mut s, now, cost).unwrap();
                assert_brute_force(&w, &before, now, cost, &d);
                if !d.allowed {
                    assert_eq!(s, before);
                }
            }
        }
    }

    fn assert_brute_force(
        w: &FixedWindow,
        before: &FixedWindowState,
        now: Timestamp,
        cost: u64,
        d: &Decision,
    ) {
        let ctx = format!("{before:?} now={now} cost={cost} -> {d:?}");
        if let Some(retry) = d.retry_after {
            assert_retry_after_exact(w, before, now, cost, retry, &ctx);
        }
        let mut after = *before;
        if d.allowed && cost > 0 {
            w.check(&mut after, now, cost).unwrap();
        }
        // reset_after: the first time the whole limit is admissible again.
        assert_remaining_and_reset_exact(w, &after, now, d, &ctx);
    }
}
