//! envoyproxy/ratelimit's HTTP endpoints, served in `--envoy-ratelimit-env` mode:
//! - `POST /json`: a `RateLimitRequest` in proto3 JSON (`{"domain": "d", "descriptors":
//!   [{"entries": [{"key": "k", "value": "v"}]}]}`; field names in lowerCamelCase or as in the
//!   proto, numbers or decimal strings for integers, enum names or numbers), decided by the
//!   same `ShouldRateLimit` as gRPC, answered with the `RateLimitResponse` in proto3 JSON
//!   (lowerCamelCase, enums by name, default values left out): 200, 429 when `OVER_LIMIT`,
//!   500 when `UNKNOWN`, as upstream. A body that is not such a request is a 400
//!   problem+json naming the field; a request the service refuses (`INVALID_ARGUMENT`) a 400,
//!   a store failure of a closed rule (`UNAVAILABLE`) a 503. At most [`MAX_JSON_BODY`] bytes.
//! - `GET /healthcheck`: `OK` while serving, 500 from SIGTERM on (upstream's health checker).
//! - the Prometheus text at `PROMETHEUS_PATH` on `PROMETHEUS_ADDR`, and on the debug listener
//!   (`/metrics`, with `/` listing it).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService as _;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Map, Value};

use crate::grpc::rls::RateLimitService;
use crate::state::AppState;

/// Largest `/json` body: 64 descriptors of 32 long entries fit many times over.
pub(crate) const MAX_JSON_BODY: usize = 1024 * 1024;

/// `/json` and `/healthcheck`, to merge into the HTTP listener's router.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/json", post(json_endpoint))
        .route("/healthcheck", get(healthcheck))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        // The body deadline and budget are the API listener's (`super::body_budget`).
        .with_state(state)
}

/// The Prometheus text at `path` (`PROMETHEUS_PATH`).
pub(crate) fn prometheus(state: Arc<AppState>, path: &str) -> Router {
    Router::new().route(path, get(metrics)).with_state(state)
}

/// The debug listener (`DEBUG_HOST:DEBUG_PORT`): `/metrics`, and `/` listing it.
pub(crate) fn debug(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { "/metrics: the Prometheus metrics (docs/metrics.md)\n" }),
        )
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut response = state.prometheus.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn healthcheck(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::SeqCst) {
        (StatusCode::INTERNAL_SERVER_ERROR, "shutting down\n").into_response()
    } else {
        "OK".into_response()
    }
}

async fn json_endpoint(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    // Past the body deadline, with the body budget full or above the bound: the problem the
    // API answers (408, 503 with `Retry-After`, 413), not axum's plain-text rejection.
    let body = match super::body::body_within(body, MAX_JSON_BODY) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let request = match serde_json::from_slice::<Value>(&body)
        .map_err(|e| (String::new(), format!("not JSON: {e}")))
        .and_then(|v| parse_request(&v))
    {
        Ok(r) => r,
        Err((field, detail)) => return problem(StatusCode::BAD_REQUEST, &field, &detail),
    };
    let service = RateLimitService::new(state);
    match service
        .should_rate_limit(tonic::Request::new(request))
        .await
    {
        Ok(response) => {
            let response = response.into_inner();
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                Ok(Code::Ok) => StatusCode::OK,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, axum::Json(render_response(&response))).into_response()
        }
        Err(status) => {
            let code = match status.code() {
                tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            problem(code, "", status.message())
        }
    }
}

