//! Reservation tokens and `POST /v1/settle`.
//!
//! `POST /v1/check` with `"reserve": true` answers a granted reservation with a token:
//!
//! ```json
//! {"allowed": true, ..., "reservation": "v2.Qm9vZ3Vz.eyJpZCI6....Q2x1", "reservation_expires_in_us": 300000000, "wait_us": 0}
//! ```
//!
//! and `POST /v1/settle` takes it back with the actual cost (one reserved item) or costs (one
//! per reserved item, in the order of the check's descriptors):
//!
//! ```json
//! {"reservation": "v2.Qm9vZ3Vz.eyJpZCI6....Q2x1", "cost": 3}
//! {"reservation": "v2.Qm9vZ3Vz.eyJpZCI6....Q2x1", "costs": [3, 120]}
//! ```
//!
//! answering 200 with each key's standing afterwards:
//!
//! ```json
//! {"decisions": [{"actual": 3, "current": true, "key": "job-7", "limit": 10, "remaining": 7,
//!                 "reserved": 5, "reset_after_us": 300000, "rule": "per-second"}],
//!  "settled": true}
//! ```
//!
//! The token and its secret: see [`super::token`].

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest as _, Request, State};
use axum::response::{IntoResponse, Response};
use floodgate_tower::{SettleError, SettledItem};
use http::StatusCode;
use serde::{Deserialize, Serialize};

use super::auth::authorize_api;
use super::body::{not_null, read_json, whole_number};
use super::problem::{invalid, problem, rejected, PROBLEM_INVALID_REQUEST};
use super::token::{secret_not_ready, TokenError};
pub(crate) use super::token::{SecretSource, Signer};
use crate::config::MAX_COST;
use crate::state::AppState;

/// Problem type of a settle of a reservation that was settled before (409).
pub(crate) const PROBLEM_RESERVATION_SETTLED: &str = "urn:floodgate:problem:reservation-settled";

/// Problem type of a settle of a reservation made by another process or a previous run, on a
/// store whose claims live in one process (409).
pub(crate) const PROBLEM_RESERVATION_ELSEWHERE: &str =
    "urn:floodgate:problem:reservation-elsewhere";

/// Problem type of a settle of a token this service did not sign: its key id is this
/// service's but its MAC does not match (forged or edited; 404).
pub(crate) const PROBLEM_RESERVATION_UNKNOWN: &str = "urn:floodgate:problem:reservation-unknown";

/// Problem type of a settle whose costs are not one per item of the reservation (409): the
/// request is well formed, but the reservation it names holds another number of items.
pub(crate) const PROBLEM_RESERVATION_ITEMS: &str = "urn:floodgate:problem:reservation-items";

/// Problem type of a settle of an expired reservation (410).
pub(crate) const PROBLEM_RESERVATION_EXPIRED: &str = "urn:floodgate:problem:reservation-expired";

/// A settle: the reservation token and the actual cost (one reserved item) or costs (one per
/// reserved item, in the order of the check's descriptors), not both.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SettleRequest {
    /// The token `/v1/check` answered in `reservation`: `v2.<key id>.<payload>.<mac>`, all
    /// base64url (an 8-character key id, a 43-character HMAC-SHA256, whose last character
    /// carries 2 zero bits). Well-formed but not
    /// signed by this service is a 404 `reservation-unknown`; signed with another secret a 409
    /// `reservation-elsewhere`.
    #[schema(
        pattern = r"^v(2\.[A-Za-z0-9_-]{8}|1)\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$"
    )]
    reservation: String,
    /// The actual cost of a one-item reservation: a whole number from 0 to 1,000,000.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false, value_type = Option<u64>, minimum = 0, maximum = 1_000_000)]
    cost: Option<serde_json::Number>,
    /// The actual costs, one per reserved item in order, each from 0 to 1,000,000.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false, value_type = Option<Vec<crate::http::openapi::Cost>>, min_items = 1, max_items = 16)]
    costs: Option<Vec<serde_json::Number>>,
}

