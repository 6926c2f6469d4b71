//! Admin API: inspect (`GET`) or reset (`DELETE`) one key of one rule.
//!
//! `/v1/keys/{rule}/{key}` names a client key as given to `/v1/check`; add `?encoded=true` to
//! name an encoded store key instead (as derived from requests by forward-auth and the proxy,
//! e.g. `ip=203.0.113.7`), or a key as the web page shows it, secret values hashed
//! (`api_key=#3f9a1c2b`, written `api_key=%233f9a1c2b` in the path), which is resolved among
//! the denied keys the page holds (see `crate::ui::denied_keys`). Guarded by `Authorization: Bearer <token>` (`[server] admin_token`
//! or `FLOODGATE_ADMIN_TOKEN`); without a configured token the admin API does not exist (404).

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use floodgate_store::Store;
use http::{HeaderMap, StatusCode};
use serde_json::json;

use super::auth::authorize_admin as authorize;
use super::bounds::MAX_KEY_BYTES;
use super::problem::{invalid, problem};
use super::query::QueryParams;
use crate::state::AppState;

/// Longest accepted `?encoded=true` store key, in bytes: a client key of [`MAX_KEY_BYTES`]
/// percent-escaped in full (3 bytes per byte) plus its `key=` prefix.
const MAX_ENCODED_KEY_BYTES: usize = MAX_KEY_BYTES * 3 + 4;

/// The `(rule, key)` path parameters, or a 400 problem naming `path` (e.g. a `%FF` that does
/// not decode to UTF-8).
fn path_params(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(String, String), Response> {
    path.map(|Path(p)| p)
        .map_err(|e| invalid(StatusCode::BAD_REQUEST, "path", e.body_text()))
}

/// `GET /v1/keys/{rule}/{key}`: the key's standing (a cost-0 peek).
pub(super) async fn inspect(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    query: QueryParams,
) -> Response {
    let (config, index, store_key, key) = match located(&state, &headers, path, &query) {
        Ok(found) => found,
        Err(response) => return response,
    };
    let r = &config.rules[index];
    let tracked = tracked(&state, &r.name, &r.policy, &store_key).await;
    match state
        .limiter
        .store()
        .inspect(&r.name, &r.policy, &store_key)
        .await
    {
        Ok(d) => Json(json!({
            "tracked": tracked,
            "rule": r.name,
            "key": key,
            "store_key": store_key,
            "algorithm": r.policy.kind().as_str(),
            "quota": r.policy.quota().to_string(),
            "limit": d.limit,
            "remaining": d.remaining,
            "reset_after_us": d.reset_after,
        }))
        .into_response(),
        Err(e) => store_unavailable(e),
    }
}

/// Whether the store holds state for the key (`"tracked"` in the answer): `false` for a key
/// never seen (or only peeked, or expired), whose standing is a fresh key's full quota; `None`
/// (`null`) when the store cannot tell now (Redis did not answer).
async fn tracked(
    state: &AppState,
    rule: &str,
    policy: &floodgate_core::Policy,
    store_key: &str,
) -> Option<bool> {
    state
        .store()
        .holds(rule, policy, store_key)
        .await
        .ok()
        .flatten()
}

/// `DELETE /v1/keys/{rule}/{key}`: forget the key's state (it becomes fresh).
pub(super) async fn reset(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    query: QueryParams,
) -> Response {
    let (config, index, store_key, key) = match located(&state, &headers, path, &query) {
        Ok(found) => found,
        Err(response) => return response,
    };
    let r = &config.rules[index];
    match state
        .limiter
        .store()
        .reset(&r.name, &r.policy, &store_key)
        .await
    {
        Ok(existed) => {
            tracing::info!(rule = %r.name, store_key, existed, "admin reset a key");
            Json(json!({"rule": r.name, "key": key, "store_key": store_key, "existed": existed}))
                .into_response()
        }
        Err(e) => store_unavailable(e),
    }
}

/// The 503 problem for a store that could not answer an admin request.
fn store_unavailable(e: impl std::fmt::Display) -> Response {
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
        "Service Unavailable",
        e.to_string(),
        None,
    )
}

/// The configuration in force, the rule's index in it, the store key, and the key as given.
type Located = (Arc<crate::config::Config>, usize, String, String);

/// Authorizes an admin request, validates its path and query and finds the rule: the common
/// start of [`inspect`] and [`reset`].
fn located(
    state: &AppState,
    headers: &HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    query: &QueryParams,
) -> Result<Located, Response> {
    authorize(state, headers)?;
    let (rule, key) = path_params(path)?;
    let encoded = query.bool("encoded")?.unwrap_or(false);
    let (config, index, store_key) = locate(state, &rule, &key, encoded)?;
    Ok((config, index, store_key, key))
}

/// The rule named `rule` and the store key for `key`: a client key (as given to `/v1/check`,
/// 1 to [`MAX_KEY_BYTES`] bytes), or with `encoded` a store key as the request paths derive
/// it (1 to [`MAX_ENCODED_KEY_BYTES`] bytes).
fn locate(
    state: &AppState,
    rule: &str,
    key: &str,
    encoded: bool,
) -> Result<(Arc<crate::config::Config>, usize, String), Response> {
    let Some((config, index)) = state.rule(rule) else {
        return Err(super::problem::unknown_rule("rule", rule));
    };
    let max = if encoded {
        MAX_ENCODED_KEY_BYTES
    } else {
        MAX_KEY_BYTES
    };
    if key.is_empty() || key.len() > max {
        return Err(invalid(
            StatusCode::BAD_REQUEST,
            "key",
            format!("must be between 1 and {max} bytes long"),
        ));
    }
    let store_key = if !encoded {
        super::body::client_key(key)
    } else if crate::ui::denied_keys::DeniedKeys::is_shown_form(key) {
        resolve_shown(state, rule, key)?
    } else {
        key.to_string()
    };
    Ok((config, index, store_key))
}

/// The store key the web page shows hashed as `shown` (e.g. `api_key=#3f9a1c2b`), among the
/// busiest denied keys it holds: a 404 when none (or the list is off), a 409 listing none
/// when two held keys share the hash.
fn resolve_shown(state: &AppState, rule: &str, shown: &str) -> Result<String, Response> {
    let held = state
        .ui
        .as_ref()
        .and_then(|live| live.denied_keys.as_ref())
        .map(|d| d.resolve(rule, shown))
        .unwrap_or_default();
    let mut held = held.into_iter();
    match (held.next(), held.next()) {
        (Some(key), None) => Ok(key),
        (None, _) => Err(problem(
            StatusCode::NOT_FOUND,
            "urn:floodgate:problem:unknown-key",
            "Not Found",
            format!(
                "key: {shown:?} is a key as the web page shows it, and no denied key of rule \
                 {rule:?} the page holds has that hash ([server] ui_denied_keys; the hash \
                 changes when the process restarts)"
            ),
            Some(("field", "key".into())),
        )),
        (Some(_), Some(_)) => Err(problem(
            StatusCode::CONFLICT,
            "urn:floodgate:problem:ambiguous-key",
            "Conflict",
            format!("key: several held keys of rule {rule:?} are shown as {shown:?}"),
            Some(("field", "key".into())),
        )),
    }
}
