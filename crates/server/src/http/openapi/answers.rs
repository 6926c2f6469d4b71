//! The schemas of the answers that the handlers write field by field (`api::Answer`) or as
//! JSON values (`json!`): each says which handler writes it. The fuzzer of the test suite
//! checks every answer against them.

#![allow(dead_code)]

use utoipa::ToSchema;

use crate::http::api::DecisionEntry;
use crate::http::settle::SettledEntry;

/// A problem (RFC 9457), the body of every error: `problem::problem`.
#[derive(ToSchema)]
pub(crate) struct Problem {
    /// The problem type: a `urn:floodgate:problem:...` name (`invalid-request`,
    /// `request-too-large`, `unknown-rule`, `unknown-key`, `ambiguous-key`,
    /// `method-not-allowed`, `rate-limited`, `store-unavailable`, `unauthorized`,
    /// `forbidden`, `admin-disabled`, `reservation-settled`, `reservation-expired`,
    /// `cost-exceeds-capacity`, ...) or `about:blank`.
    #[schema(rename = "type")]
    kind: String,
    /// One title per type.
    title: String,
    /// The HTTP status.
    status: u16,
    /// What is wrong; for bad input it starts with the field: `cost: must be ...`.
    detail: String,
    /// The request field at fault: a body member (`cost`, `descriptors[1].key`), a query
    /// parameter, a header name, `body`, `path` or `method`.
    field: Option<String>,
    /// The rule at fault: of `cost-exceeds-capacity` (a cost above what the rule admits at
    /// once, on every endpoint: `/v1/check` names `field` too), `invalid-cost`, `ambiguous-key`
    /// and the decisions' problems.
    rule: Option<String>,
}

/// The answer of `/v1/check` and `/v1/peek` (`api::Answer`). The top-level `limit`,
/// `remaining`, `reset_after_us`, `retry_after_us`, `retry_after_s` and `rule` repeat the
/// *binding* decision: the denying rule with the longest wait, or when admitted the enforcing
/// rule with the fewest units remaining; they are absent when no rule decided (a store that
/// failed open: then `degraded` is `true` and `decisions` is empty).
#[derive(ToSchema)]
pub(crate) struct CheckAnswer<'a> {
    /// Whether the request is admitted (all its items).
    allowed: bool,
    /// One decision per item, in the order of the request.
    decisions: Vec<DecisionEntry<'a>>,
    /// `true` when the store failed and the rules fail open: admitted without a decision.
    degraded: Option<bool>,
    /// Why `store_full` is set.
    detail: Option<String>,
    /// The binding rule's limit.
    limit: Option<u64>,
    /// Units the binding rule has left.
    remaining: Option<u64>,
    /// A granted reservation's token for `POST /v1/settle` (`"reserve": true`).
    reservation: Option<String>,
    /// Microseconds the token stays valid (`[server] reservation_ttl`).
    reservation_expires_in_us: Option<u64>,
    /// Microseconds until the binding rule's key is back to its full quota.
    reset_after_us: Option<u64>,
    /// Whole seconds until a retry may be admitted, rounded up (as in `Retry-After`).
    retry_after_s: Option<u64>,
    /// Microseconds until a retry of the same cost may be admitted; `null` when admitted.
    retry_after_us: Option<u64>,
    /// The binding rule's name.
    rule: Option<String>,
    /// The store is full (`[store] on_full`): `reject` or `admit_untracked`.
    store_full: Option<String>,
    /// A granted reservation's wait (`max_wait_ms`): microseconds until the caller may go on.
    wait_us: Option<u64>,
}

/// The answer of `/v1/settle` (`settle::answer`).
#[derive(ToSchema)]
pub(crate) struct SettleAnswer<'a> {
    /// Each reserved item's standing after the settle, in order.
    decisions: Vec<SettledEntry<'a>>,
    /// Always `true`.
    settled: bool,
}

/// `GET /v1/keys/{rule}/{key}` (`admin::inspect`): a key's standing.
#[derive(ToSchema)]
pub(crate) struct KeyStanding {
    /// Whether the store holds state for the key (`false`: never seen, only peeked or
    /// expired); `null` when the store cannot tell now.
    tracked: Option<bool>,
    /// The rule's name.
    rule: String,
    /// The key as given in the path.
    key: String,
    /// The key in the store (`key=<value>` for a client key).
    store_key: String,
    /// The rule's algorithm.
    algorithm: String,
    /// The rule's quota, e.g. `10/s`.
    quota: String,
    /// The rule's limit.
    limit: u64,
    /// Units left.
    remaining: u64,
    /// Microseconds until the key is back to its full quota.
    reset_after_us: u64,
}

