//! Reading what a limiter says about itself: the declared limit, the remaining allowance and
//! the reset time of each response, and `Retry-After`.
//!
//! Sources, in the order they are believed:
//! - the IETF draft (draft-ietf-httpapi-ratelimit-headers, versions 07 to 10):
//!   `RateLimit-Policy: "name";q=100;w=10` and `RateLimit: "name";r=99;t=10`, Structured Field
//!   lists (RFC 8941) whose items carry `q` (quota), `w` (window, seconds), `r` (remaining),
//!   `t` (seconds until reset); also the draft-07 form `RateLimit-Policy: 100;w=10` with
//!   `RateLimit-Limit`/`-Remaining`/`-Reset`, and draft-06's `RateLimit: limit=10, remaining=9,
//!   reset=3`;
//! - `X-RateLimit-*`: `X-RateLimit-Limit: 60` (GitHub: no window given), `X-RateLimit-Limit:
//!   10, 10;w=60` (envoyproxy/ratelimit), `X-RateLimit-Limit-Second: 5` and `-Minute`,
//!   `-Hour`, `-Day` (Kong), `X-RateLimit-Replenish-Rate` and `X-RateLimit-Burst-Capacity`
//!   (Spring Cloud Gateway: a token bucket refilling that many per second);
//!   `X-RateLimit-Remaining`, and `X-RateLimit-Reset` as seconds to go or, above 10^9, a Unix
//!   time in seconds (GitHub).
//!
//! When a response names several policies, the one with the smallest quota is the declared
//! one: a burst meets it first.

use serde::Serialize;

/// Microseconds in one second.
const US: u64 = 1_000_000;

/// The limit a limiter declares (or the one given with `--limit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeclaredLimit {
    /// Units admitted per window (for a token bucket: refilled per window).
    pub limit: u64,
    /// The window in microseconds, when it is known.
    pub window_us: Option<u64>,
    /// Most admitted at once when that differs from `limit` (a bucket's burst capacity).
    pub burst: Option<u64>,
    /// Where it came from: the header and its value, or `--limit`.
    pub source: String,
}

impl DeclaredLimit {
    /// Most units one counter may admit in a burst lasting `span_us`: the burst (or the limit)
    /// plus what a bucket refills meanwhile (`limit x span / window`); an upper bound that
    /// holds for every algorithm the documents describe, except a fixed window across an edge.
    pub fn allowance(&self, span_us: u64) -> f64 {
        let base = self.burst.unwrap_or(self.limit) as f64;
        match self.window_us {
            Some(w) if w > 0 => base + self.limit as f64 * span_us as f64 / w as f64,
            _ => base,
        }
    }

    /// `100/10s`, `60 (window not given)`, `10/s burst 20`.
    pub fn describe(&self) -> String {
        let mut s = match self.window_us {
            Some(w) => format!("{}/{}", self.limit, format_window(w)),
            None => format!("{} (window not given)", self.limit),
        };
        if let Some(b) = self.burst {
            s.push_str(&format!(" burst {b}"));
        }
        s
    }
}

/// `s`, `10s`, `1500ms`, `min`, `h`: the window as `floodgate` spells a period.
pub fn format_window(us: u64) -> String {
    match us {
        US => "s".into(),
        60_000_000 => "min".into(),
        3_600_000_000 => "h".into(),
        86_400_000_000 => "day".into(),
        _ if us.is_multiple_of(US) => format!("{}s", us / US),
        _ if us.is_multiple_of(1000) => format!("{}ms", us / 1000),
        _ => format!("{us}us"),
    }
}

/// What one response says about the caller's allowance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Allowance {
    /// Units left (`RateLimit` `r`, `X-RateLimit-Remaining`), when given.
    pub remaining: Option<u64>,
    /// Microseconds until the allowance resets (`t`, `X-RateLimit-Reset`), when given; whole
    /// seconds on the wire.
    pub reset_us: Option<u64>,
}

/// A Structured Field bare item (RFC 8941 section 3.3).
#[derive(Debug, Clone, PartialEq)]
pub enum Bare {
    /// `100`, `-3`.
    Integer(i64),
    /// `1.5`.
    Decimal(f64),
    /// `"name"`.
    String(String),
    /// `name`, `limit`.
    Token(String),
    /// `:aGk=:` (kept as its base64 text).
    Bytes(String),
    /// `?1` / `?0`, and a parameter given without a value.
    Boolean(bool),
}