/// `POST /v1/settle`.
pub(super) async fn settle(State(state): State<Arc<AppState>>, request: Request) -> Response {
    // The token before any byte of the body is read: an unauthenticated client holds no body
    // buffer (the body is not an extractor, which axum would read before this runs).
    if let Err(refused) = authorize_api(&state, request.headers()) {
        return refused;
    }
    let body = Bytes::from_request(request, &state).await;
    let request: SettleRequest = match read_json(body) {
        Ok(request) => request,
        Err(response) => return response,
    };
    // The shape of the costs first (what the client wrote), then the token.
    let actual = match given_costs(&request) {
        Ok(actual) => actual,
        Err(response) => return response,
    };
    let mut opened = state
        .reservations
        .open(&request.reservation, state.clock.now());
    // A secret this instance does not know may be the store's new one: read it, then again.
    if matches!(opened, Err(TokenError::OtherSecret { .. }))
        && crate::serve::secret::recheck(&state).await
    {
        opened = state
            .reservations
            .open(&request.reservation, state.clock.now());
    }
    let opened = match opened {
        Ok(opened) => opened,
        Err(error) => return token_refused(&state, error),
    };
    let n = opened.reservation.len();
    if request.cost.is_some() && n != 1 {
        return wrong_items(
            "cost",
            format!("the reservation holds {n} items: give costs, one per item in order"),
        );
    }
    if actual.len() != n {
        return wrong_items(
            "costs",
            format!(
                "the reservation holds {n} item{}: give {n} costs, one per item in order, got {}",
                if n == 1 { "" } else { "s" },
                actual.len()
            ),
        );
    }
    match Box::pin(state.limiter.settle(&opened.reservation, &actual)).await {
        Ok(settled) => answer(&settled, &opened.keys),
        Err(error) => settle_refused(error, opened.expires_in),
    }
}

/// The actual costs the request gives (`cost` or `costs`), each a whole number within bounds.
fn given_costs(request: &SettleRequest) -> Result<Vec<u64>, Response> {
    let bad = |field: &str, detail: String| invalid(StatusCode::BAD_REQUEST, field, detail);
    let given: Vec<(String, &serde_json::Number)> = match (&request.cost, &request.costs) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "costs",
                "give either cost (one reserved item) or costs (one per item), not both".into(),
            ))
        }
        (None, None) => {
            return Err(bad(
                "cost",
                "missing: give cost (one reserved item) or costs (one per item, in order)".into(),
            ))
        }
        (Some(cost), None) => vec![("cost".to_string(), cost)],
        (None, Some(costs)) => costs
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("costs[{i}]"), c))
            .collect(),
    };
    let mut actual = Vec::with_capacity(given.len());
    for (field, n) in &given {
        match whole_number(n, MAX_COST, "whole number") {
            Ok(c) => actual.push(c),
            Err(e) => return Err(bad(field, e)),
        }
    }
    Ok(actual)
}

/// The answer to a token that does not open.
fn token_refused(state: &AppState, error: TokenError) -> Response {
    match error {
        TokenError::Malformed(why) => invalid_reservation(&why),
        // Well-formed, but no reservation of this service: not found (the request itself is
        // one the document describes; nothing about its key is told).
        TokenError::Forged => rejected(
            StatusCode::NOT_FOUND,
            "reservation_unknown",
            PROBLEM_RESERVATION_UNKNOWN,
            "reservation unknown",
            "reservation",
            "no reservation of this service has this token: forged or edited (its key id is \
             this service's but its MAC does not match); nothing was settled",
        ),
        TokenError::OtherSecret { theirs, ours } => rejected(
            StatusCode::CONFLICT,
            "reservation_elsewhere",
            PROBLEM_RESERVATION_ELSEWHERE,
            "reservation held elsewhere",
            "reservation",
            format!(
                "signed with another secret (key id {theirs}; this instance signs with \
                 {ours}): another instance's or a former one; instances sharing a store \
                 must share one secret: the same [server] reservation_secret, or none on \
                 every instance of a Redis store (they then share one through it); nothing \
                 was settled"
            ),
        ),
        TokenError::NotReady => secret_not_ready(),
        TokenError::OtherInstance => rejected(
            StatusCode::CONFLICT,
            "reservation_elsewhere",
            PROBLEM_RESERVATION_ELSEWHERE,
            "reservation held elsewhere",
            "reservation",
            "made by another instance or a previous run of this one: with the memory store \
             a reservation is held by the process that made it and settles only there; \
             nothing was settled",
        ),
        TokenError::Expired { ago } => rejected(
            StatusCode::GONE,
            "reservation_expired",
            PROBLEM_RESERVATION_EXPIRED,
            "reservation expired",
            "reservation",
            format!(
                "expired {} ms ago ([server] reservation_ttl is {} ms after the check): \
                     its units were spent as reserved",
                ago.div_ceil(1_000),
                state.reservations.ttl() / 1_000
            ),
        ),
    }
}

