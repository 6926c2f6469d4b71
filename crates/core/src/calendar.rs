//! Calendar windows: the fixed window and the sliding window counter counted in calendar periods
//! (a day, a week starting on a chosen weekday, a month) of a named IANA time zone.
//!
//! A day across a daylight-saving change is 23 or 25 hours, a month 28 to 31 days, so a period
//! is not a fixed duration: the window is `[start, end)` as the zone's calendar says, computed
//! around `now` by a [`Periods`] source and handed to the counting, which stays the exact integer
//! arithmetic of `docs/spec/fixed_window.md` and `docs/spec/sliding_window.md` with the period's
//! own length in place of `period` (`docs/spec/calendar.md`).
//!
//! Two sources give the same windows: [`Calendar`] (the time zone database, via `jiff`, bundled
//! so every machine agrees) and [`Boundaries`] (six consecutive period starts around a time, what
//! the Redis script receives so that it can place Redis' own clock in its period).
//!
//! ```
//! use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
//! use floodgate_core::{AlgorithmKind, FixedWindowState};
//!
//! let day = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
//! let quota = CalendarQuota::new(AlgorithmKind::FixedWindow, 2, day).unwrap();
//! let mut state = FixedWindowState::default();
//! // 2027-03-14 is a 23-hour day in Los Angeles: it starts at 08:00Z and ends at 07:00Z.
//! let start = 1_805_011_200_000_000; // 2027-03-14T00:00:00-08:00
//! let d = quota.check_fixed(&mut state, start, 2).unwrap();
//! assert!(d.allowed);
//! let denied = quota.check_fixed(&mut state, start + 1, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(23 * 3_600_000_000 - 1));
//! ```

use std::fmt;

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::ToSpan;

use crate::algorithm::base::{validate_cost, AlgorithmKind};
use crate::algorithm::{FixedWindowState, SlidingWindowState};
use crate::decision::Decision;
use crate::error::CheckError;
use crate::quota::MAX_EXACT;
use crate::time::{Micros, Timestamp};

const HOUR: Micros = 3_600_000_000;
const DAY: Micros = 24 * HOUR;

/// The length of a calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CalendarUnit {
    /// From local midnight to the next local midnight (23, 24 or 25 hours in most zones).
    Day,
    /// Seven local days from midnight of the week's first day.
    Week,
    /// From midnight of the first of the month to midnight of the first of the next one.
    Month,
}

impl CalendarUnit {
    /// `"day"`, `"week"` or `"month"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }

    /// The unit a quota's period names in its text form (`10000/day`, `1/week`, `5/month`,
    /// with or without a leading `1`), or `None`.
    pub fn from_period_text(text: &str) -> Option<Self> {
        match text.trim().trim_start_matches('1') {
            "d" | "day" | "days" => Some(Self::Day),
            "w" | "week" | "weeks" => Some(Self::Week),
            "mo" | "month" | "months" => Some(Self::Month),
            _ => None,
        }
    }

