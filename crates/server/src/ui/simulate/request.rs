//! The body of `POST /v1/simulate`: its members, parsed and bounded into a [`Spec`].
//!
//! A refusal is a 400 when the body is not what the OpenAPI document's schema describes (not
//! a JSON object of the documented members and types, an unknown or repeated member, a name
//! outside a member's `enum`, a number or length outside its bounds) and a 422 when it is well
//! formed but cannot be run: a duration, quota, rate or trace outside the simulator's grammar or
//! bounds, members that do not go together, a run above the request cap. Either names the
//! member at fault.

use std::str::FromStr;

use floodgate_core::{Micros, Quota};
use floodgate_simulate::setup::{Balance, CounterMode, StoreSpec};
use floodgate_simulate::traffic::{parse_duration, parse_rate};
use floodgate_simulate::{AlgorithmChoice, Choice, Preset, ScenarioName, Spec, TraceInput};
use http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

use crate::http::bounds::MAX_KEY_BYTES;

/// Most requests one `/v1/simulate` generates or replays with one algorithm (`max_requests`
/// may lower it, never raise it). The answer holds every decision (about 175 bytes each).
pub(super) const MAX_SIMULATE_REQUESTS: u64 = 50_000;

/// Most requests with `"algorithm": "all"` or a list of several: up to six decisions each, so the largest answer of the
/// default key is about 12,000 x 6 x 175 bytes = 12.6 MB, within [`super::MAX_ANSWER_BYTES`].
pub(super) const MAX_SIMULATE_REQUESTS_ALL: u64 = 12_000;

/// Most service instances one simulation may model (each keeps its own counters per key).
pub(super) const MAX_INSTANCES: u64 = 1_000;

/// Most job runners of the `daily-jobs` scenario a request may ask for.
pub(super) const MAX_RUNNERS: u64 = 1_000;

/// Longest `max_wait` (one day): a request that waits longer is not queued but refused.
pub(super) const MAX_WAIT_US: u64 = 86_400 * 1_000_000;

/// Longest duration member (`duration`, `spread`, `before`, `after`, `at`, `every`, `column`,
/// and the period of `rate`): 366 days, a year of traffic.
pub(super) const MAX_DURATION_US: u64 = 366 * 86_400 * 1_000_000;

/// Longest `calendar` time zone name, in bytes (the longest IANA name is 32).
const MAX_ZONE_BYTES: usize = 64;

/// The request body: the [`Spec`] fields, as text where the command line takes text.
/// (In the OpenAPI document as `SimulateRequest`; the words are `floodgate simulate --help`'s.)
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimulateRequest {
    #[schema(schema_with = scenario_schema)]
    scenario: Option<String>,
    #[schema(schema_with = preset_schema)]
    preset: Option<String>,
    /// A trace instead of a scenario: one request time per line.
    trace: Option<String>,
    /// An algorithm (`GET /ui/choices.json`: `algorithm`), several separated by commas
    /// (`fixed_window,token_bucket`: each runs once), or `all`.
    algorithm: Option<String>,
    /// The quota, e.g. `10/s`, `100/min`.
    limit: Option<String>,
    /// Burst capacity in units (default: the limit).
    #[serde(default, deserialize_with = "whole")]
    burst: Option<u64>,
    /// Instances of the service sharing the traffic, 1 to 1,000.
    #[schema(minimum = 1, maximum = 1_000)]
    #[serde(default, deserialize_with = "whole")]
    instances: Option<u64>,
    #[schema(schema_with = counter_schema)]
    counter: Option<String>,
    #[schema(schema_with = balance_schema)]
    balance: Option<String>,
    #[schema(schema_with = store_schema)]
    store: Option<String>,
    /// Requests of the scenario (at most 50,000; 12,000 with every algorithm).
    #[schema(maximum = 50_000)]
    #[serde(default, deserialize_with = "whole")]
    requests: Option<u64>,
    /// A duration the scenario spreads its requests over, e.g. `10s`.
    spread: Option<String>,
    /// A duration before the scenario's burst.
    before: Option<String>,
    /// A duration after it.
    after: Option<String>,
    /// When the burst happens, a duration.
    at: Option<String>,
    /// The interval of a steady scenario, a duration.
    every: Option<String>,
    /// A rate of arrivals, e.g. `20/s`.
    rate: Option<String>,
    /// The run's duration, at most 366 days.
    duration: Option<String>,
    /// Lowers the bound on requests (never raises it).
    #[schema(maximum = 50_000)]
    #[serde(default, deserialize_with = "whole")]
    max_requests: Option<u64>,
    /// The simulated client's key, 1 to 256 bytes.
    #[schema(min_length = 1, max_length = 256)]
    key: Option<String>,
    /// A trace's column holding the times.
    column: Option<String>,
    /// The longest wait of a waiting client, a duration of at most one day.
    max_wait: Option<String>,
    /// Concurrent runners of a waiting client, 1 to 1,000.
    #[schema(minimum = 1, maximum = 1_000)]
    #[serde(default, deserialize_with = "whole")]
    runners: Option<u64>,
    /// Count the limit per calendar day of this IANA time zone (`America/Los_Angeles`), from
    /// local midnight: one window algorithm and a `N/day` limit. At most 64 bytes.
    #[schema(max_length = 64)]
    calendar: Option<String>,
}

