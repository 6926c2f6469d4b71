//! The problem+json answers (RFC 9457) every endpoint builds, and the count of rejected
//! requests (`floodgate_requests_rejected_total{reason}`).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};

/// Problem type of a malformed or out-of-range API request.
pub(crate) const PROBLEM_INVALID_REQUEST: &str = "urn:floodgate:problem:invalid-request";

/// Problem type of a request body above its bound (413; RFC 9457: one title per type).
pub(crate) const PROBLEM_TOO_LARGE: &str = "urn:floodgate:problem:request-too-large";

/// Problem type of a request naming a rule that is not configured (404 on the admin API).
pub(crate) const PROBLEM_UNKNOWN_RULE: &str = "urn:floodgate:problem:unknown-rule";

/// Problem type of a method an endpoint does not support (405, with `Allow`).
pub(crate) const PROBLEM_METHOD_NOT_ALLOWED: &str = "urn:floodgate:problem:method-not-allowed";

/// The `reason` labels of `floodgate_requests_rejected_total`, all exported from startup.
pub(crate) const REJECTION_REASONS: &[&str] = &[
    "invalid",
    "too_large",
    "unknown_rule",
    "method_not_allowed",
    "reservation_invalid",
    "reservation_expired",
    "reservation_elsewhere",
    "reservation_unknown",
];

/// A problem+json response. `extra` fields (e.g. `field`) are merged into the body.
pub(crate) fn problem(
    status: StatusCode,
    kind: &str,
    title: &str,
    detail: impl Into<String>,
    extra: Option<(&str, serde_json::Value)>,
) -> Response {
    let mut body = serde_json::json!({
        "type": kind,
        "title": title,
        "status": status.as_u16(),
        "detail": detail.into(),
    });
    if let Some((k, v)) = extra {
        body[k] = v;
    }
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(floodgate_tower::response::PROBLEM_JSON),
    );
    response
}

/// A 400 (or `status`, e.g. 413) problem naming the request `field` at fault. Counted in
/// `floodgate_requests_rejected_total{reason}` (`too_large` for a 413, else `invalid`).
pub(crate) fn invalid(status: StatusCode, field: &str, detail: impl Into<String>) -> Response {
    let (reason, problem_type, title) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => ("too_large", PROBLEM_TOO_LARGE, "request too large"),
        StatusCode::REQUEST_TIMEOUT => ("invalid", PROBLEM_INVALID_REQUEST, "request timeout"),
        StatusCode::NOT_IMPLEMENTED => ("invalid", PROBLEM_INVALID_REQUEST, "not implemented"),
        _ => ("invalid", PROBLEM_INVALID_REQUEST, "invalid request"),
    };
    rejected(status, reason, problem_type, title, field, detail)
}

/// A 404 problem: the rule named by `field` is not configured. Counted in
/// `floodgate_requests_rejected_total{reason="unknown_rule"}`.
pub(crate) fn unknown_rule(field: &str, rule: &str) -> Response {
    rejected(
        StatusCode::NOT_FOUND,
        "unknown_rule",
        PROBLEM_UNKNOWN_RULE,
        "unknown rule",
        field,
        format!("no rule named {rule:?} is configured"),
    )
}

/// A 400 problem like [`invalid`] for a request body naming (in `field`) a rule that is not
/// configured, but counted in `floodgate_requests_rejected_total{reason="unknown_rule"}`.
pub(crate) fn unknown_rule_in_body(field: &str, detail: impl Into<String>) -> Response {
    rejected(
        StatusCode::BAD_REQUEST,
        "unknown_rule",
        PROBLEM_INVALID_REQUEST,
        "invalid request",
        field,
        detail,
    )
}

/// A 400 `cost-exceeds-capacity` problem, the one type for that fault on every front end
/// (forward-auth and the proxy answer it through floodgate-tower's mapping): names `rule` and
/// the request `field` holding the cost. Counted in
/// `floodgate_requests_rejected_total{reason="invalid"}`, as before.
pub(crate) fn cost_exceeds_capacity(field: &str, rule: &str, detail: String) -> Response {
    metrics::counter!("floodgate_requests_rejected_total", "reason" => "invalid").increment(1);
    let body = serde_json::json!({
        "type": floodgate_tower::response::PROBLEM_COST_EXCEEDS_CAPACITY,
        "title": "Request cost exceeds capacity",
        "status": 400,
        "detail": format!("{field}: {detail}"),
        "rule": rule,
        "field": field,
    });
    from_tower(floodgate_tower::response::problem_response(
        StatusCode::BAD_REQUEST,
        &body,
    ))
}

/// A rejected request: counted under `reason`, answered as a problem naming `field`, whose
/// `detail` starts with `field: `.
pub(crate) fn rejected(
    status: StatusCode,
    reason: &'static str,
    kind: &str,
    title: &str,
    field: &str,
    detail: impl Into<String>,
) -> Response {
    metrics::counter!("floodgate_requests_rejected_total", "reason" => reason).increment(1);
    let detail = detail.into();
    let detail = if field.is_empty() {
        detail
    } else {
        format!("{field}: {detail}")
    };
    problem(status, kind, title, detail, Some(("field", field.into())))
}

/// Converts a floodgate-tower response (bytes body) into an axum response.
pub(crate) fn from_tower(response: http::Response<bytes::Bytes>) -> Response {
    response.map(Body::from)
}