    /// The longest period of this unit in any zone this crate accepts, in microseconds: the
    /// nominal length plus two hours (the largest daylight-saving shift in the database). The
    /// sliding window counter's bound `limit x max_period <= 2^51` uses it.
    pub fn max_period(self) -> Micros {
        match self {
            Self::Day => DAY + 2 * HOUR,
            Self::Week => 7 * DAY + 2 * HOUR,
            Self::Month => 31 * DAY + 2 * HOUR,
        }
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a calendar could not be built or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarError {
    /// The zone is not in the IANA time zone database.
    #[error("unknown time zone {0:?} (an IANA name such as \"America/Los_Angeles\" or \"UTC\")")]
    UnknownZone(String),
    /// The weekday of `week_start` is not a weekday name.
    #[error("unknown weekday {0:?} (monday, tuesday, ..., sunday)")]
    UnknownWeekday(String),
    /// Only the fixed window and the sliding window counter count in calendar periods.
    #[error(
        "calendar periods apply to fixed_window and sliding_window only, not {0}: a bucket \
         refills at a constant rate and a sliding log slides by a fixed duration"
    )]
    Algorithm(AlgorithmKind),
    /// The sliding window counter multiplies by the period's length.
    #[error(
        "limit x longest {unit} = {value} exceeds {max}, the largest value computed exactly in \
         every store; the largest limit is {largest}"
    )]
    NotExact {
        /// The calendar unit.
        unit: CalendarUnit,
        /// `limit x unit.max_period()`.
        value: u128,
        /// [`MAX_EXACT`].
        max: u64,
        /// The largest limit that fits.
        largest: u64,
    },
    /// A limit of 0 or above [`MAX_EXACT`].
    #[error("limit must be between 1 and {MAX_EXACT}")]
    Limit,
    /// `now` lies outside the span the time zone database covers (years -9999 to 9999), or
    /// outside the boundaries a script was given.
    #[error("time {0} us is outside the calendar's range")]
    OutOfRange(Timestamp),
}

/// Why a calendar check could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarCheckError {
    /// `cost` above the limit.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// No period for `now`.
    #[error(transparent)]
    Calendar(#[from] CalendarError),
}

/// The calendar period holding a time and its neighbours, in microseconds since the epoch:
/// `previous_start < start < end < next_end`; the period is `[start, end)`, the previous one
/// `[previous_start, start)`, the next `[end, next_end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalendarWindow {
    /// Start of the period before.
    pub previous_start: Timestamp,
    /// Start of the period.
    pub start: Timestamp,
    /// End of the period (exclusive): the start of the next one.
    pub end: Timestamp,
    /// End of the next period.
    pub next_end: Timestamp,
}

impl CalendarWindow {
    /// `end - start`, at least 1.
    pub fn len(&self) -> Micros {
        self.end - self.start
    }

    /// Always false: a period holds at least one microsecond.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A source of calendar windows.
pub trait Periods {
    /// The window whose period holds `t`, or `None` when `t` is outside this source's range.
    fn window_at(&self, t: Timestamp) -> Option<CalendarWindow>;
}

/// Calendar periods of one unit in one IANA time zone.
#[derive(Clone, PartialEq)]
pub struct Calendar {
    zone: TimeZone,
    name: String,
    unit: CalendarUnit,
    week_start: Weekday,
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({} in {}", self.unit, self.name)?;
        if self.unit == CalendarUnit::Week {
            write!(f, ", from {}", weekday_name(self.week_start))?;
        }
        f.write_str(")")
    }
}

/// The lowercase English name of a weekday.
pub fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "monday",
        Weekday::Tuesday => "tuesday",
        Weekday::Wednesday => "wednesday",
        Weekday::Thursday => "thursday",
        Weekday::Friday => "friday",
        Weekday::Saturday => "saturday",
        Weekday::Sunday => "sunday",
    }
}

/// Parses a weekday name (`monday` .. `sunday`, or its first three letters; any case).
///
/// # Errors
/// [`CalendarError::UnknownWeekday`].
pub fn parse_weekday(text: &str) -> Result<Weekday, CalendarError> {
    let lower = text.trim().to_ascii_lowercase();
    let days = [
        Weekday::Monday,
        Weekday::Tuesday,
        Weekday::Wednesday,
        Weekday::Thursday,
        Weekday::Friday,
        Weekday::Saturday,
        Weekday::Sunday,
    ];
    days.into_iter()
        .find(|d| {
            let name = weekday_name(*d);
            lower == name || (lower.len() == 3 && name.starts_with(&lower))
        })
        .ok_or_else(|| CalendarError::UnknownWeekday(text.to_string()))
}