/// An optional whole number written in any JSON spelling of one (`5`, `5.0`, `5e0`): JSON
/// Schema's `integer`, the document's type, is any number whose fraction is zero (as the
/// decision API's [`crate::http::body::whole_number`]); `null` is absent.
fn whole<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    crate::http::body::whole_number(&n, u64::MAX, "whole number")
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A member that is one name of a closed set (the simulator's [`Choice`]s), or absent (`null`).
fn names(description: &str, names: impl IntoIterator<Item = &'static str>) -> Object {
    let mut values: Vec<Value> = names.into_iter().map(Value::from).collect();
    values.push(Value::Null);
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(values))
        .description(Some(description))
        .build()
}

/// The names of `T`'s values.
fn choices<T: Choice>() -> impl Iterator<Item = &'static str> {
    T::ALL.iter().map(|(_, name, _)| *name)
}

fn scenario_schema() -> Object {
    names(
        "A scenario (`GET /ui/choices.json`: `scenario`).",
        choices::<ScenarioName>(),
    )
}

fn preset_schema() -> Object {
    names(
        "A preset of the scenario (`GET /ui/choices.json`); one of another scenario is a 422.",
        choices::<Preset>(),
    )
}

fn counter_schema() -> Object {
    names(
        "How instances count (`GET /ui/choices.json`: `counter`).",
        choices::<CounterMode>(),
    )
}

fn balance_schema() -> Object {
    names(
        "How traffic is spread across instances (`GET /ui/choices.json`: `balance`).",
        choices::<Balance>(),
    )
}

fn store_schema() -> Object {
    names("The store: `memory` only on this endpoint.", ["memory"])
}

/// A refused request: the member at fault, why, and whether the body breaks the document's
/// schema (a 400) or is well formed but cannot be run (a 422).
#[derive(Debug)]
pub(super) struct Bad {
    pub(super) field: String,
    pub(super) detail: String,
    malformed: bool,
}

impl Bad {
    /// The body is not what the document's schema describes: a 400.
    fn malformed(field: &str, detail: impl Into<String>) -> Self {
        Self::new(field, detail.into(), true)
    }

    /// The body is well formed but its members cannot be run: a 422.
    fn unrunnable(field: &str, detail: impl Into<String>) -> Self {
        Self::new(field, detail.into(), false)
    }

    fn new(field: &str, detail: String, malformed: bool) -> Self {
        Self {
            field: field.to_string(),
            detail,
            malformed,
        }
    }

    /// The answer's status.
    pub(super) fn status(&self) -> StatusCode {
        if self.malformed {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        }
    }
}

/// Parses the body straight from the bytes (not through a `Value`, which would keep the last
/// of two members with one name): unknown and repeated members are errors naming them.
pub(super) fn parse_body(bytes: &[u8]) -> Result<SimulateRequest, Bad> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Bad::malformed("body", "must be a JSON object"));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let request: SimulateRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        // serde names an unknown or repeated member between backticks, at the object's path.
        let named = ["unknown field `", "duplicate field `"]
            .iter()
            .find_map(|p| message.strip_prefix(p))
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string);
        let field = match (path.as_str(), named) {
            (".", Some(name)) => name,
            (".", None) => "body".to_string(),
            (path, _) => path.to_string(),
        };
        Bad::malformed(&field, format!("invalid JSON: {message}"))
    })?;
    de.end()
        .map_err(|e| Bad::malformed("body", format!("invalid JSON: {e}")))?;
    Ok(request)
}

/// One named value of a closed set (the member's `enum` in the document), or an error listing
/// the set.
fn choice<T: Choice>(field: &str, text: &str) -> Result<T, Bad> {
    T::from_name(text).ok_or_else(|| {
        let names: Vec<_> = T::ALL.iter().map(|(_, name, _)| *name).collect();
        Bad::malformed(
            field,
            format!(
                "unknown value {text:?}; expected one of {}",
                names.join(", ")
            ),
        )
    })
}

