//! A [`Policy`] that counts in calendar periods: the fixed window or the sliding window counter
//! built with a [`Calendar`] ([`Policy::with_calendar`]). Its checks and peeks are
//! [`decide_fixed_window`] / [`decide_sliding_window`] of `docs/spec/calendar.md`, so every store
//! deciding through [`Policy`] (the memory store, the local fallback) counts in the zone's days,
//! weeks or months without knowing it.
//!
//! Reservations for later are not offered ([`Policy::max_wait`] is 0): a reservation is a check
//! at once, and a settle gives units back only within the period they were charged to (or
//! charges more, up to one period's carry on the fixed window, as the epoch-aligned windows do).
//!
//! ```
//! use floodgate_core::calendar::{Calendar, CalendarUnit};
//! use floodgate_core::{AlgorithmKind, Policy};
//!
//! let day = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
//! let policy = Policy::parse(AlgorithmKind::FixedWindow, "1/day")
//!     .unwrap()
//!     .with_calendar(day)
//!     .unwrap();
//! let mut state = policy.initial_state();
//! // 2027-03-14T23:00:00-07:00: an hour before midnight in Los Angeles
//! let late = 1_805_090_400_000_000;
//! assert!(policy.check(&mut state, late, 1).unwrap().allowed);
//! let denied = policy.check(&mut state, late, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(3_600_000_000));
//! assert_eq!(policy.calendar().unwrap().calendar().zone(), "America/Los_Angeles");
//! ```

use std::sync::Arc;

use crate::algorithm::base::{CalendarRef, WindowCalendar};
use crate::algorithm::{FixedWindowState, Policy, SlidingWindowState};
use crate::calendar::{
    decide_fixed_window, decide_sliding_window, Calendar, CalendarError, CalendarQuota, Periods,
};
use crate::decision::{Decision, Reservation};
use crate::time::{Micros, Timestamp};

impl Policy {
    /// This fixed window or sliding window counter policy, counting its limit per period of
    /// `calendar` instead of per epoch-aligned `period` (which stays the quota's nominal length:
    /// a day, a week, 30 days for a month).
    ///
    /// # Errors
    /// As [`CalendarQuota::new`]: [`CalendarError::Algorithm`] for another algorithm,
    /// [`CalendarError::NotExact`] for a sliding window limit too large for the longest period.
    pub fn with_calendar(mut self, calendar: Calendar) -> Result<Self, CalendarError> {
        let quota = CalendarQuota::new(self.kind(), self.quota().limit(), calendar)?;
        match &mut self {
            Policy::FixedWindow(a) => a.calendar = Some(CalendarRef(Arc::new(quota))),
            Policy::SlidingWindow(a) => a.calendar = Some(CalendarRef(Arc::new(quota))),
            _ => unreachable!("CalendarQuota::new accepts the two windows only"),
        }
        Ok(self)
    }

    /// The calendar quota of a policy built by [`Policy::with_calendar`], else `None`.
    #[inline]
    pub fn calendar(&self) -> Option<&CalendarQuota> {
        match self {
            Policy::FixedWindow(a) => a.calendar(),
            Policy::SlidingWindow(a) => a.calendar(),
            _ => None,
        }
    }
}

impl crate::FixedWindow {
    /// The calendar quota of a window built by [`Policy::with_calendar`], else `None`.
    pub fn calendar(&self) -> Option<&CalendarQuota> {
        self.calendar.as_ref().and_then(|c| quota_of(c.0.as_any()))
    }
}

impl crate::SlidingWindow {
    /// The calendar quota of a window built by [`Policy::with_calendar`], else `None`.
    pub fn calendar(&self) -> Option<&CalendarQuota> {
        self.calendar.as_ref().and_then(|c| quota_of(c.0.as_any()))
    }
}

fn quota_of(calendar: &dyn std::any::Any) -> Option<&CalendarQuota> {
    calendar.downcast_ref::<CalendarQuota>()
}

