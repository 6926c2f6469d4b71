//! The one place that turns [`Decision`]s into HTTP: `RateLimit-Policy` / `RateLimit` headers,
//! `Retry-After`, and `application/problem+json` bodies (RFC 9457).
//!
//! Headers follow the IETF draft *RateLimit header fields for HTTP*
//! (draft-ietf-httpapi-ratelimit-headers) in its structured-field form. **Every enforcing rule
//! that applied to the request is listed**, one list member per rule, in rule order, so a
//! client sees each limit it is under (shadow rules are never shown):
//!
//! ```text
//! RateLimit-Policy: "per-ip";q=10;w=10, "per-user";q=1000;w=3600
//! RateLimit: "per-ip";r=3;t=7, "per-user";r=998;t=4
//! ```
//!
//! `q` is the limit of the quota enforced (the rule's; scaled down when a shared store's local
//! fallback decided, see [`enforced_quota`]), `w` its period in seconds (rounded up, at least 1), `r` the units
//! remaining, `t` the seconds until the key is back to a fresh state (rounded up; for a denial
//! never less than `Retry-After`). The partition
//! key is never sent (it may be a user id or an API key).
//!
//! A denial is `429 Too Many Requests` with `Retry-After` (whole seconds, rounded up, at least
//! 1: the largest of the denying rules') and a problem body naming the most restrictive denying
//! rule (the one with the longest wait):
//!
//! ```json
//! {"type":"urn:floodgate:problem:rate-limited","title":"Too Many Requests","status":429,
//!  "detail":"limit is 10 requests per 10 seconds for this key","rule":"per-ip","retry_after":7}
//! ```
//!
//! The `floodgate` service's `/v1/check` and forward-auth endpoints use these same functions.

use std::cell::Cell;

use bytes::Bytes;
use floodgate_core::Decision;
use floodgate_limiter::{push_policy_item, push_sf_string, Action, RuleOutcome, Verdict};
use floodgate_store::OnFull;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};

// Decided by the engine, shown here: re-exported so that the HTTP mapping is one module.
pub use floodgate_limiter::{
    enforced_quota, most_restrictive, most_restrictive_of, policy_item, retry_after_secs,
};

/// `RateLimit-Policy` header name.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` header name.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// Problem type of a rate-limited request (429).
pub const PROBLEM_RATE_LIMITED: &str = "urn:floodgate:problem:rate-limited";
/// Problem type of a request refused because the store failed and the rule fails closed (503).
pub const PROBLEM_STORE_UNAVAILABLE: &str = "urn:floodgate:problem:store-unavailable";
/// Problem type of a request whose cost exceeds what a rule can ever admit (400).
pub const PROBLEM_COST_EXCEEDS_CAPACITY: &str = "urn:floodgate:problem:cost-exceeds-capacity";
/// Problem type of a request whose cost header is not a positive whole number (400).
pub const PROBLEM_INVALID_COST: &str = "urn:floodgate:problem:invalid-cost";
/// The `Content-Type` of problem bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";
/// Problem type of a request carrying a key header twice ([`ambiguous_key`]).
pub const PROBLEM_AMBIGUOUS_KEY: &str = "urn:floodgate:problem:ambiguous-key";
/// Problem type of a request whose client address the limiter could not find
/// ([`no_client_address`]).
pub const PROBLEM_NO_CLIENT_ADDRESS: &str = "urn:floodgate:problem:no-client-address";

/// The response to send for `verdict` instead of calling the inner service; `None` when it is
/// admitted: 429 ([`too_many_requests`], or [`store_full`] when a full store refused a new
/// key), 503 ([`service_unavailable`]) or the 400/500 of a refusal ([`cost_exceeds_capacity`],
/// [`invalid_cost`], [`no_client_address`], [`ambiguous_key`]).
pub fn for_verdict(verdict: &Verdict) -> Option<Response<Bytes>> {
    for_verdict_denying_with(verdict, StatusCode::TOO_MANY_REQUESTS)
}

