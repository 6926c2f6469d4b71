//! `POST /v1/simulate`: the simulation engine of `floodgate simulate` behind the API.
//!
//! The body is a JSON object whose members are the fields of [`floodgate_simulate::Spec`],
//! every one optional (the defaults are those of `floodgate simulate` without flags):
//!
//! ```json
//! {"scenario": "boundary", "algorithm": "fixed_window", "limit": "10/10s", "burst": 10,
//!  "instances": 3, "counter": "local", "balance": "round-robin", "store": "memory",
//!  "requests": 10, "spread": "0", "before": "500ms", "after": "500ms", "at": "4.5s",
//!  "every": "1s", "rate": "100/10s", "duration": "10s", "max_requests": 1000,
//!  "key": "client", "column": "1s", "preset": "clock-boundary",
//!  "trace": "t_ms,key,cost\n950,alice,1\n"}
//! ```
//!
//! Names and choices are the command line's (`--counter local` is `"counter": "local"`);
//! durations are strings with a unit (`950ms`, `0.95s`, `4.5s`, `1min`, or `0`); `limit` is a
//! quota (`10/10s`); `rate` is `COUNT/DURATION`; `trace` is the text of a trace (CSV
//! `t_ms,key,cost` or JSON lines), replacing `scenario` and `preset`. Unknown members and
//! members given twice are refused.
//!
//! The answer is exactly the document `floodgate simulate --format json` prints for the same
//! inputs. Work is bounded (docs/ui.md lists the bounds): at most [`MAX_SIMULATE_REQUESTS`]
//! requests with one algorithm and [`MAX_SIMULATE_REQUESTS_ALL`] with several (`max_requests`
//! may lower it, never raise it), at most [`MAX_INSTANCES`] instances, `max_wait` at most
//! [`MAX_WAIT_US`], every other duration at most [`MAX_DURATION_US`], a body of at most
//! [`MAX_SIMULATE_BODY_BYTES`] arriving within [`BODY_TIMEOUT`], an answer of at most [`MAX_ANSWER_BYTES`], counters in memory
//! only, at most [`MAX_IN_FLIGHT`] simulations from reading the body until the answer is sent
//! (a 503 with `Retry-After` beyond), [`MAX_RUNNING`] of them running on the blocking thread
//! pool. With an API or admin token configured it needs one ([`crate::http::auth`]). Every
//! error is a 400 problem+json naming the member at fault.

use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use floodgate_core::{Micros, Quota};
use floodgate_simulate::setup::{Balance, CounterMode, StoreSpec};
use floodgate_simulate::traffic::{parse_duration, parse_rate};
use floodgate_simulate::{
    build_report, json, AlgorithmChoice, Choice, Preset, ScenarioName, Spec, TraceInput,
};
use http::{HeaderValue, StatusCode};
use serde::Deserialize;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::http::bounds::MAX_KEY_BYTES;
use crate::http::problem::invalid;
use crate::state::AppState;

/// Most requests one `/v1/simulate` generates or replays with one algorithm (`max_requests`
/// may lower it, never raise it). The answer holds every decision (about 175 bytes each).
const MAX_SIMULATE_REQUESTS: u64 = 50_000;

/// Most requests with `"algorithm": "all"` or a list of several: up to six decisions each, so the largest answer of the
/// default key is about 12,000 x 6 x 175 bytes = 12.6 MB, within [`MAX_ANSWER_BYTES`].
const MAX_SIMULATE_REQUESTS_ALL: u64 = 12_000;

/// Largest answer, in bytes (16 MiB). Rendering stops at it (a trace's keys can be long) and
/// the request is a 400 naming `max_requests`.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Most service instances one simulation may model (each keeps its own counters per key).
const MAX_INSTANCES: u64 = 1_000;

/// Most job runners of the `daily-jobs` scenario a request may ask for.
const MAX_RUNNERS: u64 = 1_000;

/// Longest `max_wait` (one day): a request that waits longer is not queued but refused.
const MAX_WAIT_US: u64 = 86_400 * 1_000_000;

