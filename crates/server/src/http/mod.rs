//! The HTTP API of `floodgate serve`.
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/check` | decide and consume: 200 when admitted, 429 with headers when not |
//! | `POST /v1/peek` | the same decision without consuming (always 200) |
//! | `GET /v1/keys/{rule}/{key}` | admin: a key's standing (bearer token) |
//! | `DELETE /v1/keys/{rule}/{key}` | admin: reset a key (bearer token) |
//! | `GET`/`POST /v1/forward-auth` | Traefik ForwardAuth, Caddy `forward_auth`, nginx `auth_request` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness (503 while shutting down) |
//! | `POST /v1/debug/clock/advance` | TEST ONLY, with `--manual-clock`: move time |
//!
//! Every error is `application/problem+json` (RFC 9457) with `type`, `title`, `status`,
//! `detail` and, for bad input, the `field` at fault; bad input is rejected before any state is
//! touched.

// Handlers return `Result<_, Response>` so that `?` can short-circuit with a finished error
// answer; the error path is the rare one and a response is moved once, so boxing buys nothing.
#![allow(clippy::result_large_err)]

mod admin;
mod api;
mod forward_auth;
mod ops;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http::{HeaderValue, StatusCode};

use crate::serve::AppState;

/// Largest accepted request body on the API, in bytes (64 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest accepted client key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// Most descriptors in one `/v1/check` request.
pub const MAX_DESCRIPTORS: usize = 16;

/// Problem type of a malformed or out-of-range API request.
pub const PROBLEM_INVALID_REQUEST: &str = "urn:floodgate:problem:invalid-request";

/// The API router (everything but the reverse proxy).
pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/v1/check", post(api::check))
        .route("/v1/peek", post(api::peek))
        .route(
            "/v1/keys/{rule}/{key}",
            get(admin::inspect).delete(admin::reset),
        )
        .route(
            "/v1/forward-auth",
            get(forward_auth::forward_auth).post(forward_auth::forward_auth),
        )
        .route("/metrics", get(ops::metrics))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz));
    if state.manual_clock.is_some() {
        router = router.route("/v1/debug/clock/advance", post(ops::advance_clock));
    }
    router
        .fallback(ops::not_found)
        // The body limit is checked again while reading (see `api::read_json`) so that the
        // answer is a problem+json 413 rather than axum's plain text.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// A problem+json response. `extra` fields (e.g. `field`) are merged into the body.
pub fn problem(
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

/// A 400 (or `status`) problem naming the request `field` at fault. Counted in
/// `floodgate_requests_rejected_total{reason}`.
pub fn invalid(status: StatusCode, field: &str, detail: impl Into<String>) -> Response {
    let reason = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::NOT_FOUND => "unknown_rule",
        _ => "invalid",
    };
    metrics::counter!("floodgate_requests_rejected_total", "reason" => reason).increment(1);
    let detail = detail.into();
    let detail = if field.is_empty() {
        detail
    } else {
        format!("{field}: {detail}")
    };
    problem(
        status,
        PROBLEM_INVALID_REQUEST,
        "invalid request",
        detail,
        Some(("field", field.into())),
    )
}

/// Converts a floodgate-tower response (bytes body) into an axum response.
pub fn from_tower(response: http::Response<bytes::Bytes>) -> Response {
    response.map(Body::from)
}