/// [`for_verdict`], but a denial is answered with `deny_status` (forward-auth's configurable
/// status, e.g. 403) instead of 429, in the status line and in the problem body's `status` and
/// `title`, which RFC 9457 (section 3.1.4) wants to agree with it; the headers and the rest
/// of the body are those of the 429.
pub fn for_verdict_denying_with(
    verdict: &Verdict,
    deny_status: StatusCode,
) -> Option<Response<Bytes>> {
    match &verdict.action {
        Action::Admit => None,
        Action::Deny if verdict.store_full == Some(OnFull::Reject) => Some(deny(
            &verdict.outcomes,
            Some(STORE_FULL_DETAIL),
            deny_status,
        )),
        Action::Deny => Some(deny(&verdict.outcomes, None, deny_status)),
        Action::Unavailable => Some(service_unavailable(1)),
        Action::CostExceedsCapacity {
            rule,
            cost,
            capacity,
            ..
        } => Some(cost_exceeds_capacity(rule, *cost, *capacity)),
        Action::InvalidCost { rule, header } => Some(invalid_cost(rule, header)),
        Action::NoClientAddress { rule } => Some(no_client_address(rule)),
        Action::AmbiguousKey { rule, header } => Some(ambiguous_key(rule, header)),
        Action::NoReservation { rule, .. } => Some(no_reservation(rule)),
    }
}

/// Adds `RateLimit-Policy` and `RateLimit` for every non-shadow outcome (nothing when there is
/// none), and `Retry-After` when some non-shadow outcome is denied. Replaces earlier values of
/// these headers.
pub fn apply_headers(headers: &mut HeaderMap, outcomes: &[RuleOutcome]) {
    apply_headers_of(headers, outcomes);
}

/// [`apply_headers`] for outcomes that are not in one slice (e.g. `Option`s of a list, with
/// `.iter().flatten()`), so that the caller need not collect them.
pub fn apply_headers_of<'a, I>(headers: &mut HeaderMap, outcomes: I)
where
    I: IntoIterator<Item = &'a RuleOutcome>,
    I::IntoIter: Clone,
{
    let outcomes = outcomes.into_iter();
    // `RateLimit` is written straight into one buffer (integers by `itoa`); `RateLimit-Policy`
    // is the rule's cached member when one rule is shown (the usual case), else the members
    // joined.
    let mut shown = outcomes.clone().filter(|o| !o.shadow);
    let Some(first) = shown.next() else {
        return;
    };
    // Written into this thread's reused buffer and copied out once (`HeaderValue::from_bytes`):
    // one allocation per answer, where a fresh `Vec` handed to `Bytes` costs two.
    let mut state = STATE_BUFFER.try_with(Cell::take).unwrap_or_default();
    state.clear();
    let mut numbers = itoa::Buffer::new();
    let mut push_state = |state: &mut Vec<u8>, o: &RuleOutcome| {
        push_sf_string(state, &o.rule);
        state.extend_from_slice(b";r=");
        state.extend_from_slice(numbers.format(o.decision.remaining).as_bytes());
        state.extend_from_slice(b";t=");
        state.extend_from_slice(numbers.format(reset_secs(&o.decision)).as_bytes());
    };
    push_state(&mut state, first);
    let push_policy = |policy: &mut Vec<u8>, o: &RuleOutcome| match &o.policy_item {
        Some(item) => policy.extend_from_slice(item.as_bytes()),
        None => push_policy_item(policy, &o.rule, &o.quota),
    };
    let mut policy = None;
    for o in shown {
        let policy = policy.get_or_insert_with(|| {
            let mut policy = Vec::with_capacity(64);
            push_policy(&mut policy, first);
            policy
        });
        policy.extend_from_slice(b", ");
        state.extend_from_slice(b", ");
        push_policy(policy, o);
        push_state(&mut state, o);
    }
    let policy = match (policy, &first.policy_item) {
        (Some(joined), _) => HeaderValue::from_maybe_shared(exact(joined)),
        (None, Some(item)) => Ok(item.clone()),
        (None, None) => Ok(self::policy_item(&first.rule, &first.quota)),
    };
    // Built only from integers and escaped printable ASCII, so always a valid header value.
    if let (Ok(p), Ok(s)) = (policy, HeaderValue::from_bytes(&state)) {
        headers.insert(RATELIMIT_POLICY, p);
        headers.insert(RATELIMIT, s);
    }
    // Kept for the next answer unless it grew unusually large (a long list of rules).
    if state.capacity() <= MAX_KEPT_BUFFER {
        let _ = STATE_BUFFER.try_with(|b| b.set(state));
    }
    let retry_after = outcomes
        .filter(|o| !o.shadow)
        .filter_map(|o| o.decision.retry_after_secs())
        .max();
    if let Some(secs) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
}