impl Bare {
    fn as_u64(&self) -> Option<u64> {
        match self {
            Bare::Integer(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }
}

/// A list member: a bare item with its parameters, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The item.
    pub bare: Bare,
    /// `;key=value` parameters (`;key` alone is `Boolean(true)`).
    pub params: Vec<(String, Bare)>,
}

impl Item {
    /// The parameter `key`.
    pub fn param(&self, key: &str) -> Option<&Bare> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Parses an RFC 8941 List (inner lists are refused).
///
/// # Errors
/// A message naming the first offending character position.
pub fn parse_list(text: &str) -> Result<Vec<Item>, String> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    skip_sp(b, &mut i);
    if i == b.len() {
        return Ok(out);
    }
    loop {
        let bare = bare_item(b, &mut i)?;
        let params = parameters(b, &mut i)?;
        out.push(Item { bare, params });
        skip_ows(b, &mut i);
        if i == b.len() {
            return Ok(out);
        }
        if b[i] != b',' {
            return Err(format!("expected ',' at position {i}"));
        }
        i += 1;
        skip_ows(b, &mut i);
        if i == b.len() {
            return Err("trailing ','".into());
        }
    }
}

fn skip_sp(b: &[u8], i: &mut usize) {
    while *i < b.len() && b[*i] == b' ' {
        *i += 1;
    }
}

fn skip_ows(b: &[u8], i: &mut usize) {
    while *i < b.len() && (b[*i] == b' ' || b[*i] == b'\t') {
        *i += 1;
    }
}

fn parameters(b: &[u8], i: &mut usize) -> Result<Vec<(String, Bare)>, String> {
    let mut params = Vec::new();
    while *i < b.len() && b[*i] == b';' {
        *i += 1;
        skip_sp(b, i);
        let start = *i;
        while *i < b.len()
            && (b[*i].is_ascii_lowercase()
                || b[*i].is_ascii_digit()
                || matches!(b[*i], b'_' | b'-' | b'.' | b'*'))
        {
            *i += 1;
        }
        if start == *i || !(b[start].is_ascii_lowercase() || b[start] == b'*') {
            return Err(format!("expected a parameter name at position {start}"));
        }
        let key = String::from_utf8_lossy(&b[start..*i]).into_owned();
        let value = if *i < b.len() && b[*i] == b'=' {
            *i += 1;
            bare_item(b, i)?
        } else {
            Bare::Boolean(true)
        };
        params.push((key, value));
    }
    Ok(params)
}

fn bare_item(b: &[u8], i: &mut usize) -> Result<Bare, String> {
    let start = *i;
    match b.get(*i) {
        None => Err(format!("expected an item at position {start}")),
        Some(b'"') => {
            *i += 1;
            let mut s = String::new();
            loop {
                match b.get(*i) {
                    None => return Err(format!("unterminated string at position {start}")),
                    Some(b'\\') => {
                        match b.get(*i + 1) {
                            Some(&c @ (b'"' | b'\\')) => s.push(c as char),
                            _ => return Err(format!("bad escape at position {}", *i)),
                        }
                        *i += 2;
                    }
                    Some(b'"') => {
                        *i += 1;
                        return Ok(Bare::String(s));
                    }
                    Some(&c) if (0x20..0x7f).contains(&c) => {
                        s.push(c as char);
                        *i += 1;
                    }
                    Some(_) => return Err(format!("invalid character at position {}", *i)),
                }
            }
        }
        Some(b'?') => {
            let v = match b.get(*i + 1) {
                Some(b'1') => true,
                Some(b'0') => false,
                _ => return Err(format!("bad boolean at position {start}")),
            };
            *i += 2;
            Ok(Bare::Boolean(v))
        }
        Some(b':') => {
            *i += 1;
            let s = *i;
            while *i < b.len() && b[*i] != b':' {
                *i += 1;
            }
            if *i == b.len() {
                return Err(format!("unterminated byte sequence at position {start}"));
            }
            let text = String::from_utf8_lossy(&b[s..*i]).into_owned();
            *i += 1;
            Ok(Bare::Bytes(text))
        }
        Some(c) if c.is_ascii_digit() || *c == b'-' => {
            *i += 1;
            while *i < b.len() && (b[*i].is_ascii_digit() || b[*i] == b'.') {
                *i += 1;
            }
            let text = std::str::from_utf8(&b[start..*i]).unwrap_or("");
            if text.contains('.') {
                text.parse()
                    .map(Bare::Decimal)
                    .map_err(|_| format!("bad decimal {text:?} at position {start}"))
            } else if text.len() > 16 {
                Err(format!("integer {text:?} has more than 15 digits"))
            } else {
                text.parse()
                    .map(Bare::Integer)
                    .map_err(|_| format!("bad integer {text:?} at position {start}"))
            }
        }
        Some(c) if c.is_ascii_alphabetic() || *c == b'*' => {
            while *i < b.len()
                && (b[*i].is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b[*i]))
            {
                *i += 1;
            }
            Ok(Bare::Token(
                String::from_utf8_lossy(&b[start..*i]).into_owned(),
            ))
        }
        Some(_) => Err(format!("unexpected character at position {start}")),
    }
}

