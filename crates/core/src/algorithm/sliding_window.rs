//! Sliding window counter: the current and the previous aligned window's counts, the previous
//! one weighted by how much of it still overlaps the sliding window.
//!
//! Source: Cloudflare, "Counting things, a lot of different things" (Julien Desgats, 2017).
//! Windows are aligned to multiples of `period` since the Unix epoch (as in
//! [`FixedWindow`](crate::FixedWindow)). The sliding window at `now` is the last `period`
//! microseconds, `[now - period + 1, now]`; at `elapsed` microseconds into the current window it
//! overlaps the previous window in `period - 1 - elapsed` of them, and the number of units in
//! it is estimated as
//!
//! ```text
//! estimate = previous_count x (period - 1 - elapsed) / period + count
//! ```
//!
//! (Cloudflare's `period - elapsed` is the same overlap in continuous time; with whole
//! microseconds it would never reach 0, and a client at full demand would get only `limit - 1`
//! units per window.) A request of `cost` units is admitted when `estimate + cost <= limit`,
//! compared exactly by multiplying through by `period` (no rounding, no floats):
//!
//! ```text
//! previous_count x (period - 1 - elapsed) + (count + cost) x period <= limit x period
//! ```
//!
//! [`SlidingWindow::new`] rejects quotas with `limit x period > MAX_EXACT`, so every product is
//! exact in the Redis Lua script too. `retry_after` is exact, in closed form: the first
//! microsecond at which the inequality holds, either later in the current window (as the previous
//! window's weight decays) or in the next one. See `docs/spec/sliding_window.md`.
//!
//! ```
//! use floodgate_core::{Algorithm, Quota, SlidingWindow};
//! let window = SlidingWindow::new("10/s".parse::<Quota>().unwrap()).unwrap();
//! let mut state = window.initial_state();
//! let t0 = 1_700_000_000_000_000; // a second boundary
//! assert!(window.check(&mut state, t0 + 900_000, 10).unwrap().allowed);
//! // 0.5 s into the next window the last second overlaps the previous one by 499,999 us:
//! // the previous 10 weigh 10 x 0.499999 = 4.99999, leaving room for 5.
//! let d = window.check(&mut state, t0 + 1_500_000, 5).unwrap();
//! assert_eq!((d.allowed, d.remaining), (true, 0));
//! // One more unit fits once 10 x overlap <= 4 x 1 s, i.e. at an overlap of 400,000 us.
//! let denied = window.check(&mut state, t0 + 1_500_000, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(99_999));
//! ```

use crate::algorithm::base::{Algorithm, AlgorithmKind, CalendarRef};
use crate::decision::{Decision, Reservation};
use crate::div::Divisor;
use crate::error::QuotaError;
use crate::quota::{Quota, MAX_EXACT};
use crate::time::{Micros, Timestamp};

/// The sliding window counter prepared for one quota: about `limit` units per sliding `period`
/// (`burst` is ignored).
#[derive(Debug, Clone, PartialEq)]
pub struct SlidingWindow {
    quota: Quota,
    /// `period` as a multiply-and-shift divisor: `now mod period` without a hardware division.
    period_div: Divisor,
    /// Calendar periods of a time zone in place of epoch-aligned ones ([`crate::Policy::with_calendar`]).
    pub(crate) calendar: Option<CalendarRef<SlidingWindowState>>,
}

/// Sliding window counter state of one key. The initial state is all zeros.
///
/// Field names are the Redis hash fields of the sliding window script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct SlidingWindowState {
    /// Start of the window `count` belongs to, in microseconds since the Unix epoch; always a
    /// multiple of the period (0 for a fresh key).
    pub window_start: Timestamp,
    /// Units admitted in the window starting at `window_start` (`0 <= count <= 2 x limit`;
    /// above `limit` only after a settle charged more: the bounded debt).
    pub count: u64,
    /// Units admitted in the window before it, `[window_start - period, window_start)`
    /// (`0 <= previous_count <= 2 x limit`).
    pub previous_count: u64,
}