fn problem(status: StatusCode, field: &str, detail: &str) -> Response {
    let mut body = json!({
        "type": "urn:floodgate:problem:invalid-request",
        "title": if status == StatusCode::BAD_REQUEST { "invalid request" } else { "rate limit service error" },
        "status": status.as_u16(),
        "detail": detail,
    });
    if !field.is_empty() {
        body["field"] = json!(field);
    }
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// A field problem: (the field's path, what is wrong).
type Bad = (String, String);

/// The object's fields, each under its JSON name or its proto name (proto3 JSON accepts
/// both); an unknown field is an error, as in upstream's `protojson.Unmarshal`.
fn fields<'a>(
    value: &'a Value,
    path: &str,
    known: &[(&str, &str)],
) -> Result<Vec<Option<&'a Value>>, Bad> {
    let object: &Map<String, Value> = value
        .as_object()
        .ok_or_else(|| (path.to_string(), "expected an object".to_string()))?;
    let mut out = vec![None; known.len()];
    for (key, v) in object {
        let i = known
            .iter()
            .position(|(json, proto)| key == json || key == proto)
            .ok_or_else(|| (join(path, key), "unknown field".to_string()))?;
        if out[i].is_some() {
            return Err((join(path, key), "given twice".to_string()));
        }
        // `null` is the default value in proto3 JSON.
        out[i] = (!v.is_null()).then_some(v);
    }
    Ok(out)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn string(value: Option<&Value>, path: &str) -> Result<String, Bad> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err((path.to_string(), "expected a string".to_string())),
    }
}

/// An integer as proto3 JSON writes it: a number or a decimal string, in either form a whole
/// number such as `3`, `3.0` or `3e0` (what protojson accepts), checked by the same
/// [`whole_number`](super::body::whole_number) as the JSON API's costs.
fn integer(value: Option<&Value>, path: &str, max: u64) -> Result<u64, Bad> {
    let number = match value {
        None => return Ok(0),
        Some(Value::Number(n)) => n.clone(),
        Some(Value::String(s)) => s.parse::<serde_json::Number>().map_err(|_| {
            (
                path.to_string(),
                format!("must be a whole number between 0 and {max}, got {s:?}"),
            )
        })?,
        Some(other) => {
            return Err((
                path.to_string(),
                format!("must be a whole number between 0 and {max}, got {other}"),
            ))
        }
    };
    super::body::whole_number(&number, max, "whole number").map_err(|m| (path.to_string(), m))
}

fn array<'a>(value: Option<&'a Value>, path: &str) -> Result<&'a [Value], Bad> {
    match value {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err((path.to_string(), "expected an array".to_string())),
    }
}

/// A `RateLimitRequest` from its proto3 JSON form.
fn parse_request(value: &Value) -> Result<RateLimitRequest, Bad> {
    let f = fields(
        value,
        "",
        &[
            ("domain", "domain"),
            ("descriptors", "descriptors"),
            ("hitsAddend", "hits_addend"),
        ],
    )?;
    let mut descriptors = Vec::new();
    for (i, d) in array(f[1], "descriptors")?.iter().enumerate() {
        // Bounded by the body limit; the service refuses more than 64 descriptors.
        descriptors.push(parse_descriptor(d, &format!("descriptors[{i}]"))?);
    }
    Ok(RateLimitRequest {
        domain: string(f[0], "domain")?,
        descriptors,
        hits_addend: u32::try_from(integer(f[2], "hitsAddend", u64::from(u32::MAX))?)
            .unwrap_or(u32::MAX),
    })
}