thread_local! {
    /// The `RateLimit` value's buffer, reused by each answer on this thread.
    static STATE_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest `RateLimit` buffer kept for reuse, in bytes (a member is about 30 bytes plus
/// the rule's name).
const MAX_KEPT_BUFFER: usize = 4096;

/// The `t` of a `RateLimit` member: the seconds until the key is fresh again, but never less
/// than the decision's `Retry-After`, so a client following `t` never retries before a retry
/// can succeed (a refusal by a full store has no state to reset, `reset_after` 0, yet asks the
/// client to wait).
fn reset_secs(decision: &Decision) -> u64 {
    decision
        .reset_after_secs()
        .max(decision.retry_after_secs().unwrap_or(0))
}

/// `buf` as `Bytes` without a second allocation: `Bytes` takes a buffer without spare capacity
/// as it is, but boxes a bookkeeping record for one with spare capacity.
fn exact(mut buf: Vec<u8>) -> Bytes {
    buf.shrink_to_fit();
    Bytes::from(buf)
}

/// The full `429 Too Many Requests` response for a denied request: headers as
/// [`apply_headers`] and a problem body naming the [`most_restrictive`] denying rule. If no
/// non-shadow outcome is denied the body names no rule (callers only call this on a denial).
pub fn too_many_requests(outcomes: &[RuleOutcome]) -> Response<Bytes> {
    deny(outcomes, None, StatusCode::TOO_MANY_REQUESTS)
}

/// The detail of [`store_full`].
const STORE_FULL_DETAIL: &str =
    "the rate limiter is tracking as many clients as it can; try again later";

/// `429` for a request refused because the store holds as many keys as it may and this
/// client's key is new ([`OnFull::Reject`]): same headers as
/// [`too_many_requests`], but the detail says so instead of blaming the client's own usage.
pub fn store_full(outcomes: &[RuleOutcome]) -> Response<Bytes> {
    deny(
        outcomes,
        Some(STORE_FULL_DETAIL),
        StatusCode::TOO_MANY_REQUESTS,
    )
}

/// A denial answered with `status` (429, or forward-auth's own): the title names the status
/// sent (RFC 9457 section 3.1.3: the type still says rate-limited).
fn deny(outcomes: &[RuleOutcome], detail: Option<&str>, status: StatusCode) -> Response<Bytes> {
    let mut body = serde_json::json!({
        "type": PROBLEM_RATE_LIMITED,
        "title": status.canonical_reason().unwrap_or("Too Many Requests"),
        "status": status.as_u16(),
    });
    if let Some(o) = most_restrictive(outcomes) {
        body["detail"] = match detail {
            Some(detail) => detail.into(),
            None => format!("limit is {} for this key", o.quota.describe()).into(),
        };
        body["rule"] = o.rule.as_ref().into();
        body["retry_after"] = o.decision.retry_after_secs().unwrap_or(1).into();
    } else {
        body["detail"] = "rate limit exceeded".into();
    }
    let mut response = problem_response(status, &body);
    apply_headers(response.headers_mut(), outcomes);
    response
}

/// `503 Service Unavailable` for a fail-closed rule whose store failed: `Retry-After:
/// retry_after_secs` (at least 1) and a problem body. The store error is not disclosed.
pub fn service_unavailable(retry_after_secs: u64) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": PROBLEM_STORE_UNAVAILABLE,
        "title": "Service Unavailable",
        "status": 503,
        "detail": "the rate limiter cannot reach its store and this limit fails closed",
    });
    let mut response = problem_response(StatusCode::SERVICE_UNAVAILABLE, &body);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs.max(1)));
    response
}

/// `500 Internal Server Error` for a request to a rule counted by client IP when the request
/// carries no peer address: the app is served without one (axum: `axum::serve(listener, app)`
/// instead of `app.into_make_service_with_connect_info::<SocketAddr>()`), a setup error that
/// must not pass silently as "nothing is limited".
pub fn no_client_address(rule: &str) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": PROBLEM_NO_CLIENT_ADDRESS,
        "title": "Internal Server Error",
        "status": 500,
        "detail": format!(
            "rule {rule:?} counts by client IP but the request has no peer address: serve the \
             app with into_make_service_with_connect_info::<SocketAddr>() (axum) or insert a \
             floodgate_tower::PeerAddr extension"
        ),
        "rule": rule,
    });
    problem_response(StatusCode::INTERNAL_SERVER_ERROR, &body)
}

