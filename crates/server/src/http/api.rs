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
//! The top-level fields repeat the *binding* decision: the denying rule with the longest wait, or
//! when admitted the enforcing rule with the fewest units remaining. Times are microseconds
//! (`_us`) except `retry_after_s` (whole seconds, rounded up, as in `Retry-After`). Client keys
//! live in their own namespace (`key=<value>`): they never share counters with the keys the
//! forward-auth and proxy paths derive from requests.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use floodgate_core::Decision;
use floodgate_store::{CheckItem, Store, StoreError};
use floodgate_tower::response::{apply_headers_of, most_restrictive_of};
use floodgate_tower::{FailureMode, Outcome, RuleOutcome, RuleSet};
use http::StatusCode;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{invalid, MAX_BODY_BYTES, MAX_DESCRIPTORS, MAX_KEY_BYTES};
use crate::config::MAX_COST;
use crate::serve::AppState;

// Strings borrow from the body when they hold no escape (`Cow`), so parsing allocates only the
// descriptor list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckRequest<'a> {
    #[serde(borrow)]
    rule: Option<Cow<'a, str>>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    cost: Option<serde_json::Number>,
    #[serde(borrow)]
    descriptors: Option<Vec<Descriptor<'a>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Descriptor<'a> {
    #[serde(borrow)]
    rule: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    cost: Option<serde_json::Number>,
}

/// One validated item: the rule's index in the rule set, the client's key, its encoded form,
/// and the cost.
#[derive(Debug)]
struct Item<'a> {
    rule: usize,
    raw_key: Cow<'a, str>,
    key: String,
    cost: u64,
}

/// A list holding the usual single element inline, without an allocation.
#[derive(Debug)]
enum OneOrMany<T> {
    One([T; 1]),
    Many(Vec<T>),
}

impl<T> std::ops::Deref for OneOrMany<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            OneOrMany::One(one) => one,
            OneOrMany::Many(many) => many,
        }
    }
}

impl<T> std::ops::DerefMut for OneOrMany<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            OneOrMany::One(one) => one,
            OneOrMany::Many(many) => many,
        }
    }
}

impl<T> From<Vec<T>> for OneOrMany<T> {
    fn from(many: Vec<T>) -> Self {
        OneOrMany::Many(many)
    }
}

/// `POST /v1/check`.
pub(super) async fn check(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(&state, body, true).await
}

/// `POST /v1/peek`.
pub(super) async fn peek(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(&state, body, false).await
}