impl WindowCalendar<FixedWindowState> for CalendarQuota {
    fn decide(
        &self,
        s: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        fixed_decide(self, s, now, cost, consume)
    }
    fn reserve(
        &self,
        s: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        fixed_reserve_at(self, s, now, cost, wait)
    }
    fn settle(
        &self,
        s: &mut FixedWindowState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        fixed_settle(self, s, now, scheduled_at, reserved, actual)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn same(&self, other: &dyn std::any::Any) -> bool {
        quota_of(other) == Some(self)
    }
}

impl WindowCalendar<SlidingWindowState> for CalendarQuota {
    fn decide(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        sliding_decide(self, s, now, cost, consume)
    }
    fn reserve(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        sliding_reserve_at(self, s, now, cost, wait)
    }
    fn settle(
        &self,
        s: &mut SlidingWindowState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        sliding_settle(self, s, now, scheduled_at, reserved, actual)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn same(&self, other: &dyn std::any::Any) -> bool {
        quota_of(other) == Some(self)
    }
}

/// The answer outside the time zone database's range (after the year 9999): a denial, since no
/// period can be named.
fn out_of_range(limit: u64) -> Decision {
    Decision {
        allowed: false,
        limit,
        remaining: 0,
        reset_after: 0,
        retry_after: Some(Micros::MAX),
    }
}

fn fixed_decide(
    q: &CalendarQuota,
    state: &mut FixedWindowState,
    now: Timestamp,
    cost: u64,
    consume: bool,
) -> Decision {
    decide_fixed_window(q.limit(), state, now, cost, consume, q.calendar())
        .unwrap_or_else(|| out_of_range(q.limit()))
}

fn sliding_decide(
    q: &CalendarQuota,
    state: &mut SlidingWindowState,
    now: Timestamp,
    cost: u64,
    consume: bool,
) -> Decision {
    decide_sliding_window(q.limit(), state, now, cost, consume, q.calendar())
        .unwrap_or_else(|| out_of_range(q.limit()))
}

/// A reservation at once (`wait == 0`) is a check that admits; none later.
fn fixed_reserve_at(
    q: &CalendarQuota,
    state: &mut FixedWindowState,
    now: Timestamp,
    cost: u64,
    wait: Micros,
) -> Option<Reservation> {
    let now = now.max(state.window_start);
    let mut after = *state;
    let d = fixed_decide(q, &mut after, now, cost, cost > 0);
    (wait == 0 && d.allowed).then(|| {
        *state = after;
        Reservation::granted_at(d, now, 0)
    })
}

/// As [`fixed_reserve_at`].
fn sliding_reserve_at(
    q: &CalendarQuota,
    state: &mut SlidingWindowState,
    now: Timestamp,
    cost: u64,
    wait: Micros,
) -> Option<Reservation> {
    let now = now.max(state.window_start);
    let mut after = *state;
    let d = sliding_decide(q, &mut after, now, cost, cost > 0);
    (wait == 0 && d.allowed).then(|| {
        *state = after;
        Reservation::granted_at(d, now, 0)
    })
}

/// The start of the period holding `t`.
fn period_start(q: &CalendarQuota, t: Timestamp) -> Option<Timestamp> {
    q.calendar().period_at(t).map(|(start, _)| start)
}

fn fixed_settle(
    q: &CalendarQuota,
    state: &mut FixedWindowState,
    now: Timestamp,
    scheduled_at: Timestamp,
    reserved: u64,
    actual: u64,
) -> Decision {
    let limit = q.limit();
    let now = now.max(state.window_start);
    let Some(w) = q.calendar().window_at(now) else {
        return out_of_range(limit);
    };
    let mut count = if state.window_start == w.start {
        state.count
    } else if state.window_start == w.previous_start {
        state.count.saturating_sub(limit)
    } else {
        0
    };
    if actual <= reserved {
        // Back only into the period the units were charged to, and never below zero.
        if period_start(q, scheduled_at) == Some(w.start) && count <= limit {
            count -= (reserved - actual).min(count);
        }
    } else {
        // Charged unconditionally, up to one period's carry (the bounded debt).
        count = count.saturating_add(actual - reserved).min(2 * limit);
    }
    *state = FixedWindowState {
        window_start: w.start,
        count,
    };
    fixed_decide(q, &mut state.clone(), now, 0, false)
}

fn sliding_settle(
    q: &CalendarQuota,
    state: &mut SlidingWindowState,
    now: Timestamp,
    scheduled_at: Timestamp,
    reserved: u64,
    actual: u64,
) -> Decision {
    let limit = q.limit();
    let now = now.max(state.window_start);
    let Some(w) = q.calendar().window_at(now) else {
        return out_of_range(limit);
    };
    let (mut previous, mut count) = if state.window_start == w.start {
        (state.previous_count, state.count)
    } else if state.window_start == w.previous_start {
        (state.count, 0)
    } else {
        (0, 0)
    };
    let charged_in = period_start(q, scheduled_at);
    if actual <= reserved {
        let back = reserved - actual;
        if charged_in == Some(w.start) {
            count -= back.min(count);
        } else if charged_in == Some(w.previous_start) {
            previous -= back.min(previous);
        }
    } else {
        count = count.saturating_add(actual - reserved).min(limit);
    }
    *state = SlidingWindowState {
        window_start: w.start,
        count,
        previous_count: previous,
    };
    sliding_decide(q, &mut state.clone(), now, 0, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::CalendarUnit;
    use crate::AlgorithmKind;

    const LA_2027_03_14: Timestamp = 1_805_011_200_000_000; // 00:00-08:00, a 23-hour day
    const HOUR: Micros = 3_600_000_000;

    fn policy(kind: AlgorithmKind, quota: &str) -> Policy {
        let day = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
        Policy::parse(kind, quota)
            .unwrap()
            .with_calendar(day)
            .unwrap()
    }

    #[test]
    fn a_calendar_policy_decides_as_the_calendar_quota() {
        for kind in [AlgorithmKind::FixedWindow, AlgorithmKind::SlidingWindow] {
            let p = policy(kind, "3/day");
            let q = p.calendar().unwrap().clone();
            let mut state = p.initial_state();
            let (mut fixed, mut sliding) =
                (FixedWindowState::default(), SlidingWindowState::default());
            for step in 0..40u64 {
                let now = LA_2027_03_14 + step * 2 * HOUR;
                let cost = step % 3;
                let got = p.check(&mut state, now, cost).unwrap();
                let want = match kind {
                    AlgorithmKind::FixedWindow => q.check_fixed(&mut fixed, now, cost),
                    _ => q.check_sliding(&mut sliding, now, cost),
                }
                .unwrap();
                assert_eq!(got, want, "{kind} at step {step}");
            }
        }
    }

    #[test]
    fn the_23_hour_day_resets_at_local_midnight() {
        let p = policy(AlgorithmKind::FixedWindow, "1/day");
        let mut state = p.initial_state();
        assert!(p.check(&mut state, LA_2027_03_14, 1).unwrap().allowed);
        let denied = p.check(&mut state, LA_2027_03_14 + HOUR, 1).unwrap();
        assert_eq!(denied.retry_after, Some(22 * HOUR));
        assert!(
            !p.check(&mut state, LA_2027_03_14 + 23 * HOUR - 1, 1)
                .unwrap()
                .allowed
        );
        assert!(
            p.check(&mut state, LA_2027_03_14 + 23 * HOUR, 1)
                .unwrap()
                .allowed
        );
    }

    #[test]
    fn other_algorithms_refuse_a_calendar() {
        let day = Calendar::new("UTC", CalendarUnit::Day, None).unwrap();
        let gcra = Policy::parse(AlgorithmKind::Gcra, "10/day").unwrap();
        assert!(matches!(
            gcra.with_calendar(day),
            Err(CalendarError::Algorithm(AlgorithmKind::Gcra))
        ));
    }

    #[test]
    fn reservations_are_checks_at_once_and_settle_within_the_period() {
        let p = policy(AlgorithmKind::FixedWindow, "10/day");
        assert_eq!(p.max_wait(), 0);
        let mut state = p.initial_state();
        let r = p.reserve(&mut state, LA_2027_03_14, 6, 60_000_000).unwrap();
        assert_eq!((r.wait, r.decision.remaining), (Some(0), 4));
        let after = p
            .settle(&mut state, LA_2027_03_14 + HOUR, LA_2027_03_14, 6, 2)
            .unwrap();
        assert_eq!(after.remaining, 8);
        // Next day: the units of yesterday are not given back into today's period.
        assert!(
            p.check(&mut state, LA_2027_03_14 + 23 * HOUR, 1)
                .unwrap()
                .allowed
        );
        let next = p
            .settle(&mut state, LA_2027_03_14 + 24 * HOUR, LA_2027_03_14, 2, 0)
            .unwrap();
        assert_eq!(next.remaining, 9);
    }
}