impl Calendar {
    /// Periods of `unit` in the zone named `zone` (`"America/Los_Angeles"`, `"UTC"`); a week
    /// starts on `week_start` (Monday when `None`, ISO 8601).
    ///
    /// # Errors
    /// [`CalendarError::UnknownZone`] for a name the bundled database does not hold.
    pub fn new(
        zone: &str,
        unit: CalendarUnit,
        week_start: Option<Weekday>,
    ) -> Result<Self, CalendarError> {
        let tz = jiff::tz::db()
            .get(zone)
            .map_err(|_| CalendarError::UnknownZone(zone.to_string()))?;
        Ok(Self {
            zone: tz,
            name: zone.to_string(),
            unit,
            week_start: week_start.unwrap_or(Weekday::Monday),
        })
    }

    /// The zone's name as given.
    pub fn zone(&self) -> &str {
        &self.name
    }

    /// The period length.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The first day of a week.
    pub fn week_start(&self) -> Weekday {
        self.week_start
    }

    /// The local date of `t`.
    fn date_of(&self, t: Timestamp) -> Option<Date> {
        let ts = jiff::Timestamp::from_microsecond(i64::try_from(t).ok()?).ok()?;
        Some(ts.to_zoned_datetime(self.zone.clone()).date())
    }

    /// The first instant of local date `date` (midnight, or the end of a gap that swallowed it).
    fn instant_of(&self, date: Date) -> Option<Timestamp> {
        let zoned = date.to_zoned_datetime(self.zone.clone()).ok()?;
        u64::try_from(zoned.timestamp().as_microsecond()).ok()
    }

    /// The first local date of the period holding `date`, and of the next period.
    fn period_dates(&self, date: Date) -> Option<(Date, Date)> {
        let first = match self.unit {
            CalendarUnit::Day => date,
            CalendarUnit::Week => {
                let back = self.week_start.until(date.weekday());
                date.checked_sub(i64::from(back).days()).ok()?
            }
            CalendarUnit::Month => date.first_of_month(),
        };
        let next = match self.unit {
            CalendarUnit::Day => first.tomorrow().ok()?,
            CalendarUnit::Week => first.checked_add(7.days()).ok()?,
            CalendarUnit::Month => first.checked_add(1.month()).ok()?,
        };
        Some((first, next))
    }

    /// The period `[start, end)` holding `t`.
    pub fn period_at(&self, t: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let (mut first, mut next) = self.period_dates(self.date_of(t)?)?;
        // A period whose dates a gap swallowed (Samoa skipped 2011-12-30) is empty: its start
        // and end are the same instant. Step over empty periods to the one that holds `t`.
        for _ in 0..4 {
            let (start, end) = (self.instant_of(first)?, self.instant_of(next)?);
            if start <= t && t < end {
                return Some((start, end));
            }
            if t < start {
                return self.period_at(start.checked_sub(1)?);
            }
            (first, next) = self.period_dates(next)?;
        }
        None
    }

    /// Six consecutive period starts `b[0] < ... < b[5]` with `t` in `[b[2], b[3])`: what the
    /// Redis script receives ([`Boundaries`]), so that a clock a period behind or ahead of `t`
    /// still finds its window.
    pub fn boundaries_around(&self, t: Timestamp) -> Option<Boundaries> {
        let (start, end) = self.period_at(t)?;
        let (b1, _) = self.period_at(start.checked_sub(1)?)?;
        let (b0, _) = self.period_at(b1.checked_sub(1)?)?;
        let (_, b4) = self.period_at(end)?;
        let (_, b5) = self.period_at(b4)?;
        Some(Boundaries([b0, b1, start, end, b4, b5]))
    }

    /// The local transitions of the zone's daylight-saving changes inside the period holding
    /// `t`, as a length: `Some(len)` when the period is not its unit's nominal length in
    /// whole days (a day of 23 or 25 hours).
    pub fn irregular_len(&self, t: Timestamp) -> Option<Micros> {
        let (start, end) = self.period_at(t)?;
        let len = end - start;
        let nominal = match self.unit {
            CalendarUnit::Day => DAY,
            CalendarUnit::Week => 7 * DAY,
            CalendarUnit::Month => len - len % DAY,
        };
        (len != nominal).then_some(len)
    }

