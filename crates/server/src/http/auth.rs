//! The guard of the endpoints that spend real CPU or memory or show traffic: `POST
//! /v1/simulate`, `GET /v1/ui/live` and, with `--manual-clock`, `POST /v1/debug/clock/advance`.
//!
//! With `[server] api_token` or `admin_token` configured (or their flags and environment
//! variables), such an endpoint answers only a request carrying one of them as
//! `Authorization: Bearer <token>`: 401 with `WWW-Authenticate: Bearer` without credentials,
//! 403 with a wrong token. With neither configured they stay open, as the decision API does.
//! The web page (`/ui/`) itself stays open: it asks for the token and sends it as that header.

use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::admin::{bearer_token, constant_time_eq};
use super::problem;
use crate::state::AppState;

/// `Ok` when no token is configured or `headers` carry the API token or the admin token.
///
/// # Errors
/// A 401 problem (with `WWW-Authenticate: Bearer`) without a bearer token, a 403 problem with
/// a token that is neither.
pub(crate) fn authorize_costly(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let tokens: Vec<String> = [state.api_token(), state.admin_token()]
        .into_iter()
        .flatten()
        .collect();
    if tokens.is_empty() {
        return Ok(());
    }
    let given = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let Some(given) = given else {
        let mut r = problem(
            StatusCode::UNAUTHORIZED,
            "urn:floodgate:problem:unauthorized",
            "Unauthorized",
            "send Authorization: Bearer <API token or admin token>",
            None,
        );
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
        return Err(r);
    };
    // Every configured token is compared, so the time taken does not tell which one matched.
    let matched = tokens.iter().fold(false, |found, t| {
        constant_time_eq(given.as_bytes(), t.as_bytes()) | found
    });
    if matched {
        Ok(())
    } else {
        Err(problem(
            StatusCode::FORBIDDEN,
            "urn:floodgate:problem:forbidden",
            "Forbidden",
            "wrong token: send the API token or the admin token",
            None,
        ))
    }
}