/// A duration member of at most `max` microseconds.
fn duration_within(field: &str, text: Option<String>, max: Micros) -> Result<Option<Micros>, Bad> {
    let Some(text) = text else {
        return Ok(None);
    };
    let us = parse_duration(&text).map_err(|e| Bad::unrunnable(field, e))?;
    if us > max {
        return Err(Bad::unrunnable(
            field,
            format!(
                "{text:?} is longer than the API's {} (at most {max} us)",
                days(max)
            ),
        ));
    }
    Ok(Some(us))
}

/// A duration member of at most [`MAX_DURATION_US`].
fn duration(field: &str, text: Option<String>) -> Result<Option<Micros>, Bad> {
    duration_within(field, text, MAX_DURATION_US)
}

/// `max` in days, as the bounds are written (`1 day`, `366 days`).
fn days(max: Micros) -> String {
    match max / (86_400 * 1_000_000) {
        1 => "1 day".to_string(),
        n => format!("{n} days"),
    }
}

/// The [`Spec`] a request describes, within the API's bounds.
// Over 120 lines: the request's fields one after another, each bounded and named in its own
// error, in the order of the API's documentation.
pub(super) fn spec_of(r: SimulateRequest) -> Result<Spec, Bad> {
    let bad = |field: &str, detail: String| Err(Bad::unrunnable(field, detail));
    let malformed = |field: &str, detail: String| Err(Bad::malformed(field, detail));
    let defaults = Spec::default();
    if r.trace.is_some() && (r.scenario.is_some() || r.preset.is_some()) {
        let other = if r.scenario.is_some() {
            "scenario"
        } else {
            "preset"
        };
        return bad(
            "trace",
            format!("a trace replaces the built-in traffic: give trace or {other}, not both"),
        );
    }
    // `memory` exactly (the member's `enum`): a Redis URL is the command line's only.
    let store = match r.store.as_deref() {
        None | Some("memory") => StoreSpec::Memory,
        Some(text) if text.starts_with("redis://") || text.starts_with("rediss://") => {
            return malformed(
                "store",
                "the API simulates with counters in memory only; use `floodgate simulate \
                 --store redis://...` for Redis"
                    .into(),
            )
        }
        Some(text) => {
            return malformed(
                "store",
                format!("unknown store {text:?}; the API takes `memory` only"),
            )
        }
    };
    let algorithm = r
        .algorithm
        .map(|t| AlgorithmChoice::from_str(&t).map_err(|e| Bad::unrunnable("algorithm", e)))
        .transpose()?
        .unwrap_or(defaults.algorithm);
    // Every decision of every algorithm is in the answer: all six get fewer requests.
    let (cap, with) = match algorithm {
        AlgorithmChoice::All => (MAX_SIMULATE_REQUESTS_ALL, " with algorithm all"),
        AlgorithmChoice::Several(_) => (MAX_SIMULATE_REQUESTS_ALL, " with more than one algorithm"),
        AlgorithmChoice::One(_) => (MAX_SIMULATE_REQUESTS, ""),
    };
    let max_requests = match r.max_requests {
        None => cap,
        Some(n) if n <= cap => n,
        // Above the document's `maximum` (the cap of one algorithm).
        Some(n) if n > MAX_SIMULATE_REQUESTS => {
            return malformed(
                "max_requests",
                format!("{n} is above the API's cap of {cap} requests{with}"),
            )
        }
        Some(n) => {
            return bad(
                "max_requests",
                format!("{n} is above the API's cap of {cap} requests{with}"),
            )
        }
    };
    let rate = r
        .rate
        .map(|t| parse_rate(&t).map_err(|e| Bad::unrunnable("rate", e)))
        .transpose()?;
    if let Some((_, per)) = rate {
        if per > MAX_DURATION_US {
            return bad(
                "rate",
                format!(
                    "the period is longer than the API's {} (at most {MAX_DURATION_US} us)",
                    days(MAX_DURATION_US)
                ),
            );
        }
    }
    let instances = match r.instances {
        None => defaults.instances,
        Some(n @ 1..=MAX_INSTANCES) => usize::try_from(n).unwrap_or(1),
        Some(n) => {
            return malformed(
                "instances",
                format!("must be between 1 and {MAX_INSTANCES}, got {n}"),
            )
        }
    };
    if let Some(n) = r.runners {
        if !(1..=MAX_RUNNERS).contains(&n) {
            return malformed(
                "runners",
                format!("must be between 1 and {MAX_RUNNERS}, got {n}"),
            );
        }
    }
    if let Some(key) = &r.key {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            let detail = format!("must be between 1 and {MAX_KEY_BYTES} bytes");
            // The document bounds characters (JSON Schema's `maxLength`): 256 of them may
            // be more bytes, a well-formed key the API still refuses.
            return if key.chars().count() > MAX_KEY_BYTES || key.is_empty() {
                malformed("key", detail)
            } else {
                bad("key", detail)
            };
        }
    }
    Ok(Spec {
        scenario: r
            .scenario
            .map(|t| choice::<ScenarioName>("scenario", &t))
            .transpose()?
            .unwrap_or(defaults.scenario),
        preset: r
            .preset
            .map(|t| choice::<Preset>("preset", &t))
            .transpose()?,
        trace: r.trace.map(|text| TraceInput::Text {
            name: "trace".into(),
            text,
        }),
        algorithm,
        limit: r
            .limit
            .map(|t| {
                Quota::from_str(&t).map_err(|e| Bad::unrunnable("limit", format!("{t:?}: {e}")))
            })
            .transpose()?,
        burst: r.burst,
        instances,
        counter: r
            .counter
            .map(|t| choice::<CounterMode>("counter", &t))
            .transpose()?
            .unwrap_or(defaults.counter),
        balance: r
            .balance
            .map(|t| choice::<Balance>("balance", &t))
            .transpose()?
            .unwrap_or(defaults.balance),
        store,
        requests: r.requests,
        spread: duration("spread", r.spread)?,
        before: duration("before", r.before)?,
        after: duration("after", r.after)?,
        at: duration("at", r.at)?,
        every: duration("every", r.every)?,
        rate,
        duration: duration("duration", r.duration)?,
        max_requests,
        key: r.key.unwrap_or(defaults.key),
        column: duration("column", r.column)?,
        max_wait: duration_within("max_wait", r.max_wait, MAX_WAIT_US)?,
        runners: r.runners,
        calendar: match r.calendar {
            Some(zone) if zone.len() > MAX_ZONE_BYTES => {
                let detail = format!("a time zone name of at most {MAX_ZONE_BYTES} bytes");
                // As `key`: the document bounds characters.
                return if zone.chars().count() > MAX_ZONE_BYTES {
                    malformed("calendar", detail)
                } else {
                    bad("calendar", detail)
                };
            }
            zone => zone,
        },
    })
}

