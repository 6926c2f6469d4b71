//! `POST /v1/check` and `POST /v1/peek`: decisions for explicit (rule, key, cost) items.
//!
//! Request (one item, or several with `descriptors`, decided all-or-nothing):
//!
//! ```json
//! {"rule": "per-user", "key": "alice", "cost": 1}
//! {"descriptors": [{"rule": "per-second", "key": "alice"}, {"rule": "per-day", "key": "alice"}]}
//! ```
//!
//! Answer (200 when admitted, 429 with `Retry-After`, `RateLimit-Policy` and `RateLimit` when
//! not; `/v1/peek` always answers 200 and consumes nothing):
//!
//! ```json
//! {"allowed": false, "rule": "per-second", "limit": 10, "remaining": 0,
//!  "reset_after_us": 1000000, "retry_after_us": 100000, "retry_after_s": 1,
//!  "decisions": [{"rule": "per-second", "key": "alice", "shadow": false, "allowed": false,
//!                 "limit": 10, "remaining": 0, "reset_after_us": 1000000,
//!                 "retry_after_us": 100000}, ...]}
//! ```
//!
//! With `"max_wait_ms": W` (`/v1/check` only; a whole number from 0 to 86,400,000) the check
//! may wait: a request that would be admitted within `W` milliseconds is admitted now for its
//! scheduled time, consuming its units, and the answer carries `"wait_us"` (microseconds until
//! the caller may go on; 0 when at once). Beyond `W` it is denied as a check is (429),
//! consuming nothing, and carries no `wait_us`.
//!
//! With `"reserve": true` (`/v1/check` only; with or without `max_wait_ms`, which defaults to
//! 0 then) a granted reservation also answers `"reservation"`, a signed token, and
//! `"reservation_expires_in_us"`: `POST /v1/settle` gives back or charges the difference once
//! the actual cost is known (see [`super::settle`]). No token when nothing was reserved (a
//! denial, a degraded answer, or only shadow rules).
//!
//! The top-level fields repeat the *binding* decision: the denying rule with the longest wait, or
//! when admitted the enforcing rule with the fewest units remaining. Times are microseconds
//! (`_us`) except `retry_after_s` (whole seconds, rounded up, as in `Retry-After`). Client keys
//! live in their own namespace (`key=<value>`): they never share counters with the keys the
//! forward-auth and proxy paths derive from requests.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use floodgate_limiter::SmallList;
use floodgate_tower::response::apply_headers_of;
use floodgate_tower::{Action, FindError, Mode, Plan, RuleOutcome, RuleSet, Traffic, Verdict};
use http::StatusCode;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::auth::authorize_api as authorize;
use super::body::{client_key, not_null, parse_json, read_json, whole_number};
use super::bounds::{MAX_BODY_BYTES, MAX_CHECK_DESCRIPTORS, MAX_KEY_BYTES};
use super::problem::invalid;
use crate::config::MAX_COST;
use crate::state::AppState;

// Strings borrow from the body when they hold no escape (`Cow`), so parsing allocates only the
// descriptor list.
/// A decision request: one item (`rule`, `key`, `cost`) or several (`descriptors`), not both.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckRequest<'a> {
    /// The rule's name, as configured (`[[rules]] name`); or give `descriptors`.
    #[serde(borrow)]
    #[schema(nullable = false, value_type = Option<String>, min_length = 1, example = "per-second")]
    rule: Option<Cow<'a, str>>,
    /// The client's key: what is counted (a user, an API key, a job). 1 to 256 bytes.
    #[serde(borrow)]
    #[schema(nullable = false, value_type = Option<String>, min_length = 1, max_length = 256, example = "alice")]
    key: Option<Cow<'a, str>>,
    /// Units this request consumes: a whole number from 0 to 1,000,000 (default 1; 0 reads).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false, value_type = Option<u64>, minimum = 0, maximum = 1_000_000)]
    cost: Option<serde_json::Number>,
    /// 1 to 16 items decided all-or-nothing, instead of `rule`/`key`/`cost`.
    // `null` is a 400 naming the member, as for every optional member (it was taken for an
    // absent list: `descriptors_null_is_refused_naming_it`).
    #[serde(borrow, default, deserialize_with = "not_null")]
    #[schema(nullable = false, min_items = 1, max_items = 16)]
    descriptors: Option<Vec<Descriptor<'a>>>,
    /// `/v1/check` only: wait up to this many milliseconds for a slot (a reservation), a whole
    /// number from 0 to 86,400,000 (one day).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false, value_type = Option<u64>, minimum = 0, maximum = 86_400_000)]
    max_wait_ms: Option<serde_json::Number>,
    /// `/v1/check` only: answer a granted reservation with a token for `/v1/settle`.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    reserve: Option<bool>,
}