/// `DELETE /v1/keys/{rule}/{key}` (`admin::reset`).
#[derive(ToSchema)]
pub(crate) struct KeyReset {
    /// The rule's name.
    rule: String,
    /// The key as given in the path.
    key: String,
    /// The key in the store.
    store_key: String,
    /// Whether the store held state for the key.
    existed: bool,
}

/// A rule in force, as `/readyz` lists it (`ops::readyz`).
#[derive(ToSchema)]
pub(crate) struct RuleInForce {
    /// The rule's name.
    name: String,
    /// The rule's algorithm.
    algorithm: String,
    /// The rule's quota, e.g. `10/s`.
    quota: String,
    /// A shadow rule decides and counts but never denies.
    shadow: bool,
}

/// The configuration in force (`ops::readyz`).
#[derive(ToSchema)]
pub(crate) struct ConfigInForce {
    /// The configuration file (`null` without one).
    file: Option<String>,
    /// How many configurations were loaded (1, then one more per reload).
    generation: u64,
    /// The rules.
    rules: Vec<RuleInForce>,
}

/// The store's state (`ops::StoreReadiness`).
#[derive(ToSchema)]
pub(crate) struct StoreState {
    /// `memory`, `redis`, ...
    kind: String,
    /// `up`, `degraded` or `down`.
    state: String,
    /// Why it is not up.
    reason: Option<String>,
    /// With `fallback = "local"`: the count each limit is divided by while Redis fails.
    instances: Option<u64>,
    /// On a Redis Cluster: each master's calls of the last 10 s.
    shards: Option<Vec<ShardState>>,
}

/// One master of a Redis Cluster as `/readyz` reports it (`readyz_shards`).
#[derive(ToSchema)]
pub(crate) struct ShardState {
    /// The master's address (`ip:port`), or `none` for slots no master serves.
    node: String,
    /// Its slot ranges (`0-5460, 16383`), as the client's slot map last named them.
    slots: String,
    /// Decision calls in the last 10 s.
    calls: u64,
    /// Of which failed.
    failed: u64,
    /// `up`, or `down` when at least 10 % of at least 20 calls failed, its last 3 calls
    /// failed, or its active probe failed.
    state: String,
    /// Why it is `down` (`its last 4 calls failed (not ready from 3 in a row)`); `null` while
    /// `up`.
    reason: Option<String>,
}

/// `GET /readyz` (`ops::readyz`).
#[derive(ToSchema)]
pub(crate) struct Readiness {
    /// `ready`, `degraded` (Redis fails, the local fallback decides) or `shutting_down`.
    status: String,
    /// The configuration in force.
    config: ConfigInForce,
    /// The store, with a Redis store.
    store: Option<StoreState>,
}

/// `GET /v1/ui/live` (`ui::live_data`): the rules in force with their per-second decisions
/// (`per_second`, `totals`), the store, the configuration's generation and the busiest denied
/// keys (secret parts hashed).
#[derive(ToSchema)]
pub(crate) struct Live {
    /// Seconds between samples (1).
    interval_s: u64,
    /// Seconds of samples kept.
    window_s: u64,
    /// Samples taken.
    samples: u64,
    /// Each rule as `/readyz` lists it, with `per_second` and `totals` per decision group.
    rules: Vec<serde_json::Value>,
    /// `[server] ui_denied_keys`: `{"capacity", "denials", "keys"}`, or `null` when off.
    denied_keys: Option<serde_json::Value>,
    /// The store (`kind`, `state`; `keys` and `max_keys` for the memory store).
    store: serde_json::Value,
    /// The configuration's generation.
    generation: u64,
}

/// A choice of the simulator: its name and what it does.
#[derive(ToSchema)]
pub(crate) struct Choice {
    /// The name to send.
    name: String,
    /// What it does (empty for algorithms).
    description: String,
}

/// `GET /ui/choices.json` (`ui::choices`): what `/v1/simulate` accepts.
#[derive(ToSchema)]
pub(crate) struct Choices {
    /// Algorithms.
    algorithm: Vec<Choice>,
    /// Scenarios.
    scenario: Vec<Choice>,
    /// Counters of several instances.
    counter: Vec<Choice>,
    /// Balances of traffic across instances.
    balance: Vec<Choice>,
}
