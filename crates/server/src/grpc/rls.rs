//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: Envoy's rate limit requests
//! translated onto the one decision path ([`floodgate_tower::RateLimiter`]).
//!
//! A request names a `domain` and sends descriptors; each descriptor selects at most one rule
//! (see [`crate::config::descriptors`] for the look-up, the same as envoyproxy/ratelimit's).
//! Then:
//! - **cost**: a descriptor's `hits_addend` (a wrapper: 0 is a report-only check, cost 0),
//!   else the request's `hits_addend` (a plain `uint32`: 0 means unset, i.e. 1). A cost above
//!   the rule's capacity is an `INVALID_ARGUMENT` error, never `OK`;
//! - **limit override** (`descriptor.limit`): one a rule lists (`overrides` in YAML,
//!   `limit_overrides` in TOML) is decided by the override's own rule
//!   (`<rule>@<limit>/<period>`); any other on a descriptor selecting a rule is decided by a
//!   policy of its own (`[envoy] request_limit_overrides`, default true, as
//!   envoyproxy/ratelimit), its counters keyed by the override; with that setting off it is
//!   `INVALID_ARGUMENT`;
//! - **replaces**: a limit whose name another matched limit replaces is not applied (status
//!   `OK` without a limit), as in envoyproxy/ratelimit;
//! - **all or nothing**: the descriptors' rules are decided as one batch, so a request denied
//!   by one descriptor consumes nothing under the others (envoyproxy/ratelimit increments each
//!   independently);
//! - **answer**: `overall_code`, one `statuses[i]` per descriptor (`code`, `current_limit`
//!   with the YAML's name or none, `limit_remaining`, `duration_until_reset` in whole seconds,
//!   see [`super::reset`]), and
//!   `response_headers_to_add` with `RateLimit-Policy` / `RateLimit` (and `Retry-After` when
//!   over the limit), written by the same function as the HTTP front ends' headers;
//! - **quota mode** (a descriptor's `quota_mode`, or `[envoy] quota_mode` for every descriptor,
//!   `QUOTA_MODE`): an over-limit quota-mode descriptor makes the answer `OVER_LIMIT` only when
//!   every quota-mode descriptor is over (its own status still says `OVER_LIMIT`); the engine
//!   decides it ([`floodgate_limiter::ItemOptions::quota_mode`]);
//! - **global shadow mode** (`[envoy] shadow_mode`, `SHADOW_MODE`): the engine answers a denial
//!   as an admission ([`floodgate_limiter::Plan::shadow_all`]), so the overall code is `OK`;
//! - **store failure**: each rule's failure mode: `open` answers `OK`, `closed` answers gRPC
//!   `UNAVAILABLE`, so that Envoy's `failure_mode_deny` decides; the limiter counts both.
//!
//! A descriptor with `unlimited: true` is `OK` with `limit_remaining` 4294967295; one with
//! `requests_per_unit: 0` (a block list entry) is `OVER_LIMIT`, counted as
//! `floodgate_decisions_total{outcome="denied"}` under its name, and the request's other
//! descriptors are then only looked at (nothing is charged). An unknown domain or a descriptor
//! that selects nothing is `OK` without a limit (and `floodgate_grpc_unknown_domain_total`
//! counts unknown domains).

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_service_server, RateLimitRequest, RateLimitResponse,
};
use floodgate_core::{Micros, Policy, Quota};
use floodgate_limiter::ItemOptions;
use floodgate_tower::{Action, Mode, Plan, RuleOutcome, RuleSet, Traffic, Verdict};
use tonic::{Request, Response, Status};

use super::descriptor;
use crate::config::descriptors::{Leaf, Lookup};
use crate::config::{envoy::unit_period, Config, MAX_COST};
use crate::state::AppState;

/// The method label of the metrics.
pub(crate) const METHOD: &str = "ShouldRateLimit";

/// The HTTP/2 path of `ShouldRateLimit`.
pub(crate) const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Most descriptors in one request.
pub(crate) const MAX_RLS_DESCRIPTORS: usize = 64;

/// Most entries in one descriptor.
pub(crate) const MAX_ENTRIES: usize = 32;

/// Envoy's rate limit service over the server's limiter.
#[derive(Debug, Clone)]
pub(crate) struct RateLimitService {
    state: Arc<AppState>,
}