/// One item of `descriptors`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Descriptor<'a> {
    /// The rule's name, as configured.
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, example = "per-second")]
    rule: Cow<'a, str>,
    /// The client's key, 1 to 256 bytes.
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 256, example = "alice")]
    key: Cow<'a, str>,
    /// Units: a whole number from 0 to 1,000,000 (default 1).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false, value_type = Option<u64>, minimum = 0, maximum = 1_000_000)]
    cost: Option<serde_json::Number>,
}

/// One validated item: the rule's index in the rule set, the client's key and the cost, and
/// its position in `descriptors` (`None` for the top-level fields).
#[derive(Debug)]
struct Item<'a> {
    rule: usize,
    raw_key: Cow<'a, str>,
    cost: u64,
    index: Option<usize>,
}

impl Item<'_> {
    /// The request field holding `name` of this item: `cost` or `descriptors[1].cost`.
    fn field(&self, name: &str) -> String {
        match self.index {
            Some(i) => format!("descriptors[{i}].{name}"),
            None => name.to_string(),
        }
    }
}

// The handlers take the request whole rather than a `HeaderMap` extractor, which would copy
// every request header (callgrind: about 500 instructions per request) to read one.

/// `POST /v1/check`.
pub(super) async fn check(State(state): State<Arc<AppState>>, request: Request) -> Response {
    handle(&state, request, true).await
}

/// `POST /v1/peek`.
pub(super) async fn peek(State(state): State<Arc<AppState>>, request: Request) -> Response {
    handle(&state, request, false).await
}