/// The declared limit from a response's headers (names in any case), or `None` when no
/// header of the known forms declares one.
pub fn declared_limit<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<DeclaredLimit> {
    let h: Vec<(String, &str)> = headers
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let get = |name: &str| h.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim());
    let mut candidates: Vec<DeclaredLimit> = Vec::new();
    // IETF draft 08+: "name";q=100;w=10 (draft 07: 100;w=10, the quota as the item).
    if let Some(v) = get("ratelimit-policy") {
        if let Ok(items) = parse_list(v) {
            for it in items {
                let q = it.param("q").and_then(Bare::as_u64).or(it.bare.as_u64());
                let w = it.param("w").and_then(Bare::as_u64).map(|s| s * US);
                if let Some(q) = q {
                    candidates.push(DeclaredLimit {
                        limit: q,
                        window_us: w,
                        burst: None,
                        source: format!("RateLimit-Policy: {v}"),
                    });
                }
            }
        }
    }
    // The draft's policies win; the legacy forms are read only without them, all of them (Kong
    // sends RateLimit-Limit without a window beside X-RateLimit-Limit-Minute).
    let policy_count = candidates.len();
    if policy_count == 0 {
        // draft 06: RateLimit-Limit: 100 (window unknown; w= may follow).
        for name in ["ratelimit-limit", "x-ratelimit-limit"] {
            if let Some(v) = get(name) {
                if let Some(d) = limit_list(v, &format!("{}: {v}", display_name(name))) {
                    candidates.push(d);
                }
            }
        }
    }
    if policy_count == 0 {
        // Kong: X-RateLimit-Limit-Second/-Minute/...
        for (suffix, w) in [
            ("second", US),
            ("minute", 60 * US),
            ("hour", 3600 * US),
            ("day", 86_400 * US),
        ] {
            let name = format!("x-ratelimit-limit-{suffix}");
            if let Some(v) = get(&name) {
                if let Ok(limit) = v.parse::<u64>() {
                    candidates.push(DeclaredLimit {
                        limit,
                        window_us: Some(w),
                        burst: None,
                        source: format!("{}: {v}", display_name(&name)),
                    });
                }
            }
        }
    }
    if policy_count == 0 {
        // Spring Cloud Gateway's RedisRateLimiter: a token bucket.
        if let Some(rate) = get("x-ratelimit-replenish-rate").and_then(|v| v.parse::<u64>().ok()) {
            let burst = get("x-ratelimit-burst-capacity").and_then(|v| v.parse::<u64>().ok());
            candidates.push(DeclaredLimit {
                limit: rate,
                window_us: Some(US),
                burst: burst.filter(|b| *b != rate),
                source: format!(
                    "X-RateLimit-Replenish-Rate: {rate}{}",
                    burst
                        .map(|b| format!(", X-RateLimit-Burst-Capacity: {b}"))
                        .unwrap_or_default()
                ),
            });
        }
    }
    if policy_count == 0 {
        // draft 06 combined: RateLimit: limit=10, remaining=9, reset=3.
        if let Some(v) = get("ratelimit") {
            if let Some(limit) = dictionary_value(v, "limit") {
                candidates.push(DeclaredLimit {
                    limit,
                    window_us: None,
                    burst: None,
                    source: format!("RateLimit: {v}"),
                });
            }
        }
    }
    // One with a window before one without; then the one a burst meets first: the smallest
    // quota (then the shortest window).
    candidates.into_iter().min_by_key(|d| {
        (
            d.window_us.is_none(),
            d.limit,
            d.window_us.unwrap_or(u64::MAX),
        )
    })
}

/// `X-RateLimit-Limit: 60` or envoy's `10, 10;w=60` (first the limit, then policies).
fn limit_list(v: &str, source: &str) -> Option<DeclaredLimit> {
    let items = parse_list(v).ok()?;
    let first = items.first()?.bare.as_u64()?;
    let w = items
        .iter()
        .find_map(|it| {
            it.param("w")
                .and_then(Bare::as_u64)
                .filter(|_| it.bare.as_u64() == Some(first))
        })
        .map(|s| s * US);
    Some(DeclaredLimit {
        limit: first,
        window_us: w,
        burst: None,
        source: source.to_string(),
    })
}

