//! Operations endpoints: `/metrics`, `/healthz`, `/readyz`, the not-found and
//! method-not-allowed answers, and the test-only clock control.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use floodgate_core::Clock;
use floodgate_store::{AnyStore, Readiness, Store};
use http::{HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::problem::problem;
use crate::state::AppState;

/// `GET /metrics`: Prometheus text exposition.
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    // Refresh the key gauge so a scrape sees the current size.
    let _ = state.store().stats();
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
///
/// With a Redis store it also reports the store (`"store": {"kind", "state", "reason"}`): while
/// the circuit breaker is open or a readiness probe (`INFO stats`) failed within the last second (at most one
/// probe a second, however often `/readyz` is polled; see `RedisStore::readiness`), the store
/// is `down` and `/readyz` answers 503 problem+json naming the store, since every `closed`
/// rule would answer 503 too. With `fallback = "local"` it stays 200 with `"status":
/// "degraded"`: requests are still decided, locally. On a Redis Cluster `store.shards` lists
/// each master's recent calls (`readyz_shards`); one failing shard makes the store `down`.
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
    let config_json =
        json!({ "file": config.file, "generation": state.generation(), "rules": rules });
    let shutting_down = state.shutting_down.load(Ordering::SeqCst);
    let (store, shards) = store_readiness(state.store()).await;
    if !shutting_down {
        if let StoreReadiness::Down(reason) = &store {
            // A problem+json body (RFC 9457: `status` is the HTTP status here) with the store
            // and the configuration as extension members.
            let body = json!({
                "type": floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
                "title": "Store Unavailable",
                "status": StatusCode::SERVICE_UNAVAILABLE.as_u16(),
                "detail": format!(
                    "store {}: {reason}; rules with failure_mode = \"closed\" answer 503",
                    state.store().kind()
                ),
                "store": store.to_json(state.store().kind()),
                "config": config_json,
            });
            let mut body = body;
            if let Some(shards) = shards {
                body["store"]["shards"] = shards;
            }
            let mut response = (StatusCode::SERVICE_UNAVAILABLE, body.to_string()).into_response();
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(floodgate_tower::response::PROBLEM_JSON),
            );
            return response;
        }
    }
    let status_text = if shutting_down {
        "shutting_down"
    } else if matches!(store, StoreReadiness::Degraded(_)) {
        "degraded"
    } else {
        "ready"
    };
    let mut body = json!({
        "status": status_text,
        "config": config_json,
    });
    if !matches!(store, StoreReadiness::NotChecked) {
        body["store"] = store.to_json(state.store().kind());
        // `fallback = "local"`: the count each limit is divided by while Redis fails.
        if let Some(instances) = state.store().fallback_instances() {
            body["store"]["instances"] = json!(instances);
        }
        if let Some(shards) = shards {
            body["store"]["shards"] = shards;
        }
    }
    let status = if shutting_down {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}

/// What `/readyz` found about the store.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreReadiness {
    /// The memory store: nothing to check.
    NotChecked,
    /// Redis answers.
    Up,
    /// Redis fails, and the local fallback decides meanwhile.
    Degraded(String),
    /// Redis fails and there is no fallback: each rule's failure mode applies.
    Down(String),
}

impl StoreReadiness {
    fn to_json(&self, kind: &str) -> serde_json::Value {
        match self {
            StoreReadiness::NotChecked | StoreReadiness::Up => {
                json!({ "kind": kind, "state": "up" })
            }
            StoreReadiness::Degraded(reason) => {
                json!({ "kind": kind, "state": "degraded", "fallback": "local", "reason": reason })
            }
            StoreReadiness::Down(reason) => {
                json!({ "kind": kind, "state": "down", "reason": reason })
            }
        }
    }
}

/// The store's state as `/readyz` reports it (`kind`, `state`, `reason`), for the web page.
pub(crate) async fn store_state(store: &AnyStore) -> serde_json::Value {
    store_readiness(store).await.0.to_json(store.kind())
}

/// The store's readiness and, for a store spread over shards, `store.shards`.
async fn store_readiness(store: &AnyStore) -> (StoreReadiness, Option<serde_json::Value>) {
    let state = store.ready_state().await;
    let shards = super::readyz_shards::shards(&state);
    let readiness = match state.readiness {
        Readiness::NotChecked => StoreReadiness::NotChecked,
        Readiness::Up => StoreReadiness::Up,
        Readiness::Degraded(why) => StoreReadiness::Degraded(why),
        Readiness::Down(why) => StoreReadiness::Down(why),
    };
    (readiness, shards)
}

/// A route that exists but not for this method: 405 problem+json naming the `method` field
/// (axum adds the `Allow` header with the methods the route does support).
pub(super) async fn method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    metrics::counter!("floodgate_requests_rejected_total", "reason" => "method_not_allowed")
        .increment(1);
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        super::problem::PROBLEM_METHOD_NOT_ALLOWED,
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
/// `--manual-clock` flag; moves the manual clock forward and answers the new time. Needs the
/// API or admin token when one is configured ([`super::auth`]).
pub(super) async fn advance_clock(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
) -> Response {
    let Some(clock) = &state.manual_clock else {
        return not_found().await;
    };
    // The token before the body is read.
    if let Err(refused) = super::auth::authorize_costly(&state, request.headers()) {
        return refused;
    }
    let body = <Bytes as axum::extract::FromRequest<_>>::from_request(request, &state).await;
    let advance: Advance = match super::body::read_json(body) {
        Ok(a) => a,
        Err(response) => return response,
    };
    clock.advance(advance.micros);
    Json(json!({ "now_us": clock.now() })).into_response()
}
