//! The operations of the document, one per route and method of `http::router` (the handlers
//! are in `api`, `settle`, `admin`, `forward_auth`, `ops` and `crate::ui`), and the problem
//! answers each path may give ([`PROBLEMS`]).
//!
//! The functions are never called: `#[utoipa::path]` reads their attributes.

#![allow(dead_code)]

use super::answers::{
    CheckAnswer, Choices, KeyReset, KeyStanding, Live, Problem, Readiness, SettleAnswer,
};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::http::api::CheckRequest;
use crate::http::settle::SettleRequest;
use crate::ui::simulate::SimulateRequest;

/// The problem statuses of each path (besides the ones its operation describes itself), as
/// the handlers answer them: 400 bad input (or `Authorization` sent twice), 401 no token, 403 a wrong token, 404 an unknown
/// rule (or key, or a disabled API), 405 another method (with `Allow`), 408 a body too slow,
/// 409 a second settle or an ambiguous key, 410 an expired reservation, 413 a body too large,
/// 422 a well-formed simulation that cannot be run, 503 a store that failed (or a server shutting down, or busy).
pub(crate) const PROBLEMS: &[(&str, &[u16])] = &[
    ("/v1/check", &[400, 401, 403, 405, 413, 503]),
    ("/v1/peek", &[400, 401, 403, 405, 413, 503]),
    ("/v1/settle", &[400, 401, 403, 404, 405, 409, 410, 413, 503]),
    (
        "/v1/keys/{rule}/{key}",
        &[400, 401, 403, 404, 405, 409, 503],
    ),
    ("/v1/forward-auth", &[400, 405, 503]),
    ("/v1/forward-auth/{original}", &[400, 503]),
    ("/v1/simulate", &[400, 401, 403, 405, 408, 413, 422, 503]),
    ("/v1/ui/live", &[400, 401, 403, 404, 405]),
    ("/ui/choices.json", &[405]),
    ("/ui/", &[405]),
    ("/ui/{asset}", &[404, 405]),
    ("/healthz", &[405]),
    ("/readyz", &[405]),
    ("/metrics", &[405]),
    ("/v1/openapi.json", &[405]),
];

/// `deny_status` of forward-auth: 429 or 403 (`forward_auth::forward_auth` refuses others).
pub(crate) struct DenyStatus;

impl PartialSchema for DenyStatus {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .enum_values(Some([429, 403]))
            .into()
    }
}

impl ToSchema for DenyStatus {}

/// The description of a problem answer of `status`.
pub(crate) fn problem_description(status: u16) -> &'static str {
    match status {
        400 => {
            "Bad input: the problem's `field` names the member, parameter or header at fault; a \
                cost above the rule's capacity is `cost-exceeds-capacity`, naming `rule` too."
        }
        401 => "A token is configured and the request carries none (`WWW-Authenticate: Bearer`).",
        403 => "The bearer token is not the configured one.",
        404 => {
            "An unknown rule or key, a reservation token this service did not sign \
                (`reservation-unknown`), or an API that is off (no admin token, `--no-ui`)."
        }
        405 => "The path does not take this method; `Allow` lists the methods it takes.",
        408 => "The body did not arrive in time.",
        409 => {
            "The reservation was settled before (`reservation-settled`) or is held elsewhere \
                (`reservation-elsewhere`: another instance, or another secret), or a shown key \
                names several keys, or a settle's costs are not one per item of its reservation \
                (`reservation-items`)."
        }
        410 => "The reservation expired: its units were spent as reserved.",
        413 => "The body is above its bound (64 KiB; 1 MiB for `/v1/simulate`).",
        422 => {
            "The body is well formed (this document's schema holds) but cannot be run: a \
                duration, quota, rate or trace outside the simulator's grammar or bounds, \
                members that do not go together, more requests than the cap; `field` names the \
                member."
        }
        503 => {
            "The store failed and a rule fails closed, the reservation secret is not known yet, \
                or the server is busy or shutting down (`Retry-After` in seconds)."
        }
        _ => "A problem.",
    }
}