impl RateLimitService {
    /// The service deciding with `state`'s limiter and configuration.
    pub(crate) fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl rate_limit_service_server::RateLimitService for RateLimitService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // Latency needs a monotonic clock, not the limiter's (possibly manual) time source.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let result = should_rate_limit(&self.state, &request.into_inner()).await;
        let code = match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => "over_limit",
            Ok(_) => "ok",
            Err(status) => status_label(status.code()),
        };
        metrics::counter!("floodgate_grpc_requests_total", "method" => METHOD, "code" => code)
            .increment(1);
        metrics::histogram!("floodgate_grpc_request_duration_seconds", "method" => METHOD)
            .record(started.elapsed().as_secs_f64());
        result.map(Response::new)
    }
}

fn status_label(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::InvalidArgument => "invalid_argument",
        tonic::Code::Unavailable => "unavailable",
        tonic::Code::Internal => "internal",
        _ => "other",
    }
}

/// What one descriptor selected.
#[derive(Debug, Clone)]
enum Slot {
    /// Nothing (unknown domain, no match, or replaced): `OK` without a limit.
    Free,
    /// `unlimited: true`.
    Unlimited,
    /// A block list entry.
    Blocked { name: String, period: Micros },
    /// Item `item` of the plan, for rule `rule`; `field` names its cost in the request, `name`
    /// is its `current_limit.name` (the YAML's `name`, empty when none is given or for a limit
    /// override).
    Item {
        rule: usize,
        item: usize,
        field: CostField,
        name: String,
    },
}

/// Answers one request (see the [module docs](self)).
///
/// # Errors
/// `INVALID_ARGUMENT` naming the field at fault; `UNAVAILABLE` when the store failed and a
/// rule fails closed.
async fn should_rate_limit(
    state: &AppState,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    validate(request)?;
    // The configuration whose descriptor tree points at the rules, and those rules: one
    // generation, read once.
    let snapshot = state.snapshot();
    let (config, rules) = (&snapshot.config, &snapshot.rules);
    let (slots, mut plan) = plan(state, config, rules, request)?;
    if config.envoy.shadow_mode {
        // SHADOW_MODE: the engine decides and counts as ever, and answers a denial OK.
        plan.shadow_all();
    }
    // A plan with block list entries consumes nothing and is counted by the limiter.
    let verdict = state.limiter.evaluate(&plan, Mode::Check).await;
    let mut response = answer(
        rules,
        &slots,
        &verdict,
        plan.is_blocked(),
        config.envoy.ok_response_headers,
        state.clock.now(),
    )?;
    if let Some(names) = &config.envoy.limit_headers {
        super::limit_headers::add(&mut response, names);
    }
    if config.envoy.response_dynamic_metadata {
        let mut passed = serde_json::Map::new();
        for (slot, status) in slots.iter().zip(&response.statuses) {
            if let (Slot::Item { rule, .. }, true) = (slot, status.code == Code::Ok as i32) {
                let extras = config.rules[*rule].descriptor.as_ref().map(|d| &d.extras);
                if let Some(meta) = extras.and_then(|e| e.metadata.as_ref()) {
                    descriptor::merge_json(&mut passed, meta);
                }
            }
        }
        response.dynamic_metadata = Some(descriptor::dynamic_metadata(request, &passed));
    }
    Ok(response)
}

fn invalid(field: &str, detail: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {detail}"))
}

fn validate(request: &RateLimitRequest) -> Result<(), Status> {
    if request.domain.is_empty() {
        return Err(invalid("domain", "rate limit domain must not be empty"));
    }
    if request.descriptors.is_empty() || request.descriptors.len() > MAX_RLS_DESCRIPTORS {
        return Err(invalid(
            "descriptors",
            format!("must hold between 1 and {MAX_RLS_DESCRIPTORS} descriptors"),
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        // An empty descriptor selects nothing: OK without a limit, as envoyproxy/ratelimit.
        if d.entries.len() > MAX_ENTRIES {
            return Err(invalid(
                &format!("descriptors[{i}].entries"),
                format!("must hold at most {MAX_ENTRIES} entries"),
            ));
        }
        if d.is_negative_hits {
            return Err(invalid(
                &format!("descriptors[{i}].is_negative_hits"),
                "returning hits is not supported by Floodgate",
            ));
        }
    }
    Ok(())
}

/// Where a descriptor's cost was read from: named only in errors, so built only then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CostField {
    /// The request's `hits_addend`.
    Request,
    /// `descriptors[i].hits_addend`.
    Descriptor(usize),
}

impl std::fmt::Display for CostField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CostField::Request => f.write_str("hits_addend"),
            CostField::Descriptor(i) => write!(f, "descriptors[{i}].hits_addend"),
        }
    }
}