    /// The local date (`YYYY-MM-DD`) of `t`.
    pub fn local_date(&self, t: Timestamp) -> Option<String> {
        Some(self.date_of(t)?.to_string())
    }
}

impl Calendar {
    /// The calendar in words, with the irregular periods of the year from `now`, for
    /// `check-config`: `"resets at 00:00 America/Los_Angeles; 23 h on 2027-03-14, 25 h on
    /// 2027-11-07"` (weeks: `"resets at 00:00 on sunday ..."`, months `"... on the 1st ..."`;
    /// an irregular week or month is named by its first local date).
    pub fn describe(&self, now: Timestamp) -> String {
        let when = match self.unit {
            CalendarUnit::Day => String::new(),
            CalendarUnit::Week => format!(" on {}", weekday_name(self.week_start)),
            CalendarUnit::Month => " on the 1st".to_string(),
        };
        let mut text = format!("resets at 00:00{when} {}", self.name);
        let mut irregular = Vec::new();
        let horizon = now.saturating_add(366 * DAY);
        let mut t = now;
        while t < horizon {
            let Some((start, end)) = self.period_at(t) else {
                break;
            };
            if let (Some(len), Some(date)) = (self.irregular_len(t), self.local_date(start)) {
                irregular.push(format!("{} on {date}", human_len(len)));
            }
            t = end;
        }
        if !irregular.is_empty() {
            text.push_str("; ");
            text.push_str(&irregular.join(", "));
        }
        text
    }
}

/// `23 h`, `6 d 23 h`, `24 h 30 min`: a period length in words.
fn human_len(len: Micros) -> String {
    const MINUTE: Micros = 60_000_000;
    let (days, hours, minutes) = (len / DAY, len % DAY / HOUR, len % HOUR / MINUTE);
    let mut parts = Vec::new();
    if days > 1 {
        parts.push(format!("{days} d"));
        parts.push(format!("{hours} h"));
    } else {
        parts.push(format!("{} h", days * 24 + hours));
    }
    if minutes > 0 {
        parts.push(format!("{minutes} min"));
    }
    parts.join(" ")
}

impl Periods for Calendar {
    fn window_at(&self, t: Timestamp) -> Option<CalendarWindow> {
        let (start, end) = self.period_at(t)?;
        let (previous_start, _) = self.period_at(start.checked_sub(1)?)?;
        let (_, next_end) = self.period_at(end)?;
        Some(CalendarWindow {
            previous_start,
            start,
            end,
            next_end,
        })
    }
}

/// Six consecutive period starts, as the service hands them to the Redis script: a time in
/// `[b[1], b[4])` finds its window (the periods of `b[1]`, `b[2]` and `b[3]`), anything else is
/// out of range. The Lua search is the same as [`Periods::window_at`] here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Boundaries(pub [Timestamp; 6]);

impl Periods for Boundaries {
    fn window_at(&self, t: Timestamp) -> Option<CalendarWindow> {
        let b = &self.0;
        (1..=3)
            .find(|&i| b[i] <= t && t < b[i + 1])
            .map(|i| CalendarWindow {
                previous_start: b[i - 1],
                start: b[i],
                end: b[i + 1],
                next_end: b[i + 2],
            })
    }
}

/// A window algorithm counting `limit` units per calendar period.
#[derive(Debug, Clone, PartialEq)]
pub struct CalendarQuota {
    kind: AlgorithmKind,
    limit: u64,
    calendar: Calendar,
}