/// `POST /v1/check`: decide and consume.
#[utoipa::path(
    post,
    path = "/v1/check",
    tag = "decisions",
    request_body(content = CheckRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Admitted (with `max_wait_ms`: at its slot, after `wait_us`).",
         body = CheckAnswer, content_type = "application/json",
         headers(
            ("RateLimit-Policy" = String, description = "The rules' quotas (IETF RateLimit headers draft): `\"rule\";q=10;w=1`."),
            ("RateLimit" = String, description = "The binding rule's standing: `\"rule\";r=9;t=1` (remaining, seconds to reset)."),
         )),
        (status = 429, description = "Denied: nothing was consumed. `retry_after_us` says when a retry may be admitted.",
         body = CheckAnswer, content_type = "application/json",
         headers(
            ("Retry-After" = u64, description = "Whole seconds, rounded up, at least 1."),
            ("RateLimit-Policy" = String, description = "The rules' quotas."),
            ("RateLimit" = String, description = "The binding rule's standing."),
         )),
    ),
    security((), ("api_token" = []))
)]
pub(crate) fn check() {}

/// `POST /v1/peek`: the same decision, consuming nothing (always 200).
#[utoipa::path(
    post,
    path = "/v1/peek",
    tag = "decisions",
    request_body(content = CheckRequest, content_type = "application/json",
        description = "As for `/v1/check`, without `max_wait_ms` and `reserve` (a 400 naming them)."),
    responses(
        (status = 200, description = "The decision a check would get now; nothing consumed.",
         body = CheckAnswer, content_type = "application/json"),
    ),
    security((), ("api_token" = []))
)]
pub(crate) fn peek() {}

/// `POST /v1/settle`: give back or charge the difference of a reservation.
#[utoipa::path(
    post,
    path = "/v1/settle",
    tag = "decisions",
    request_body(content = SettleRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Settled: each key's standing afterwards.",
         body = SettleAnswer, content_type = "application/json"),
    ),
    security((), ("api_token" = []))
)]
pub(crate) fn settle() {}

/// `GET /v1/keys/{rule}/{key}`: a key's standing.
#[utoipa::path(
    get,
    path = "/v1/keys/{rule}/{key}",
    tag = "admin",
    params(
        ("rule" = String, Path, description = "The rule's name."),
        ("key" = String, Path, description = "A client key (1 to 256 bytes), or with `encoded=true` a store key (1 to 772 bytes)."),
        ("encoded" = Option<bool>, Query, description = "The key is a store key as forward-auth and the proxy derive it (`ip=203.0.113.7`), or as the web page shows it."),
    ),
    responses(
        (status = 200, description = "The key's standing (a cost-0 peek).", body = KeyStanding, content_type = "application/json"),
    ),
    security(("admin_token" = []))
)]
pub(crate) fn inspect_key() {}

/// `DELETE /v1/keys/{rule}/{key}`: forget a key's state.
#[utoipa::path(
    delete,
    path = "/v1/keys/{rule}/{key}",
    tag = "admin",
    params(
        ("rule" = String, Path, description = "The rule's name."),
        ("key" = String, Path, description = "A client key (1 to 256 bytes), or with `encoded=true` a store key (1 to 772 bytes)."),
        ("encoded" = Option<bool>, Query, description = "The key is a store key."),
    ),
    responses(
        (status = 200, description = "Reset: the key is fresh.", body = KeyReset, content_type = "application/json"),
    ),
    security(("admin_token" = []))
)]
pub(crate) fn reset_key() {}

/// `GET /v1/forward-auth`.
#[utoipa::path(
    get,
    path = "/v1/forward-auth",
    tag = "forward-auth",
    params(
        ("deny_status" = Option<DenyStatus>, Query, description = "The status of a denial: 429 (default) or 403 (for nginx `auth_request`)."),
        ("X-Forwarded-Method" = Option<String>, Header, description = "The original request's method."),
        ("X-Forwarded-Host" = Option<String>, Header, description = "The original request's host."),
        ("X-Forwarded-Uri" = Option<String>, Header, description = "The original request's URI (also `X-Original-URI`)."),
        ("X-Forwarded-For" = Option<String>, Header, description = "Read from the right when the peer is in `[server] trusted_proxies`."),
    ),
    responses(
        (status = 200, description = "Admitted (empty body).",
         headers(
            ("RateLimit-Policy" = String, description = "The rules' quotas."),
            ("RateLimit" = String, description = "The binding rule's standing."),
         )),
        (status = 429, description = "Denied.", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Whole seconds, rounded up, at least 1."))),
        (status = 403, description = "Denied, with `deny_status=403`.", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Whole seconds, rounded up, at least 1."))),
    ),
)]
pub(crate) fn forward_auth_get() {}