/// The cost of descriptor `d`: its own `hits_addend` when set (0 allowed: report only), else
/// the request's (0 = unset = 1); with the field it came from, for errors.
fn cost_of(request: &RateLimitRequest, i: usize, d: &RateLimitDescriptor) -> (u64, CostField) {
    match &d.hits_addend {
        Some(v) => (v.value, CostField::Descriptor(i)),
        None => (u64::from(request.hits_addend.max(1)), CostField::Request),
    }
}

/// What one descriptor selected, before `replaces` is applied.
struct Selected {
    leaf: Leaf,
    cost: u64,
    field: CostField,
    /// A request's own limit override that no rule lists: the item's own policy.
    policy: Option<Policy>,
}

/// The rule and the override policy of descriptor `i` with limit override `o` that selected
/// `found` (see the [module docs](self)).
fn with_override(
    config: &Config,
    i: usize,
    o: &RateLimitOverride,
    found: Option<Leaf>,
) -> Result<Option<(Leaf, Option<Policy>)>, Status> {
    let field = format!("descriptors[{i}].limit");
    let base = match found {
        Some(Leaf::Rule(base)) => base,
        // Unlimited, blocked and unmatched descriptors keep what the configuration says.
        other if config.envoy.request_limit_overrides => return Ok(other.map(|l| (l, None))),
        _ => {
            return Err(invalid(
                &field,
                "a limit override applies only to a descriptor that selects a rule allowing \
                 it, and this one selects none",
            ))
        }
    };
    let unit = Unit::try_from(o.unit).unwrap_or(Unit::Unknown);
    let period = unit_period(unit.as_str_name());
    let requests = u64::from(o.requests_per_unit);
    if let Some(rule) = period.and_then(|p| config.descriptors.override_rule(base, requests, p)) {
        return Ok(Some((Leaf::Rule(rule), None)));
    }
    if !config.envoy.request_limit_overrides {
        return Err(invalid(
            &field,
            format!(
                "rule {:?} does not allow the limit override {} per {}; allowed: {}",
                config.rules[base].name,
                o.requests_per_unit,
                unit.as_str_name().to_ascii_lowercase(),
                allowed_overrides(config, base)
            ),
        ));
    }
    let Some(period) = period else {
        return Err(invalid(
            &field,
            "the override's unit must be second, minute, hour, day, month or year",
        ));
    };
    let kind = config.rules[base].policy.kind();
    let policy = Quota::new(requests, period)
        .and_then(|q| Policy::new(kind, q))
        .map_err(|e| invalid(&format!("{field}.requests_per_unit"), e))?;
    Ok(Some((Leaf::Rule(base), Some(policy))))
}

/// What each descriptor of `request` selects (`None`: nothing), with its cost.
fn select(config: &Config, request: &RateLimitRequest) -> Result<Vec<Option<Selected>>, Status> {
    let index = &config.descriptors;
    let mut selected = Vec::with_capacity(request.descriptors.len());
    let mut unknown_domain = false;
    for (i, d) in request.descriptors.iter().enumerate() {
        let entries = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
        let found = match index.lookup(&request.domain, entries) {
            Lookup::UnknownDomain => {
                unknown_domain = true;
                None
            }
            Lookup::NoMatch => None,
            Lookup::Found(leaf) => Some(leaf.clone()),
        };
        let found = match &d.limit {
            None => found.map(|l| (l, None)),
            Some(o) => with_override(config, i, o, found)?,
        };
        let (cost, field) = cost_of(request, i, d);
        if cost > MAX_COST {
            return Err(invalid(
                &field.to_string(),
                format!("must be at most {MAX_COST}, got {cost}"),
            ));
        }
        selected.push(found.map(|(leaf, policy)| Selected {
            leaf,
            cost,
            field,
            policy,
        }));
    }
    if unknown_domain {
        metrics::counter!("floodgate_grpc_unknown_domain_total").increment(1);
    }
    Ok(selected)
}