/// Longest duration member (`duration`, `spread`, `before`, `after`, `at`, `every`, `column`,
/// and the period of `rate`): 366 days, a year of traffic.
const MAX_DURATION_US: u64 = 366 * 86_400 * 1_000_000;

/// Largest accepted `/v1/simulate` body, in bytes (1 MiB: room for a pasted trace of about
/// 50,000 lines).
pub(crate) const MAX_SIMULATE_BODY_BYTES: usize = 1024 * 1024;

/// How long the body may take to arrive once a slot is taken (a 408 naming `body` beyond).
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most simulations running at once (on the blocking pool); admitted ones wait for a run slot.
const MAX_RUNNING: usize = 2;

/// Most simulations in flight at once, from reading the body until the answer is sent (or its
/// connection closed): a slow reader holds its slot, so at most this many answers are held.
/// Further requests are a 503 with `Retry-After`.
pub(crate) const MAX_IN_FLIGHT: usize = 4;

/// The request body: the [`Spec`] fields, as text where the command line takes text.
/// (In the OpenAPI document as `SimulateRequest`; the words are `floodgate simulate --help`'s.)
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimulateRequest {
    /// A scenario name (`GET /ui/choices.json`: `scenario`), e.g. `burst`, `steady`.
    scenario: Option<String>,
    /// A preset of the scenario.
    preset: Option<String>,
    /// A trace instead of a scenario: one request time per line.
    trace: Option<String>,
    /// An algorithm (`GET /ui/choices.json`: `algorithm`), several separated by commas
    /// (`fixed_window,token_bucket`: each runs once), or `all`.
    algorithm: Option<String>,
    /// The quota, e.g. `10/s`, `100/min`.
    limit: Option<String>,
    /// Burst capacity in units (default: the limit).
    burst: Option<u64>,
    /// Instances of the service sharing the traffic, 1 to 1,000.
    #[schema(minimum = 1, maximum = 1_000)]
    instances: Option<u64>,
    /// How instances count (`GET /ui/choices.json`: `counter`).
    counter: Option<String>,
    /// How traffic is spread across instances (`GET /ui/choices.json`: `balance`).
    balance: Option<String>,
    /// The store: `memory` only on this endpoint.
    store: Option<String>,
    /// Requests of the scenario (at most 50,000; 12,000 with every algorithm).
    #[schema(maximum = 50_000)]
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
    runners: Option<u64>,
    /// Count the limit per calendar day of this IANA time zone (`America/Los_Angeles`), from
    /// local midnight: one window algorithm and a `N/day` limit. At most 64 bytes.
    #[schema(max_length = 64)]
    calendar: Option<String>,
}

/// The slots bounding simulations in flight and running (one process, one pool).
static IN_FLIGHT: Semaphore = Semaphore::const_new(MAX_IN_FLIGHT);
static RUNNING: Semaphore = Semaphore::const_new(MAX_RUNNING);