/// `400 Bad Request` for a request that carries `header`, which `rule` counts by, more than
/// once: which value is the client would be a guess.
pub fn ambiguous_key(rule: &str, header: &HeaderName) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": PROBLEM_AMBIGUOUS_KEY,
        "title": "Ambiguous rate-limit key",
        "status": 400,
        "detail": format!(
            "header {} appears more than once, and rule {rule:?} counts by it: send it once",
            header.as_str()
        ),
        "rule": rule,
        "field": header.as_str(),
    });
    problem_response(StatusCode::BAD_REQUEST, &body)
}

/// Problem type of a reservation a rule cannot take ([`no_reservation`]).
pub const PROBLEM_INVALID_REQUEST: &str = "urn:floodgate:problem:invalid-request";

/// `400 Bad Request` for a reservation (a check that may wait) of a plan with an item of
/// `rule`, which counts in calendar periods: those take no reservation.
pub fn no_reservation(rule: &str) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": PROBLEM_INVALID_REQUEST,
        "title": "invalid request",
        "status": 400,
        "detail": format!(
            "rule {rule:?} counts in calendar periods, which take no reservation: send the \
             check without a wait or reservation"
        ),
        "rule": rule,
    });
    problem_response(StatusCode::BAD_REQUEST, &body)
}

/// `400 Bad Request` for a request whose cost can never be admitted by `rule` (cost above the
/// policy's capacity): retrying would never help, so this is not a 429.
pub fn cost_exceeds_capacity(rule: &str, cost: u64, capacity: u64) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": PROBLEM_COST_EXCEEDS_CAPACITY,
        "title": "Request cost exceeds capacity",
        "status": 400,
        "detail": format!("this request costs {cost} units but rule {rule:?} admits at most {capacity} at once"),
        "rule": rule,
    });
    problem_response(StatusCode::BAD_REQUEST, &body)
}

/// `400 Bad Request` for a request whose cost `header` (read by `rule`) is present but not a
/// positive whole number: the body names the header in `field`.
pub fn invalid_cost(rule: &str, header: &HeaderName) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": PROBLEM_INVALID_COST,
        "title": "Invalid request cost",
        "status": 400,
        "detail": format!("header {} must be a positive whole number (the request's cost for rule {rule:?})", header.as_str()),
        "rule": rule,
        "field": header.as_str(),
    });
    problem_response(StatusCode::BAD_REQUEST, &body)
}

