//! [`Quota`]: how many units a key may consume per period, and how many at once (burst).
//!
//! Rates are kept as an exact fraction. The emission interval (the time one unit "costs" in the
//! bucket algorithms) is `period / limit` microseconds, reduced to lowest terms
//! `numerator / denominator`. The bucket algorithms count in *ticks* of `1 / denominator`
//! microseconds, so 7 per second (142,857.142857... us per request) is exact and never drifts.

use std::fmt;
use std::str::FromStr;

use crate::error::QuotaError;
use crate::time::{Micros, MICROS_PER_SECOND};

/// Every intermediate value an algorithm computes stays at or below this bound (2^51), leaving
/// head room under 2^53, the largest integer a Lua double (Redis scripts) holds exactly.
pub const MAX_EXACT: u64 = 1 << 51;

/// The longest accepted period: 2^45 microseconds (about 1.1 years).
pub const MAX_PERIOD: Micros = 1 << 45;

/// A rate-limiting policy: `limit` units per `period`, with up to `burst` units at once.
///
/// - Window algorithms (fixed window, sliding log, sliding window counter) admit `limit` units
///   per `period` and ignore `burst`.
/// - Bucket algorithms (token bucket, leaky bucket, GCRA) refill at `limit / period` and hold at
///   most `burst` units; `burst` defaults to `limit`.
///
/// ```
/// use floodgate_core::Quota;
/// let q: Quota = "10/10s".parse().unwrap();
/// assert_eq!((q.limit(), q.period(), q.burst()), (10, 10_000_000, 10));
/// let q: Quota = "100/s burst 20".parse().unwrap();
/// assert_eq!(q.burst(), 20);
/// assert_eq!(q.to_string(), "100/s burst 20");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period: Micros,
    burst: u64,
    /// `period / gcd(limit, period)`: emission interval numerator, in microseconds.
    interval_numerator: u64,
    /// `limit / gcd(limit, period)`: ticks per microsecond.
    interval_denominator: u64,
}

impl Quota {
    /// `limit` units per `period` microseconds, with `burst = limit`.
    ///
    /// # Errors
    /// [`QuotaError::ZeroLimit`], [`QuotaError::ZeroPeriod`], [`QuotaError::PeriodTooLong`], or
    /// [`QuotaError::NotExact`] when `limit` or `limit x emission interval` would exceed
    /// [`MAX_EXACT`].
    pub fn new(limit: u64, period: Micros) -> Result<Self, QuotaError> {
        Self::with_burst(limit, period, limit)
    }

