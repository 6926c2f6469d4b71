//! Traffic: the requests a simulation replays, built-in scenarios, and duration parsing.
//!
//! Every time here is simulation time: microseconds since the start of the simulation. The
//! engine adds a period-aligned epoch base before calling the algorithms (see
//! [`epoch_base`](super::engine::epoch_base)), so simulation time `k x period` is a window edge.

use floodgate_core::{Micros, Quota, MICROS_PER_SECOND};

/// One request of the replayed traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// When the request arrives, in microseconds since the start of the simulation.
    pub t_us: Micros,
    /// The rate-limit key (user, API key, client IP ...).
    pub key: String,
    /// Units the request consumes (1 for a plain request).
    pub cost: u64,
    /// Which part of the traffic generated it: `burst-1`, `burst-2`, `calm`, `spike`, `flood`
    /// or `trace`. Summaries count admissions per source.
    pub source: &'static str,
}

/// A complete, time-ordered traffic pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traffic {
    /// The scenario's name (`boundary`, `calm-spike`, `flood`, or `trace`).
    pub name: String,
    /// One line for people, e.g. `100 requests at 0.95 s, 100 at 1.05 s (key "client")`.
    pub description: String,
    /// The requests, sorted by `t_us` (ties keep generation order).
    pub requests: Vec<Request>,
    /// How much simulated time the per-second table and the charts cover, in microseconds; at
    /// least up to the last request.
    pub span_us: Micros,
}

impl Traffic {
    fn new(name: &str, description: String, mut requests: Vec<Request>, span_us: Micros) -> Self {
        // A stable sort keeps generation order at equal timestamps (calm before spike).
        requests.sort_by_key(|r| r.t_us);
        let last = requests.last().map_or(0, |r| r.t_us + 1);
        Self {
            name: name.to_string(),
            description,
            requests,
            span_us: span_us.max(last),
        }
    }
}

/// `n` requests of cost 1 spread evenly over `[start, start + spread)`: request `i` arrives at
/// `start + floor(i x spread / n)`. With `spread == 0` they all arrive at `start`.
fn burst(
    out: &mut Vec<Request>,
    start: Micros,
    n: u64,
    spread: Micros,
    key: &str,
    source: &'static str,
) {
    for i in 0..n {
        let offset = (u128::from(i) * u128::from(spread) / u128::from(n)) as u64;
        out.push(Request {
            t_us: start + offset,
            key: key.to_string(),
            cost: 1,
            source,
        });
    }
}

/// Two bursts on either side of the first window edge (simulation time `period`).
///
/// The first burst of `requests` starts `before` the edge, the second starts `after` it; each is
/// spread evenly over `spread`. The defaults ([`Boundary::for_quota`]) are the documents'
/// simulated-clock case: `limit` requests at `0.95 x period` and `limit` at `1.05 x period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundary {
    /// Requests in each burst.
    pub requests: u64,
    /// How long before the window edge the first burst starts, in microseconds.
    pub before: Micros,
    /// How long after the window edge the second burst starts, in microseconds.
    pub after: Micros,
    /// How long each burst lasts (requests evenly spaced), in microseconds; 0 = one instant.
    pub spread: Micros,
    /// The window edge, in microseconds of simulation time (the quota's period).
    pub edge: Micros,
    /// The key every request uses.
    pub key: String,
}

impl Boundary {
    /// `limit` requests at `0.95 x period` and `limit` at `1.05 x period`, one instant each.
    pub fn for_quota(quota: &Quota) -> Self {
        Self {
            requests: quota.limit(),
            before: quota.period() / 20,
            after: quota.period() / 20,
            spread: 0,
            edge: quota.period(),
            key: "client".to_string(),
        }
    }

    /// How many requests [`Boundary::traffic`] generates (`2 x requests`), computed without
    /// generating them, so a bound can be checked first.
    pub fn count(&self) -> u128 {
        2 * u128::from(self.requests)
    }