impl SlidingWindow {
    /// `(elapsed, window, previous_count, count)` at `now >= window_start`.
    fn window_at(&self, state: &SlidingWindowState, now: Timestamp) -> (u64, Timestamp, u64, u64) {
        let period = self.period_div.get();
        let elapsed = self.period_div.rem(now);
        let window = now - elapsed;
        let (previous, count) = Self::counts_at(state, window, period);
        (elapsed, window, previous, count)
    }

    /// The standing of `state` at `now >= window_start`: a cost-0 decision.
    fn standing(&self, state: &SlidingWindowState, now: Timestamp) -> Decision {
        self.decide(&mut state.clone(), now, 0, false)
    }

    /// The counts `(previous_count, count)` as seen from the window starting at `window`.
    fn counts_at(state: &SlidingWindowState, window: Timestamp, period: u64) -> (u64, u64) {
        match window - state.window_start {
            0 => (state.previous_count, state.count),
            d if d == period => (state.count, 0),
            _ => (0, 0),
        }
    }
}

/// `max(0, period - 1 - quotient)`: the first elapsed time at which an overlap of
/// `period - 1 - e` microseconds weighs at most `quotient` whole units.
#[inline]
fn overlap_floor(period: u64, quotient: u64) -> u64 {
    (period - 1).saturating_sub(quotient)
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;
    const KIND: AlgorithmKind = AlgorithmKind::SlidingWindow;

    /// # Errors
    /// [`QuotaError::NotExact`] when `limit x period` exceeds
    /// [`MAX_EXACT`]: the admission test multiplies by `period`.
    fn new(quota: Quota) -> Result<Self, QuotaError> {
        let product = u128::from(quota.limit()) * u128::from(quota.period());
        if product > u128::from(MAX_EXACT) {
            return Err(QuotaError::NotExact {
                what: "limit x period",
                value: product,
                max: MAX_EXACT,
            });
        }
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

    fn initial_state(&self) -> SlidingWindowState {
        SlidingWindowState::default()
    }

    // Always inlined so that a caller reading only `allowed` pays for nothing else.
    #[inline(always)]
    fn decide(
        &self,
        state: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        if let Some(calendar) = &self.calendar {
            return calendar.0.decide(state, now, cost, consume);
        }
        let (limit, period) = (self.quota.limit(), self.period_div.get());
        // A stale `now` (before the state's window) is read as the window's start; within the
        // window an earlier `now` only gives the previous window more weight, never less.
        let since = now.checked_sub(state.window_start);
        let (elapsed, window, previous, count) = match since {
            // The usual checks: `now` in the state's (aligned) window or the next one. Its offset
            // then needs no division, and the next check's state does not wait for one.
            Some(since) if since < 2 * period && self.period_div.divides(state.window_start) => {
                if since < period {
                    (since, state.window_start, state.previous_count, state.count)
                } else {
                    (since - period, state.window_start + period, state.count, 0)
                }
            }
            _ => {
                let now = now.max(state.window_start);
                let elapsed = self.period_div.rem(now);
                let window = now - elapsed;
                let (previous, count) = Self::counts_at(state, window, period);
                (elapsed, window, previous, count)
            }
        };
        // The sliding window is the last `period` microseconds, [now - period + 1, now]; it
        // overlaps the previous window in `period - 1 - elapsed` of them (Cloudflare's
        // `period - elapsed` in continuous time). `weight` is the previous count's share,
        // scaled by `period`. At the last microsecond of a window it is 0, so a client at full
        // demand gets exactly `limit` per window.
        let overlap = period - 1 - elapsed;
        let weight = previous.saturating_mul(overlap);
        // `room` = limit - count - cost, so the test `weight <= room x period` keeps every value
        // at or below limit x period (<= MAX_EXACT by `new`). Cost 0 is always allowed, even if
        // a backwards `now` made the estimate exceed the limit.
        let room = limit.checked_sub(count).and_then(|r| r.checked_sub(cost));
        let allowed = cost == 0 || room.is_some_and(|room| weight <= room * period);
        let count_after = if allowed && consume && cost > 0 {
            *state = SlidingWindowState {
                window_start: window,
                count: count + cost,
                previous_count: previous,
            };
            count + cost
        } else {
            count
        };
        // Largest k with weight + (count_after + k) x period <= limit x period.
        let remaining = limit
            .saturating_sub(count_after)
            .saturating_sub(weight.div_ceil(period));
        // `count_after` weighs until the last microsecond of the next window; `previous` until
        // the last microsecond of this one, where its overlap reaches 0.
        let reset_after = if count_after > 0 {
            period + overlap
        } else if previous > 0 {
            overlap
        } else {
            0
        };
        let retry_after = (!allowed).then(|| match room {
            // Later in this window: previous x (period - 1 - e) <= room x period first holds at
            // e = period - 1 - floor(room x period / previous), always within the window (the
            // overlap is 0 at its last microsecond). previous > 0 here, else it was allowed;
            // `checked_div` only spares a caller that reads `allowed` alone the division-by-zero
            // check (its fallback is unreachable).
            Some(room) => overlap - (room * period).checked_div(previous).unwrap_or(0),
            // count + cost > limit: in the next window `count` becomes the previous count and
            // the new count is 0; count x (period - 1 - e) <= (limit - cost) x period first
            // holds at e = period - 1 - floor((limit - cost) x period / count), clamped at 0.
            // count > 0 here (count + cost > limit >= cost); the fallback is unreachable.
            None => {
                let quotient = ((limit - cost) * period).checked_div(count).unwrap_or(0);
                let first = overlap_floor(period, quotient);
                period - elapsed + first
            }
        });
        Decision {
            allowed,
            limit,
            remaining,
            reset_after,
            retry_after,
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
        state: &mut SlidingWindowState,
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
        let (elapsed, window, previous, count) = self.window_at(state, now);
        if cost == 0 {
            return Some(Reservation::granted_at(
                self.standing(state, now),
                now,
                wait,
            ));
        }
        // Later in this window, as the previous window's weight decays: counted in this
        // window's count now. (The state holds no count for the next window.)
        if wait >= period - elapsed {
            return None;
        }
        let overlap = period - 1 - (elapsed + wait);
        let room = limit.checked_sub(count)?.checked_sub(cost)?;
        if previous.saturating_mul(overlap) > room * period {
            return None;
        }
        *state = SlidingWindowState {
            window_start: window,
            count: count + cost,
            previous_count: previous,
        };
        Some(Reservation::granted_at(
            self.standing(state, now),
            now,
            wait,
        ))
    }

    fn decide_settle(
        &self,
        state: &mut SlidingWindowState,
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
        let (_, window, mut previous, mut count) = self.window_at(state, now);
        let reserved_window = scheduled_at - self.period_div.rem(scheduled_at);
        if actual <= reserved {
            let back = reserved - actual;
            if reserved_window == window {
                count -= back.min(count);
            } else if reserved_window.saturating_add(period) == window {
                // Rolled once: the units still weigh as the previous window's.
                previous -= back.min(previous);
            }
            // Else they no longer count: nothing back.
        } else {
            // Charged unconditionally to this window, up to twice its limit: the bounded debt.
            count = count.saturating_add(actual - reserved).min(2 * limit);
        }
        *state = SlidingWindowState {
            window_start: window,
            count,
            previous_count: previous,
        };
        self.standing(state, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::test_support::{
        assert_cost_above_capacity_changes_nothing, assert_remaining_and_reset_exact,
        assert_retry_after_exact, decision, xorshift, T0,
    };

    fn window(text: &str) -> SlidingWindow {
        SlidingWindow::new(text.parse().unwrap()).unwrap()
    }

    #[test]
    fn previous_window_weight_decays_across_the_boundary() {
        let w = window("10/s");
        let mut s = w.initial_state();
        assert_eq!(
            w.check(&mut s, T0 + 900_000, 10).unwrap(),
            decision(10, true, 0, 1_099_999, None)
        );
        // 1 us before the edge the current window is full. In the next one, 1 unit fits when
        // 10 x overlap <= 9 x 1 s: overlap 900_000, elapsed 99_999.
        assert_eq!(
            w.check(&mut s, T0 + 999_999, 1).unwrap(),
            decision(10, false, 0, 1_000_000, Some(100_000))
        );
        // At the edge the previous 10 overlap by 999_999 us: 9.99999 units.
        assert_eq!(
            w.check(&mut s, T0 + 1_000_000, 1).unwrap(),
            decision(10, false, 0, 999_999, Some(99_999))
        );
        assert_eq!(
            w.check(&mut s, T0 + 1_099_998, 1).unwrap(),
            decision(10, false, 0, 900_001, Some(1))
        );
        assert_eq!(
            w.check(&mut s, T0 + 1_099_999, 1).unwrap(),
            decision(10, true, 0, 1_900_000, None)
        );
        assert_eq!(
            s,
            SlidingWindowState {
                window_start: T0 + 1_000_000,
                count: 1,
                previous_count: 10
            }
        );
    }

    #[test]
    fn boundary_burst_admits_a_little_over_the_limit() {
        // The documents' test: 100/s, 100 requests at 0.95 s then 100 at 1.05 s.
        let w = window("100/s");
        let mut s = w.initial_state();
        let admitted = |s: &mut SlidingWindowState, at| {
            (0..100)
                .filter(|_| w.check(s, at, 1).unwrap().allowed)
                .count()
        };
        assert_eq!(admitted(&mut s, T0 + 950_000), 100);
        // 100 x 0.949999 = 94.9999 of the previous window still weigh: room for 5.
        assert_eq!(admitted(&mut s, T0 + 1_050_000), 5);
    }

    #[test]
    fn full_demand_gets_exactly_the_limit_per_window() {
        // With the continuous-time overlap `period - elapsed` the previous window would never
        // stop weighing and this client would get 2 per window, not 3.
        let w = window("3/10us");
        let mut s = w.initial_state();
        let mut now = T0;
        let mut admitted = 0;
        while now < T0 + 1_000 {
            match w.check(&mut s, now, 1).unwrap().retry_after {
                None => admitted += 1,
                Some(retry) => now += retry,
            }
        }
        assert_eq!(admitted, 300);
    }

    #[test]
    fn retry_after_may_fall_in_the_next_window() {
        let w = window("10/s");
        let mut s = w.initial_state();
        assert!(w.check(&mut s, T0 + 500_000, 6).unwrap().allowed);
        // Cost 5 with count 6: not in this window; in the next one 6 x overlap <= 5 x 1 s at
        // overlap <= 833_333.33, i.e. elapsed >= 999_999 - 833_333 = 166_666.
        assert_eq!(
            w.check(&mut s, T0 + 500_000, 5).unwrap(),
            decision(10, false, 4, 1_499_999, Some(500_000 + 166_666))
        );
        // Cost 10 needs the previous count to weigh nothing: the next window's last microsecond.
        assert_eq!(
            w.check(&mut s, T0 + 500_000, 10).unwrap(),
            decision(10, false, 4, 1_499_999, Some(1_499_999))
        );
    }

    #[test]
    fn long_idle_forgets_both_windows() {
        let w = window("10/s");
        let mut s = w.initial_state();
        assert!(w.check(&mut s, T0, 10).unwrap().allowed);
        for idle in [86_400_000_000, 10 * 365 * 86_400_000_000] {
            let mut s2 = s;
            assert_eq!(
                w.check(&mut s2, T0 + idle + 5, 10).unwrap(),
                decision(10, true, 0, 1_999_994, None)
            );
            assert_eq!(s2.previous_count, 0);
        }
        // Exactly one window later the count becomes the previous count.
        let mut s2 = s;
        assert!(!w.check(&mut s2, T0 + 1_000_000, 1).unwrap().allowed);
        assert_eq!(
            w.peek(&s, T0 + 1_500_000, 0).unwrap(),
            decision(10, true, 5, 499_999, None)
        );
    }

    #[test]
    fn backwards_time_never_reopens_an_older_window() {
        let w = window("10/s");
        let mut s = w.initial_state();
        assert!(w.check(&mut s, T0 + 1_500_000, 10).unwrap().allowed);
        let before = s;
        assert_eq!(
            w.check(&mut s, T0 + 500_000, 1).unwrap(),
            decision(10, false, 0, 1_999_999, Some(1_000_000 + 99_999))
        );
        assert_eq!(s, before);
    }

    #[test]
    fn cost_zero_is_allowed_even_when_backwards_time_overfills_the_estimate() {
        let w = window("10/s");
        let mut s = w.initial_state();
        assert!(w.check(&mut s, T0 + 900_000, 10).unwrap().allowed);
        assert!(w.check(&mut s, T0 + 1_500_000, 5).unwrap().allowed);
        // Back to the start of the window: 9.99999 + 5 > 10, yet a peek is still a peek.
        assert_eq!(
            w.check(&mut s, T0 + 1_000_000, 0).unwrap(),
            decision(10, true, 0, 1_999_999, None)
        );
    }

    #[test]
    fn cost_above_capacity_is_an_error_and_changes_nothing() {
        assert_cost_above_capacity_changes_nothing::<SlidingWindow>(T0);
    }

    #[test]
    fn limit_one() {
        let w = window("1/min");
        let mut s = w.initial_state();
        assert_eq!(
            w.check(&mut s, T0 + 30_000_000, 1).unwrap(),
            decision(1, true, 0, 89_999_999, None)
        );
        // The previous unit weighs until the last microsecond of the next window.
        assert_eq!(
            w.check(&mut s, T0 + 60_000_000, 1).unwrap(),
            decision(1, false, 0, 59_999_999, Some(59_999_999))
        );
        assert!(!w.check(&mut s, T0 + 119_999_998, 1).unwrap().allowed);
        assert!(w.check(&mut s, T0 + 119_999_999, 1).unwrap().allowed);
    }

    #[test]
    fn new_rejects_inexact_quotas() {
        // 2^21 per 2^31 us: limit x period = 2^52 > 2^51.
        let q = Quota::new(1 << 21, 1 << 31).unwrap();
        assert!(matches!(
            SlidingWindow::new(q),
            Err(QuotaError::NotExact {
                what: "limit x period",
                ..
            })
        ));
        assert!(SlidingWindow::new(Quota::new(1 << 20, 1 << 31).unwrap()).is_ok());
        // A million per day: 10^6 x 8.64 x 10^10 > 2^51.
        assert!(SlidingWindow::new(Quota::per_day(1_000_000).unwrap()).is_err());
        assert!(SlidingWindow::new(Quota::per_day(10_000).unwrap()).is_ok());
    }

    /// Brute force on small quotas: every denial's retry_after is the first microsecond at which
    /// the same request is admitted, `remaining` is the largest admissible cost and `reset_after`
    /// the first time the whole limit is admissible again.
    #[test]
    fn retry_after_remaining_and_reset_are_exact_by_brute_force() {
        for (limit, period) in [(1, 1), (1, 5), (2, 3), (3, 7), (4, 10), (5, 6), (7, 12)] {
            let w = SlidingWindow::new(Quota::new(limit, period).unwrap()).unwrap();
            let mut s = w.initial_state();
            let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (limit << 8) ^ period;
            let mut now = 1_000 * period;
            let mut denials = 0;
            for _ in 0..3_000 {
                xorshift(&mut rng);
                // Mostly small steps, sometimes a step back in time.
                now = match rng % 16 {
                    0 => now - (rng >> 8) % period.min(now),
                    _ => now + (rng >> 8) % (period + 2),
                };
                let cost = (rng >> 16) % (limit + 1);
                let before = s;
                let d = w.check(&mut s, now, cost).unwrap();
                assert_brute_force(&w, &before, now, cost, &d);
                if !d.allowed {
                    denials += 1;
                    assert_eq!(s, before);
                }
            }
            assert!(denials > 100, "{limit}/{period}: only {denials} denials");
        }
    }

    fn assert_brute_force(
        w: &SlidingWindow,
        before: &SlidingWindowState,
        now: Timestamp,
        cost: u64,
        d: &Decision,
    ) {
        let ctx = format!("{before:?} now={now} cost={cost} -> {d:?}");
        if let Some(retry) = d.retry_after {
            let from = now.max(before.window_start);
            assert_retry_after_exact(w, before, from, cost, retry, &ctx);
        }
        let mut after = *before;
        if d.allowed && cost > 0 {
            w.check(&mut after, now, cost).unwrap();
        }
        // `decide` reads a stale `now` as the window's start; times count from there.
        let now = now.max(after.window_start);
        assert_remaining_and_reset_exact(w, &after, now, d, &ctx);
    }
}
