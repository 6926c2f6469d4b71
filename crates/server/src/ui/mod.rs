//! The web page at `/ui/` and the endpoints behind it, on the API listener.
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/simulate` | the simulation engine: the document `floodgate simulate --format json` prints ([`simulate`]) |
//! | `GET /ui/` | the page: a simulator of the algorithms and a live view of the rules in force |
//! | `GET /ui/choices.json` | the simulator's choices (algorithms, scenarios, counters, balances) |
//! | `GET /ui/{asset}` | its script, style sheet and the vendored charting library (uPlot, MIT) |
//! | `GET /v1/ui/live` | the live view's data: per-rule decisions per second, the store ([`live`]), the leased rules and their bound ([`leases`]) |
//!
//! Everything the page loads is embedded in the binary: it works offline and loads nothing from
//! elsewhere. `--no-ui` or `[server] ui = false` turn the page and `/v1/ui/live` off;
//! `/v1/simulate` stays (it is an API of its own, bounded like the command line). With an API
//! or admin token configured, `/v1/simulate` and `/v1/ui/live` need one of them
//! ([`crate::http::auth`]); the page asks for it and sends it as a header.

// Fed by `floodgate_tower::RateLimiter`'s denial observer when `[server] ui_denied_keys` > 0.
pub(crate) mod denied_keys;
pub(crate) mod leases;
pub(crate) mod live;
pub(crate) mod simulate;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use floodgate_core::AlgorithmKind;
use floodgate_simulate::setup::{Balance, CounterMode};
use floodgate_simulate::{Choice, ScenarioName};
use floodgate_store::Store;
use http::{header, HeaderValue, StatusCode};
use serde_json::json;

use crate::state::AppState;

impl live::Sampled for AppState {
    fn rule_names(&self) -> Vec<String> {
        self.config().rules.iter().map(|r| r.name.clone()).collect()
    }

    fn metrics_text(&self) -> String {
        self.prometheus.render()
    }
}

/// The page's files: path under `/ui/`, content type, contents.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/style.css"),
    ),
    (
        "vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/vendor/uPlot.iife.min.js"),
    ),
    (
        "vendor/uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/vendor/uPlot.min.css"),
    ),
    (
        "vendor/LICENSE",
        "text/plain; charset=utf-8",
        include_str!("../../ui/vendor/LICENSE"),
    ),
];

/// Adds the page's routes to the API router: `/v1/simulate` always, `/ui/` and `/v1/ui/live`
/// when the page is on ([`AppState::ui`]).
pub(crate) fn routes(router: Router<Arc<AppState>>, state: &AppState) -> Router<Arc<AppState>> {
    let router = router.route(
        "/v1/simulate",
        post(simulate::simulate).layer(DefaultBodyLimit::max(simulate::MAX_SIMULATE_BODY_BYTES)),
    );
    if state.ui.is_none() {
        return router;
    }
    router
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { asset_response("index.html") }))
        .route("/ui/choices.json", get(|| async { Json(choices()) }))
        .route("/ui/{*path}", get(asset))
        .route("/v1/ui/live", get(live_data))
}

/// The simulator's closed sets as `{"algorithm": [{"name", "description"}], "scenario": ...,
/// "counter": ..., "balance": ...}`, from the engine's own lists, so the page's controls offer
/// exactly what `/v1/simulate` accepts.
fn choices() -> serde_json::Value {
    fn list<T: Choice>() -> serde_json::Value {
        T::ALL
            .iter()
            .map(|(_, name, description)| json!({"name": name, "description": description}))
            .collect()
    }
    let algorithms: Vec<_> = AlgorithmKind::ALL
        .iter()
        .map(|k| json!({"name": k.as_str(), "description": ""}))
        .collect();
    json!({
        "algorithm": algorithms,
        "scenario": list::<ScenarioName>(),
        "counter": list::<CounterMode>(),
        "balance": list::<Balance>(),
    })
}

async fn asset(Path(path): Path<String>) -> Response {
    asset_response(&path)
}

fn asset_response(path: &str) -> Response {
    let Some((_, kind, body)) = ASSETS.iter().find(|(p, _, _)| *p == path) else {
        return crate::http::problem::problem(
            StatusCode::NOT_FOUND,
            "about:blank",
            "Not Found",
            format!("no file {path:?} under /ui/"),
            None,
        );
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Only this server's own files: no inline script, nothing from elsewhere.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'",
        ),
    );
    response
}

/// `GET /v1/ui/live`: the rules in force with their per-second decisions
/// ([`live::Live::to_json`]) and the store's state (`kind`, `state` as in `/readyz`, and for
/// the memory store `keys` and `max_keys`).
async fn live_data(State(state): State<Arc<AppState>>, headers: http::HeaderMap) -> Response {
    if let Err(refused) = crate::http::auth::authorize_costly(&state, &headers) {
        return refused;
    }
    let Some(live) = &state.ui else {
        return crate::http::problem::problem(
            StatusCode::NOT_FOUND,
            "about:blank",
            "Not Found",
            "the web page is off (--no-ui)",
            None,
        );
    };
    let config = state.config();
    let rules: Vec<_> = config
        .rules
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                json!({
                    "name": r.name,
                    "algorithm": r.policy.kind().as_str(),
                    "quota": r.policy.quota().to_string(),
                    "shadow": r.shadow,
                }),
            )
        })
        .collect();
    let mut doc = live.to_json(&rules);
    let mut store = crate::http::ops::store_state(state.store()).await;
    if let Some(stats) = state.store().stats() {
        store["keys"] = stats.keys.into();
        store["max_keys"] = stats.max_keys.into();
    }
    doc["store"] = store;
    doc["generation"] = state.generation().into();
    doc["leases"] = leases::leased_rules(&config.rules);
    Json(doc).into_response()
}