    /// The requests of both bursts; the charts cover two periods.
    ///
    /// # Errors
    /// When `before` is longer than the first window (the burst would start before time 0).
    pub fn traffic(&self) -> Result<Traffic, String> {
        if self.before > self.edge {
            return Err(format!(
                "--before {} reaches before the start of the simulation (the edge is at {})",
                format_duration(self.before),
                format_duration(self.edge)
            ));
        }
        let first = self.edge - self.before;
        let second = self.edge + self.after;
        let mut requests = Vec::new();
        burst(
            &mut requests,
            first,
            self.requests,
            self.spread,
            &self.key,
            "burst-1",
        );
        burst(
            &mut requests,
            second,
            self.requests,
            self.spread,
            &self.key,
            "burst-2",
        );
        let over = if self.spread == 0 {
            String::new()
        } else {
            format!(" over {}", format_span(self.spread))
        };
        let description = format!(
            "{n} requests at {a}{over}, {n} at {b}{over}, around the window edge at {e} (key {k:?})",
            n = self.requests,
            a = format_duration(first),
            b = format_duration(second),
            e = format_duration(self.edge),
            k = self.key,
        );
        Ok(Traffic::new(
            "boundary",
            description,
            requests,
            2 * self.edge,
        ))
    }
}

/// A calm client plus a sudden spike from the same key.
///
/// The calm client sends one request every `every` from time 0 until `duration`; the spike of
/// `requests` arrives at `at` (spread over `spread`). At equal timestamps the calm request comes
/// first. Defaults ([`CalmSpike::for_quota`]): one calm request per `period / limit` (1 s at the
/// documents' 10 per 10 s), a spike of `1.5 x limit` (15) at `0.45 x period` (4.5 s), for two
/// periods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalmSpike {
    /// Interval between calm requests, in microseconds (at least 1).
    pub every: Micros,
    /// How long the calm client keeps going, in microseconds.
    pub duration: Micros,
    /// Requests in the spike.
    pub requests: u64,
    /// When the spike starts, in microseconds.
    pub at: Micros,
    /// How long the spike lasts, in microseconds; 0 = one instant.
    pub spread: Micros,
    /// The key every request uses.
    pub key: String,
}

impl CalmSpike {
    /// The defaults described on [`CalmSpike`].
    pub fn for_quota(quota: &Quota) -> Self {
        Self {
            every: (quota.period() / quota.limit()).max(1),
            duration: 2 * quota.period(),
            requests: (quota.limit() * 3).div_ceil(2),
            at: quota.period() * 9 / 20,
            spread: 0,
            key: "client".to_string(),
        }
    }

    /// How many requests [`CalmSpike::traffic`] generates: `ceil(duration / every)` calm ones
    /// (at `0, every, 2 x every ...` below `duration`) plus the spike's `requests`, computed
    /// without generating them. With `every == 0` (which `traffic` refuses) only the spike is
    /// counted.
    pub fn count(&self) -> u128 {
        let calm = match self.every {
            0 => 0,
            every => u128::from(self.duration.div_ceil(every)),
        };
        calm + u128::from(self.requests)
    }

    /// The calm requests and the spike.
    ///
    /// # Errors
    /// When `every` is 0.
    pub fn traffic(&self) -> Result<Traffic, String> {
        if self.every == 0 {
            return Err("--every must be longer than 0".into());
        }
        let mut requests = Vec::new();
        let mut t = 0;
        while t < self.duration {
            requests.push(Request {
                t_us: t,
                key: self.key.clone(),
                cost: 1,
                source: "calm",
            });
            // A duration near u64::MAX must end the loop, not overflow.
            match t.checked_add(self.every) {
                Some(next) => t = next,
                None => break,
            }
        }
        burst(
            &mut requests,
            self.at,
            self.requests,
            self.spread,
            &self.key,
            "spike",
        );
        let description = format!(
            "a calm client every {} for {} plus a spike of {} at {} (key {:?})",
            format_span(self.every),
            format_span(self.duration),
            self.requests,
            format_duration(self.at),
            self.key,
        );
        Ok(Traffic::new(
            "calm-spike",
            description,
            requests,
            self.duration,
        ))
    }
}

/// Job runners sharing one daily quota of a paid API (the source documents' case): `runners`
/// jobs each make one call every `every`, staggered by `every / runners`, for `duration`;
/// every `search_every`-th call of a job is a search costing `search_cost` units, the others
/// list calls costing 1. Every call spends from the same key (the shared budget). Defaults
/// ([`DailyJobs::for_quota`]): 8 runners, one call per 10 minutes each, a search (100 units)
/// every 10th call, for one period: about 12,500 units of demand a day against 10,000.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyJobs {
    /// Job runners.
    pub runners: u64,
    /// Interval between one runner's calls, in microseconds (at least 1).
    pub every: Micros,
    /// How long the jobs run, in microseconds.
    pub duration: Micros,
    /// Every this many calls of a runner is a search (the first call included).
    pub search_every: u64,
    /// Units a search costs (a list call costs 1).
    pub search_cost: u64,
    /// The key every call spends from.
    pub key: String,
}