    /// `limit` units per `period` microseconds, holding at most `burst` units at once.
    ///
    /// # Errors
    /// As [`Quota::new`], plus [`QuotaError::ZeroBurst`], and [`QuotaError::NotExact`] when
    /// `burst x period / gcd(limit, period)` exceeds [`MAX_EXACT`].
    pub fn with_burst(limit: u64, period: Micros, burst: u64) -> Result<Self, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if period == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        if period > MAX_PERIOD {
            return Err(QuotaError::PeriodTooLong {
                period,
                max: MAX_PERIOD,
            });
        }
        check_exact("limit", u128::from(limit))?;
        let g = gcd(limit, period);
        let (numerator, denominator) = (period / g, limit / g);
        check_exact(
            "burst x emission interval numerator",
            u128::from(burst) * u128::from(numerator),
        )?;
        Ok(Self {
            limit,
            period,
            burst,
            interval_numerator: numerator,
            interval_denominator: denominator,
        })
    }

    /// A copy with a different burst.
    ///
    /// # Errors
    /// As [`Quota::with_burst`].
    pub fn burst_of(self, burst: u64) -> Result<Self, QuotaError> {
        Self::with_burst(self.limit, self.period, burst)
    }

    /// `limit` per second. # Errors: as [`Quota::new`].
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_second(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, MICROS_PER_SECOND)
    }

    /// `limit` per minute.
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_minute(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, 60 * MICROS_PER_SECOND)
    }

    /// `limit` per hour.
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_hour(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, 3_600 * MICROS_PER_SECOND)
    }

    /// `limit` per day (86,400 s).
    ///
    /// # Errors
    /// As [`Quota::new`].
    pub fn per_day(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, 86_400 * MICROS_PER_SECOND)
    }

    /// Units admitted per period.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The period (window length) in microseconds.
    #[inline]
    pub fn period(&self) -> Micros {
        self.period
    }

    /// The most units the bucket algorithms admit at once from a fresh state.
    #[inline]
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The emission interval `period / limit` as an exact fraction of microseconds:
    /// `(numerator, denominator)` in lowest terms. `denominator` is also the number of ticks per
    /// microsecond in the bucket algorithms.
    #[inline]
    pub fn emission_interval(&self) -> (u64, u64) {
        (self.interval_numerator, self.interval_denominator)
    }

    /// A sentence for people, e.g. `"10 requests per 10 seconds"`.
    pub fn describe(&self) -> String {
        let unit = if self.limit == 1 {
            "request"
        } else {
            "requests"
        };
        format!("{} {unit} per {}", self.limit, describe_period(self.period))
    }

    /// The smallest burst with which a bucket algorithm (token bucket, leaky bucket, GCRA)
    /// admits exactly `limit / period` when time is counted in whole microseconds:
    /// `ceil((denominator + numerator - 1) / numerator)` for an emission interval
    /// `numerator / denominator` finer than 1 us, else 1.
    ///
    /// Why: a client at full demand leaves less than one unit (`numerator` ticks) in the bucket
    /// after each microsecond's admissions, and the next microsecond refills `denominator`
    /// ticks; nothing is lost to the cap only when `numerator - 1 + denominator <= burst x
    /// numerator`. For an interval of 1 us or more one microsecond refills at most one unit and
    /// any burst of 2 is exact; with burst 1 and an interval that is not a whole number of
    /// microseconds each unit is admitted at the first whole microsecond after it refills, less
    /// than 1 us late (so at most `1 us / T` below the rate; see `docs/spec/README.md`).
    pub fn min_exact_burst(&self) -> u64 {
        let (n, d) = (self.interval_numerator, self.interval_denominator);
        if d > n {
            (d + n - 1).div_ceil(n)
        } else {
            1
        }
    }

    /// `Ok(())` when the bucket algorithms admit this quota's rate exactly (see
    /// [`Quota::min_exact_burst`]); used by their `new`.
    ///
    /// # Errors
    /// [`QuotaError::BurstTooSmall`] when the emission interval is below 1 us and `burst` is
    /// below [`Quota::min_exact_burst`].
    pub fn check_bucket_exact(&self) -> Result<(), QuotaError> {
        let min_burst = self.min_exact_burst();
        if self.burst < min_burst {
            return Err(QuotaError::BurstTooSmall {
                burst: self.burst,
                min_burst,
                limit: self.limit,
                period: self.period,
                numerator: self.interval_numerator,
                denominator: self.interval_denominator,
            });
        }
        Ok(())
    }
}

fn check_exact(what: &'static str, value: u128) -> Result<(), QuotaError> {
    if value > u128::from(MAX_EXACT) {
        Err(QuotaError::NotExact {
            what,
            value,
            max: MAX_EXACT,
        })
    } else {
        Ok(())
    }
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

const UNITS: &[(&str, Micros)] = &[
    ("d", 86_400 * MICROS_PER_SECOND),
    ("h", 3_600 * MICROS_PER_SECOND),
    ("min", 60 * MICROS_PER_SECOND),
    ("s", MICROS_PER_SECOND),
    ("ms", 1_000),
    ("us", 1),
];

fn unit_micros(unit: &str) -> Option<Micros> {
    Some(match unit {
        "us" | "µs" | "micro" | "micros" | "microsecond" | "microseconds" => 1,
        "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1_000,
        "s" | "sec" | "secs" | "second" | "seconds" => MICROS_PER_SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * MICROS_PER_SECOND,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * MICROS_PER_SECOND,
        "d" | "day" | "days" => 86_400 * MICROS_PER_SECOND,
        _ => return None,
    })
}

/// Parses a period such as `s`, `10s`, `5min`, `1h`, `day`, `250ms` into microseconds.
///
/// # Errors
/// A human-readable reason when the text is not a count followed by a known unit.
pub fn parse_period(text: &str) -> Result<Micros, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("period {text:?} has no unit (use us, ms, s, min, h or day)"))?;
    let (count, unit) = text.split_at(split);
    let count: u64 = if count.is_empty() {
        1
    } else {
        count.parse().map_err(|_| {
            format!(
                "period count {count} is too large: the longest period is {MAX_PERIOD} us \
                 (about {} days)",
                MAX_PERIOD / (86_400 * MICROS_PER_SECOND)
            )
        })?
    };
    let unit = unit.trim();
    if unit.starts_with('.') && split > 0 {
        return Err(format!(
            "period {text:?} is not a whole number of its unit: use a smaller unit (1500ms, \
             not 1.5s)"
        ));
    }
    let per_unit = unit_micros(unit)
        .ok_or_else(|| format!("unknown period unit {unit:?} (use us, ms, s, min, h or day)"))?;
    count
        .checked_mul(per_unit)
        .ok_or_else(|| format!("period {text:?} is too long"))
}