async fn handle(state: &AppState, body: Result<Bytes, BytesRejection>, consume: bool) -> Response {
    let body = match body {
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
    let rules = state.limiter.shared_rules().load();
    let items = match validate(&rules, request) {
        Ok(items) => items,
        Err(response) => return response,
    };
    let decided = match decide(state, &rules, &items, consume).await {
        Ok(decided) => decided,
        Err(response) => return response,
    };
    answer(&items, &decided, consume)
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`]; errors name the field at fault.
pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, Response> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            invalid(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body",
                format!("must be at most {MAX_BODY_BYTES} bytes"),
            )
        } else {
            invalid(rejection.status(), "body", rejection.body_text())
        }
    })?;
    if bytes.len() > MAX_BODY_BYTES {
        return Err(invalid(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body",
            format!("must be at most {MAX_BODY_BYTES} bytes"),
        ));
    }
    parse_json(&bytes)
}

/// Parses a JSON object into `T`: syntax first (a whole JSON object), then the shape, with the
/// path of the failing field; errors are 400 problems naming it.
fn parse_json<'de, T: Deserialize<'de>>(bytes: &[u8]) -> Result<T, Response> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        invalid(
            StatusCode::BAD_REQUEST,
            "body",
            format!("invalid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(invalid(
            StatusCode::BAD_REQUEST,
            "body",
            "invalid JSON: expected an object",
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "body".to_string()
        } else {
            path
        };
        invalid(
            StatusCode::BAD_REQUEST,
            &field,
            format!("invalid JSON: {}", e.into_inner()),
        )
    })
}

fn validate<'a>(
    rules: &RuleSet,
    request: CheckRequest<'a>,
) -> Result<OneOrMany<Item<'a>>, Response> {
    let bad = |field: &str, detail: String| invalid(StatusCode::BAD_REQUEST, field, detail);
    match request.descriptors {
        Some(list) => {
            if request.rule.is_some() || request.key.is_some() || request.cost.is_some() {
                return Err(bad(
                    "descriptors",
                    "give either rule/key/cost or descriptors, not both".into(),
                ));
            }
            if list.is_empty() || list.len() > MAX_DESCRIPTORS {
                return Err(bad(
                    "descriptors",
                    format!("must hold between 1 and {MAX_DESCRIPTORS} items"),
                ));
            }
            let mut items: Vec<Item<'a>> = Vec::with_capacity(list.len());
            for (i, d) in list.into_iter().enumerate() {
                let item = validate_one(rules, Some(i), d)?;
                // Descriptors of one rule and key are decided in order, each seeing the earlier
                // ones' consumption, so together they must fit the capacity too; refused here,
                // naming the descriptor that does not fit (the store would name its internal
                // state id).
                let before: u64 = items
                    .iter()
                    .filter(|o| o.rule == item.rule && o.key == item.key)
                    .map(|o| o.cost)
                    .sum();
                let capacity = rules.rules[item.rule].policy.capacity();
                if before > 0 && before + item.cost > capacity {
                    return Err(bad(
                        &format!("descriptors[{i}].cost"),
                        format!(
                            "the descriptors for rule {:?} and key {:?} cost {} together, above \
                             the rule's capacity ({capacity} units at once): they could never \
                             be admitted",
                            &*rules.rules[item.rule].name,
                            item.raw_key,
                            before + item.cost
                        ),
                    ));
                }
                items.push(item);
            }
            Ok(OneOrMany::Many(items))
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
            Ok(OneOrMany::One([validate_one(rules, None, d)?]))
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
    let Some(rule) = rules.rules.iter().position(|r| *r.name == *d.rule) else {
        let known: Vec<&str> = rules.rules.iter().map(|r| &*r.name).collect();
        return Err(super::unknown_rule_in_body(
            &field("rule"),
            format!(
                "unknown rule {:?}; configured rules: {}",
                d.rule,
                known.join(", ")
            ),
        ));
    };
    if d.key.is_empty() || d.key.len() > MAX_KEY_BYTES {
        return Err(bad(
            "key",
            format!("must be between 1 and {MAX_KEY_BYTES} bytes long"),
        ));
    }
    let cost = match &d.cost {
        None => 1,
        Some(n) => match n.as_u64() {
            Some(c) if c <= MAX_COST => c,
            _ => {
                return Err(bad(
                    "cost",
                    format!("must be a whole number between 0 and {MAX_COST}"),
                ))
            }
        },
    };
    let capacity = rules.rules[rule].policy.capacity();
    if cost > capacity {
        return Err(bad(
            "cost",
            format!(
                "{cost} exceeds the capacity of rule {:?} ({capacity} units at once): it \
                 could never be admitted",
                d.rule
            ),
        ));
    }
    Ok(Item {
        rule,
        key: client_key(&d.key),
        raw_key: d.key,
        cost,
    })
}

/// The store key of a client-supplied key (`key=<value>`, escaped by floodgate-tower's encoder).
pub(super) fn client_key(raw: &str) -> String {
    floodgate_tower::encode_key([("key", raw.as_bytes())])
}

/// Decides the items like the middleware does: enforcing rules as one all-or-nothing batch,
/// shadow rules one by one afterwards (charged only when the request was admitted). Returns one
/// outcome per item, in item order.
async fn decide(
    state: &AppState,
    rules: &RuleSet,
    items: &[Item<'_>],
    consume: bool,
) -> Result<Decided, Response> {
    let store = state.limiter.store();
    let mut store_full = None;
    let mut outcomes = match items.len() {
        1 => OneOrMany::One([None]),
        n => OneOrMany::Many(vec![None; n]),
    };
    let outcome = |item: &Item, decision: Decision| {
        let rule = &rules.rules[item.rule];
        // A decision of the local fallback (Redis down) describes its own, smaller quota, so
        // that `RateLimit-Policy` agrees with the answer's `limit`.
        let (quota, policy_item) =
            match floodgate_tower::response::enforced_quota(&rule.policy, &decision) {
                // Shadow rules are never shown in headers.
                None => (
                    *rule.policy.quota(),
                    (!rule.shadow).then(|| rules.policy_item(item.rule)),
                ),
                Some(quota) => (quota, None),
            };
        RuleOutcome {
            rule: Arc::clone(&rule.name),
            quota,
            decision,
            shadow: rule.shadow,
            policy_item,
        }
    };
    let is_enforcing = |i: &usize| !rules.rules[items[*i].rule].shadow;
    let enforcing = || (0..items.len()).filter(is_enforcing);
    let mut admitted = true;
    if enforcing().next().is_some() {
        // The usual request has one item: its batch is a one-item array, not a Vec.
        let one;
        let many: Vec<CheckItem<'_>>;
        let batch: &[CheckItem<'_>] = match items {
            [item] => {
                one = [check_item(rules, item)];
                &one
            }
            _ => {
                many = enforcing().map(|i| check_item(rules, &items[i])).collect();
                &many
            }
        };
        // Same histogram as the middleware's: the store batch round trip.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        // A store's future can be kilobytes (a remote store's state machine), and each await
        // point would keep its own copy in this handler's future, which axum moves into a box
        // on every request: the check is awaited in place, the rarer peek boxed.
        let result = if consume {
            store.check(batch).await
        } else {
            Box::pin(store.peek(batch)).await
        };
        rules.record_decision_duration(started.elapsed());
        match result {
            Ok(decided) => {
                admitted = decided.allowed;
                store_full = decided.store_full;
                // A batch refused because the store is full of live keys is not the keys'
                // own doing: its denials are counted apart, so dashboards do not read them
                // as clients over their limits.
                let refused_full = store_full == Some(floodgate_store::OnFull::Reject);
                for (i, decision) in enforcing().zip(decided.decisions) {
                    if consume {
                        rules.count(
                            items[i].rule,
                            match (decision.allowed, refused_full) {
                                (true, _) => Outcome::Allowed,
                                (false, true) => Outcome::StoreFull,
                                (false, false) => Outcome::Denied,
                            },
                        );
                    }
                    outcomes[i] = Some(outcome(&items[i], decision));
                }
            }
            Err(error) => {
                let enforcing: Vec<usize> = enforcing().collect();
                return Err(store_failure(rules, items, &enforcing, &error));
            }
        }
    }
    for i in (0..items.len()).filter(|i| !is_enforcing(i)) {
        let item = [check_item(rules, &items[i])];
        // Boxed, as the peek above: shadow rules are the rare case.
        let pending: Pin<Box<dyn Future<Output = _> + Send + '_>> = if consume && admitted {
            Box::pin(store.check(&item))
        } else {
            Box::pin(store.peek(&item))
        };
        match pending.await {
            Ok(decided) => {
                let decision = decided.decisions[0];
                if consume {
                    rules.count(
                        items[i].rule,
                        if decision.allowed {
                            Outcome::ShadowAllowed
                        } else {
                            Outcome::ShadowDenied
                        },
                    );
                }
                outcomes[i] = Some(outcome(&items[i], decision));
            }
            Err(error) => {
                // As the middleware does: counted, the shadow rule admits (it never enforces),
                // and logged at most once a second.
                floodgate_tower::limiter::count_store_error(&error);
                floodgate_tower::limiter::log_store_failure(&error, false);
                rules.count(items[i].rule, Outcome::ErrorOpen);
            }
        }
    }
    Ok(Decided {
        outcomes,
        store_full,
    })
}

/// What [`decide`] found: one outcome per item (in item order), and whether a new key met a
/// full store.
struct Decided {
    outcomes: OneOrMany<Option<RuleOutcome>>,
    store_full: Option<floodgate_store::OnFull>,
}

fn check_item<'a>(rules: &'a RuleSet, item: &'a Item<'_>) -> CheckItem<'a> {
    let rule = &rules.rules[item.rule];
    CheckItem {
        rule: &rule.name,
        policy: &rule.policy,
        key: &item.key,
        cost: item.cost,
    }
}

/// A store failure, handled like the middleware does: 503 when an enforcing rule fails closed;
/// otherwise admitted (200, `"degraded": true`, no decisions, since none could be computed).
/// Counted in `floodgate_store_errors_total{kind}` and `floodgate_decisions_total` as
/// `error_open` / `error_closed`.
fn store_failure(
    rules: &RuleSet,
    items: &[Item<'_>],
    enforcing: &[usize],
    error: &StoreError,
) -> Response {
    if let StoreError::InsufficientCapacity {
        rule,
        cost,
        capacity,
    } = error
    {
        return super::from_tower(floodgate_tower::response::cost_exceeds_capacity(
            rule, *cost, *capacity,
        ));
    }
    let closed = enforcing
        .iter()
        .any(|&i| rules.rules[items[i].rule].failure_mode == FailureMode::Closed);
    floodgate_tower::limiter::log_store_failure(error, closed);
    floodgate_tower::limiter::count_store_error(error);
    // Each rule is counted by its own mode; the answer (503 when any fails closed) is the
    // batch's.
    for &i in enforcing {
        rules.count(
            items[i].rule,
            match rules.rules[items[i].rule].failure_mode {
                FailureMode::Closed => Outcome::ErrorClosed,
                FailureMode::Open => Outcome::ErrorOpen,
            },
        );
    }
    if closed {
        super::from_tower(floodgate_tower::response::service_unavailable(1))
    } else {
        (
            StatusCode::OK,
            axum::Json(json!({"allowed": true, "degraded": true, "decisions": []})),
        )
            .into_response()
    }
}

/// Explains `store_full` in an answer: the denial (or untracked admission) is not the key's own
/// doing. See `[store] on_full`.
fn store_full_detail(full: floodgate_store::OnFull) -> &'static str {
    match full {
        floodgate_store::OnFull::Reject => {
            "the store holds [store] max_keys live keys and refuses new keys \
             (on_full = \"reject\"); this is not the key's own limit, and retry_after is \
             only a suggestion: room appears as keys expire"
        }
        floodgate_store::OnFull::AdmitUntracked => {
            "the store holds [store] max_keys live keys; a new key was admitted without \
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
    outcomes: &'a [Option<RuleOutcome>],
    store_full: Option<floodgate_store::OnFull>,
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
            map.serialize_entry("reset_after_us", &d.reset_after)?;
            map.serialize_entry("retry_after_s", &d.retry_after_secs())?;
            map.serialize_entry("retry_after_us", &d.retry_after)?;
            map.serialize_entry("rule", &*b.rule)?;
        }
        if let Some(full) = self.store_full {
            map.serialize_entry("store_full", full.as_str())?;
        }
        map.end()
    }
}

/// The `decisions` list: one entry per decided item, in item order.
struct Decisions<'a> {
    items: &'a [Item<'a>],
    outcomes: &'a [Option<RuleOutcome>],
}

impl Serialize for Decisions<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for (item, o) in self.items.iter().zip(self.outcomes) {
            let Some(o) = o else { continue };
            seq.serialize_element(&DecisionEntry::new(item, o))?;
        }
        seq.end()
    }
}

/// One entry of `decisions` (fields in sorted key order, as the answers have always had them).
#[derive(Serialize)]
struct DecisionEntry<'a> {
    allowed: bool,
    key: &'a str,
    limit: u64,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: Option<u64>,
    rule: &'a str,
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

fn answer(items: &[Item<'_>], result: &Decided, consume: bool) -> Response {
    let outcomes = &result.outcomes;
    // The decided outcomes in item order, without collecting them.
    let decided = || outcomes.iter().flatten();
    let allowed = decided().filter(|o| !o.shadow).all(|o| o.decision.allowed);
    let binding = if allowed {
        decided()
            .filter(|o| !o.shadow)
            .min_by_key(|o| o.decision.remaining)
            .or(decided().next())
    } else {
        most_restrictive_of(decided())
    };
    let body = Answer {
        allowed,
        binding,
        items,
        outcomes,
        store_full: result.store_full,
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
        apply_headers_of(response.headers_mut(), decided());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: &str) -> RuleSet {
        crate::serve::state::rule_set(
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
            key: client_key("k"),
            cost: 1,
        }
    }

    #[test]
    fn store_failures_follow_the_failure_mode() {
        let down = StoreError::Unavailable {
            reason: "test".into(),
        };
        let r = store_failure(&config("closed"), &[item()], &[0], &down);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "1");
        let r = store_failure(&config("open"), &[item()], &[0], &down);
        assert_eq!(r.status(), StatusCode::OK);
        let too_big = StoreError::InsufficientCapacity {
            rule: "a".into(),
            cost: 5,
            capacity: 1,
        };
        let r = store_failure(&config("open"), &[item()], &[0], &too_big);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }

    /// The answer is written field by field: it must be exactly what a JSON object with sorted
    /// keys gives (the form answers have always had), for every shape of answer.
    #[test]
    fn answers_are_sorted_json_objects() {
        let rules = config("open");
        let decision = |allowed: bool, retry_after: Option<u64>| Decision {
            allowed,
            limit: 1,
            remaining: u64::from(allowed),
            reset_after: 1_000_000,
            retry_after,
        };
        let outcome = |shadow: bool, d: Decision| RuleOutcome {
            rule: Arc::clone(&rules.rules[0].name),
            quota: *rules.rules[0].policy.quota(),
            decision: d,
            shadow,
            policy_item: None,
        };
        let items = [item(), item()];
        let cases = [
            (vec![Some(outcome(false, decision(true, None))), None], None),
            (
                vec![
                    Some(outcome(false, decision(false, Some(400_000)))),
                    Some(outcome(true, decision(true, None))),
                ],
                Some(floodgate_store::OnFull::Reject),
            ),
            (
                vec![None, None],
                Some(floodgate_store::OnFull::AdmitUntracked),
            ),
        ];
        for (outcomes, store_full) in cases {
            let decided = Decided {
                outcomes: outcomes.into(),
                store_full,
            };
            let response = answer(&items, &decided, true);
            let body = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
                .unwrap();
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(std::str::from_utf8(&body).unwrap(), value.to_string());
            assert_eq!(
                value["decisions"].as_array().unwrap().len(),
                decided.outcomes.iter().flatten().count()
            );
        }
    }

    #[test]
    fn client_keys_are_namespaced_and_escaped() {
        assert_eq!(client_key("alice"), "key=alice");
        assert_eq!(client_key("a|b=c"), "key=a%7Cb%3Dc");
    }
}