/// `POST /v1/forward-auth`: as `GET`.
#[utoipa::path(
    post,
    path = "/v1/forward-auth",
    tag = "forward-auth",
    params(
        ("deny_status" = Option<DenyStatus>, Query, description = "The status of a denial: 429 (default) or 403."),
    ),
    responses(
        (status = 200, description = "Admitted (empty body)."),
        (status = 429, description = "Denied.", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Denied, with `deny_status=403`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub(crate) fn forward_auth_post() {}

/// `/v1/forward-auth/{original}` (Envoy `ext_authz`): the suffix is the original path, the
/// method the original request's, whatever it is.
#[utoipa::path(
    method(get, post, put, delete, patch, head, options, trace),
    path = "/v1/forward-auth/{original}",
    tag = "forward-auth",
    params(("original" = String, Path, description = "The original request's path and query (Envoy appends them).")),
    responses(
        (status = 200, description = "Admitted (empty body)."),
        (status = 429, description = "Denied.", body = Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Whole seconds, rounded up, at least 1."))),
    ),
)]
pub(crate) fn forward_auth_envoy() {}

/// `POST /v1/simulate`.
#[utoipa::path(
    post,
    path = "/v1/simulate",
    tag = "simulator",
    request_body(content = SimulateRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The document `floodgate simulate --format json` prints (at most 16 MiB).",
         body = serde_json::Value, content_type = "application/json"),
    ),
    security((), ("api_token" = []), ("admin_token" = []))
)]
pub(crate) fn simulate() {}

/// `GET /v1/ui/live`.
#[utoipa::path(
    get,
    path = "/v1/ui/live",
    tag = "simulator",
    responses(
        (status = 200, description = "The live view's data.", body = Live, content_type = "application/json"),
    ),
    security((), ("api_token" = []), ("admin_token" = []))
)]
pub(crate) fn ui_live() {}

/// `GET /ui/choices.json`.
#[utoipa::path(
    get,
    path = "/ui/choices.json",
    tag = "simulator",
    responses(
        (status = 200, description = "The simulator's choices.", body = Choices, content_type = "application/json"),
    ),
)]
pub(crate) fn ui_choices() {}

/// `GET /ui/`.
#[utoipa::path(
    get,
    path = "/ui/",
    tag = "simulator",
    responses((status = 200, description = "The web page.", body = String, content_type = "text/html")),
)]
pub(crate) fn ui_page() {}

/// `GET /ui/{asset}`.
#[utoipa::path(
    get,
    path = "/ui/{asset}",
    tag = "simulator",
    params(("asset" = String, Path, description = "`app.js`, `style.css`, `vendor/uPlot.iife.min.js`, ...")),
    responses((status = 200, description = "A file of the page.", content(
        (String = "text/javascript"),
        (String = "text/css"),
        (String = "text/plain"),
        (String = "text/html"),
    ))),
)]
pub(crate) fn ui_asset() {}

/// `GET /healthz`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "The process is up: `ok`.", body = String, content_type = "text/plain")),
)]
pub(crate) fn healthz() {}

/// `GET /readyz`.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Serving: the configuration in force.", body = Readiness, content_type = "application/json"),
        (status = 503, description = "Shutting down (`status`: `shutting_down`), or the Redis store is down (a problem with `store` and `config`).",
         content(
            (Readiness = "application/json"),
            (Problem = "application/problem+json"),
         )),
    ),
)]
pub(crate) fn readyz() {}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text exposition.", body = String, content_type = "text/plain")),
)]
pub(crate) fn metrics() {}

/// `GET /v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document.", body = serde_json::Value, content_type = "application/json")),
)]
pub(crate) fn openapi() {}