impl CalendarQuota {
    /// `limit` units per period of `calendar`, counted by `kind`.
    ///
    /// # Errors
    /// [`CalendarError::Algorithm`] for an algorithm other than the two windows;
    /// [`CalendarError::Limit`]; [`CalendarError::NotExact`] for a sliding window whose
    /// `limit x unit.max_period()` exceeds [`MAX_EXACT`].
    pub fn new(kind: AlgorithmKind, limit: u64, calendar: Calendar) -> Result<Self, CalendarError> {
        if !matches!(
            kind,
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow
        ) {
            return Err(CalendarError::Algorithm(kind));
        }
        if limit == 0 || limit > MAX_EXACT {
            return Err(CalendarError::Limit);
        }
        let max_period = calendar.unit.max_period();
        let value = u128::from(limit) * u128::from(max_period);
        if kind == AlgorithmKind::SlidingWindow && value > u128::from(MAX_EXACT) {
            return Err(CalendarError::NotExact {
                unit: calendar.unit,
                value,
                max: MAX_EXACT,
                largest: MAX_EXACT / max_period,
            });
        }
        Ok(Self {
            kind,
            limit,
            calendar,
        })
    }

    /// The algorithm.
    pub fn kind(&self) -> AlgorithmKind {
        self.kind
    }

    /// Units per period.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The calendar.
    pub fn calendar(&self) -> &Calendar {
        &self.calendar
    }