/// The 409 of a settle whose costs (`field`) are not one per item of its reservation: nothing
/// was settled, and the same token settles with the right number.
fn wrong_items(field: &str, detail: String) -> Response {
    problem(
        StatusCode::CONFLICT,
        PROBLEM_RESERVATION_ITEMS,
        "reservation holds other items",
        format!("{field}: {detail}; nothing was settled"),
        Some(("field", field.into())),
    )
}

/// The answer to a settle the limiter refused.
fn settle_refused(error: SettleError, expires_in: u64) -> Response {
    match error {
        SettleError::AlreadySettled => problem(
            StatusCode::CONFLICT,
            PROBLEM_RESERVATION_SETTLED,
            "reservation already settled",
            "reservation: this reservation was settled before; nothing was changed",
            Some(("field", "reservation".into())),
        ),
        SettleError::CostCount { expected, got } => wrong_items(
            "costs",
            format!("the reservation holds {expected} items, got {got} costs"),
        ),
        SettleError::Store(floodgate_store::StoreError::InsufficientCapacity { .. }) => {
            invalid_reservation("reserves more than its policy's capacity")
        }
        SettleError::Store(floodgate_store::StoreError::ClaimsFull { max, retry_after }) => {
            // The claim was not made, so nothing was settled: the same token settles once a
            // claim ends (refunds are not lost, only delayed). Never advise a retry after the
            // token's end: claims outlive their tokens by a margin, so the earliest may end
            // after this one expires.
            let seconds = retry_after
                .div_ceil(1_000_000)
                .min(expires_in / 1_000_000)
                .max(1);
            let left = expires_in.div_ceil(1_000_000);
            let when = if retry_after < expires_in {
                format!("settle this reservation again in {seconds} s, while it is valid ({left} s left)")
            } else {
                format!(
                    "no claim held now ends while this reservation is valid (the earliest in \
                     {} s, the reservation in {left} s): unless room is made sooner its units \
                     stay spent as reserved",
                    retry_after.div_ceil(1_000_000)
                )
            };
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
                "store unavailable",
                format!(
                    "the store holds {max} live reservation claims ([store] max_claims): \
                     nothing was settled; {when}"
                ),
                Some(("field", "reservation".into())),
            );
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
            response
        }
        SettleError::Store(error) => {
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
                "store unavailable",
                format!(
                    "the store failed ({error}); the reservation may be spent without being \
                     settled"
                ),
                None,
            );
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
            response
        }
    }
}

/// A 400 naming `reservation`, counted as `reservation_invalid`.
fn invalid_reservation(detail: &str) -> Response {
    rejected(
        StatusCode::BAD_REQUEST,
        "reservation_invalid",
        PROBLEM_INVALID_REQUEST,
        "invalid request",
        "reservation",
        detail,
    )
}

/// One entry of the answer's `decisions` (fields in sorted order).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct SettledEntry<'a> {
    /// The actual cost settled.
    actual: u64,
    /// `false` when the rules in force no longer have this rule with the reservation's
    /// algorithm and quota (a reload changed it): the difference was still settled, on state
    /// that no longer limits anyone.
    current: bool,
    /// The client's key.
    key: &'a str,
    /// The rule's limit.
    limit: u64,
    /// Units left after the settle.
    remaining: u64,
    /// The units reserved by the check.
    reserved: u64,
    /// Microseconds until the key is back to its full quota.
    reset_after_us: u64,
    /// The rule's name.
    rule: &'a str,
}

fn answer(settled: &[SettledItem], keys: &[String]) -> Response {
    let decisions: Vec<SettledEntry<'_>> = settled
        .iter()
        .zip(keys)
        .map(|(s, key)| SettledEntry {
            actual: s.actual,
            current: s.current,
            key,
            limit: s.decision.limit,
            remaining: s.decision.remaining,
            reserved: s.reserved,
            reset_after_us: s.decision.reset_after,
            rule: &s.rule,
        })
        .collect();
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"decisions": decisions, "settled": true})),
    )
        .into_response()
}