/// A problem+json response with `status` and `body`.
pub fn problem_response(status: StatusCode, body: &serde_json::Value) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(rule: &str, quota: &str, decision: Decision) -> RuleOutcome {
        RuleOutcome {
            rule: rule.into(),
            quota: quota.parse().unwrap(),
            decision,
            shadow: false,
            policy_item: None,
            item: 0,
            scheduled_at: None,
        }
    }

    fn denied(retry_after: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            reset_after: 9_500_000,
            retry_after: Some(retry_after),
        }
    }

    #[test]
    fn a_smaller_decided_capacity_scales_the_quota_shown() {
        use floodgate_core::{AlgorithmKind, Policy};
        let policy = Policy::new(AlgorithmKind::TokenBucket, "10/min".parse().unwrap()).unwrap();
        let decided = |limit| Decision {
            allowed: true,
            limit,
            remaining: 4,
            reset_after: 12_000_000,
            retry_after: None,
        };
        assert_eq!(enforced_quota(&policy, &decided(10)), None);
        let half = enforced_quota(&policy, &decided(5)).unwrap();
        assert_eq!(
            (half.limit(), half.burst(), half.period()),
            (5, 5, 60_000_000)
        );
        let mut h = HeaderMap::new();
        let mut o = outcome("per-user", "10/min", decided(5));
        o.quota = half;
        apply_headers(&mut h, &[o]);
        assert_eq!(h[RATELIMIT_POLICY], "\"per-user\";q=5;w=60");
        // A burst scales with the limit.
        let bursty = Policy::new(AlgorithmKind::Gcra, "10/min burst 20".parse().unwrap()).unwrap();
        let q = enforced_quota(&bursty, &decided(10)).unwrap();
        assert_eq!((q.limit(), q.burst()), (5, 10));
    }

    #[test]
    fn headers_list_every_enforcing_rule() {
        let ok = Decision {
            allowed: true,
            limit: 1000,
            remaining: 998,
            reset_after: 3_600_001,
            retry_after: None,
        };
        let mut shadow = outcome("shadow", "1/s", denied(5_000_000));
        shadow.shadow = true;
        let outcomes = vec![
            outcome("per-ip", "10/10s", denied(700_000)),
            outcome("per-user", "1000/h", ok),
            shadow,
        ];
        let mut h = HeaderMap::new();
        apply_headers(&mut h, &outcomes);
        assert_eq!(
            h[RATELIMIT_POLICY],
            "\"per-ip\";q=10;w=10, \"per-user\";q=1000;w=3600"
        );
        assert_eq!(h[RATELIMIT], "\"per-ip\";r=0;t=10, \"per-user\";r=998;t=4");
        assert_eq!(h[RETRY_AFTER], "1");
    }

    #[test]
    fn cached_policy_items_give_the_same_headers() {
        let ok = |remaining| Decision {
            allowed: true,
            limit: 10,
            remaining,
            reset_after: 1_500_000,
            retry_after: None,
        };
        let cached = |rule: &str, quota: &str, d| {
            let mut o = outcome(rule, quota, d);
            o.policy_item = Some(policy_item(&o.rule, &o.quota));
            o
        };
        assert_eq!(
            policy_item("a\"b", &"10/90s".parse().unwrap()),
            "\"a\\\"b\";q=10;w=90"
        );
        for outcomes in [
            vec![outcome("per-ip", "10/10s", ok(4))],
            vec![
                outcome("per-ip", "10/10s", ok(4)),
                outcome("per-user", "7/500ms", ok(2)),
            ],
        ] {
            let mut plain = HeaderMap::new();
            apply_headers(&mut plain, &outcomes);
            let with: Vec<RuleOutcome> = outcomes
                .iter()
                .map(|o| cached(&o.rule, &o.quota.to_string(), o.decision))
                .collect();
            let mut fast = HeaderMap::new();
            apply_headers(&mut fast, &with);
            assert_eq!(plain, fast);
        }
        let mut h = HeaderMap::new();
        apply_headers(
            &mut h,
            &[
                cached("per-ip", "10/10s", ok(4)),
                cached("per-user", "7/500ms", ok(2)),
            ],
        );
        assert_eq!(
            h[RATELIMIT_POLICY],
            "\"per-ip\";q=10;w=10, \"per-user\";q=7;w=1"
        );
        assert_eq!(h[RATELIMIT], "\"per-ip\";r=4;t=2, \"per-user\";r=2;t=2");
    }

    #[test]
    fn too_many_requests_names_the_longest_wait() {
        let outcomes = vec![
            outcome("short", "10/10s", denied(1_500_000)),
            outcome("long", "5/min", denied(12_000_001)),
        ];
        let r = too_many_requests(&outcomes);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(r.headers()[RETRY_AFTER], "13");
        let body: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": PROBLEM_RATE_LIMITED,
                "title": "Too Many Requests",
                "status": 429,
                "detail": "limit is 5 requests per minute for this key",
                "rule": "long",
                "retry_after": 13,
            })
        );
    }

    #[test]
    fn service_unavailable_has_retry_after() {
        let r = service_unavailable(0);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[RETRY_AFTER], "1");
    }

    #[test]
    fn a_denial_sent_as_403_says_403_in_its_body_too() {
        let verdict = Verdict {
            action: Action::Deny,
            outcomes: vec![outcome("a", "1/s", denied(3_000_000))].into(),
            store_error: None,
            store_full: None,
            wait: None,
        };
        let r = for_verdict_denying_with(&verdict, StatusCode::FORBIDDEN).unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(r.headers()["retry-after"], "3");
        let body: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(
            (body["status"].as_u64(), body["title"].as_str()),
            (Some(403), Some("Forbidden"))
        );
        // The rest is the 429's.
        let usual = for_verdict(&verdict).unwrap();
        let mut usual_body: serde_json::Value = serde_json::from_slice(usual.body()).unwrap();
        usual_body["status"] = 403.into();
        usual_body["title"] = "Forbidden".into();
        assert_eq!(body, usual_body);
        assert_eq!(r.headers(), usual.headers());
    }
}
