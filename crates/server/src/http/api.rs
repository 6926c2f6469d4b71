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

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use floodgate_core::Decision;
use floodgate_store::{CheckItem, Store, StoreError};
use floodgate_tower::response::{apply_headers, most_restrictive};
use floodgate_tower::RuleOutcome;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::{invalid, MAX_BODY_BYTES, MAX_DESCRIPTORS, MAX_KEY_BYTES};
use crate::config::{Config, FailureMode, MAX_COST};
use crate::serve::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckRequest {
    rule: Option<String>,
    key: Option<String>,
    cost: Option<serde_json::Number>,
    descriptors: Option<Vec<Descriptor>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Descriptor {
    rule: String,
    key: String,
    cost: Option<serde_json::Number>,
}

/// One validated item: the rule's index in the config, the client's key, its encoded form, and
/// the cost.
#[derive(Debug)]
struct Item {
    rule: usize,
    raw_key: String,
    key: String,
    cost: u64,
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
    let request: CheckRequest = match read_json(body) {
        Ok(r) => r,
        Err(response) => return response,
    };
    let config = state.config();
    let items = match validate(&config, request) {
        Ok(items) => items,
        Err(response) => return response,
    };
    let decided = match decide(state, &config, &items, consume).await {
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
    // Syntax first (a whole JSON object), then the shape, with the path of the failing field.
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
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

fn validate(config: &Config, request: CheckRequest) -> Result<Vec<Item>, Response> {
    let bad = |field: &str, detail: String| invalid(StatusCode::BAD_REQUEST, field, detail);
    let descriptors: Vec<(String, Descriptor)> = match request.descriptors {
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
            list.into_iter()
                .enumerate()
                .map(|(i, d)| (format!("descriptors[{i}]."), d))
                .collect()
        }
        None => {
            let rule = request
                .rule
                .ok_or_else(|| bad("rule", "missing (or give descriptors)".into()))?;
            let key = request.key.ok_or_else(|| bad("key", "missing".into()))?;
            vec![(
                String::new(),
                Descriptor {
                    rule,
                    key,
                    cost: request.cost,
                },
            )]
        }
    };
    let mut items = Vec::with_capacity(descriptors.len());
    for (prefix, d) in descriptors {
        let Some(rule) = config.rules.iter().position(|r| r.name == d.rule) else {
            let known: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
            return Err(bad(
                &format!("{prefix}rule"),
                format!(
                    "unknown rule {:?}; configured rules: {}",
                    d.rule,
                    known.join(", ")
                ),
            ));
        };
        if d.key.is_empty() || d.key.len() > MAX_KEY_BYTES {
            return Err(bad(
                &format!("{prefix}key"),
                format!("must be between 1 and {MAX_KEY_BYTES} bytes long"),
            ));
        }
        let cost = match &d.cost {
            None => 1,
            Some(n) => match n.as_u64() {
                Some(c) if c <= MAX_COST => c,
                _ => {
                    return Err(bad(
                        &format!("{prefix}cost"),
                        format!("must be a whole number between 0 and {MAX_COST}"),
                    ))
                }
            },
        };
        let capacity = config.rules[rule].policy.capacity();
        if cost > capacity {
            return Err(bad(
                &format!("{prefix}cost"),
                format!(
                    "{cost} exceeds the capacity of rule {:?} ({capacity} units at once): it \
                     could never be admitted",
                    d.rule
                ),
            ));
        }
        items.push(Item {
            rule,
            key: client_key(&d.key),
            raw_key: d.key,
            cost,
        });
    }
    Ok(items)
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
    config: &Config,
    items: &[Item],
    consume: bool,
) -> Result<Decided, Response> {
    let store = state.limiter.store();
    let mut store_full = None;
    let mut outcomes: Vec<Option<RuleOutcome>> = vec![None; items.len()];
    let outcome = |item: &Item, decision: Decision| RuleOutcome {
        rule: config.rules[item.rule].name.as_str().into(),
        quota: *config.rules[item.rule].policy.quota(),
        decision,
        shadow: config.rules[item.rule].shadow,
    };
    let enforcing: Vec<usize> = (0..items.len())
        .filter(|&i| !config.rules[items[i].rule].shadow)
        .collect();
    let mut admitted = true;
    if !enforcing.is_empty() {
        let batch: Vec<CheckItem<'_>> = enforcing
            .iter()
            .map(|&i| check_item(config, &items[i]))
            .collect();
        // Same histogram as the middleware's: the store batch round trip.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let result = if consume {
            store.check(&batch).await
        } else {
            store.peek(&batch).await
        };
        metrics::histogram!("floodgate_decision_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(decided) => {
                admitted = decided.allowed;
                store_full = decided.store_full;
                // A batch refused because the store is full of live keys is not the keys'
                // own doing: its denials are counted apart, so dashboards do not read them
                // as clients over their limits.
                let refused_full = store_full == Some(floodgate_store::OnFull::Reject);
                for (&i, decision) in enforcing.iter().zip(decided.decisions) {
                    if consume {
                        count(
                            &config.rules[items[i].rule].name,
                            match (decision.allowed, refused_full) {
                                (true, _) => "allowed",
                                (false, true) => "store_full",
                                (false, false) => "denied",
                            },
                        );
                    }
                    outcomes[i] = Some(outcome(&items[i], decision));
                }
            }
            Err(error) => return Err(store_failure(config, items, &enforcing, &error)),
        }
    }
    for i in (0..items.len()).filter(|i| !enforcing.contains(i)) {
        let item = [check_item(config, &items[i])];
        let result = if consume && admitted {
            store.check(&item).await
        } else {
            store.peek(&item).await
        };
        match result {
            Ok(decided) => {
                let decision = decided.decisions[0];
                if consume {
                    count(
                        &config.rules[items[i].rule].name,
                        if decision.allowed {
                            "shadow_allowed"
                        } else {
                            "shadow_denied"
                        },
                    );
                }
                outcomes[i] = Some(outcome(&items[i], decision));
            }
            Err(error) => {
                tracing::warn!(%error, rule = %config.rules[items[i].rule].name, "store failed on a shadow rule");
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
    outcomes: Vec<Option<RuleOutcome>>,
    store_full: Option<floodgate_store::OnFull>,
}

fn check_item<'a>(config: &'a Config, item: &'a Item) -> CheckItem<'a> {
    let rule = &config.rules[item.rule];
    CheckItem {
        rule: &rule.name,
        policy: &rule.policy,
        key: &item.key,
        cost: item.cost,
    }
}

fn count(rule: &str, outcome: &'static str) {
    metrics::counter!("floodgate_decisions_total", "rule" => rule.to_string(), "outcome" => outcome)
        .increment(1);
}

/// A store failure, handled like the middleware does: 503 when an enforcing rule fails closed;
/// otherwise admitted (200, `"degraded": true`, no decisions, since none could be computed).
/// Counted in `floodgate_store_errors_total{kind}` and `floodgate_decisions_total` as
/// `error_open` / `error_closed`.
fn store_failure(
    config: &Config,
    items: &[Item],
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
        .any(|&i| config.rules[items[i].rule].failure_mode == FailureMode::Closed);
    floodgate_tower::limiter::log_store_failure(error, closed);
    let kind = match error {
        StoreError::Unavailable { .. } => "unavailable",
        StoreError::Timeout { .. } => "timeout",
        _ => "other",
    };
    metrics::counter!("floodgate_store_errors_total", "kind" => kind).increment(1);
    for &i in enforcing {
        count(
            &config.rules[items[i].rule].name,
            if closed { "error_closed" } else { "error_open" },
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

fn decision_json(d: &Decision) -> serde_json::Value {
    json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "reset_after_us": d.reset_after,
        "retry_after_us": d.retry_after,
    })
}

fn answer(items: &[Item], result: &Decided, consume: bool) -> Response {
    let outcomes = &result.outcomes;
    let decided: Vec<RuleOutcome> = outcomes.iter().flatten().cloned().collect();
    let allowed = decided
        .iter()
        .filter(|o| !o.shadow)
        .all(|o| o.decision.allowed);
    let binding = if allowed {
        decided
            .iter()
            .filter(|o| !o.shadow)
            .min_by_key(|o| o.decision.remaining)
            .or(decided.first())
    } else {
        most_restrictive(&decided)
    };
    let mut body = json!({ "allowed": allowed });
    if let Some(b) = binding {
        let mut d = decision_json(&b.decision);
        d["rule"] = b.rule.as_ref().into();
        d["retry_after_s"] = b.decision.retry_after_secs().into();
        d["allowed"] = allowed.into();
        body = d;
    }
    body["decisions"] = items
        .iter()
        .zip(outcomes)
        .filter_map(|(item, o)| {
            let o = o.as_ref()?;
            let mut d = decision_json(&o.decision);
            d["rule"] = o.rule.as_ref().into();
            d["key"] = item.raw_key.as_str().into();
            d["shadow"] = o.shadow.into();
            Some(d)
        })
        .collect::<Vec<_>>()
        .into();
    if let Some(full) = result.store_full {
        // The store was full of live keys: the denial (or untracked admission) is not the
        // key's own doing. See `[store] on_full`.
        body["store_full"] = full.as_str().into();
        body["detail"] = match full {
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
        .into();
    }
    let status = if allowed || !consume {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, axum::Json(body)).into_response();
    if consume {
        apply_headers(response.headers_mut(), &decided);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: &str) -> Config {
        crate::config::parse(
            "t",
            &format!("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nfailure_mode = \"{mode}\"\n"),
        )
        .unwrap()
    }

    fn item() -> Item {
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

    #[test]
    fn client_keys_are_namespaced_and_escaped() {
        assert_eq!(client_key("alice"), "key=alice");
        assert_eq!(client_key("a|b=c"), "key=a%7Cb%3Dc");
    }
}