async fn handle(state: &AppState, request: Request, consume: bool) -> Response {
    if let Err(refused) = authorize(state, request.headers()) {
        return refused;
    }
    // The body as the `Bytes` extractor reads it (within the router's body limit).
    let body = match Bytes::from_request(request, state).await {
        Ok(bytes) if bytes.len() <= MAX_BODY_BYTES => bytes,
        other => match read_json::<serde::de::IgnoredAny>(other) {
            // Unreachable (an accepted body is within the limit), kept total.
            Ok(_) => return invalid(StatusCode::BAD_REQUEST, "body", "unreadable body"),
            Err(response) => return response,
        },
    };
    // The usual request is well formed: decoded in one pass, straight into the typed request.
    // Anything else goes the careful way (`parse_json`), whose errors name the field at fault;
    // both accept exactly the same documents with the same meaning.
    // (A top-level array would decode into the struct too, but it is not an object: only a
    // body that starts as an object takes the fast way.)
    let object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let fast = object
        .then(|| serde_json::from_slice::<CheckRequest<'_>>(&body).ok())
        .flatten();
    let request = match fast {
        Some(request) => request,
        None => match parse_json(&body) {
            Ok(request) => request,
            Err(response) => return response,
        },
    };
    // One snapshot of the rules for the whole request: names, quotas, modes and the metric
    // handles all come from the same generation, even across a reload.
    let rules = state.limiter.rules();
    let max_wait = match max_wait(request.max_wait_ms.as_ref(), consume) {
        Ok(max_wait) => max_wait,
        Err(response) => return response,
    };
    let reserve = request.reserve == Some(true);
    // A reservation token must still be settleable at its slot: with `reserve`, the wait is
    // at most the token's life (`[server] reservation_ttl`).
    let max_wait = match max_wait {
        Some(w) if reserve => Some(w.min(state.reservations.ttl())),
        other => other,
    };
    // On a peek, `"reserve": true` is refused (as `max_wait_ms` is); false is leaving it out.
    if reserve && !consume {
        return invalid(
            StatusCode::BAD_REQUEST,
            "reserve",
            "only /v1/check reserves: a peek consumes nothing",
        );
    }
    // A reservation needs a token to be settled: none is reserved before the secret that
    // signs them is known (shared through the store, which has not answered yet).
    if reserve && !state.reservations.is_ready() {
        return super::token::secret_not_ready();
    }
    // The rules of the plan, kept for signing the reservation's policies.
    let signing = reserve.then(|| Arc::clone(&rules));
    let mut plan = Plan::new(rules);
    let items = match validate(&mut plan, request) {
        Ok(items) => items,
        Err(response) => return response,
    };
    let mode = match (consume, max_wait, reserve) {
        (false, _, _) => Mode::Peek,
        (true, None, false) => Mode::Check,
        (true, max_wait, _) => Mode::Reserve {
            max_wait: max_wait.unwrap_or(0),
        },
    };
    let verdict = state.limiter.evaluate(&plan, mode).await;
    // A calendar rule takes no reservation (the engine refuses it): named by the member that
    // asked for one.
    if let Action::NoReservation { rule, .. } = &verdict.action {
        let field = if reserve { "reserve" } else { "max_wait_ms" };
        return invalid(
            StatusCode::BAD_REQUEST,
            field,
            format!(
                "rule {rule:?} counts in calendar periods, which take no reservation: \
                 send the check without max_wait_ms and reserve"
            ),
        );
    }
    let token = signing.and_then(|rules| reservation_token(state, &rules, &items, &verdict));
    answer(&items, &verdict, consume, token.as_ref())
}

/// A granted reservation's token and its life in microseconds (`None` when nothing was
/// reserved): one item per [`Verdict::reserved`] entry, with the client's own key.
fn reservation_token(
    state: &AppState,
    rules: &RuleSet,
    items: &[Item<'_>],
    verdict: &Verdict,
) -> Option<(String, u64)> {
    let reserved: Vec<super::token::PayloadItem> = verdict
        .reserved()
        .filter_map(|(check, at)| {
            let item = items.get(check)?;
            let rule = rules.rules.get(item.rule)?;
            Some(super::token::PayloadItem::new(
                &rule.name,
                &rule.policy,
                &item.raw_key,
                item.cost,
                at,
            ))
        })
        .collect();
    // Nothing reserved (every item's cost is 0): nothing to settle, so no token (a token
    // would only cost a claim in the store when settled).
    if reserved.iter().all(|item| item.cost == 0) {
        return None;
    }
    let now = state.clock.now();
    let (token, expires) = state.reservations.sign(reserved, now)?;
    Some((token, expires.saturating_sub(now)))
}

/// The longest `max_wait_ms` accepted: one day.
const MAX_WAIT_MS: u64 = 86_400_000;

/// `max_wait_ms` in microseconds; `None` when absent. Errors are 400 problems naming the field.
fn max_wait(value: Option<&serde_json::Number>, consume: bool) -> Result<Option<u64>, Response> {
    let Some(n) = value else {
        return Ok(None);
    };
    let bad = |detail: String| invalid(StatusCode::BAD_REQUEST, "max_wait_ms", detail);
    if !consume {
        return Err(bad(
            "only /v1/check waits: a peek consumes nothing and reserves nothing".into(),
        ));
    }
    whole_number(n, MAX_WAIT_MS, "whole number of milliseconds")
        .map(|ms| Some(ms * 1_000))
        .map_err(bad)
}

/// Validates the request's items and adds them to `plan` (whose rules they name), in order.
fn validate<'a>(
    plan: &mut Plan,
    request: CheckRequest<'a>,
) -> Result<SmallList<Item<'a>>, Response> {
    let rules = Arc::clone(plan.rules());
    let bad = |field: &str, detail: String| invalid(StatusCode::BAD_REQUEST, field, detail);
    match request.descriptors {
        Some(list) => {
            if request.rule.is_some() || request.key.is_some() || request.cost.is_some() {
                return Err(bad(
                    "descriptors",
                    "give either rule/key/cost or descriptors, not both".into(),
                ));
            }
            if list.is_empty() || list.len() > MAX_CHECK_DESCRIPTORS {
                return Err(bad(
                    "descriptors",
                    format!("must hold between 1 and {MAX_CHECK_DESCRIPTORS} items"),
                ));
            }
            let mut items: Vec<Item<'a>> = Vec::with_capacity(list.len());
            for (i, d) in list.into_iter().enumerate() {
                let item = validate_one(&rules, Some(i), d)?;
                plan.push(item.rule, client_key(&item.raw_key), item.cost);
                // Descriptors of one rule and key that together never fit (the engine's
                // check), named here by the descriptor that does not fit (the store would
                // name the whole group).
                if let Some((together, capacity)) = plan.over_capacity_with_earlier(i) {
                    return Err(super::problem::cost_exceeds_capacity(
                        &format!("descriptors[{i}].cost"),
                        &rules.rules[item.rule].name,
                        format!(
                            "the descriptors for rule {:?} and key {:?} cost {together} \
                             together, above the rule's capacity ({capacity} units at once): \
                             they could never be admitted",
                            &*rules.rules[item.rule].name, item.raw_key,
                        ),
                    ));
                }
                items.push(item);
            }
            Ok(SmallList::from(items))
        }
        None => {
            let rule = request
                .rule
                .ok_or_else(|| bad("rule", "missing (or give descriptors)".into()))?;
            let key = request.key.ok_or_else(|| bad("key", "missing".into()))?;
            let d = Descriptor {
                rule,
                key,
                cost: request.cost,
            };
            let item = validate_one(&rules, None, d)?;
            plan.push(item.rule, client_key(&item.raw_key), item.cost);
            Ok(SmallList::One([item]))
        }
    }
}