/// `limit=10, remaining=9` -> the integer of `key`.
fn dictionary_value(v: &str, key: &str) -> Option<u64> {
    v.split(',').find_map(|part| {
        let (k, val) = part.split_once('=')?;
        (k.trim().eq_ignore_ascii_case(key))
            .then(|| val.trim().parse().ok())
            .flatten()
    })
}

fn display_name(lower: &str) -> String {
    lower
        .split('-')
        .map(|p| match p {
            "ratelimit" => "RateLimit".to_string(),
            "x" => "X".to_string(),
            _ => {
                let mut c = p.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// The remaining allowance and reset time a response gives. `now_unix_s`, when known, turns a
/// Unix-time reset (GitHub's `X-RateLimit-Reset`) into seconds to go.
pub fn allowance<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    now_unix_s: Option<u64>,
) -> Allowance {
    let h: Vec<(String, &str)> = headers
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let get = |name: &str| h.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim());
    let mut out = Allowance::default();
    if let Some(v) = get("ratelimit") {
        if let Ok(items) = parse_list(v) {
            // The item that binds first: the smallest remaining.
            let best = items
                .iter()
                .filter_map(|it| Some((it.param("r")?.as_u64()?, it)))
                .min_by_key(|(r, _)| *r);
            if let Some((r, it)) = best {
                out.remaining = Some(r);
                out.reset_us = it.param("t").and_then(Bare::as_u64).map(|s| s * US);
            }
        }
        if out.remaining.is_none() {
            out.remaining = dictionary_value(v, "remaining");
            out.reset_us = dictionary_value(v, "reset").map(|s| s * US);
        }
    }
    if out.remaining.is_none() {
        let kong = ["second", "minute", "hour", "day"]
            .iter()
            .find_map(|s| get(&format!("x-ratelimit-remaining-{s}")));
        out.remaining = get("ratelimit-remaining")
            .or(get("x-ratelimit-remaining"))
            .or(kong)
            .and_then(|v| v.split(',').next()?.trim().parse().ok());
    }
    if out.reset_us.is_none() {
        out.reset_us = get("ratelimit-reset")
            .or(get("x-ratelimit-reset"))
            .and_then(|v| v.split(',').next()?.trim().parse::<u64>().ok())
            .map(|s| match now_unix_s {
                Some(now) if s > 1_000_000_000 => s.saturating_sub(now) * US,
                _ if s > 1_000_000_000 => u64::MAX,
                _ => s * US,
            })
            .filter(|us| *us != u64::MAX);
    }
    out
}

/// A parsed `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfter {
    /// Delta-seconds (`Retry-After: 3`).
    Seconds(u64),
    /// An HTTP-date, as seconds after the response's own `Date` (0 when not after it).
    Date(u64),
}

impl RetryAfter {
    /// The wait in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            RetryAfter::Seconds(s) | RetryAfter::Date(s) => s,
        }
    }
}

/// Parses `Retry-After` (RFC 9110 10.2.3): delta-seconds, or an HTTP-date measured against
/// `date` (the response's `Date` header).
///
/// # Errors
/// The value is neither.
pub fn retry_after(value: &str, date: Option<&str>) -> Result<RetryAfter, String> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse()
            .map(RetryAfter::Seconds)
            .map_err(|_| format!("Retry-After {v:?} is out of range"));
    }
    let at = httpdate::parse_http_date(v)
        .map_err(|_| format!("Retry-After {v:?} is neither delta-seconds nor an HTTP-date"))?;
    let base = date
        .and_then(|d| httpdate::parse_http_date(d.trim()).ok())
        .ok_or_else(|| format!("Retry-After {v:?} is a date but the response has no Date"))?;
    Ok(RetryAfter::Date(
        at.duration_since(base).map(|d| d.as_secs()).unwrap_or(0),
    ))
}