/// The plan of a request: one slot per descriptor, and the plan of its items and block list
/// entries ([`Plan::block`]: then the limiter only peeks the items).
fn plan(
    state: &AppState,
    config: &Config,
    rules: &Arc<RuleSet>,
    request: &RateLimitRequest,
) -> Result<(Vec<Slot>, Plan), Status> {
    let selected = select(config, request)?;
    // Limits replaced by another matched limit are not applied.
    let mut replaced: Vec<String> = Vec::new();
    for s in selected.iter().flatten() {
        match &s.leaf {
            Leaf::Rule(r) => {
                if let Some(d) = &config.rules[*r].descriptor {
                    replaced.extend(d.replaces.iter().cloned());
                }
            }
            Leaf::Unlimited { replaces } | Leaf::Blocked { replaces, .. } => {
                replaced.extend(replaces.iter().cloned());
            }
        }
    }
    let is_replaced = |name: Option<&String>| name.is_some_and(|n| replaced.contains(n));
    let mut plan = Plan::new(Arc::clone(rules));
    let mut slots = Vec::with_capacity(selected.len());
    for (d, s) in request.descriptors.iter().zip(selected) {
        // QUOTA_MODE counts a descriptor without a limit as a quota descriptor not over it.
        let free = |plan: &mut Plan| {
            if config.envoy.quota_mode {
                plan.pass_quota();
            }
            Slot::Free
        };
        let slot = match s {
            None => free(&mut plan),
            Some(Selected {
                leaf: Leaf::Unlimited { .. },
                ..
            }) => Slot::Unlimited,
            Some(Selected {
                leaf:
                    Leaf::Blocked {
                        name,
                        period,
                        limit_name,
                        quota_mode,
                        ..
                    },
                ..
            }) => {
                if is_replaced(limit_name.as_ref()) {
                    free(&mut plan)
                } else {
                    if quota_mode || config.envoy.quota_mode {
                        plan.block_in_quota_mode(Arc::from(name.as_str()));
                    } else {
                        plan.block(Arc::from(name.as_str()));
                    }
                    Slot::Blocked { name, period }
                }
            }
            Some(Selected {
                leaf: Leaf::Rule(r),
                cost,
                field,
                policy,
            }) => {
                let rule = &config.rules[r];
                let descriptor = rule.descriptor.as_ref();
                let limit_name = descriptor.and_then(|d| d.limit_name.as_ref());
                // The engine says whether the rule answers gRPC (its `applies_to`).
                if is_replaced(limit_name) || !rules.applies(r, Traffic::Grpc) {
                    free(&mut plan)
                } else {
                    let overridden = policy.is_some() || rule.override_of.is_some();
                    let label = descriptor
                        .filter(|x| x.extras.labels_values() && !overridden)
                        .map(|x| {
                            state.descriptor_labels.label(
                                &rules.rules[r].name,
                                descriptor::stats_key(&request.domain, d, x),
                                config.envoy.metric_values_per_rule,
                            )
                        });
                    // A cost above the capacity is refused (and counted) by the limiter.
                    let item = plan.len();
                    let key = descriptor::counter_key(&request.domain, d, descriptor);
                    let quota_mode =
                        config.envoy.quota_mode || descriptor.is_some_and(|x| x.extras.quota_mode);
                    let options = ItemOptions {
                        policy,
                        label,
                        quota_mode,
                    };
                    plan.push_item(r, key, cost, options);
                    let name = match (overridden, limit_name) {
                        (false, Some(n)) => n.clone(),
                        _ => String::new(),
                    };
                    Slot::Item {
                        rule: r,
                        item,
                        field,
                        name,
                    }
                }
            }
        };
        slots.push(slot);
    }
    Ok((slots, plan))
}

fn allowed_overrides(config: &Config, base: usize) -> String {
    let list: Vec<String> = config.rules[base]
        .descriptor
        .iter()
        .flat_map(|d| d.overrides.iter().map(Quota::to_string))
        .collect();
    if list.is_empty() {
        "none (allow them with overrides in the YAML's rate_limit, or limit_overrides in TOML)"
            .into()
    } else {
        list.join(", ")
    }
}

/// The Envoy unit of a period, or `UNKNOWN` when it is not one unit.
fn unit_of(period: Micros) -> Unit {
    match period / 1_000_000 {
        _ if !period.is_multiple_of(1_000_000) => Unit::Unknown,
        1 => Unit::Second,
        60 => Unit::Minute,
        3_600 => Unit::Hour,
        86_400 => Unit::Day,
        604_800 => Unit::Week,
        2_592_000 => Unit::Month,
        31_536_000 => Unit::Year,
        _ => Unit::Unknown,
    }
}

fn saturating_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn current_limit(name: &str, quota: &Quota) -> RateLimit {
    RateLimit {
        name: name.to_string(),
        requests_per_unit: saturating_u32(quota.limit()),
        unit: unit_of(quota.period()) as i32,
    }
}