/// Validates one descriptor (number `index` of `descriptors`, or the top-level fields).
fn validate_one<'a>(
    rules: &RuleSet,
    index: Option<usize>,
    d: Descriptor<'a>,
) -> Result<Item<'a>, Response> {
    // The field names of errors, made only when there is an error.
    let field = |name: &str| match index {
        Some(i) => format!("descriptors[{i}].{name}"),
        None => name.to_string(),
    };
    let bad = |name: &str, detail: String| invalid(StatusCode::BAD_REQUEST, &field(name), detail);
    let rule = match rules.find(&d.rule, Traffic::Api) {
        Ok(rule) => rule,
        Err(FindError::Unknown) => {
            let known: Vec<&str> = (0..rules.rules.len())
                .filter(|&i| rules.applies(i, Traffic::Api))
                .map(|i| &*rules.rules[i].name)
                .collect();
            return Err(super::problem::unknown_rule_in_body(
                &field("rule"),
                format!(
                    "unknown rule {:?}; rules for /v1/check: {}",
                    d.rule,
                    known.join(", ")
                ),
            ));
        }
        Err(FindError::OutOfScope { scope }) => {
            return Err(super::problem::unknown_rule_in_body(
                &field("rule"),
                format!(
                    "rule {:?} applies only to {scope} (its applies_to), not to /v1/check \
                     calls: add \"api\" to its applies_to",
                    d.rule
                ),
            ));
        }
    };
    if d.key.is_empty() || d.key.len() > MAX_KEY_BYTES {
        return Err(bad(
            "key",
            format!("must be between 1 and {MAX_KEY_BYTES} bytes long"),
        ));
    }
    let cost = match &d.cost {
        None => 1,
        Some(n) => whole_number(n, MAX_COST, "whole number").map_err(|e| bad("cost", e))?,
    };
    Ok(Item {
        rule,
        raw_key: d.key,
        cost,
        index,
    })
}

/// Explains `store_full` in an answer: the denial (or untracked admission) is not the key's own
/// doing. See `[store] on_full`.
fn store_full_detail(full: floodgate_store::OnFull) -> &'static str {
    match full {
        floodgate_store::OnFull::Reject => {
            "the store holds [store] max_keys live keys, or the rule its own max_keys, and \
             refuses new keys (on_full = \"reject\"); this is not the key's own limit, and retry_after is \
             only a suggestion: room appears as keys expire"
        }
        floodgate_store::OnFull::AdmitUntracked => {
            "the store holds [store] max_keys live keys, or the rule its own max_keys; a new key was admitted without \
             being counted (on_full = \"admit_untracked\")"
        }
    }
}

/// The answer body. Serialized field by field in the order a JSON object with sorted keys has
/// (the order these answers have always had), without building a `serde_json::Value`.
struct Answer<'a> {
    allowed: bool,
    /// The binding decision, repeated at the top level.
    binding: Option<&'a RuleOutcome>,
    items: &'a [Item<'a>],
    /// The decided items' outcomes, in item order.
    outcomes: &'a [RuleOutcome],
    store_full: Option<floodgate_store::OnFull>,
    /// A granted reservation's wait (`wait_us`).
    wait: Option<u64>,
    /// A granted reservation's token and its life in microseconds (`"reserve": true`).
    reservation: Option<&'a (String, u64)>,
}

