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

use floodgate_core::calendar::{Calendar, CalendarCheckError, CalendarQuota, CalendarUnit};
use floodgate_core::{
    AlgorithmKind, Decision, FixedWindowState, Micros, Quota, SlidingWindowState, Timestamp,
    MICROS_PER_SECOND,
};

use crate::engine::{epoch_base, run_with, simulate, Outcome, Run};
use crate::error::Error;
use crate::setup::StoreSpec;
use crate::setup::{Balance, Balancer, CounterError, CounterMode, CounterStore, Setup};
use crate::spec::Spec;
use crate::traffic::{Request, Traffic};

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

/// A calendar counter seen from a run's clock: the engine replays at a UTC-day-aligned base
/// ([`crate::engine::epoch_base`]); this moves that base to the local midnight of the same
/// date, so that `t = 0` of the run is 00:00 in the zone.
struct LocalMidnight {
    counters: CalendarCounters,
    base: Timestamp,
    midnight: Timestamp,
}

impl CounterStore for LocalMidnight {
    fn check(
        &mut self,
        instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CounterError> {
        let local = now - self.base + self.midnight;
        self.counters.check(instance, key, local, cost)
    }
}

/// The calendar `spec.calendar` names (`--calendar ZONE`), checked against the rest of the
/// spec: one window algorithm, a per-day limit, one instance (or shared counters), memory
/// counters, no waiting. `None` without `--calendar`.
///
/// # Errors
/// [`Error::Invalid`] (`field` = `"calendar"`) naming what does not fit.
pub(crate) fn calendar_of(spec: &Spec, quota: &Quota) -> Result<Option<Calendar>, Error> {
    let Some(zone) = &spec.calendar else {
        return Ok(None);
    };
    let fail = |m: String| Err(Error::invalid("calendar", m));
    if !spec
        .algorithm
        .kinds()
        .iter()
        .all(|k| matches!(k, AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow))
    {
        return fail(
            "--calendar needs --algorithm fixed_window or sliding_window, or both (the algorithms \
             that count in calendar periods)"
                .into(),
        );
    }
    if quota.period() != 86_400 * MICROS_PER_SECOND {
        return fail(format!(
            "--calendar counts the limit per calendar day: use --limit N/day (got {quota})"
        ));
    }
    if spec.store != StoreSpec::Memory || spec.max_wait.is_some() {
        return fail("--calendar runs on --store memory without --max-wait".into());
    }
    if spec.instances > 1 && spec.counter != CounterMode::Shared {
        return fail("--calendar with --instances > 1 needs --counter shared".into());
    }
    Calendar::new(zone, CalendarUnit::Day, None)
        .map(Some)
        .map_err(|e| Error::invalid("calendar", e.to_string()))
}

/// One algorithm's run in `calendar`'s days, from local midnight.
///
/// # Errors
/// As [`crate::engine::run_with`].
pub(crate) fn run_one(
    traffic: &Traffic,
    kind: AlgorithmKind,
    quota: Quota,
    setup: Setup,
    column: Micros,
    calendar: &Calendar,
) -> Result<Run, Error> {
    let limited = CalendarQuota::new(kind, quota.limit(), calendar.clone())
        .map_err(|e| Error::invalid("calendar", e.to_string()))?;
    let base = epoch_base(quota.period());
    let midnight = calendar
        .period_at(base)
        .map(|(start, _)| start)
        .ok_or_else(|| Error::invalid("calendar", "no calendar day at the run's start"))?;
    run_with(
        &traffic.requests,
        kind,
        quota,
        setup,
        column,
        traffic.span_us,
        |_| {
            Ok(Box::new(LocalMidnight {
                counters: CalendarCounters::new(limited.clone()),
                base,
                midnight,
            }))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::DailyJobs;

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