    /// A fixed window check (or a peek with `cost == 0`) at `now`.
    ///
    /// # Errors
    /// [`CheckError::InsufficientCapacity`] for `cost > limit`; [`CalendarError::OutOfRange`].
    pub fn check_fixed(
        &self,
        state: &mut FixedWindowState,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CalendarCheckError> {
        validate_cost(cost, self.limit)?;
        decide_fixed_window(self.limit, state, now, cost, cost > 0, &self.calendar)
            .ok_or_else(|| CalendarError::OutOfRange(now).into())
    }

    /// What [`CalendarQuota::check_fixed`] would answer, consuming nothing.
    ///
    /// # Errors
    /// As [`CalendarQuota::check_fixed`].
    pub fn peek_fixed(
        &self,
        state: &FixedWindowState,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CalendarCheckError> {
        validate_cost(cost, self.limit)?;
        decide_fixed_window(
            self.limit,
            &mut state.clone(),
            now,
            cost,
            false,
            &self.calendar,
        )
        .ok_or_else(|| CalendarError::OutOfRange(now).into())
    }

    /// What [`CalendarQuota::check_sliding`] would answer, consuming nothing.
    ///
    /// # Errors
    /// As [`CalendarQuota::check_fixed`].
    pub fn peek_sliding(
        &self,
        state: &SlidingWindowState,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CalendarCheckError> {
        validate_cost(cost, self.limit)?;
        decide_sliding_window(
            self.limit,
            &mut state.clone(),
            now,
            cost,
            false,
            &self.calendar,
        )
        .ok_or_else(|| CalendarError::OutOfRange(now).into())
    }

    /// A sliding window counter check (or a peek with `cost == 0`) at `now`.
    ///
    /// # Errors
    /// As [`CalendarQuota::check_fixed`].
    pub fn check_sliding(
        &self,
        state: &mut SlidingWindowState,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CalendarCheckError> {
        validate_cost(cost, self.limit)?;
        decide_sliding_window(self.limit, state, now, cost, cost > 0, &self.calendar)
            .ok_or_else(|| CalendarError::OutOfRange(now).into())
    }
}

/// The fixed window of `docs/spec/calendar.md`: `limit` units per period of `periods`.
/// `1 <= cost <= limit` or `cost == 0`; the state is written only when allowed, `consume` and
/// `cost > 0`. `None` (state unchanged) when `periods` has no window for the effective `now`.
pub fn decide_fixed_window(
    limit: u64,
    state: &mut FixedWindowState,
    now: Timestamp,
    cost: u64,
    consume: bool,
    periods: &impl Periods,
) -> Option<Decision> {
    // Backwards time: a `now` before the state's window is read as the window's start.
    let now = now.max(state.window_start);
    let w = periods.window_at(now)?;
    let count = if state.window_start == w.start {
        state.count
    } else if state.window_start == w.previous_start {
        // what a closed window carried into this one (reservations; never with calendar checks)
        state.count.saturating_sub(limit)
    } else {
        0
    };
    let allowed = cost <= limit.saturating_sub(count);
    let count_after = if allowed && consume && cost > 0 {
        state.window_start = w.start;
        state.count = count + cost;
        state.count
    } else {
        count
    };
    let to_edge = w.end - now;
    Some(Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(count_after),
        reset_after: if count_after > 0 { to_edge } else { 0 },
        retry_after: (!allowed).then(|| {
            if count.saturating_sub(limit) + cost <= limit {
                to_edge
            } else {
                w.next_end - now
            }
        }),
    })
}

/// The sliding window counter of `docs/spec/calendar.md`: the previous period's count weighs
/// `overlap / len` of the current period `[start, start + len)`, with `overlap = len - 1 -
/// elapsed`. Same contract as [`decide_fixed_window`]. Products are at most `limit x len`
/// (`u128` here, so any limit is exact in Rust; [`CalendarQuota::new`] bounds it for Lua).
pub fn decide_sliding_window(
    limit: u64,
    state: &mut SlidingWindowState,
    now: Timestamp,
    cost: u64,
    consume: bool,
    periods: &impl Periods,
) -> Option<Decision> {
    let now = now.max(state.window_start);
    let w = periods.window_at(now)?;
    let (previous, count) = if state.window_start == w.start {
        (state.previous_count, state.count)
    } else if state.window_start == w.previous_start {
        (state.count, 0)
    } else {
        (0, 0)
    };
    let len = u128::from(w.len());
    let elapsed = now - w.start;
    let overlap = w.len() - 1 - elapsed;
    let weight = u128::from(previous) * u128::from(overlap);
    let room = limit.checked_sub(count).and_then(|r| r.checked_sub(cost));
    let allowed = cost == 0 || room.is_some_and(|room| weight <= u128::from(room) * len);
    let count_after = if allowed && consume && cost > 0 {
        *state = SlidingWindowState {
            window_start: w.start,
            count: count + cost,
            previous_count: previous,
        };
        count + cost
    } else {
        count
    };
    let weighed = u64::try_from(weight.div_ceil(len)).unwrap_or(u64::MAX);
    let remaining = limit.saturating_sub(count_after).saturating_sub(weighed);
    // `count_after` weighs until the last microsecond of the next period; `previous` until the
    // last microsecond of this one.
    let reset_after = if count_after > 0 {
        w.next_end - 1 - now
    } else if previous > 0 {
        overlap
    } else {
        0
    };
    let retry_after = (!allowed).then(|| match room {
        // Later in this period: previous x (len - 1 - e) <= room x len first holds at
        // e = len - 1 - floor(room x len / previous); previous > 0 here.
        Some(room) => {
            let q = (u128::from(room) * len) / u128::from(previous.max(1));
            overlap - u64::try_from(q).unwrap_or(u64::MAX).min(overlap)
        }
        // In the next period [end, next_end) of length `next`: count becomes the previous count
        // and count x (next - 1 - e) <= (limit - cost) x next first holds at
        // e = max(0, next - 1 - floor((limit - cost) x next / count)); count > 0 here.
        None => {
            let next = w.next_end - w.end;
            let q = (u128::from(limit - cost) * u128::from(next)) / u128::from(count.max(1));
            let first = (next - 1).saturating_sub(u64::try_from(q).unwrap_or(u64::MAX));
            w.end - now + first
        }
    });
    Some(Decision {
        allowed,
        limit,
        remaining,
        reset_after,
        retry_after,
    })
}

#[cfg(test)]
#[path = "calendar_tests.rs"]
mod tests;