/// `POST /v1/simulate`.
pub(crate) async fn simulate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    if let Err(refused) = crate::http::auth::authorize_costly(&state, request.headers()) {
        return refused;
    }
    // Taken before the body is read: at most MAX_IN_FLIGHT bodies and answers are held.
    let Ok(permit) = IN_FLIGHT.try_acquire() else {
        return busy();
    };
    let in_flight = RunPermit::new(permit);
    // A body sent slowly would hold the slot as long as its sender likes.
    let body = tokio::time::timeout(BODY_TIMEOUT, Bytes::from_request(request, &state)).await;
    let Ok(body) = body else {
        return invalid(
            StatusCode::REQUEST_TIMEOUT,
            "body",
            format!("not received within {} s", BODY_TIMEOUT.as_secs()),
        );
    };
    let bytes = match body {
        Ok(bytes) if bytes.len() <= MAX_SIMULATE_BODY_BYTES => bytes,
        Ok(_) => return too_large(),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return too_large()
        }
        Err(rejection) => {
            return crate::http::body_budget::refusal(&rejection)
                .unwrap_or_else(|| invalid(rejection.status(), "body", rejection.body_text()))
        }
    };
    let spec = match parse_body(&bytes).and_then(spec_of) {
        Ok(spec) => spec,
        Err((field, detail)) => return invalid(StatusCode::BAD_REQUEST, &field, detail),
    };
    drop(bytes);
    // `acquire` fails only on a closed semaphore, and this one is never closed.
    let running = RUNNING.acquire().await.ok();
    // The engine is CPU-bound: off the async workers, so a big run does not stall the server.
    // The task holds both slots until it ends: a client that leaves does not stop it, and
    // must not free its slots while it still runs.
    let run = tokio::task::spawn_blocking(move || {
        let gauge = metrics::gauge!("floodgate_simulations_running");
        gauge.increment(1.0);
        let answer =
            build_report(&spec).map(|report| json::render_within(&report, MAX_ANSWER_BYTES));
        gauge.decrement(1.0);
        drop(running);
        (answer, in_flight)
    })
    .await;
    match run {
        Ok((Ok(Some(text)), in_flight)) => {
            let mut response = Response::new(Body::new(Answer {
                rest: Bytes::from(text),
                _slot: in_flight,
            }));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Ok((Ok(None), _)) => invalid(
            StatusCode::BAD_REQUEST,
            "max_requests",
            format!(
                "the answer would be larger than the API's {MAX_ANSWER_BYTES} bytes (it holds \
                 every decision of every algorithm, with its key); lower max_requests, choose \
                 one algorithm, or use `floodgate simulate`"
            ),
        ),
        Ok((Err(e), _)) => {
            let field = e.field().unwrap_or("body");
            // The engine's advice names no cap; the API has one.
            let detail = api_words(&e.to_string()).replace(
                "or raise max_requests",
                &format!(
                    "or raise max_requests (the API takes at most {MAX_SIMULATE_REQUESTS}, \
                     {MAX_SIMULATE_REQUESTS_ALL} with algorithm all; `floodgate simulate` more)"
                ),
            );
            invalid(StatusCode::BAD_REQUEST, field, detail)
        }
        Err(e) => {
            tracing::error!(error = %e, "simulation task failed");
            crate::http::problem::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "about:blank",
                "Internal Server Error",
                "the simulation failed",
                None,
            )
        }
    }
}

/// What `/v1/simulate` makes of a body, less the HTTP around it: the parse and, when it
/// parses, the run and its rendering (for the parsers' property test: an answer, never a
/// panic). `Err` is the problem the endpoint would answer.
#[cfg(test)]
pub(crate) fn answer_body(bytes: &[u8]) -> Result<Option<String>, String> {
    let spec = parse_body(bytes)
        .and_then(spec_of)
        .map_err(|(field, detail)| format!("{field}: {detail}"))?;
    build_report(&spec)
        .map(|report| json::render_within(&report, MAX_ANSWER_BYTES))
        .map_err(|e| e.to_string())
}

/// Bytes of the answer handed to the connection at a time.
const ANSWER_CHUNK_BYTES: usize = 64 * 1024;

/// The answer's body: the rendered document, sent in chunks, holding its in-flight slot until
/// the last chunk is taken or the connection is gone (the body is dropped either way).
struct Answer {
    rest: Bytes,
    _slot: RunPermit,
}