fn parse_descriptor(value: &Value, path: &str) -> Result<RateLimitDescriptor, Bad> {
    let f = fields(
        value,
        path,
        &[
            ("entries", "entries"),
            ("limit", "limit"),
            ("hitsAddend", "hits_addend"),
            ("isNegativeHits", "is_negative_hits"),
        ],
    )?;
    let mut entries = Vec::new();
    for (i, e) in array(f[0], &join(path, "entries"))?.iter().enumerate() {
        let at = format!("{path}.entries[{i}]");
        let g = fields(e, &at, &[("key", "key"), ("value", "value")])?;
        entries.push(Entry {
            key: string(g[0], &join(&at, "key"))?,
            value: string(g[1], &join(&at, "value"))?,
        });
    }
    let limit = match f[1] {
        None => None,
        Some(l) => {
            let at = join(path, "limit");
            let g = fields(
                l,
                &at,
                &[("requestsPerUnit", "requests_per_unit"), ("unit", "unit")],
            )?;
            let unit = match g[1] {
                None => RateLimitUnit::Unknown as i32,
                Some(Value::String(s)) => RateLimitUnit::from_str_name(s)
                    .ok_or_else(|| {
                        (
                            join(&at, "unit"),
                            format!("unknown unit {s:?}; expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"),
                        )
                    })? as i32,
                Some(v) => i32::try_from(integer(Some(v), &join(&at, "unit"), 7)?).unwrap_or(0),
            };
            Some(RateLimitOverride {
                requests_per_unit: u32::try_from(integer(
                    g[0],
                    &join(&at, "requestsPerUnit"),
                    u64::from(u32::MAX),
                )?)
                .unwrap_or(u32::MAX),
                unit,
            })
        }
    };
    let hits_addend = match f[2] {
        None => None,
        Some(v) => Some(UInt64Value {
            value: integer(Some(v), &join(path, "hitsAddend"), u64::MAX)?,
        }),
    };
    let is_negative_hits = match f[3] {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err((
                join(path, "isNegativeHits"),
                "expected true or false".into(),
            ))
        }
    };
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

/// A `RateLimitResponse` in proto3 JSON, as Go's `protojson.Marshal` writes it: lowerCamelCase
/// names, enums by name, fields holding their default value left out, durations as `"12s"` /
/// `"0.500s"`.
fn render_response(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if let Ok(code) = Code::try_from(response.overall_code) {
        if code != Code::Unknown {
            out.insert("overallCode".into(), json!(code.as_str_name()));
        }
    }
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|s| {
            let mut st = Map::new();
            if let Ok(code) = Code::try_from(s.code) {
                if code != Code::Unknown {
                    st.insert("code".into(), json!(code.as_str_name()));
                }
            }
            if let Some(limit) = &s.current_limit {
                let mut l = Map::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), json!(limit.name));
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                }
                if let Ok(unit) = Unit::try_from(limit.unit) {
                    if unit != Unit::Unknown {
                        l.insert("unit".into(), json!(unit.as_str_name()));
                    }
                }
                st.insert("currentLimit".into(), Value::Object(l));
            }
            if s.limit_remaining != 0 {
                st.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                st.insert(
                    "durationUntilReset".into(),
                    json!(duration(d.seconds, d.nanos)),
                );
            }
            Value::Object(st)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    let headers = |list: &[envoy_types::pb::envoy::config::core::v3::HeaderValue]| -> Value {
        Value::Array(
            list.iter()
                .map(|h| json!({"key": h.key, "value": h.value}))
                .collect(),
        )
    };
    if !response.response_headers_to_add.is_empty() {
        out.insert(
            "responseHeadersToAdd".into(),
            headers(&response.response_headers_to_add),
        );
    }
    if !response.request_headers_to_add.is_empty() {
        out.insert(
            "requestHeadersToAdd".into(),
            headers(&response.request_headers_to_add),
        );
    }
    Value::Object(out)
}