impl DailyJobs {
    /// The defaults described on [`DailyJobs`].
    pub fn for_quota(quota: &Quota) -> Self {
        Self {
            runners: 8,
            every: 600 * 1_000_000,
            duration: quota.period(),
            search_every: 10,
            search_cost: 100,
            key: "client".to_string(),
        }
    }

    /// How many calls [`DailyJobs::traffic`] generates, computed without generating them.
    pub fn count(&self) -> u128 {
        match self.every {
            0 => 0,
            every => u128::from(self.duration.div_ceil(every)) * u128::from(self.runners),
        }
    }

    /// Every runner's calls.
    ///
    /// # Errors
    /// When `every`, `runners` or `search_every` is 0.
    pub fn traffic(&self) -> Result<Traffic, String> {
        if self.every == 0 {
            return Err("--every must be longer than 0".into());
        }
        if self.runners == 0 {
            return Err("--runners must be at least 1".into());
        }
        let search_every = self.search_every.max(1);
        let mut requests = Vec::new();
        for runner in 0..self.runners {
            let offset = self.every / self.runners * runner;
            let mut call = 0u64;
            let mut t = offset;
            while t < self.duration {
                // Runners search at different calls of theirs, as independent jobs do.
                let search = (call + runner).is_multiple_of(search_every);
                requests.push(Request {
                    t_us: t,
                    key: self.key.clone(),
                    cost: if search { self.search_cost } else { 1 },
                    source: if search { "search" } else { "list" },
                });
                call += 1;
                match t.checked_add(self.every) {
                    Some(next) => t = next,
                    None => break,
                }
            }
        }
        let description = format!(
            "{} job runners sharing one quota (key {:?}), each calling every {} for {}: a search \
             ({} units) every {} calls, list calls (1 unit) otherwise",
            self.runners,
            self.key,
            format_span(self.every),
            format_span(self.duration),
            self.search_cost,
            search_every,
        );
        Ok(Traffic::new(
            "daily-jobs",
            description,
            requests,
            self.duration,
        ))
    }
}

/// Sustained demand well above the limit: `units` requests per `per`, evenly spaced, for
/// `duration`. Request `i` arrives at `floor(i x per / units)`. Defaults
/// ([`Flood::for_quota`]): 10 x the limit (100 per 10 s at the documents' 10 per 10 s) for one
/// period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flood {
    /// Requests per `per`.
    pub units: u64,
    /// The rate's period, in microseconds.
    pub per: Micros,
    /// How long the flood lasts, in microseconds.
    pub duration: Micros,
    /// The key every request uses.
    pub key: String,
}

impl Flood {
    /// The defaults described on [`Flood`].
    pub fn for_quota(quota: &Quota) -> Self {
        Self {
            units: 10 * quota.limit(),
            per: quota.period(),
            duration: quota.period(),
            key: "client".to_string(),
        }
    }

    /// How many requests [`Flood::traffic`] generates, computed without generating them.
    ///
    /// Request `i` arrives at `floor(i x per / units)`, which is below `duration` exactly when
    /// `i x per < duration x units` (an integer's floor is below an integer bound iff the value
    /// is), so the count is `ceil(duration x units / per)`, exact in `u128`. A rate that
    /// `traffic` refuses (0 units or a 0 period) counts 0.
    pub fn count(&self) -> u128 {
        if self.units == 0 || self.per == 0 {
            return 0;
        }
        (u128::from(self.duration) * u128::from(self.units)).div_ceil(u128::from(self.per))
    }

    /// The flood's requests.
    ///
    /// # Errors
    /// When the rate is 0 requests or has a 0 period.
    pub fn traffic(&self) -> Result<Traffic, String> {
        if self.units == 0 || self.per == 0 {
            return Err("--rate must be at least 1 request per non-empty period".into());
        }
        let mut requests = Vec::new();
        for i in 0u64.. {
            let t = (u128::from(i) * u128::from(self.per) / u128::from(self.units)) as u64;
            if t >= self.duration {
                break;
            }
            requests.push(Request {
                t_us: t,
                key: self.key.clone(),
                cost: 1,
                source: "flood",
            });
        }
        let description = format!(
            "a flood of {} requests per {} for {} (key {:?})",
            self.units,
            format_span(self.per),
            format_span(self.duration),
            self.key
        );
        Ok(Traffic::new("flood", description, requests, self.duration))
    }
}