fn answer(
    rules: &RuleSet,
    slots: &[Slot],
    verdict: &Verdict,
    blocked: bool,
    ok_headers: bool,
    now: floodgate_core::Timestamp,
) -> Result<RateLimitResponse, Status> {
    match &verdict.action {
        Action::Admit | Action::Deny => {}
        Action::Unavailable => {
            return Err(Status::unavailable(
                "the rate limit store cannot be reached and a matching rule fails closed",
            ))
        }
        Action::CostExceedsCapacity {
            rule,
            cost,
            capacity,
            item: Some(check),
        } => {
            let (i, field) = slots
                .iter()
                .enumerate()
                .find_map(|(i, s)| match s {
                    Slot::Item { item, field, .. } if item == check => Some((i, field.to_string())),
                    _ => None,
                })
                .unwrap_or((0, "descriptors".to_string()));
            return Err(invalid(
                &field,
                format!(
                    "descriptors[{i}] costs {cost}, above the capacity of rule {rule:?} \
                     ({capacity} units at once): it could never be admitted"
                ),
            ));
        }
        Action::CostExceedsCapacity {
            rule,
            cost,
            capacity,
            item: None,
        } => {
            return Err(invalid(
                "descriptors",
                format!(
                    "the descriptors for rule {rule:?} cost {cost} together, above its capacity \
                     ({capacity} units at once): they could never be admitted"
                ),
            ))
        }
        Action::InvalidCost { rule, .. } => {
            return Err(Status::internal(format!(
                "rule {rule:?} reads its cost from a header, which a rate limit request has not"
            )))
        }
        // Refusals of request-derived plans (a descriptor plan has none); answered whole.
        other => return Err(Status::internal(format!("refused: {other:?}"))),
    }
    let outcome_of = |item: usize| verdict.outcomes.iter().find(|o| o.item == item);
    // A matched block list entry makes the engine's verdict a denial (and the engine counts it).
    let over = verdict.action == Action::Deny;
    let statuses = slots
        .iter()
        .map(|slot| match slot {
            Slot::Free => DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            },
            Slot::Unlimited => DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..DescriptorStatus::default()
            },
            Slot::Blocked { name, period } => DescriptorStatus {
                code: Code::OverLimit as i32,
                current_limit: Some(RateLimit {
                    name: name.clone(),
                    requests_per_unit: 0,
                    unit: unit_of(*period) as i32,
                }),
                ..DescriptorStatus::default()
            },
            Slot::Item {
                rule, item, name, ..
            } => match outcome_of(*item) {
                Some(o) => status(o, name, rules.rules[*rule].policy.kind(), now),
                // The store failed and the rule fails open: no decision was computed.
                None => DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: Some(current_limit(name, rules.rules[*rule].policy.quota())),
                    ..DescriptorStatus::default()
                },
            },
        })
        .collect();
    let mut response_headers_to_add = Vec::new();
    // An OK answer carries headers only with `[envoy] ok_response_headers` (envoyproxy/ratelimit
    // sends none unless LIMIT_RESPONSE_HEADERS_ENABLED): building them is most of the answer's
    // allocations, and Envoy copies them into every admitted response.
    if !blocked && (over || ok_headers) {
        // Exactly the headers the HTTP front ends write, by the same function.
        let mut headers = http::HeaderMap::new();
        floodgate_tower::response::apply_headers_of(&mut headers, verdict.outcomes.iter());
        for (name, value) in &headers {
            response_headers_to_add.push(HeaderValue {
                key: name.as_str().to_string(),
                value: value.to_str().unwrap_or_default().to_string(),
                ..HeaderValue::default()
            });
        }
    }
    Ok(RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    })
}

/// The status of a decided descriptor; `name` is its `current_limit.name`.
fn status(
    o: &RuleOutcome,
    name: &str,
    algorithm: floodgate_core::AlgorithmKind,
    now: floodgate_core::Timestamp,
) -> DescriptorStatus {
    let d = &o.decision;
    DescriptorStatus {
        // A shadow rule never enforces: OK whatever it decided (counted as shadow_denied).
        code: if d.allowed || o.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        current_limit: Some(current_limit(name, &o.quota)),
        limit_remaining: saturating_u32(d.remaining),
        duration_until_reset: Some(super::reset::duration_until_reset(
            algorithm,
            o.quota.period(),
            d.reset_after,
            now,
        )),
        ..DescriptorStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_of_periods() {
        assert_eq!(unit_of(1_000_000), Unit::Second);
        assert_eq!(unit_of(60_000_000), Unit::Minute);
        assert_eq!(unit_of(86_400_000_000), Unit::Day);
        assert_eq!(unit_of(10_000_000), Unit::Unknown);
        assert_eq!(unit_of(1_500_000), Unit::Unknown);
    }
}