/// A limit or burst: a whole number, at most [`MAX_EXACT`]; the message says which of the two
/// is wrong (digits too many for the bound are "too large", not "not a whole number").
fn parse_count(what: &str, text: &str) -> Result<u64, String> {
    let too_large = || {
        format!("{what} {text} is too large: the largest {what} is {MAX_EXACT} (2^51, exact in every store)")
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} {text:?} is not a whole number"));
    }
    match text.parse::<u64>() {
        Ok(n) if n <= MAX_EXACT => Ok(n),
        _ => Err(too_large()),
    }
}

/// Formats a period in microseconds as the largest whole unit, e.g. `10s`, `min`, `1500ms`.
pub fn format_period(period: Micros) -> String {
    for (name, micros) in UNITS {
        if period.is_multiple_of(*micros) {
            let n = period / micros;
            return if n == 1 {
                (*name).to_string()
            } else {
                format!("{n}{name}")
            };
        }
    }
    unreachable!("every period is a whole number of microseconds")
}

fn describe_period(period: Micros) -> String {
    const WORDS: &[(&str, Micros)] = &[
        ("day", 86_400 * MICROS_PER_SECOND),
        ("hour", 3_600 * MICROS_PER_SECOND),
        ("minute", 60 * MICROS_PER_SECOND),
        ("second", MICROS_PER_SECOND),
        ("millisecond", 1_000),
        ("microsecond", 1),
    ];
    for (word, micros) in WORDS {
        if period.is_multiple_of(*micros) {
            let n = period / micros;
            return if n == 1 {
                (*word).to_string()
            } else {
                format!("{n} {word}s")
            };
        }
    }
    unreachable!("every period is a whole number of microseconds")
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.limit, format_period(self.period))?;
        if self.burst != self.limit {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    /// Parses `LIMIT/PERIOD` with an optional burst: `100/s`, `10/10s`, `5/min`, `1/h`,
    /// `10000/day`, `3/20s`, `100/s burst 20` (also `burst=20`).
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| QuotaError::Parse {
            input: input.to_string(),
            reason,
        };
        let text = input.trim();
        let (rate, burst) = match text.find("burst") {
            Some(at) => {
                let b = text[at + "burst".len()..].trim_start();
                let b = b.strip_prefix('=').unwrap_or(b).trim();
                let burst = parse_count("burst", b).map_err(fail)?;
                (text[..at].trim().trim_end_matches(','), Some(burst))
            }
            None => (text, None),
        };
        let (limit, period) = rate
            .split_once('/')
            .ok_or_else(|| fail("expected LIMIT/PERIOD, e.g. 100/s or 10/10s".into()))?;
        let limit = limit.trim();
        let limit = parse_count("limit", limit).map_err(fail)?;
        let period = parse_period(period).map_err(fail)?;
        Quota::with_burst(limit, period, burst.unwrap_or(limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_with_a_fraction_asks_for_a_smaller_unit() {
        for text in ["1.5s", "2.5min", "0.5h"] {
            let e = parse_period(text).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "period {text:?} is not a whole number of its unit: use a smaller unit \
                     (1500ms, not 1.5s)"
                )
            );
        }
        assert_eq!(parse_period("1500ms"), Ok(1_500_000));
        // No count before the dot: not a number at all, an unknown unit.
        assert!(parse_period(".5s")
            .unwrap_err()
            .contains("unknown period unit"));
    }

    /// Issue 10 item 12: a number too large for a quota says so and gives the bound.
    #[test]
    fn a_number_too_large_says_so_and_gives_the_bound() {
        let message = |text: &str| text.parse::<Quota>().unwrap_err().to_string();
        assert_eq!(
            message("99999999999999999999/min"),
            "invalid quota \"99999999999999999999/min\": limit 99999999999999999999 is too \
             large: the largest limit is 2251799813685248 (2^51, exact in every store)"
        );
        assert!(message("2251799813685249/min").contains("limit 2251799813685249 is too large"));
        assert!(message("10/s burst 99999999999999999999")
            .contains("burst 99999999999999999999 is too large"));
        assert!(message("-1/min").contains("limit \"-1\" is not a whole number"));
        assert!(message("1.5/min").contains("is not a whole number"));
        assert!(message("1/99999999999999999999s")
            .contains("period count 99999999999999999999 is too large: the longest period is"));
        assert_eq!(
            "2251799813685248/us".parse::<Quota>().map(|q| q.limit()),
            Ok(MAX_EXACT)
        );
    }

    #[test]
    fn parses_the_documented_forms() {
        let cases = [
            ("100/s", 100, MICROS_PER_SECOND),
            ("10/10s", 10, 10 * MICROS_PER_SECOND),
            ("5/min", 5, 60 * MICROS_PER_SECOND),
            ("1/h", 1, 3_600 * MICROS_PER_SECOND),
            ("10000/day", 10_000, 86_400 * MICROS_PER_SECOND),
            ("3/20s", 3, 20 * MICROS_PER_SECOND),
            ("7/1500ms", 7, 1_500_000),
        ];
        for (text, limit, period) in cases {
            let q: Quota = text.parse().unwrap();
            assert_eq!(
                (q.limit(), q.period(), q.burst()),
                (limit, period, limit),
                "{text}"
            );
            assert_eq!(
                q.to_string().parse::<Quota>().unwrap(),
                q,
                "round trip {text}"
            );
        }
        let q: Quota = "100/s burst=20".parse().unwrap();
        assert_eq!(q.burst(), 20);
    }

    #[test]
    fn rejects_bad_text_with_reasons() {
        for text in [
            "",
            "100",
            "x/s",
            "100/",
            "100/fortnight",
            "100/s burst x",
            "-1/s",
        ] {
            assert!(
                matches!(text.parse::<Quota>(), Err(QuotaError::Parse { .. })),
                "{text}"
            );
        }
        assert_eq!("0/s".parse::<Quota>(), Err(QuotaError::ZeroLimit));
        assert_eq!("1/0s".parse::<Quota>(), Err(QuotaError::ZeroPeriod));
        assert_eq!("1/s burst 0".parse::<Quota>(), Err(QuotaError::ZeroBurst));
    }

    #[test]
    fn emission_interval_is_reduced_exactly() {
        assert_eq!(
            Quota::per_second(7).unwrap().emission_interval(),
            (1_000_000, 7)
        );
        assert_eq!(
            Quota::per_second(100).unwrap().emission_interval(),
            (10_000, 1)
        );
        assert_eq!(
            Quota::per_hour(1).unwrap().emission_interval(),
            (3_600_000_000, 1)
        );
    }

    #[test]
    fn huge_values_are_rejected_not_rounded() {
        assert!(matches!(
            Quota::new(1, MAX_PERIOD + 1),
            Err(QuotaError::PeriodTooLong { .. })
        ));
        assert!(matches!(
            Quota::new(u64::MAX, 1),
            Err(QuotaError::NotExact { .. })
        ));
        // 999,983 (prime) per day: burst x numerator = 999,983 x 86,400,000,000 > 2^51.
        assert!(matches!(
            Quota::per_day(999_983),
            Err(QuotaError::NotExact { .. })
        ));
        // A million per day reduces to 86,400 us per unit and is exact.
        assert!(Quota::per_day(1_000_000).is_ok());
    }

    /// Issue 17, case 3: `2000000/s burst 1` (one unit every 0.5 us) cannot be honoured with a
    /// microsecond clock; the smallest exact burst is 2. Intervals of 1 us or more need nothing.
    #[test]
    fn rates_finer_than_a_microsecond_name_their_smallest_exact_burst() {
        let q: Quota = "2000000/s burst 1".parse().unwrap();
        assert_eq!(q.min_exact_burst(), 2);
        let err = q.check_bucket_exact().unwrap_err();
        assert!(matches!(
            err,
            QuotaError::BurstTooSmall {
                burst: 1,
                min_burst: 2,
                ..
            }
        ));
        assert!(
            err.to_string().contains("smallest exact burst is 2"),
            "{err}"
        );
        assert!(q.burst_of(2).unwrap().check_bucket_exact().is_ok());
        // 5 per 3 us: T = 3/5 us; (5 + 3 - 1) / 3 rounded up = 3.
        assert_eq!(Quota::with_burst(5, 3, 1).unwrap().min_exact_burst(), 3);
        // 10^7/s with the default burst (the limit) is exact.
        assert!("10000000/s"
            .parse::<Quota>()
            .unwrap()
            .check_bucket_exact()
            .is_ok());
        for text in [
            "1000000/s burst 1",
            "7/s burst 1",
            "1/h burst 1",
            "3/2us burst 2",
        ] {
            assert!(
                text.parse::<Quota>().unwrap().check_bucket_exact().is_ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn describes_for_people() {
        assert_eq!(
            "10/10s".parse::<Quota>().unwrap().describe(),
            "10 requests per 10 seconds"
        );
        assert_eq!(
            "1/h".parse::<Quota>().unwrap().describe(),
            "1 request per hour"
        );
    }
}