/// The engine's messages name command-line flags (`--max-requests`); the API's members are
/// the same words in snake case (`max_requests`).
pub(super) fn api_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("--") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(after.len());
        if end == 0 {
            out.push_str("--");
        } else {
            out.push_str(&after[..end].replace('-', "_"));
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(body: &str) -> Result<Spec, Bad> {
        parse_body(body.as_bytes()).and_then(spec_of)
    }

    fn field(body: &str) -> String {
        spec(body).unwrap_err().field
    }

    fn status(body: &str) -> u16 {
        spec(body).unwrap_err().status().as_u16()
    }

    #[test]
    fn empty_object_is_the_command_lines_default_within_the_api_cap() {
        let s = spec("{}").unwrap();
        assert_eq!(
            s,
            Spec {
                max_requests: MAX_SIMULATE_REQUESTS_ALL,
                ..Spec::default()
            }
        );
        let s = spec(r#"{"algorithm": "gcra"}"#).unwrap();
        assert_eq!(s.max_requests, MAX_SIMULATE_REQUESTS);
    }

    #[test]
    fn members_map_onto_the_spec() {
        let s = spec(
            r#"{"scenario": "calm-spike", "algorithm": "token_bucket", "limit": "10/10s",
                "burst": 5, "instances": 3, "counter": "shared", "balance": "skewed",
                "at": "4.5s", "every": "950ms", "duration": "20s", "key": "k", "column": "1s",
                "max_requests": 100}"#,
        )
        .unwrap();
        assert_eq!(s.scenario, ScenarioName::CalmSpike);
        assert_eq!(s.limit, Some("10/10s".parse().unwrap()));
        assert_eq!((s.burst, s.instances), (Some(5), 3));
        assert_eq!(
            (s.counter, s.balance),
            (CounterMode::Shared, Balance::Skewed)
        );
        assert_eq!((s.at, s.every), (Some(4_500_000), Some(950_000)));
        assert_eq!((s.duration, s.column), (Some(20_000_000), Some(1_000_000)));
        assert_eq!((s.key.as_str(), s.max_requests), ("k", 100));
        let s = spec(r#"{"scenario": "daily-jobs", "runners": 4, "max_wait": "2s"}"#).unwrap();
        assert_eq!(s.scenario, ScenarioName::DailyJobs);
        assert_eq!((s.runners, s.max_wait), (Some(4), Some(2_000_000)));
    }

    #[test]
    fn bad_members_are_named() {
        assert_eq!(field(r#"{"algorithm": "leaky"}"#), "algorithm");
        assert_eq!(field(r#"{"scenario": "storm"}"#), "scenario");
        assert_eq!(field(r#"{"limt": "1/s"}"#), "limt");
        assert_eq!(field(r#"{"limit": "1/s", "limit": "2/s"}"#), "limit");
        assert_eq!(field(r#"{"burst": "5"}"#), "burst");
        assert_eq!(field(r#"{"before": "5 parsecs"}"#), "before");
        assert_eq!(field(r#"{"store": "redis://127.0.0.1:6379"}"#), "store");
        assert_eq!(field(r#"{"max_requests": 12001}"#), "max_requests");
        assert_eq!(
            field(r#"{"algorithm": "gcra", "max_requests": 50001}"#),
            "max_requests"
        );
        assert!(spec(r#"{"algorithm": "gcra", "max_requests": 50000}"#).is_ok());
        assert_eq!(field(r#"{"max_wait": "1d1us"}"#), "max_wait");
        assert_eq!(field(r#"{"max_wait": "2d"}"#), "max_wait");
        assert!(spec(r#"{"scenario": "flood", "max_wait": "1d"}"#).is_ok());
        for member in [
            "duration", "spread", "before", "after", "at", "every", "column",
        ] {
            let body = format!(r#"{{"{member}": "367d"}}"#);
            assert_eq!(field(&body), member);
        }
        assert_eq!(field(r#"{"scenario": "flood", "rate": "1/367d"}"#), "rate");
        assert_eq!(field(r#"{"instances": 0}"#), "instances");
        assert_eq!(field(r#"{"runners": 0}"#), "runners");
        assert_eq!(field(r#"{"max_wait": "soon"}"#), "max_wait");
        assert_eq!(field(r#"{"trace": "1,a", "scenario": "flood"}"#), "trace");
        assert_eq!(field(r#"[1]"#), "body");
        assert_eq!(field(r#"{} {}"#), "body");
    }

    #[test]
    fn what_breaks_the_schema_is_a_400_and_what_cannot_run_a_422() {
        for body in [
            r#"[1]"#,
            r#"{"limt": "1/s"}"#,
            r#"{"limit": "1/s", "limit": "2/s"}"#,
            r#"{"burst": "5"}"#,
            r#"{"scenario": "storm"}"#,
            r#"{"counter": "global"}"#,
            r#"{"balance": "random"}"#,
            r#"{"preset": "nope"}"#,
            r#"{"store": " memory"}"#,
            r#"{"store": "redis://127.0.0.1:6379"}"#,
            r#"{"instances": 0}"#,
            r#"{"runners": 1001}"#,
            r#"{"max_requests": 50001}"#,
            r#"{"key": ""}"#,
        ] {
            assert_eq!(status(body), 400, "{body}");
        }
        let wide_zone = format!(r#"{{"calendar": "{}"}}"#, "\u{e9}".repeat(40));
        let wide_key = format!(r#"{{"key": "{}"}}"#, "\u{e9}".repeat(200));
        for body in [
            r#"{"algorithm": "leaky"}"#,
            r#"{"limit": "ten"}"#,
            r#"{"rate": "1/367d"}"#,
            r#"{"before": "5 parsecs"}"#,
            r#"{"max_wait": "2d"}"#,
            r#"{"max_requests": 12001}"#,
            r#"{"trace": "1,a", "scenario": "flood"}"#,
            &wide_zone,
            &wide_key,
        ] {
            assert_eq!(status(body), 422, "{body}");
        }
        assert!(spec(r#"{"store": "memory", "scenario": null}"#).is_ok());
        // Whole numbers in any JSON spelling, as JSON Schema's `integer`.
        let s = spec(r#"{"burst": 5.0, "instances": 2e0, "max_requests": 318.0}"#).unwrap();
        assert_eq!((s.burst, s.instances, s.max_requests), (Some(5), 2, 318));
        for body in [
            r#"{"burst": 5.5}"#,
            r#"{"runners": -1}"#,
            r#"{"requests": "5"}"#,
        ] {
            assert_eq!(
                (status(body), field(body)),
                (400, body[2..].split('"').next().unwrap().to_string()),
                "{body}"
            );
        }
    }

    #[test]
    fn flags_in_engine_messages_become_member_names() {
        assert_eq!(
            api_words("--before applies only to --scenario boundary; raise --max-requests"),
            "before applies only to scenario boundary; raise max_requests"
        );
        assert_eq!(api_words("a -- b"), "a -- b");
    }
}