/// A `google.protobuf.Duration` in proto3 JSON: seconds with 0, 3, 6 or 9 fractional digits.
fn duration(seconds: i64, nanos: i32) -> String {
    if nanos == 0 {
        return format!("{seconds}s");
    }
    let frac = format!("{:09}", nanos.unsigned_abs());
    let frac = if frac.ends_with("000000") {
        &frac[..3]
    } else if frac.ends_with("000") {
        &frac[..6]
    } else {
        &frac[..]
    };
    format!("{seconds}.{frac}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_both_field_spellings_and_integer_forms() {
        let r = parse_request(&json!({
            "domain": "edge",
            "hits_addend": "3",
            "descriptors": [
                {"entries": [{"key": "k", "value": "v"}], "hitsAddend": 0,
                 "limit": {"requestsPerUnit": 10, "unit": "MINUTE"}},
                {"entries": [{"key": "only"}], "limit": {"requests_per_unit": "5", "unit": 1}}
            ]
        }))
        .unwrap();
        assert_eq!(r.domain, "edge");
        assert_eq!(r.hits_addend, 3);
        assert_eq!(r.descriptors[0].entries[0].value, "v");
        assert_eq!(r.descriptors[0].hits_addend, Some(UInt64Value { value: 0 }));
        let limit = r.descriptors[0].limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (10, 2));
        assert_eq!(r.descriptors[1].entries[0].value, "");
        assert_eq!(r.descriptors[1].hits_addend, None);
        let limit = r.descriptors[1].limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (5, 1));
    }

    #[test]
    fn integers_are_whole_numbers_in_any_json_spelling() {
        // protojson reads 3, 3.0, 3e0 and "3e0" as the same 3; 2.5 is not an integer.
        for given in [
            json!(3),
            json!(3.0),
            json!(3e0),
            json!("3"),
            json!("3.0"),
            json!("3e0"),
        ] {
            let r = parse_request(&json!({"hits_addend": given})).unwrap();
            assert_eq!(r.hits_addend, 3, "{given}");
        }
        for given in [
            json!(2.5),
            json!("2.5"),
            json!("3 "),
            json!(""),
            json!(-1.0),
            json!(5e9),
        ] {
            let (field, message) = parse_request(&json!({"hitsAddend": given})).unwrap_err();
            assert_eq!(field, "hitsAddend", "{given}");
            assert!(
                message.contains("whole number between 0 and 4294967295"),
                "{message}"
            );
        }
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, field) in [
            (json!({"domain": 1}), "domain"),
            (json!({"domian": "x"}), "domian"),
            (json!({"descriptors": {}}), "descriptors"),
            (
                json!({"descriptors": [{"entries": [{"key": "k", "val": "v"}]}]}),
                "descriptors[0].entries[0].val",
            ),
            (
                json!({"descriptors": [{"limit": {"unit": "FORTNIGHT"}}]}),
                "descriptors[0].limit.unit",
            ),
            (json!({"hitsAddend": -1}), "hitsAddend"),
            (json!({"hitsAddend": 4_294_967_296_u64}), "hitsAddend"),
            (json!([]), ""),
        ] {
            let (f, _) = parse_request(&body).unwrap_err();
            assert_eq!(f, field, "{body}");
        }
    }

    #[test]
    fn responses_are_written_as_protojson_writes_them() {
        use envoy_types::pb::envoy::config::core::v3::HeaderValue as Hv;
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
            DescriptorStatus, RateLimit,
        };
        use envoy_types::pb::google::protobuf::Duration as PbDuration;
        let response = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: "everyone".into(),
                        requests_per_unit: 5,
                        unit: Unit::Minute as i32,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(PbDuration {
                        seconds: 48,
                        nanos: 0,
                    }),
                    ..Default::default()
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
            ],
            response_headers_to_add: vec![Hv {
                key: "retry-after".into(),
                value: "48".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            render_response(&response),
            json!({
                "overallCode": "OVER_LIMIT",
                "statuses": [
                    {"code": "OVER_LIMIT", "currentLimit": {"name": "everyone",
                     "requestsPerUnit": 5, "unit": "MINUTE"}, "durationUntilReset": "48s"},
                    {"code": "OK"}
                ],
                "responseHeadersToAdd": [{"key": "retry-after", "value": "48"}]
            })
        );
        // As docs/envoy.md shows it: keys in name order.
        assert!(render_response(&response)
            .to_string()
            .starts_with(r#"{"overallCode":"OVER_LIMIT","responseHeadersToAdd":[{"key""#));
    }

    #[test]
    fn durations_keep_3_6_or_9_digits() {
        assert_eq!(duration(1, 0), "1s");
        assert_eq!(duration(0, 500_000_000), "0.500s");
        assert_eq!(duration(52, 190_000), "52.000190s");
        assert_eq!(duration(0, 1), "0.000000001s");
    }
}
