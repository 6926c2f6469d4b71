//! `calendar = "America/Los_Angeles"` (and `week_start = "monday"`) on a `[[rules]]` entry: the
//! fixed window or the sliding window counter counting `limit = "10000/day"` (`/week`,
//! `/month`) per calendar period of an IANA time zone (`docs/spec/calendar.md`).

use floodgate_core::calendar::{parse_weekday, Calendar, CalendarUnit};
use floodgate_core::{AlgorithmKind, Policy, Quota, MICROS_PER_SECOND};

use super::validator::Validator;
use crate::config::raw::RawRule;

const DAY: u64 = 86_400 * MICROS_PER_SECOND;

/// The nominal length a calendar rule's quota carries (its `RateLimit-Policy` window and the
/// quota shown in answers): a day, seven days, 30 days for a month. Decisions never use it.
pub(crate) fn nominal_period(unit: CalendarUnit) -> u64 {
    match unit {
        CalendarUnit::Day => DAY,
        CalendarUnit::Week => 7 * DAY,
        CalendarUnit::Month => 30 * DAY,
    }
}

/// `"10000/day"` as (10000, day); the message names what is wrong.
fn parse_limit(text: &str) -> Result<(u64, CalendarUnit), String> {
    let (count, period) = text.split_once('/').ok_or_else(|| {
        format!("with a calendar, limit is a count per period, such as \"10000/day\" (day, week or month), got {text:?}")
    })?;
    let count = count.trim();
    let limit = count
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("limit {count:?} is not a whole number of at least 1"))?;
    let unit = CalendarUnit::from_period_text(period).ok_or_else(|| {
        format!(
            "a calendar period is day, week or month, got {:?} (leave out `calendar` for \
             fixed-duration windows)",
            period.trim()
        )
    })?;
    Ok((limit, unit))
}

impl Validator<'_> {
    /// `week_start` without `calendar`.
    pub(super) fn calendar_stray(&mut self, at: &str, r: &RawRule) {
        if let (None, Some(w)) = (&r.calendar, &r.week_start) {
            self.push(
                w,
                format!("{at}.week_start"),
                "week_start applies to calendar weeks only: add calendar = \"<IANA zone>\" and \
                 limit = \"N/week\""
                    .into(),
            );
        }
    }

    /// The policy of a rule with `calendar`; `None` when it has errors (pushed, each naming its
    /// field): one check per field, in the order of the file.
    pub(super) fn calendar_policy(
        &mut self,
        at: &str,
        r: &RawRule,
        kind: AlgorithmKind,
    ) -> Option<Policy> {
        let zone = r.calendar.as_ref()?;
        let before = self.errors.len();
        if !matches!(
            kind,
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow
        ) {
            let msg = format!(
                "calendar periods need algorithm = \"fixed_window\" or \"sliding_window\", not \
                 {kind}: a bucket refills at a constant rate and a sliding log slides by a \
                 fixed duration"
            );
            match &r.algorithm {
                Some(a) => self.push(a, format!("{at}.algorithm"), msg),
                None => self.push(zone, format!("{at}.algorithm"), msg),
            }
        }
        if let Some(b) = &r.burst {
            self.push(
                b,
                format!("{at}.burst"),
                "a calendar period admits `limit` units; burst does not apply".into(),
            );
        }
        if let Some(p) = &r.period {
            self.push(
                p,
                format!("{at}.period"),
                "with a calendar, write the period in the limit: limit = \"10000/day\"".into(),
            );
        }
        if let Some(d) = &r.delay {
            self.push(
                d,
                format!("{at}.delay"),
                "a calendar rule refuses at once (it schedules nothing for later): remove `delay`"
                    .into(),
            );
        }
        let parsed = match r.limit.get_ref() {
            toml::Value::String(text) => parse_limit(text),
            other => Err(format!(
                "with a calendar, limit is a quota text such as \"10000/day\", got {other}"
            )),
        };
        let (limit, unit) = match parsed {
            Ok(v) => Some(v),
            Err(msg) => {
                self.push(&r.limit, format!("{at}.limit"), msg);
                None
            }
        }?;
        let week_start = match &r.week_start {
            None => None,
            Some(w) if unit != CalendarUnit::Week => {
                self.push(
                    w,
                    format!("{at}.week_start"),
                    format!("only a week has a first weekday; this limit counts per {unit}"),
                );
                None
            }
            Some(w) => match parse_weekday(w.get_ref()) {
                Ok(day) => Some(day),
                Err(e) => {
                    self.push(w, format!("{at}.week_start"), e.to_string());
                    None
                }
            },
        };
        let calendar = match Calendar::new(zone.get_ref(), unit, week_start) {
            Ok(c) => Some(c),
            Err(e) => {
                self.push(zone, format!("{at}.calendar"), e.to_string());
                None
            }
        };
        if self.errors.len() > before {
            return None;
        }
        let built = Quota::new(limit, nominal_period(unit))
            .map_err(|e| e.to_string())
            .and_then(|q| Policy::new(kind, q).map_err(|e| e.to_string()))
            .and_then(|p| match calendar {
                Some(c) => p.with_calendar(c).map_err(|e| e.to_string()),
                None => Err("no calendar".to_string()),
            });
        match built {
            Ok(p) => Some(p),
            Err(msg) => {
                self.push(&r.limit, format!("{at}.limit"), msg);
                None
            }
        }
    }
}

/// `policy` (a limit override's, built from `base`'s kind) counting in `base`'s calendar.
pub(crate) fn keep_calendar(base: &Policy, policy: Policy) -> Policy {
    match base.calendar() {
        Some(c) => policy
            .clone()
            .with_calendar(c.calendar().clone())
            .unwrap_or(policy),
        None => policy,
    }
}
