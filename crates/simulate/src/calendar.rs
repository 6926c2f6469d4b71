//! Calendar quotas in the simulator: one shared counter per key deciding with a
//! [`CalendarQuota`] (a day, week or month of a time zone), so that a scenario such as
//! `daily-jobs` can be replayed against a quota that resets at local midnight
//! (`docs/spec/calendar.md`). A day across a daylight-saving change is 23 or 25 hours here too.
//!
//! ```
//! use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
//! use floodgate_core::AlgorithmKind;
//! use floodgate_simulate::calendar::run_calendar;
//! use floodgate_simulate::traffic::Request;
//!
//! let la = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
//! let quota = CalendarQuota::new(AlgorithmKind::FixedWindow, 1, la).unwrap();
//! let call = |t_us| Request { t_us, key: "job".into(), cost: 1, source: "calm" };
//! // 2027-03-14T00:00:00-08:00, a 23-hour day: the second call is a day later, 23 h after the first.
//! let base = 1_805_011_200_000_000;
//! let hour = 3_600_000_000;
//! let outcomes = run_calendar(&[call(0), call(22 * hour), call(23 * hour)], &quota, base).unwrap();
//! let admitted: Vec<bool> = outcomes.iter().map(|o| o.result.unwrap().allowed).collect();
//! assert_eq!(admitted, [true, false, true]);
//! ```

use std::collections::HashMap;

use floodgate_core::calendar::{CalendarCheckError, CalendarQuota};
use floodgate_core::{AlgorithmKind, Decision, FixedWindowState, SlidingWindowState, Timestamp};

use crate::engine::{simulate, Outcome};
use crate::error::Error;
use crate::setup::{Balance, Balancer, CounterError, CounterStore};
use crate::traffic::Request;

/// One shared counter per key under a calendar quota (every instance sees the same state, as
/// with `--counter shared`).
#[derive(Debug, Clone)]
pub struct CalendarCounters {
    quota: CalendarQuota,
    fixed: HashMap<String, FixedWindowState>,
    sliding: HashMap<String, SlidingWindowState>,
}

impl CalendarCounters {
    /// Fresh counters for `quota`.
    pub fn new(quota: CalendarQuota) -> Self {
        Self {
            quota,
            fixed: HashMap::new(),
            sliding: HashMap::new(),
        }
    }
}

impl CounterStore for CalendarCounters {
    fn check(
        &mut self,
        _instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CounterError> {
        let result = if self.quota.kind() == AlgorithmKind::FixedWindow {
            let state = self.fixed.entry(key.to_string()).or_default();
            self.quota.check_fixed(state, now, cost)
        } else {
            let state = self.sliding.entry(key.to_string()).or_default();
            self.quota.check_sliding(state, now, cost)
        };
        result.map_err(|e| match e {
            CalendarCheckError::Check(e) => CounterError::Check(e),
            other => CounterError::Store(other.to_string()),
        })
    }
}

/// Replays `requests` at `base + t_us` against one shared calendar counter per key.
///
/// # Errors
/// [`Error`] when a time has no calendar period (beyond the year 9999).
pub fn run_calendar(
    requests: &[Request],
    quota: &CalendarQuota,
    base: Timestamp,
) -> Result<Vec<Outcome>, Error> {
    let mut counters = CalendarCounters::new(quota.clone());
    let mut balancer = Balancer::new(1, Balance::RoundRobin);
    simulate(requests, &mut counters, &mut balancer, base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::DailyJobs;
    use floodgate_core::calendar::{Calendar, CalendarUnit};
    use floodgate_core::Quota;

    const HOUR: u64 = 3_600_000_000;
    /// 2027-03-14T00:00:00-08:00 and 2027-03-15T00:00:00-07:00: a 23-hour day.
    const SHORT_DAY: (u64, u64) = (1_805_011_200_000_000, 1_805_094_000_000_000);

    /// daily-jobs over two local days in Los Angeles from the 23-hour one: the budget is spent
    /// within each local day and opens again exactly at local midnight, not at 00:00 UTC.
    #[test]
    fn daily_jobs_reset_at_local_midnight_across_a_short_day() {
        let la = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
        let quota = CalendarQuota::new(AlgorithmKind::FixedWindow, 10_000, la).unwrap();
        let mut jobs = DailyJobs::for_quota(&Quota::per_day(10_000).unwrap());
        jobs.duration = 47 * HOUR;
        // Four times the default demand: the budget runs out well before each day ends.
        jobs.runners = 32;
        let traffic = jobs.traffic().unwrap();
        let (base, midnight) = SHORT_DAY;
        let outcomes = run_calendar(&traffic.requests, &quota, base).unwrap();
        let mut spent = [0u64; 2];
        let mut denials = 0;
        let mut first_of_day_two = None;
        for (o, r) in outcomes.iter().zip(&traffic.requests) {
            let now = base + r.t_us;
            let d = o.result.unwrap();
            if now >= midnight && first_of_day_two.is_none() {
                first_of_day_two = Some(d.allowed);
            }
            if d.allowed {
                spent[usize::from(now >= midnight)] += r.cost;
            } else if now < midnight {
                // A denial waits exactly until local midnight, 23 h after the day began.
                denials += 1;
                assert_eq!(d.retry_after, Some(midnight - now));
            }
        }
        assert!(denials > 100, "{denials}");
        assert_eq!(
            first_of_day_two,
            Some(true),
            "the budget opens at local midnight"
        );
        for day in spent {
            assert!(day <= 10_000 && day > 9_800, "{spent:?}");
        }
    }
}