/// Checks the IETF draft headers of a response for syntax: `RateLimit-Policy` items need an
/// integer `q` (and, when given, an integer `w`), `RateLimit` items an integer `r` (and `t`).
/// Returns one message per problem (empty when both are absent or well-formed).
pub fn draft_syntax<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut problems = Vec::new();
    for (k, v) in headers {
        let lower = k.to_ascii_lowercase();
        let (required, optional) = match lower.as_str() {
            "ratelimit-policy" => ("q", "w"),
            "ratelimit" => ("r", "t"),
            _ => continue,
        };
        let name = display_name(&lower);
        match parse_list(v) {
            Err(e) => problems.push(format!("{name}: {v:?} is not a Structured Field list: {e}")),
            Ok(items) => {
                for it in items {
                    let legacy = lower == "ratelimit-policy" && it.bare.as_u64().is_some();
                    match it.param(required) {
                        Some(Bare::Integer(n)) if *n >= 0 => {}
                        Some(_) => problems.push(format!(
                            "{name}: {v:?}: {required} must be a non-negative integer"
                        )),
                        None if legacy => problems.push(format!(
                            "{name}: {v:?} uses draft-07's bare quota; the current draft names it \"policy\";q=N"
                        )),
                        None => problems.push(format!("{name}: {v:?} lacks the {required} parameter")),
                    }
                    if let Some(x) = it.param(optional) {
                        if !matches!(x, Bare::Integer(n) if *n >= 0) {
                            problems.push(format!(
                                "{name}: {v:?}: {optional} must be a non-negative integer"
                            ));
                        }
                    }
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(h: &[(&str, &str)]) -> Option<DeclaredLimit> {
        declared_limit(h.iter().copied())
    }

    #[test]
    fn ietf_draft_forms() {
        let x = d(&[(
            "RateLimit-Policy",
            "\"day\";q=1000;w=86400, \"burst\";q=10;w=1",
        )])
        .unwrap();
        assert_eq!((x.limit, x.window_us), (10, Some(US)));
        let x = d(&[("ratelimit-policy", "100;w=10")]).unwrap();
        assert_eq!((x.limit, x.window_us), (100, Some(10 * US)));
        let x = d(&[("RateLimit", "limit=10, remaining=9, reset=3")]).unwrap();
        assert_eq!((x.limit, x.window_us), (10, None));
        let a = allowance([("ratelimit", "\"a\";r=9;t=1, \"b\";r=3;t=60")], None);
        assert_eq!(
            a,
            Allowance {
                remaining: Some(3),
                reset_us: Some(60 * US)
            }
        );
    }

    #[test]
    fn legacy_forms() {
        // GitHub
        let x = d(&[("x-ratelimit-limit", "60")]).unwrap();
        assert_eq!((x.limit, x.window_us), (60, None));
        let a = allowance(
            [
                ("x-ratelimit-remaining", "59"),
                ("x-ratelimit-reset", "1800000030"),
            ],
            Some(1_800_000_000),
        );
        assert_eq!(
            a,
            Allowance {
                remaining: Some(59),
                reset_us: Some(30 * US)
            }
        );
        // envoyproxy/ratelimit
        let x = d(&[("X-RateLimit-Limit", "10, 10;w=60")]).unwrap();
        assert_eq!((x.limit, x.window_us), (10, Some(60 * US)));
        // Kong (with its windowless RateLimit-Limit beside the per-window headers)
        let x = d(&[
            ("RateLimit-Limit", "5"),
            ("X-RateLimit-Limit-Minute", "5"),
            ("X-RateLimit-Limit-Hour", "100"),
        ])
        .unwrap();
        assert_eq!((x.limit, x.window_us), (5, Some(60 * US)));
        assert_eq!(x.source, "X-RateLimit-Limit-Minute: 5");
        // Spring Cloud Gateway
        let x = d(&[
            ("X-RateLimit-Replenish-Rate", "10"),
            ("X-RateLimit-Burst-Capacity", "20"),
        ])
        .unwrap();
        assert_eq!((x.limit, x.window_us, x.burst), (10, Some(US), Some(20)));
        assert_eq!(x.describe(), "10/s burst 20");
        assert!(d(&[("content-type", "text/plain")]).is_none());
    }

    #[test]
    fn retry_after_forms_and_syntax() {
        assert_eq!(retry_after("3", None), Ok(RetryAfter::Seconds(3)));
        assert_eq!(
            retry_after(
                "Sun, 06 Nov 1994 08:49:40 GMT",
                Some("Sun, 06 Nov 1994 08:49:37 GMT")
            ),
            Ok(RetryAfter::Date(3))
        );
        assert!(retry_after("1.5", None).is_err());
        assert!(draft_syntax([("ratelimit", "\"a\";r=9;t=1")]).is_empty());
        assert_eq!(draft_syntax([("ratelimit", "\"a\";r=-1")]).len(), 1);
        assert_eq!(draft_syntax([("ratelimit-policy", "\"a\";w=10")]).len(), 1);
        assert_eq!(draft_syntax([("ratelimit-policy", "q=10, w=")]).len(), 1);
    }
}
