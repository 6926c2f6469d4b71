//! Bearer tokens: the API token of the decision API ([`authorize_api`]), the admin token of the
//! admin API ([`authorize_admin`]), and either for the costly endpoints ([`authorize_costly`]).
//!
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

use super::problem::problem;
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
    let Some(given) = given_token(headers)? else {
        return Err(unauthorized(
            "send Authorization: Bearer <API token or admin token>",
        ));
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

/// With `[server] api_token` (or `--api-token`) set, the decision API answers only requests
/// that carry it: anyone else could otherwise fill the store with junk keys.
pub(crate) fn authorize_api(state: &AppState, headers: &http::HeaderMap) -> Result<(), Response> {
    match state.api_token() {
        Some(token) => check_bearer(headers, &token, "API token"),
        None => Ok(()),
    }
}

/// `Ok` when the request carries the configured admin token. 404 when no token is configured
/// (the admin API is off), 401 without credentials, 403 with a wrong token.
pub(crate) fn authorize_admin(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let Some(token) = state.admin_token() else {
        return Err(problem(
            StatusCode::NOT_FOUND,
            "urn:floodgate:problem:admin-disabled",
            "Not Found",
            "the admin API is disabled: set [server] admin_token or FLOODGATE_ADMIN_TOKEN",
            None,
        ));
    };
    check_bearer(headers, &token, "admin token")
}

/// `Ok` when `headers` carry `Authorization: Bearer <expected>` (compared in constant time);
/// 401 with `WWW-Authenticate: Bearer` without credentials, 403 with a wrong token. `what`
/// names the token in the answer (`admin token`, `API token`).
pub(crate) fn check_bearer(
    headers: &HeaderMap,
    expected: &str,
    what: &str,
) -> Result<(), Response> {
    match given_token(headers)? {
        None => Err(unauthorized(&format!(
            "send Authorization: Bearer <{what}>"
        ))),
        Some(given) if constant_time_eq(given.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(problem(
            StatusCode::FORBIDDEN,
            "urn:floodgate:problem:forbidden",
            "Forbidden",
            format!("wrong {what}"),
            None,
        )),
    }
}

/// The bearer token `headers` carry, `None` without one (no `Authorization`, another scheme,
/// not visible ASCII).
///
/// # Errors
/// A 400 problem naming `authorization` when the header is sent more than once: it is a
/// singleton field (RFC 9110 section 11.6.2), and a proxy that appends its own beside the
/// client's must not leave which one counts to chance.
fn given_token(headers: &HeaderMap) -> Result<Option<&str>, Response> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(super::problem::invalid(
            StatusCode::BAD_REQUEST,
            "authorization",
            "sent more than once",
        ));
    }
    Ok(first.and_then(|v| v.to_str().ok()).and_then(bearer_token))
}

/// The 401 answer without credentials: `WWW-Authenticate: Bearer` and `detail`.
fn unauthorized(detail: &str) -> Response {
    let mut r = problem(
        StatusCode::UNAUTHORIZED,
        "urn:floodgate:problem:unauthorized",
        "Unauthorized",
        detail.to_string(),
        None,
    );
    r.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer"),
    );
    r
}

/// The token of an `Authorization: Bearer <token>` value. The scheme is case-insensitive
/// (RFC 9110 section 11.1; RFC 6750 names it `Bearer`), and spaces around the token are
/// ignored.
pub(crate) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares without an early exit on the first differing byte, so response time does not tell
/// how much of a guessed token was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::{bearer_token, constant_time_eq};

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER   abc  "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }
}
