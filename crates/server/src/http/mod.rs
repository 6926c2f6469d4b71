//! The HTTP API of `floodgate serve`.
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/check` | decide and consume: 200 when admitted, 429 with headers when not |
//! | `POST /v1/peek` | the same decision without consuming (always 200) |
//! | `POST /v1/settle` | settle a reservation token of `/v1/check` with the actual cost (see `settle`) |
//! | `GET /v1/keys/{rule}/{key}` | admin: a key's standing (bearer token) |
//! | `DELETE /v1/keys/{rule}/{key}` | admin: reset a key (bearer token) |
//! | `GET`/`POST /v1/forward-auth` | Traefik ForwardAuth, Caddy `forward_auth`, nginx `auth_request` |
//! | any method `/v1/forward-auth/<path>` | Envoy `ext_authz` (`http_service` appends the original path) |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness (503 while shutting down) |
//! | `POST /v1/simulate`, `GET /ui/`, `GET /v1/ui/live` | the simulator and the web page (see `crate::ui`); `/v1/simulate` and `/v1/ui/live` need a token when one is configured (see [`auth`]) |
//! | `POST /v1/debug/clock/advance` | TEST ONLY, with `--manual-clock`: move time (a token when one is configured) |
//!
//! Every error is `application/problem+json` (RFC 9457) with `type`, `title`, `status`,
//! `detail` and, for bad input, the `field` at fault (a body field, a query parameter, `path` or
//! `method`); bad input is rejected before any state is touched. A method a route does not
//! support is a 405 problem with the `Allow` header; query parameters are read by
//! [`QueryParams`], which names the parameter at fault.

// Handlers return `Result<_, Response>` so that `?` can short-circuit with a finished error
// answer; the error path is the rare one and a response is moved once, so boxing buys nothing.
#![allow(clippy::result_large_err)]

mod admin;
mod api;
pub(crate) mod auth;
pub(crate) mod bare;
pub(crate) mod envoy_json;
mod forward_auth;
mod forwarded_uri;
#[cfg(test)]
mod fuzz;
mod ops;
pub(crate) mod settle;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Query};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http::request::Parts;
use http::{HeaderValue, StatusCode};

use crate::state::AppState;
pub(crate) use ops::store_state;

/// Largest accepted request body on the API, in bytes (64 KiB).
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest accepted client key, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 256;

/// Most descriptors in one `/v1/check` request.
pub(crate) const MAX_DESCRIPTORS: usize = 16;

/// Problem type of a malformed or out-of-range API request.
const PROBLEM_INVALID_REQUEST: &str = "urn:floodgate:problem:invalid-request";

/// Problem type of a request body above its bound (413; RFC 9457: one title per type).
const PROBLEM_TOO_LARGE: &str = "urn:floodgate:problem:request-too-large";

/// Problem type of a request naming a rule that is not configured (404 on the admin API).
const PROBLEM_UNKNOWN_RULE: &str = "urn:floodgate:problem:unknown-rule";

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
];

/// The API router (everything but the reverse proxy).
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/v1/check", post(api::check))
        .route("/v1/peek", post(api::peek))
        .route("/v1/settle", post(settle::settle))
        .route(
            "/v1/keys/{rule}/{key}",
            get(admin::inspect).delete(admin::reset),
        )
        .route(
            "/v1/forward-auth",
            get(forward_auth::forward_auth).post(forward_auth::forward_auth),
        )
        .route(
            "/v1/forward-auth/{*original}",
            // Envoy asks with the original request's method, whatever it is.
            axum::routing::any(forward_auth::forward_auth_suffix),
        )
        // The app's root: `path_prefix` + `/` (the wildcard above needs a segment).
        .route(
            "/v1/forward-auth/",
            axum::routing::any(forward_auth::forward_auth_suffix),
        )
        .route("/metrics", get(ops::metrics))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz));
    // The web page and `/v1/simulate` (see `crate::ui`).
    router = crate::ui::routes(router, &state);
    if state.manual_clock.is_some() {
        router = router.route("/v1/debug/clock/advance", post(ops::advance_clock));
    }
    if state.bench_baseline {
        router = router.route("/v1/bench/bare", post(bare::bare));
    }
    router
        // After every route: it applies to the routes registered so far. axum adds `Allow`.
        .method_not_allowed_fallback(ops::method_not_allowed)
        .fallback(ops::not_found)
        // The body limit is checked again while reading (see `api::read_json`) so that the
        // answer is a problem+json 413 rather than axum's plain text.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

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

/// A rejected request: counted under `reason`, answered as a problem naming `field`, whose
/// `detail` starts with `field: `.
fn rejected(
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

/// The query parameters of a request, as decoded `(name, value)` pairs, with typed getters
/// whose errors are 400 problems naming the parameter (axum's `Query<T>` answers a bad value
/// with a plain-text 400 that names nothing). Unknown parameters are ignored, since proxies
/// may add their own.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Response> {
        match Query::<Vec<(String, String)>>::try_from_uri(&parts.uri) {
            Ok(Query(pairs)) => Ok(Self(pairs)),
            Err(e) => Err(invalid(StatusCode::BAD_REQUEST, "query", e.body_text())),
        }
    }
}

impl QueryParams {
    /// The value of parameter `name`: `None` when absent; a 400 naming it when given twice.
    ///
    /// # Errors
    /// A problem response when `name` appears more than once.
    pub(crate) fn get(&self, name: &str) -> Result<Option<&str>, Response> {
        let mut found = self
            .0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str());
        let first = found.next();
        if found.next().is_some() {
            return Err(invalid(
                StatusCode::BAD_REQUEST,
                name,
                "given more than once",
            ));
        }
        Ok(first)
    }

    /// A boolean parameter: `true` or `false` (`None` when absent).
    ///
    /// # Errors
    /// A 400 naming `name` for any other value, or when it is given twice.
    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, Response> {
        match self.get(name)? {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(invalid(
                StatusCode::BAD_REQUEST,
                name,
                format!("must be true or false, got {other:?}"),
            )),
        }
    }

    /// A `u16` parameter (`None` when absent).
    ///
    /// # Errors
    /// A 400 naming `name` when the value is not a whole number from 0 to 65535, or when it is
    /// given twice.
    pub(crate) fn u16(&self, name: &str) -> Result<Option<u16>, Response> {
        match self.get(name)? {
            None => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| {
                invalid(
                    StatusCode::BAD_REQUEST,
                    name,
                    format!("must be a whole number, got {text:?}"),
                )
            }),
        }
    }
}

/// Converts a floodgate-tower response (bytes body) into an axum response.
pub(crate) fn from_tower(response: http::Response<bytes::Bytes>) -> Response {
    response.map(Body::from)
}
