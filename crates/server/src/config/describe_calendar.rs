//! A calendar rule in words, for `check-config` and the start-up log: `daily: fixed_window
//! 10000/day in America/Los_Angeles`, then `at most 10000 per calendar day; resets at 00:00
//! America/Los_Angeles; 23 h on 2027-03-14, 25 h on 2027-11-07` (the irregular periods of the
//! coming year, from [`Calendar::describe`](floodgate_core::calendar::Calendar::describe)).

use floodgate_core::{AlgorithmKind, Clock, SystemClock, Timestamp};

use super::schema::RuleConfig;

/// `(headline, rate)` of a calendar rule, seen from `now`; `None` for any other rule.
pub(crate) fn describe_at(rule: &RuleConfig, now: Timestamp) -> Option<(String, String)> {
    let q = rule.policy.calendar()?;
    let calendar = q.calendar();
    let unit = calendar.unit();
    let headline = format!(
        "{}: {} {}/{unit} in {}",
        rule.name,
        q.kind(),
        q.limit(),
        calendar.zone()
    );
    let how = match q.kind() {
        AlgorithmKind::SlidingWindow => "at most about",
        _ => "at most",
    };
    let weighted = match q.kind() {
        AlgorithmKind::SlidingWindow => " (the previous period weighted)",
        _ => "",
    };
    let rate = format!(
        "{how} {} per calendar {unit}{weighted}; {}",
        q.limit(),
        calendar.describe(now)
    );
    Some((headline, rate))
}

/// [`describe_at`] at the system clock's now.
pub(crate) fn describe(rule: &RuleConfig) -> Option<(String, String)> {
    describe_at(rule, SystemClock.now())
}