/// An in-flight slot, counted in the gauge `floodgate_simulations_in_flight` while held.
struct RunPermit(#[allow(dead_code)] SemaphorePermit<'static>);

impl RunPermit {
    fn new(permit: SemaphorePermit<'static>) -> Self {
        metrics::gauge!("floodgate_simulations_in_flight").increment(1.0);
        Self(permit)
    }
}

impl Drop for RunPermit {
    fn drop(&mut self) {
        metrics::gauge!("floodgate_simulations_in_flight").decrement(1.0);
    }
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        let n = self.rest.len().min(ANSWER_CHUNK_BYTES);
        let chunk = self.rest.split_to(n);
        Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// The 503 of a request arriving while [`MAX_IN_FLIGHT`] simulations are in flight.
fn busy() -> Response {
    let mut response = crate::http::problem::problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "urn:floodgate:problem:simulator-busy",
        "Service Unavailable",
        format!("{MAX_IN_FLIGHT} simulations are in flight (running or being sent); try again"),
        None,
    );
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_large() -> Response {
    invalid(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body",
        format!("must be at most {MAX_SIMULATE_BODY_BYTES} bytes"),
    )
}

/// `(field, detail)` of a bad request.
type Bad = (String, String);

/// Parses the body straight from the bytes (not through a `Value`, which would keep the last
/// of two members with one name): unknown and repeated members are errors naming them.
fn parse_body(bytes: &[u8]) -> Result<SimulateRequest, Bad> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(("body".into(), "must be a JSON object".into()));
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
        (field, format!("invalid JSON: {message}"))
    })?;
    de.end()
        .map_err(|e| ("body".to_string(), format!("invalid JSON: {e}")))?;
    Ok(request)
}

/// One named value of a closed set, or an error listing the set.
fn choice<T: Choice>(field: &str, text: &str) -> Result<T, Bad> {
    T::from_name(text).ok_or_else(|| {
        let names: Vec<_> = T::ALL.iter().map(|(_, name, _)| *name).collect();
        (
            field.to_string(),
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
    let us = parse_duration(&text).map_err(|e| (field.to_string(), e))?;
    if us > max {
        return Err((
            field.to_string(),
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
fn spec_of(r: SimulateRequest) -> Result<Spec, Bad> {
    let bad = |field: &str, detail: String| Err((field.to_string(), detail));
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
    let store = match r.store.as_deref() {
        None => StoreSpec::Memory,
        Some(text) => match StoreSpec::from_str(text) {
            Ok(StoreSpec::Memory) => StoreSpec::Memory,
            Ok(StoreSpec::Redis(_)) => {
                return bad(
                    "store",
                    "the API simulates with counters in memory only; use `floodgate simulate \
                     --store redis://...` for Redis"
                        .into(),
                )
            }
            Err(e) => return bad("store", e),
        },
    };
    let algorithm = r
        .algorithm
        .map(|t| AlgorithmChoice::from_str(&t).map_err(|e| ("algorithm".to_string(), e)))
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
        Some(n) => {
            return bad(
                "max_requests",
                format!("{n} is above the API's cap of {cap} requests{with}"),
            )
        }
    };
    let rate = r
        .rate
        .map(|t| parse_rate(&t).map_err(|e| ("rate".to_string(), e)))
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
            return bad(
                "instances",
                format!("must be between 1 and {MAX_INSTANCES}, got {n}"),
            )
        }
    };
    if let Some(n) = r.runners {
        if !(1..=MAX_RUNNERS).contains(&n) {
            return bad(
                "runners",
                format!("must be between 1 and {MAX_RUNNERS}, got {n}"),
            );
        }
    }
    if let Some(key) = &r.key {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return bad(
                "key",
                format!("must be between 1 and {MAX_KEY_BYTES} bytes"),
            );
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
            .map(|t| Quota::from_str(&t).map_err(|e| ("limit".to_string(), format!("{t:?}: {e}"))))
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
            Some(zone) if zone.len() > 64 => {
                return bad(
                    "calendar",
                    "a time zone name of at most 64 bytes".to_string(),
                )
            }
            zone => zone,
        },
    })
}

/// The engine's messages name command-line flags (`--max-requests`); the API's members are
/// the same words in snake case (`max_requests`).
fn api_words(message: &str) -> String {
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
        spec(body).unwrap_err().0
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
    fn flags_in_engine_messages_become_member_names() {
        assert_eq!(
            api_words("--before applies only to --scenario boundary; raise --max-requests"),
            "before applies only to scenario boundary; raise max_requests"
        );
        assert_eq!(api_words("a -- b"), "a -- b");
    }
}
