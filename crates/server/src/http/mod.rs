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
//! | `GET /v1/openapi.json` | the OpenAPI 3.1 document of this API (see [`openapi`]) |
//! | `POST /v1/debug/clock/advance` | TEST ONLY, with `--manual-clock`: move time (a token when one is configured) |
//!
//! Every error is `application/problem+json` (RFC 9457) with `type`, `title`, `status`,
//! `detail` and, for bad input, the `field` at fault (a body field, a query parameter, `path` or
//! `method`); bad input is rejected before any state is touched. A method a route does not
//! support is a 405 problem with the `Allow` header; query parameters are read by
//! [`query::QueryParams`], which names the parameter at fault.

// Handlers return `Result<_, Response>` so that `?` can short-circuit with a finished error
// answer; the error path is the rare one and a response is moved once, so boxing buys nothing.
#![allow(clippy::result_large_err)]

mod admin;
mod api;
pub(crate) mod auth;
pub(crate) mod bare;
pub(crate) mod body;
pub(crate) mod body_budget;
pub(crate) mod bounds;
pub(crate) mod envoy_json;
mod forward_auth;
pub(crate) mod forwarded_grammar;
mod forwarded_uri;
#[cfg(test)]
mod fuzz;
pub(crate) mod openapi;
pub(crate) mod ops;
pub(crate) mod problem;
pub(crate) mod query;
mod readyz_shards;
pub(crate) mod settle;
#[cfg(test)]
mod tests;
pub(crate) mod token;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;
use bounds::MAX_BODY_BYTES;
pub(crate) use problem::REJECTION_REASONS;

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
        .route("/readyz", get(ops::readyz))
        .route("/v1/openapi.json", get(openapi::serve));
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
        // The body limit is checked again while reading (see `body::read_json`) so that the
        // answer is a problem+json 413 rather than axum's plain text.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // The body deadline and budget are the listener's (`body_budget`, `Bodies::Api`).
        .with_state(state)
}