impl Serialize for Answer<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("allowed", &self.allowed)?;
        map.serialize_entry(
            "decisions",
            &Decisions {
                items: self.items,
                outcomes: self.outcomes,
            },
        )?;
        if let Some(full) = self.store_full {
            map.serialize_entry("detail", store_full_detail(full))?;
        }
        if let Some(b) = self.binding {
            let d = &b.decision;
            map.serialize_entry("limit", &d.limit)?;
            map.serialize_entry("remaining", &d.remaining)?;
        }
        if let Some((token, expires_in)) = self.reservation {
            map.serialize_entry("reservation", token)?;
            map.serialize_entry("reservation_expires_in_us", expires_in)?;
        }
        if let Some(b) = self.binding {
            let d = &b.decision;
            map.serialize_entry("reset_after_us", &d.reset_after)?;
            map.serialize_entry("retry_after_s", &d.retry_after_secs())?;
            map.serialize_entry("retry_after_us", &d.retry_after)?;
            map.serialize_entry("rule", &*b.rule)?;
        }
        if let Some(full) = self.store_full {
            map.serialize_entry("store_full", full.as_str())?;
        }
        if let Some(wait) = self.wait {
            map.serialize_entry("wait_us", &wait)?;
        }
        map.end()
    }
}

/// The `decisions` list: one entry per decided item, in item order.
struct Decisions<'a> {
    items: &'a [Item<'a>],
    outcomes: &'a [RuleOutcome],
}

impl Serialize for Decisions<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for o in self.outcomes {
            if let Some(item) = self.items.get(o.item) {
                seq.serialize_element(&DecisionEntry::new(item, o))?;
            }
        }
        seq.end()
    }
}

/// One entry of `decisions` (fields in sorted key order, as the answers have always had them).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct DecisionEntry<'a> {
    /// Whether this rule admits the request.
    allowed: bool,
    /// The client's key, as given.
    key: &'a str,
    /// The rule's limit: units per period (its burst capacity).
    limit: u64,
    /// Units left after this decision.
    remaining: u64,
    /// Microseconds until the key is back to its full quota.
    reset_after_us: u64,
    /// Microseconds until a retry of the same cost can be admitted; `null` when admitted.
    retry_after_us: Option<u64>,
    /// The rule's name.
    rule: &'a str,
    /// A shadow rule decides and counts but never denies.
    shadow: bool,
}

impl<'a> DecisionEntry<'a> {
    fn new(item: &'a Item<'a>, outcome: &'a RuleOutcome) -> Self {
        let d = &outcome.decision;
        Self {
            allowed: d.allowed,
            key: &item.raw_key,
            limit: d.limit,
            remaining: d.remaining,
            reset_after_us: d.reset_after,
            retry_after_us: d.retry_after,
            rule: &outcome.rule,
            shadow: outcome.shadow,
        }
    }
}