/// Parses a duration such as `950ms`, `0.95s`, `1.5min`, `10s`, `s`, `250us` or `0` into
/// microseconds. The value must be a whole number of microseconds.
///
/// # Errors
/// A reason when the text is not a (decimal) number followed by `us`, `ms`, `s`, `min`, `h` or
/// `d`, or is not a whole number of microseconds.
pub fn parse_duration(text: &str) -> Result<Micros, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(0);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("duration {text:?} has no unit (use us, ms, s, min, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let per_unit: u128 = match unit.trim() {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" | "sec" => 1_000_000,
        "min" | "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" | "day" => 86_400_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use us, ms, s, min, h or d)"
            ))
        }
    };
    let micros = parse_decimal_scaled(if number.is_empty() { "1" } else { number }, per_unit)
        .ok_or_else(|| format!("{text:?} is not a whole number of microseconds"))?;
    u64::try_from(micros).map_err(|_| format!("duration {text:?} is too long"))
}

/// `number x scale` exactly, for a non-negative decimal `number` such as `0.95`; `None` when the
/// text is not a decimal or the product is not a whole number.
pub(crate) fn parse_decimal_scaled(number: &str, scale: u128) -> Option<u128> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) || frac.len() > 18 {
        return None;
    }
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_digits = frac.trim_end_matches('0');
    let frac_value: u128 = if frac_digits.is_empty() {
        0
    } else {
        frac_digits.parse().ok()?
    };
    let denominator = 10u128.checked_pow(frac_digits.len() as u32)?;
    let frac_scaled = frac_value.checked_mul(scale)?;
    if frac_scaled % denominator != 0 {
        return None;
    }
    int.checked_mul(scale)?
        .checked_add(frac_scaled / denominator)
}

/// Parses a rate `COUNT/DURATION` such as `50/10s`, `5/s` or `1000/min` into
/// `(count, period in microseconds)`.
///
/// # Errors
/// A reason when the text is not of that form.
pub fn parse_rate(text: &str) -> Result<(u64, Micros), String> {
    let (count, per) = text
        .split_once('/')
        .ok_or_else(|| format!("rate {text:?} is not COUNT/DURATION, e.g. 50/10s"))?;
    let count: u64 = count
        .trim()
        .parse()
        .map_err(|_| format!("rate count {count:?} is not a whole number"))?;
    let per = parse_duration(per)?;
    if count == 0 || per == 0 {
        return Err(format!(
            "rate {text:?} must be at least 1 request per non-empty period"
        ));
    }
    Ok((count, per))
}

/// Formats a length of time for people: whole milliseconds below a second as `14 ms`, from two
/// minutes on in minutes, hours or days ([`format_readable`]: `10 min`, `24 h`), else as
/// [`format_duration`].
pub fn format_span(us: Micros) -> String {
    if us < MICROS_PER_SECOND && us.is_multiple_of(1_000) && us > 0 {
        format!("{} ms", us / 1_000)
    } else {
        format_readable(us)
    }
}

const MICROS_PER_MINUTE: Micros = 60 * MICROS_PER_SECOND;
const MICROS_PER_HOUR: Micros = 60 * MICROS_PER_MINUTE;
const MICROS_PER_DAY: Micros = 24 * MICROS_PER_HOUR;

/// The unit a length of time reads in: days from two days on, hours from two hours (or a
/// whole number of them), minutes from two minutes (or a whole number of them), else seconds:
/// `(microseconds per unit, symbol)`.
pub fn readable_unit(us: Micros) -> (Micros, &'static str) {
    let whole = |unit: Micros| us >= unit && us.is_multiple_of(unit);
    if us >= 2 * MICROS_PER_DAY {
        (MICROS_PER_DAY, "d")
    } else if us >= 2 * MICROS_PER_HOUR || whole(MICROS_PER_HOUR) {
        (MICROS_PER_HOUR, "h")
    } else if us >= 2 * MICROS_PER_MINUTE || whole(MICROS_PER_MINUTE) {
        (MICROS_PER_MINUTE, "min")
    } else {
        (MICROS_PER_SECOND, "s")
    }
}

/// The unit the times along a span of `us` read in (a chart's axis, a table's rows): days
/// from two days on, hours from two hours, minutes from two minutes, else seconds.
pub fn span_unit(us: Micros) -> (Micros, &'static str) {
    if us >= 2 * MICROS_PER_DAY {
        (MICROS_PER_DAY, "d")
    } else if us >= 2 * MICROS_PER_HOUR {
        (MICROS_PER_HOUR, "h")
    } else if us >= 2 * MICROS_PER_MINUTE {
        (MICROS_PER_MINUTE, "min")
    } else {
        (MICROS_PER_SECOND, "s")
    }
}

