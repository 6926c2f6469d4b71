//! Operations endpoints: `/metrics`, `/healthz`, `/readyz`, the not-found and
//! method-not-allowed answers, and the test-only clock control.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use floodgate_core::Clock;
use http::{HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::problem;
use crate::serve::AppState;

/// `GET /metrics`: Prometheus text exposition.
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    // Refresh the key gauge so a scrape sees the current size.
    if let Some(memory) = state.store.memory() {
        let _ = memory.stats();
    }
    let mut response = state.prometheus.render().into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// `GET /healthz`: the process is up.
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 with the configuration in force (file, generation, rules) while serving;
/// 503 once shutdown has begun, so load balancers stop sending traffic.
pub(super) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let config = state.config();
    let rules: Vec<_> = config
        .rules
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "algorithm": r.policy.kind().as_str(),
                "quota": r.policy.quota().to_string(),
                "shadow": r.shadow,
            })
        })
        .collect();
    let shutting_down = state.shutting_down.load(Ordering::SeqCst);
    let body = json!({
        "status": if shutting_down { "shutting_down" } else { "ready" },
        "config": { "file": config.file, "generation": state.generation(), "rules": rules },
    });
    let status = if shutting_down {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}

/// A route that exists but not for this method: 405 problem+json naming the `method` field
/// (axum adds the `Allow` header with the methods the route does support).
pub(super) async fn method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    metrics::counter!("floodgate_requests_rejected_total", "reason" => "method_not_allowed")
        .increment(1);
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        super::PROBLEM_METHOD_NOT_ALLOWED,
        "Method Not Allowed",
        format!(
            "method: {method} is not allowed on {}; the Allow header lists the methods that are",
            uri.path()
        ),
        Some(("field", "method".into())),
    )
}

/// Any other path.
pub(super) async fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "about:blank",
        "Not Found",
        "no such endpoint; see the README for the API",
        None,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Advance {
    micros: u64,
}

/// `POST /v1/debug/clock/advance {"micros": N}`: TEST ONLY. Exists only with the hidden
/// `--manual-clock` flag; moves the manual clock forward and answers the new time.
pub(super) async fn advance_clock(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(clock) = &state.manual_clock else {
        return not_found().await;
    };
    let advance: Advance = match super::api::read_json(body) {
        Ok(a) => a,
        Err(response) => return response,
    };
    clock.advance(advance.micros);
    Json(json!({ "now_us": clock.now() })).into_response()
}