/// The answer to `verdict`: the limiter's refusals (400 for a cost it can never admit, 503 when
/// the store failed and a rule fails closed) as they are; a store failure of rules that fail
/// open as 200 `{"allowed": true, "degraded": true, "decisions": []}` (no decision could be
/// computed); otherwise the decisions.
fn answer(
    items: &[Item<'_>],
    verdict: &Verdict,
    consume: bool,
    reservation: Option<&(String, u64)>,
) -> Response {
    match &verdict.action {
        Action::Admit | Action::Deny => {}
        // A cost the rule can never admit, named as the request gave it.
        Action::CostExceedsCapacity {
            rule,
            cost,
            capacity,
            item: Some(check),
        } if *check < items.len() => {
            return super::problem::cost_exceeds_capacity(
                &items[*check].field("cost"),
                rule,
                format!(
                    "{cost} exceeds the capacity of rule {rule:?} ({capacity} units at once): \
                     it could never be admitted"
                ),
            );
        }
        // Every other refusal is answered as the limiter words it.
        _ => {
            if let Some(refused) = floodgate_tower::response::for_verdict(verdict) {
                return super::problem::from_tower(refused);
            }
        }
    }
    if verdict.store_error.is_some() {
        return (
            StatusCode::OK,
            axum::Json(json!({"allowed": true, "degraded": true, "decisions": []})),
        )
            .into_response();
    }
    let outcomes = &verdict.outcomes;
    let allowed = verdict.outcomes_allow();
    let binding = verdict.binding_outcome();
    let body = Answer {
        allowed,
        binding,
        items,
        outcomes,
        store_full: verdict.store_full,
        wait: verdict.wait,
        reservation,
    };
    let status = if allowed || !consume {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut buf = Vec::with_capacity(384);
    let mut response = match serde_json::to_writer(&mut buf, &body) {
        Ok(()) => (
            status,
            [(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            )],
            buf,
        )
            .into_response(),
        // Only maps with string keys and numbers are written: this cannot fail.
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if consume {
        apply_headers_of(response.headers_mut(), outcomes.iter());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: &str) -> RuleSet {
        crate::rules::rule_set(
            &crate::config::parse(
                "t",
                &format!("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nfailure_mode = \"{mode}\"\n"),
            )
            .unwrap(),
        )
    }

    fn item() -> Item<'static> {
        Item {
            rule: 0,
            raw_key: "k".into(),
            cost: 1,
            index: None,
        }
    }

    fn verdict(action: Action, outcomes: Vec<RuleOutcome>) -> Verdict {
        Verdict {
            action,
            outcomes: outcomes.into(),
            store_error: None,
            store_full: None,
            wait: None,
        }
    }

    /// The limiter's answers to a store failure and to an impossible cost, in the API's form.
    #[test]
    fn store_failures_and_refusals_are_translated() {
        let down = || {
            Some(floodgate_store::StoreError::Unavailable {
                reason: "test".into(),
            })
        };
        let mut closed = verdict(Action::Unavailable, vec![]);
        closed.store_error = down();
        let r = answer(&[item()], &closed, true, None);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "1");
        let mut open = verdict(Action::Admit, vec![]);
        open.store_error = down();
        assert_eq!(
            answer(&[item()], &open, true, None).status(),
            StatusCode::OK
        );
        let too_big = verdict(
            Action::CostExceedsCapacity {
                rule: "a".into(),
                cost: 5,
                capacity: 1,
                item: None,
            },
            vec![],
        );
        let r = answer(&[item()], &too_big, true, None);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }

    /// The answer is written field by field: it must be exactly what a JSON object with sorted
    /// keys gives (the form answers have always had), for every shape of answer.
    #[test]
    fn answers_are_sorted_json_objects() {
        let rules = config("open");
        let decision = |allowed: bool, retry_after: Option<u64>| floodgate_core::Decision {
            allowed,
            limit: 1,
            remaining: u64::from(allowed),
            reset_after: 1_000_000,
            retry_after,
        };
        let outcome = |check: usize, shadow: bool, d| RuleOutcome {
            rule: Arc::clone(&rules.rules[0].name),
            quota: *rules.rules[0].policy.quota(),
            decision: d,
            shadow,
            policy_item: None,
            item: check,
            scheduled_at: None,
        };
        let items = [item(), item()];
        let cases = [
            (
                Action::Admit,
                vec![outcome(0, false, decision(true, None))],
                None,
            ),
            (
                Action::Deny,
                vec![
                    outcome(0, false, decision(false, Some(400_000))),
                    outcome(1, true, decision(true, None)),
                ],
                Some(floodgate_store::OnFull::Reject),
            ),
            (
                Action::Admit,
                vec![],
                Some(floodgate_store::OnFull::AdmitUntracked),
            ),
        ];
        for (action, outcomes, store_full) in cases {
            let n = outcomes.len();
            let mut v = verdict(action, outcomes);
            v.store_full = store_full;
            let token = ("v1.a.b".to_string(), 300_000_000);
            let response = answer(&items, &v, true, Some(&token));
            let body = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
                .unwrap();
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(std::str::from_utf8(&body).unwrap(), value.to_string());
            assert_eq!(value["decisions"].as_array().unwrap().len(), n);
        }
    }

    #[test]
    fn client_keys_are_namespaced_and_escaped() {
        assert_eq!(client_key("alice"), "key=alice");
        assert_eq!(client_key("a|b=c"), "key=a%7Cb%3Dc");
    }
}