/// `us` in `unit` (as [`readable_unit`] gives) with at most two decimals, trailing zeros
/// trimmed: `19 h`, `1.5 h`, `0.25 s`.
pub fn format_in_unit(us: Micros, (per, symbol): (Micros, &str)) -> String {
    // Hundredths of the unit, rounded to the nearest.
    let hundredths = (u128::from(us) * 100 + u128::from(per) / 2) / u128::from(per.max(1));
    let (whole, frac) = (hundredths / 100, hundredths % 100);
    if frac == 0 {
        format!("{whole} {symbol}")
    } else {
        let frac = format!("{frac:02}");
        format!("{whole}.{} {symbol}", frac.trim_end_matches('0'))
    }
}

/// A length of time in the unit it reads in ([`readable_unit`]): `10 min`, `19 h`, `1.5 h`,
/// `3 d`; below two minutes as [`format_duration`] (exact: `0.95 s`, `250 us`).
pub fn format_readable(us: Micros) -> String {
    let unit = readable_unit(us);
    if unit.0 == MICROS_PER_SECOND {
        format_duration(us)
    } else {
        format_in_unit(us, unit)
    }
}

/// Formats microseconds for people: `0 s`, `0.95 s`, `1.05 s`, `10 s`, `250 us`... Seconds with
/// up to six decimals, trailing zeros trimmed; below a millisecond in microseconds.
pub fn format_duration(us: Micros) -> String {
    if us != 0 && us < 1_000 {
        return format!("{us} us");
    }
    let whole = us / MICROS_PER_SECOND;
    let frac = us % MICROS_PER_SECOND;
    if frac == 0 {
        format!("{whole} s")
    } else {
        let frac = format!("{frac:06}");
        format!("{whole}.{} s", frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(text: &str) -> Quota {
        text.parse().unwrap()
    }

    /// A flood of `units` requests per `per` us for `duration` us, all on key `k`.
    fn flood(units: u64, per: Micros, duration: Micros) -> Flood {
        Flood {
            units,
            per,
            duration,
            key: "k".into(),
        }
    }

    /// The arrival times of `t`'s requests, in order.
    fn arrival_times(t: Traffic) -> Vec<Micros> {
        t.requests.iter().map(|r| r.t_us).collect()
    }

    #[test]
    fn durations_parse_exactly() {
        assert_eq!(parse_duration("950ms"), Ok(950_000));
        assert_eq!(parse_duration("0.95s"), Ok(950_000));
        assert_eq!(parse_duration("1.05s"), Ok(1_050_000));
        assert_eq!(parse_duration("s"), Ok(1_000_000));
        assert_eq!(parse_duration("1.5min"), Ok(90_000_000));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("250us"), Ok(250));
        assert!(parse_duration("0.0000001s").is_err());
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("1.2.3s").is_err());
        assert_eq!(parse_rate("50/10s"), Ok((50, 10_000_000)));
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("5").is_err());
    }

    #[test]
    fn counts_equal_the_generated_traffic() {
        // Hand-checked: flood 3 per 10 us for 7 us arrives at 0, 3 and 6 us (ceil(21/10) = 3);
        // calm every 4 us for 9 us at 0, 4, 8 (ceil(9/4) = 3) plus a spike of 2.
        assert_eq!(flood(3, 10, 7).count(), 3);
        let calm = CalmSpike {
            every: 4,
            duration: 9,
            requests: 2,
            at: 1,
            spread: 0,
            key: "k".into(),
        };
        assert_eq!(calm.count(), 5);
        for units in 1..=12 {
            for per in 1..=12 {
                for duration in 0..=30 {
                    let f = flood(units, per, duration);
                    let n = f.traffic().unwrap().requests.len() as u128;
                    assert_eq!(f.count(), n, "{units}/{per} for {duration}");
                    let c = CalmSpike {
                        every: per,
                        duration,
                        requests: units,
                        at: 3,
                        spread: 5,
                        key: "k".into(),
                    };
                    assert_eq!(c.count(), c.traffic().unwrap().requests.len() as u128);
                }
            }
        }
        let b = Boundary::for_quota(&quota("7/s"));
        assert_eq!(b.count(), b.traffic().unwrap().requests.len() as u128);
        // The walkthrough's runaway cases count without generating anything.
        let huge = flood(100_000_000, 1, 10_000_000);
        assert_eq!(huge.count(), 1_000_000_000_000_000);
        assert_eq!(
            Boundary::for_quota(&quota("1000000000000/1us")).count(),
            2_000_000_000_000
        );
    }

    #[test]
    fn long_spans_read_in_minutes_hours_and_days() {
        for (us, text) in [
            (600 * MICROS_PER_SECOND, "10 min"),
            (68_400 * MICROS_PER_SECOND, "19 h"),
            (86_400 * MICROS_PER_SECOND, "24 h"),
            (5_400 * MICROS_PER_SECOND, "90 min"),
            (9_000 * MICROS_PER_SECOND, "2.5 h"),
            (3 * 86_400 * MICROS_PER_SECOND, "3 d"),
            (119 * MICROS_PER_SECOND, "119 s"),
            (3_600 * MICROS_PER_SECOND, "1 h"),
            (60 * MICROS_PER_SECOND, "1 min"),
            (90 * MICROS_PER_SECOND, "90 s"),
            (950_000, "0.95 s"),
        ] {
            assert_eq!(format_readable(us), text, "{us}");
        }
        assert_eq!(format_span(14_000), "14 ms");
        assert_eq!(
            format_in_unit(1_880_000, (MICROS_PER_SECOND, "s")),
            "1.88 s"
        );
    }

    #[test]
    fn durations_format_for_people() {
        assert_eq!(format_duration(0), "0 s");
        assert_eq!(format_duration(950_000), "0.95 s");
        assert_eq!(format_duration(10_000_000), "10 s");
        assert_eq!(format_duration(250), "250 us");
        assert_eq!(format_duration(1_000_001), "1.000001 s");
        assert_eq!(format_span(14_000), "14 ms");
        assert_eq!(format_span(14_500), "0.0145 s");
        assert_eq!(format_span(2_000_000), "2 s");
    }

    #[test]
    fn boundary_defaults_are_the_simulated_clock_case() {
        let t = Boundary::for_quota(&quota("100/s")).traffic().unwrap();
        assert_eq!(t.requests.len(), 200);
        assert!(t.requests[..100]
            .iter()
            .all(|r| r.t_us == 950_000 && r.source == "burst-1"));
        assert!(t.requests[100..]
            .iter()
            .all(|r| r.t_us == 1_050_000 && r.source == "burst-2"));
        assert_eq!(t.span_us, 2_000_000);
    }

    #[test]
    fn bursts_spread_evenly() {
        let b = Boundary {
            requests: 4,
            before: 100,
            after: 0,
            spread: 10,
            edge: 1_000,
            key: "k".into(),
        };
        let times = arrival_times(b.traffic().unwrap());
        assert_eq!(times, [900, 902, 905, 907, 1_000, 1_002, 1_005, 1_007]);
        let too_early = Boundary { before: 1_001, ..b };
        assert!(too_early.traffic().is_err());
    }

    #[test]
    fn calm_spike_defaults_match_the_chart() {
        let t = CalmSpike::for_quota(&quota("10/10s")).traffic().unwrap();
        let calm: Vec<_> = t.requests.iter().filter(|r| r.source == "calm").collect();
        let spike: Vec<_> = t.requests.iter().filter(|r| r.source == "spike").collect();
        assert_eq!(calm.len(), 20); // 0 s, 1 s, ... 19 s
        assert_eq!(calm[19].t_us, 19_000_000);
        assert_eq!(spike.len(), 15);
        assert!(spike.iter().all(|r| r.t_us == 4_500_000));
        // Time order: the spike sits between the calm requests at 4 s and 5 s.
        assert_eq!(t.requests[4].t_us, 4_000_000);
        assert_eq!(t.requests[5].source, "spike");
        assert_eq!(t.requests[20].t_us, 5_000_000);
    }

    #[test]
    fn flood_is_evenly_spaced() {
        let t = Flood::for_quota(&quota("10/10s")).traffic().unwrap();
        assert_eq!(t.requests.len(), 100);
        assert_eq!(t.requests[1].t_us, 100_000);
        assert_eq!(t.requests[99].t_us, 9_900_000);
        let third = flood(3, 1_000_000, 1_000_000);
        let times = arrival_times(third.traffic().unwrap());
        assert_eq!(times, [0, 333_333, 666_666]);
    }
}
