//! Admin API: inspect (`GET`) or reset (`DELETE`) one key of one rule.
//!
//! `/v1/keys/{rule}/{key}` names a client key as given to `/v1/check`; add `?encoded=true` to
//! name an encoded store key instead (as derived from requests by forward-auth and the proxy,
//! e.g. `ip=203.0.113.7`). Guarded by `Authorization: Bearer <token>` (`[server] admin_token`
//! or `FLOODGATE_ADMIN_TOKEN`); without a configured token the admin API does not exist (404).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use floodgate_store::Store;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::{invalid, problem, MAX_KEY_BYTES};
use crate::serve::AppState;

#[derive(Debug, Deserialize)]
pub(super) struct KeyQuery {
    #[serde(default)]
    encoded: bool,
}

/// `GET /v1/keys/{rule}/{key}`: the key's standing (a cost-0 peek).
pub(super) async fn inspect(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((rule, key)): Path<(String, String)>,
    Query(q): Query<KeyQuery>,
) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let (config, index, store_key) = match locate(&state, &rule, &key, q.encoded) {
        Ok(found) => found,
        Err(response) => return response,
    };
    let r = &config.rules[index];
    match state
        .limiter
        .store()
        .inspect(&r.name, &r.policy, &store_key)
        .await
    {
        Ok(d) => Json(json!({
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
        Err(e) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
            "Service Unavailable",
            e.to_string(),
            None,
        ),
    }
}

/// `DELETE /v1/keys/{rule}/{key}`: forget the key's state (it becomes fresh).
pub(super) async fn reset(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((rule, key)): Path<(String, String)>,
    Query(q): Query<KeyQuery>,
) -> Response {
    if let Err(denied) = authorize(&state, &headers) {
        return denied;
    }
    let (config, index, store_key) = match locate(&state, &rule, &key, q.encoded) {
        Ok(found) => found,
        Err(response) => return response,
    };
    let r = &config.rules[index];
    let id = crate::serve::store::state_id(&r.name, &r.policy);
    match state.limiter.store().reset(&id, &store_key).await {
        Ok(existed) => {
            tracing::info!(rule = %r.name, store_key, existed, "admin reset a key");
            Json(json!({"rule": r.name, "key": key, "store_key": store_key, "existed": existed}))
                .into_response()
        }
        Err(e) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
            "Service Unavailable",
            e.to_string(),
            None,
        ),
    }
}

type Located = (Arc<crate::config::Config>, usize, String);

fn locate(state: &AppState, rule: &str, key: &str, encoded: bool) -> Result<Located, Response> {
    let Some((config, index)) = state.rule(rule) else {
        return Err(invalid(
            StatusCode::NOT_FOUND,
            "rule",
            format!("unknown rule {rule:?}"),
        ));
    };
    if key.is_empty() || key.len() > MAX_KEY_BYTES * 3 {
        return Err(invalid(
            StatusCode::BAD_REQUEST,
            "key",
            format!("must be between 1 and {MAX_KEY_BYTES} bytes long"),
        ));
    }
    let store_key = if encoded {
        key.to_string()
    } else {
        super::api::client_key(key)
    };
    Ok((config, index, store_key))
}

/// `Ok` when the request carries the configured bearer token. 404 when no token is configured
/// (the admin API is off), 401 without credentials, 403 with a wrong token.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let Some(token) = state.admin_token() else {
        return Err(problem(
            StatusCode::NOT_FOUND,
            "urn:floodgate:problem:admin-disabled",
            "Not Found",
            "the admin API is disabled: set [server] admin_token or FLOODGATE_ADMIN_TOKEN",
            None,
        ));
    };
    let given = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => {
            let mut r = problem(
                StatusCode::UNAUTHORIZED,
                "urn:floodgate:problem:unauthorized",
                "Unauthorized",
                "send Authorization: Bearer <admin token>",
                None,
            );
            r.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
            Err(r)
        }
        Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(problem(
            StatusCode::FORBIDDEN,
            "urn:floodgate:problem:forbidden",
            "Forbidden",
            "wrong admin token",
            None,
        )),
    }
}

/// Compares without an early exit on the first differing byte, so response time does not tell
/// how much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }
}
