//! [`RateLimiter`]: the one place a rate-limit decision is made, counted and logged (its docs
//! give the steps).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate_core::{Decision, Micros, Policy, Quota, Timestamp};
use floodgate_store::{CheckItem, OnFull, SettleItem, Store, StoreError};
use http::{HeaderMap, HeaderValue, Request};

use crate::delay::{count_delayed, DelayTimer, Delays, Slot, DEFAULT_MAX_DELAYED};
use crate::key::KeyContext;
use crate::metrics::Outcome;
use crate::rule::{CostError, FailureMode, RuleSet};

/// Evaluates requests against a hot-swappable [`RuleSet`] using store `S`. Cheap to clone
/// (two `Arc`s); clones share rules and store.
///
/// [`RateLimiter`]: the one place a rate-limit decision is made, counted and logged.
///
/// Every front end only translates its wire format into a [`Plan`] and the [`Verdict`] back:
/// the tower `RateLimit` service (`floodgate-tower`), and in the `floodgate` service the
/// decision API (`/v1/check`, `/v1/peek`: [`Plan::new`] + [`Plan::push`] with explicit items),
/// forward-auth, the reverse proxy and the gRPC rate limit service.
///
/// Evaluation, per request:
/// 1. Take the current rule set (one atomic load; a reload swaps it without touching state).
/// 2. Plan ([`RateLimiter::plan`]): for every rule whose [`Matcher`](crate::Matcher) matches,
///    compute its key (skip the rule when the key source is absent) and cost; or take the
///    caller's explicit (rule, key, cost) items.
/// 3. Check all enforcing items as **one all-or-nothing batch**: a denial by one rule consumes
///    nothing in the others.
/// 4. Shadow items are then checked one by one (charged only when the request is admitted,
///    peeked otherwise); their denials are counted, never enforced.
///
/// A [`Mode::Reserve`] evaluation makes step 3 one [`Store::reserve`] batch (it may wait up
/// to its `max_wait` for a slot; [`Verdict::wait`], [`RuleOutcome::scheduled_at`]) and is
/// otherwise a check, counted the same way.
///
/// A [`Mode::Peek`] evaluation consumes nothing anywhere and counts no decision (a peek
/// decides nothing); store failures are still counted in `floodgate_store_errors_total` and
/// logged.
///
/// Store errors follow the rules' [`FailureMode`]: if any enforcing rule in
/// the failed batch fails closed the request gets a 503, otherwise it is admitted. Each rule's
/// outcome is counted by its own mode (`error_open` / `error_closed`), whatever the request's
/// fate. A denial because the store is full of live keys ([`OnFull::Reject`]) is counted as
/// `store_full`, not `denied`.
///
/// Metrics (via the `metrics` facade, never with per-key labels):
/// - `floodgate_decisions_total{rule, outcome}`, one per rule per evaluated request, with the
///   outcomes of [`Outcome`] (`allowed` only when the rule's units were charged; a rule that
///   would admit a request another rule refused counts `not_charged`);
/// - `floodgate_store_errors_total{kind}` (`unavailable`, `timeout`, `other`);
/// - `floodgate_decision_duration_seconds` (histogram of the store batch round trip).
#[derive(Debug)]
pub struct RateLimiter<S> {
    store: Arc<S>,
    rules: Arc<ArcSwap<RuleSet>>,
    observer: Option<Arc<dyn DenialObserver>>,
    /// The delay mode's waiting requests: their bound, count and timer.
    delays: Arc<Delays>,
}

impl<S> Clone for RateLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            rules: Arc::clone(&self.rules),
            observer: self.observer.clone(),
            delays: Arc::clone(&self.delays),
        }
    }
}

/// Told of every key an enforcing rule denies (counted `denied`), e.g. to keep a bounded list
/// of the busiest denied keys. Called on the decision path, after the decision: it must be
/// quick and must not block. `key` is the store key (`ip=203.0.113.7`, `key=alice`), which can
/// be personal data: keep such a view opt-in.
pub trait DenialObserver: Send + Sync + std::fmt::Debug {
    /// `rule` denied `key`.
    fn denied(&self, rule: &str, key: &str);
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Pass it on (with the `RateLimit` headers of [`Verdict::outcomes`]).
    Admit,
    /// Answer 429 (`floodgate_tower::response::too_many_requests`).
    Deny,
    /// The store failed and a matching rule fails closed: answer 503
    /// (`floodgate_tower::response::service_unavailable`).
    Unavailable,
    /// The request's cost exceeds what `rule` can ever admit: answer 400
    /// (`floodgate_tower::response::cost_exceeds_capacity`); nothing was charged.
    CostExceedsCapacity {
        /// The rule.
        rule: String,
        /// The request's cost (`u64::MAX` for a cost header too large for a number).
        cost: u64,
        /// The rule's capacity.
        capacity: u64,
        /// The item that asked for it, when it was one alone ([`RuleOutcome::check`]'s
        /// numbering); `None` when several items of one rule and key together exceed it.
        check: Option<usize>,
    },
    /// `rule` counts by client IP but the request has no peer address (the app is served
    /// without one): answer 500 (`floodgate_tower::response::no_client_address`); nothing was charged. A setup
    /// error, logged and counted (`no_client_address`), never a silent pass.
    NoClientAddress {
        /// The rule.
        rule: Arc<str>,
    },
    /// The request carries `header`, which `rule` counts by, more than once: answer 400
    /// (`floodgate_tower::response::ambiguous_key`); nothing was charged.
    AmbiguousKey {
        /// The rule.
        rule: Arc<str>,
        /// The header.
        header: http::HeaderName,
    },
    /// `rule`'s cost header holds something that is not a positive whole number: answer 400
    /// (`floodgate_tower::response::invalid_cost`); nothing was charged.
    InvalidCost {
        /// The rule.
        rule: Arc<str>,
        /// The header.
        header: http::HeaderName,
    },
}

/// One rule's decision for one request, as reported to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOutcome {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The rule's quota (for `q`, `w` and the problem detail).
    pub quota: Quota,
    /// The rule's decision.
    pub decision: Decision,
    /// A shadow rule: never shown in headers, never denies.
    pub shadow: bool,
    /// This rule's `RateLimit-Policy` list member (`"per-ip";q=10;w=10`), as [`policy_item`](crate::policy_item)
    /// makes it from `rule` and `quota`, when the caller has it at hand (a [`RuleSet`] keeps
    /// one per rule: [`RuleSet::policy_item`]); `None` has `floodgate_tower::response::apply_headers` format it.
    ///
    /// [`RuleSet`]: crate::RuleSet
    /// [`RuleSet::policy_item`]: crate::RuleSet::policy_item
    pub policy_item: Option<HeaderValue>,
    /// The position of the decided item in its [`Plan`](crate::Plan) (for a request plan,
    /// among the rules that applied; for explicit items, the order they were pushed).
    pub check: usize,
    /// For an enforcing item of a granted [`Mode::Reserve`] evaluation: the time (microseconds
    /// since the Unix epoch) its units were reserved for, which a settle passes back
    /// ([`floodgate_store::SettleItem::scheduled_at`]). `None` otherwise.
    pub scheduled_at: Option<Timestamp>,
}

/// The result of evaluating one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What to do.
    pub action: Action,
    /// One outcome per item that was decided, in plan order ([`RuleOutcome::check`]). Empty
    /// when no rule applied or the store failed; a shadow item whose store call failed has
    /// none.
    pub outcomes: Vec<RuleOutcome>,
    /// The store error, when the store failed (already handled by `action`).
    pub store_error: Option<StoreError>,
    /// Set when a new key met a full store, and what the store did (see
    /// [`OnFull`]); a [`OnFull::Reject`] denial is answered by `floodgate_tower::response::store_full`.
    pub store_full: Option<OnFull>,
    /// For a [`Mode::Reserve`] evaluation the store granted: microseconds until the reserved
    /// units may be used (0 when at once, also when no enforcing item applied; at most the
    /// `max_wait` asked for). `None` for other modes, a denial, a refusal or a store failure.
    pub wait: Option<Micros>,
}

impl Verdict {
    /// Whether the request goes on to the inner service.
    pub fn is_admitted(&self) -> bool {
        self.action == Action::Admit
    }

    /// What a granted [`Mode::Reserve`] evaluation holds units for: `(item, scheduled_at)` per
    /// enforcing outcome with a scheduled time (`item` its position in the plan), in outcome
    /// order. Empty when nothing was reserved: not a reserve evaluation, not admitted, a store
    /// failure, or only shadow items (never reserved). The one rule [`Reservation::from_verdict`]
    /// and a decision API handing out reservation tokens both follow.
    pub fn reserved(&self) -> impl Iterator<Item = (usize, Timestamp)> + '_ {
        let granted = self.is_admitted() && self.wait.is_some();
        self.outcomes
            .iter()
            .filter(move |o| granted && !o.shadow)
            .filter_map(|o| Some((o.check, o.scheduled_at?)))
    }
}

/// The quota actually enforced by `decision`, when it differs from `policy`'s: a decision made
/// under a smaller capacity than the policy's (the local fallback of a shared store, deciding
/// with each limit divided by the instance count while the shared store fails) enforced the
/// quota scaled by that ratio (`limit` and `burst` times `decision.limit / capacity`, rounded
/// down, at least 1). `None` when the decision is the policy's own (the usual case), so that
/// `RateLimit-Policy` and the answer's `limit` always describe the same quota.
pub fn enforced_quota(policy: &Policy, decision: &Decision) -> Option<Quota> {
    let capacity = policy.capacity();
    let enforced = decision.limit;
    if enforced == capacity || enforced == 0 || capacity == 0 {
        return None;
    }
    let quota = policy.quota();
    let scale = |n: u64| {
        u64::try_from(u128::from(n) * u128::from(enforced) / u128::from(capacity))
            .unwrap_or(u64::MAX)
            .max(1)
    };
    Quota::with_burst(scale(quota.limit()), quota.period(), scale(quota.burst())).ok()
}

/// The largest `Retry-After` (whole seconds, at least 1) among denied non-shadow outcomes.
pub fn retry_after_secs(outcomes: &[RuleOutcome]) -> Option<u64> {
    outcomes
        .iter()
        .filter(|o| !o.shadow)
        .filter_map(|o| o.decision.retry_after_secs())
        .max()
}

/// The most restrictive denied non-shadow outcome: the one with the longest wait (the first
/// such rule on ties).
pub fn most_restrictive(outcomes: &[RuleOutcome]) -> Option<&RuleOutcome> {
    most_restrictive_of(outcomes)
}

/// [`most_restrictive`] for outcomes that are not in one slice.
pub fn most_restrictive_of<'a>(
    outcomes: impl IntoIterator<Item = &'a RuleOutcome>,
) -> Option<&'a RuleOutcome> {
    outcomes
        .into_iter()
        .filter(|o| !o.shadow && !o.decision.allowed)
        .fold(None, |best: Option<&RuleOutcome>, o| match best {
            Some(b) if b.decision.retry_after >= o.decision.retry_after => Some(b),
            _ => Some(o),
        })
}

/// Whether an evaluation consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Check and, when admitted, consume; count every rule's outcome.
    #[default]
    Check,
    /// Report what a check would answer without consuming anything, and count no decision.
    Peek,
    /// A check that may wait: the enforcing items are reserved as one all-or-nothing batch
    /// ([`Store::reserve`]) for the shortest wait within `max_wait` microseconds after which
    /// they all fit (units consumed now for the scheduled time), else denied consuming nothing;
    /// counted exactly as [`Mode::Check`]. The wait is [`Verdict::wait`], each enforcing
    /// item's scheduled time [`RuleOutcome::scheduled_at`]. Shadow items are checked as in
    /// [`Mode::Check`]. `max_wait: 0` decides as a check does.
    Reserve {
        /// The longest wait accepted, in microseconds (clamped by the store to each policy's
        /// [`floodgate_core::Policy::max_wait`]).
        max_wait: Micros,
    },
}

/// A granted reservation, owned: what [`RateLimiter::settle`] needs to give units back or
/// charge more once the actual cost is known. Made from the plan and the verdict of a granted
/// [`Mode::Reserve`] evaluation ([`Reservation::from_verdict`]), or from its parts
/// ([`Reservation::new`], e.g. decoded from a signed token). Owns everything (no borrow of the
/// request or the rule set), so it can be moved into a spawned task or kept in a `Drop` guard:
///
/// ```
/// # use floodgate_limiter::*;
/// # use floodgate_store::MemoryStore;
/// # async fn example(limiter: RateLimiter<MemoryStore>, plan: Plan) {
/// let verdict = limiter.evaluate(&plan, Mode::Reserve { max_wait: 500_000 }).await;
/// if let Some(reservation) = Reservation::from_verdict(&plan, &verdict) {
///     // ... the request was given up before its slot: give every unit back.
///     let limiter = limiter.clone();
///     tokio::spawn(async move {
///         let _ = limiter.settle(&reservation, &reservation.nothing_used()).await;
///     });
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    items: Vec<ReservedItem>,
    claim: Option<Claim>,
}

/// One enforcing item of a [`Reservation`]: `cost` units reserved on `key` of rule `rule`
/// (under `policy`, as it was when reserved) for `scheduled_at`.
#[derive(Debug, Clone)]
pub struct ReservedItem {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The rule's algorithm and quota when the units were reserved: the state they were taken
    /// from (a rule given another quota by a reload keeps its old state apart).
    pub policy: Policy,
    /// The store key (as given to [`Plan::push`]).
    pub key: String,
    /// Units reserved.
    pub cost: u64,
    /// The time (microseconds since the Unix epoch) the units were reserved for
    /// ([`RuleOutcome::scheduled_at`]).
    pub scheduled_at: Timestamp,
}

/// Equal when rule, key, cost, time and the policy's algorithm and quota are (the identity of
/// the state, as the stores see it).
impl PartialEq for ReservedItem {
    fn eq(&self, other: &Self) -> bool {
        self.rule == other.rule
            && self.key == other.key
            && self.cost == other.cost
            && self.scheduled_at == other.scheduled_at
            && same_policy(&self.policy, &other.policy)
    }
}

impl Eq for ReservedItem {}

/// Whether two policies keep the same state: same algorithm, limit, period and burst.
fn same_policy(a: &Policy, b: &Policy) -> bool {
    a.kind() == b.kind() && a.quota() == b.quota()
}

/// Makes a [`Reservation`] settle at most once, across every process sharing the store:
/// [`RateLimiter::settle`] first claims `id` for `ttl` microseconds ([`Store::claim`]) and
/// settles only if the claim is new. For reservations handed out as tokens (a client could
/// present one twice); a reservation kept in-process needs none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// A unique id of the reservation (random, e.g. 128 bits).
    pub id: String,
    /// How long the claim must stand, in microseconds: at least until the reservation could no
    /// longer be presented (its expiry).
    pub ttl: Micros,
}

impl Reservation {
    /// The reservation of a granted [`Mode::Reserve`] evaluation: one item per
    /// [`Verdict::reserved`] entry, with its rule, policy, key and cost taken from `plan` (the
    /// plan that was evaluated). `None` when nothing was reserved.
    pub fn from_verdict(plan: &Plan, verdict: &Verdict) -> Option<Self> {
        let checks = plan.checks.as_slice();
        let rules = &plan.rules.rules;
        let items: Vec<ReservedItem> = verdict
            .reserved()
            .filter_map(|(check, scheduled_at)| {
                let c = checks.get(check)?;
                let rule = rules.get(c.rule)?;
                Some(ReservedItem {
                    rule: Arc::clone(&rule.name),
                    policy: rule.policy.clone(),
                    key: c.key.clone(),
                    cost: c.cost,
                    scheduled_at,
                })
            })
            .collect();
        (!items.is_empty()).then_some(Self { items, claim: None })
    }

    /// A reservation of `items` (in the order they were reserved).
    pub fn new(items: Vec<ReservedItem>) -> Self {
        Self { items, claim: None }
    }

    /// This reservation, settled at most once ([`Claim`]).
    pub fn with_claim(mut self, claim: Claim) -> Self {
        self.claim = Some(claim);
        self
    }

    /// The reserved items, in order.
    pub fn items(&self) -> &[ReservedItem] {
        &self.items
    }

    /// The claim, if any.
    pub fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
    }

    /// Number of reserved items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is reserved.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Actual costs of 0 for every item: settling with them gives every reserved unit back
    /// (a request given up before it ran).
    pub fn nothing_used(&self) -> Vec<u64> {
        vec![0; self.items.len()]
    }
}

/// One item of a settled [`Reservation`], in order: the key's standing afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledItem {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The quota the item was settled under (the reservation's).
    pub quota: Quota,
    /// Units reserved.
    pub reserved: u64,
    /// Units actually used (as given to [`RateLimiter::settle`]).
    pub actual: u64,
    /// The key's standing after the settle: a cost-0 peek (`allowed`, `remaining`,
    /// `reset_after`) under the reservation's policy.
    pub decision: Decision,
    /// `false` when the rule set in force no longer has this rule with the reservation's
    /// algorithm and quota (a reload removed or changed it): the units were still given back
    /// to (or charged on) the state they were reserved from, which no longer limits anyone.
    pub current: bool,
}

/// Why [`RateLimiter::settle`] settled nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    /// The number of actual costs is not the number of reserved items.
    #[error("{got} actual costs for a reservation of {expected} items")]
    CostCount {
        /// Items reserved.
        expected: usize,
        /// Costs given.
        got: usize,
    },
    /// The reservation's [`Claim`] was made before: it was settled already (or is being
    /// settled by another request).
    #[error("the reservation was settled already")]
    AlreadySettled,
    /// The store failed (nothing is known to have been settled; with a [`Claim`], the claim
    /// may stand, so the reservation is spent as if never settled).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The per-request work decided before talking to the store: which rules apply, with which key
/// and cost. Owns everything it needs, so the store call borrows nothing from the request.
///
/// Made by [`RateLimiter::plan`] from a request, or by [`Plan::new`] and [`Plan::push`] from
/// explicit items (a decision API naming rules and keys itself).
#[derive(Debug, Clone)]
pub struct Plan {
    rules: Arc<RuleSet>,
    checks: Checks,
    /// The first item whose cost is refused before the store is asked.
    refusal: Option<Refusal>,
    /// The longest the caller can wait for the answer ([`Plan::limit_delay`]).
    delay_limit: Option<Micros>,
}

/// Why a plan is refused before the store is asked (answered 400; nothing is charged).
#[derive(Debug, Clone)]
struct Refusal {
    /// The rule (a position in the rule set).
    rule: usize,
    /// The item, for explicit items.
    check: Option<usize>,
    /// What was wrong.
    error: CostRefusal,
}

#[derive(Debug, Clone)]
enum CostRefusal {
    /// The rule counts by client IP and the request has no peer address.
    NoClientAddress,
    /// The request carries a header the rule counts by more than once.
    AmbiguousKey(http::HeaderName),
    /// A cost header that is not a positive whole number.
    Invalid(http::HeaderName),
    /// A cost above the rule's capacity.
    ExceedsCapacity { cost: u64, capacity: u64 },
}

/// The planned checks: the usual request meets at most one rule, kept inline (no `Vec`).
#[derive(Debug, Clone, Default)]
enum Checks {
    #[default]
    None,
    One([PlannedCheck; 1]),
    Many(Vec<PlannedCheck>),
}

impl Checks {
    fn push(&mut self, check: PlannedCheck) {
        *self = match std::mem::take(self) {
            Checks::None => Checks::One([check]),
            Checks::One([first]) => Checks::Many(vec![first, check]),
            Checks::Many(mut many) => {
                many.push(check);
                Checks::Many(many)
            }
        };
    }

    fn as_slice(&self) -> &[PlannedCheck] {
        match self {
            Checks::None => &[],
            Checks::One(one) => one,
            Checks::Many(many) => many,
        }
    }
}

#[derive(Debug, Clone)]
struct PlannedCheck {
    rule: usize,
    key: String,
    cost: u64,
}

impl Plan {
    /// An empty plan over `rules` (take them from [`RateLimiter::rules`], so that the items'
    /// rule positions and the evaluation see the same generation of rules).
    pub fn new(rules: Arc<RuleSet>) -> Self {
        Self {
            rules,
            checks: Checks::None,
            refusal: None,
            delay_limit: None,
        }
    }

    /// Adds a check of `cost` units on `key` (the store key, used as it is: encode client
    /// input with [`crate::encode_key`]) for rule `rule`, a position in the plan's
    /// [`RuleSet::rules`]. Items are decided in the order they are pushed (enforcing items as
    /// one all-or-nothing batch); [`RuleOutcome::check`] is an item's position.
    ///
    /// A cost above the rule's capacity refuses the whole plan
    /// ([`Action::CostExceedsCapacity`] naming this item) before anything is charged.
    ///
    /// # Panics
    /// When `rule` is not a position in the plan's rules.
    pub fn push(&mut self, rule: usize, key: String, cost: u64) {
        assert!(rule < self.rules.rules.len(), "no rule at position {rule}");
        let capacity = self.rules.rules[rule].policy.capacity();
        if cost > capacity && self.refusal.is_none() {
            self.refusal = Some(Refusal {
                rule,
                check: Some(self.len()),
                error: CostRefusal::ExceedsCapacity { cost, capacity },
            });
        }
        self.checks.push(PlannedCheck { rule, key, cost });
    }

    /// The longest the plan's request may be held in the delay mode, in microseconds: the
    /// smallest [`Rule::delay`](crate::Rule::delay) of its enforcing items (each clamped to
    /// its policy's horizon, [`floodgate_core::Policy::max_wait`]); 0 (decide as a check)
    /// when an enforcing item's rule has no delay, when there is no enforcing item, or when
    /// the plan is refused before the store is asked; at most [`Plan::limit_delay`]'s bound.
    /// Shadow items never hold a request.
    pub fn delay(&self) -> Micros {
        if self.refusal.is_some() {
            return 0;
        }
        let rules = &self.rules.rules;
        self.checks
            .as_slice()
            .iter()
            .map(|c| &rules[c.rule])
            .filter(|rule| !rule.shadow)
            .map(|rule| rule.delay.map_or(0, |d| d.min(rule.policy.max_wait())))
            .min()
            .unwrap_or(0)
            .min(self.delay_limit.unwrap_or(Micros::MAX))
    }

    /// Holds this request in the delay mode for at most `max` microseconds, whatever its rules'
    /// `delay`: the caller cannot wait longer (a proxy in front announced its timeout, as
    /// Envoy's `x-envoy-expected-rq-timeout-ms`). A request whose slot is further away is
    /// refused at once, with `Retry-After`, instead of being held past the caller's patience.
    /// Only ever shortens: the smallest of several limits holds. 0 decides as a check.
    pub fn limit_delay(&mut self, max: Micros) {
        self.delay_limit = Some(self.delay_limit.map_or(max, |d| d.min(max)));
    }

    /// The rules the plan was made with.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// Number of rules that will be checked.
    pub fn len(&self) -> usize {
        self.checks.as_slice().len()
    }

    /// Whether no rule applies.
    pub fn is_empty(&self) -> bool {
        self.checks.as_slice().is_empty()
    }
}

impl RateLimiter<floodgate_store::MemoryStore> {
    /// A limiter with `rules` over a [`MemoryStore`](floodgate_store::MemoryStore) of the
    /// default configuration on the system clock: counters in this process.
    pub fn in_memory(rules: RuleSet) -> Self {
        Self::new(Arc::new(floodgate_store::MemoryStore::default()), rules)
    }
}

impl<S: Store> RateLimiter<S> {
    /// A limiter over `store` with `rules`.
    pub fn new(store: Arc<S>, rules: RuleSet) -> Self {
        Self::with_shared_rules(store, Arc::new(ArcSwap::from_pointee(rules)))
    }

    /// A limiter whose rules are `rules`, shared with whoever else holds the `Arc` (e.g. the
    /// server's config reloader, which calls `rules.store(...)`).
    pub fn with_shared_rules(store: Arc<S>, rules: Arc<ArcSwap<RuleSet>>) -> Self {
        Self {
            store,
            rules,
            observer: None,
            delays: Arc::new(Delays::new(DEFAULT_MAX_DELAYED, DelayTimer::Tokio)),
        }
    }

    /// At most `max` requests of this limiter (and its clones made from now on) wait in the
    /// delay mode at once ([`Rule::delay`](crate::Rule::delay)); one more that would wait is
    /// refused as a check refuses it (default [`DEFAULT_MAX_DELAYED`]; 0: none waits).
    pub fn with_max_delayed(mut self, max: usize) -> Self {
        self.delays = Arc::new(Delays::new(max, self.delays.timer.clone()));
        self
    }

    /// Held requests of the delay mode wait until `clock` reads their scheduled time, looked
    /// at every 5 ms, instead of on tokio's timer (the default, right for a store on the
    /// system clock). For a store on a [`ManualClock`](floodgate_core::ManualClock): a held
    /// request then passes when the clock is advanced past its slot.
    pub fn with_delay_clock(mut self, clock: Arc<dyn floodgate_core::Clock>) -> Self {
        self.delays = Arc::new(Delays::new(self.delays.max, DelayTimer::Clock(clock)));
        self
    }

    /// How many requests are being held in the delay mode now.
    pub fn delayed_now(&self) -> usize {
        self.delays.holding()
    }

    /// The delay mode's state.
    pub(crate) fn delays(&self) -> &Arc<Delays> {
        &self.delays
    }

    /// This limiter (and its clones made from now on) tells `observer` of every denial.
    pub fn with_denial_observer(mut self, observer: Arc<dyn DenialObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The shared, swappable rule set.
    pub fn shared_rules(&self) -> &Arc<ArcSwap<RuleSet>> {
        &self.rules
    }

    /// The rule set in force now (one atomic load and a reference count).
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Replaces the rule set for every clone; requests already being evaluated finish with the
    /// old one. Store state is untouched: a rule keeps its counters across a reload as long as
    /// its name is unchanged.
    pub fn replace_rules(&self, rules: RuleSet) {
        self.rules.store(Arc::new(rules));
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// Decides which rules apply to a request and with which keys and costs. `extensions` are
    /// read for the peer address (see [`ClientIpConfig`](crate::ClientIpConfig)).
    pub fn plan(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Plan {
        let rules = self.rules.load_full();
        let mut checks = Checks::None;
        let mut refusal = None;
        let mut client_addr = None;
        let mut client_ip = None;
        let mut client_ip_resolved = false;
        for (index, rule) in rules.rules.iter().enumerate() {
            if rule.explicit_only || !rule.matcher.matches(method, uri, headers) {
                continue;
            }
            if let Some(header) = rule.key.repeated_header(headers) {
                refusal.get_or_insert(Refusal {
                    rule: index,
                    check: None,
                    error: CostRefusal::AmbiguousKey(header.clone()),
                });
                continue;
            }
            if rule.key.uses_client_ip() {
                if !client_ip_resolved {
                    client_ip_resolved = true;
                    client_addr = crate::ip::peer_addr(extensions)
                        .map(|peer| rules.client_ip.client_ip(peer.ip(), headers));
                    client_ip = client_addr.map(|addr| rules.client_ip.group(addr));
                }
                if client_addr.is_none() {
                    // Without a peer address a client-IP rule would skip every request: the
                    // app is served without one, which must be loud, not "nothing limited".
                    refusal.get_or_insert(Refusal {
                        rule: index,
                        check: None,
                        error: CostRefusal::NoClientAddress,
                    });
                    continue;
                }
            }
            let cx = KeyContext {
                method,
                uri,
                headers,
                client_ip,
                client_addr,
            };
            match rule.key.key(&cx) {
                Some(key) => match rule.cost.cost(method, uri, headers) {
                    Ok(cost) => checks.push(PlannedCheck {
                        rule: index,
                        key,
                        cost,
                    }),
                    Err(error) => {
                        refusal.get_or_insert(Refusal {
                            rule: index,
                            check: None,
                            error: match error {
                                CostError::Invalid { header } => CostRefusal::Invalid(header),
                                CostError::ExceedsCapacity { cost, capacity, .. } => {
                                    CostRefusal::ExceedsCapacity { cost, capacity }
                                }
                            },
                        });
                    }
                },
                None => rules.count(index, Outcome::Skipped),
            }
        }
        Plan {
            rules,
            checks,
            refusal,
            delay_limit: None,
        }
    }

    /// [`RateLimiter::plan`] for a request.
    pub fn plan_request<B>(&self, request: &Request<B>) -> Plan {
        self.plan(
            request.method(),
            request.uri(),
            request.headers(),
            request.extensions(),
        )
    }

    /// Plans `request` now and returns a future evaluating the plan; the future borrows nothing
    /// from the request.
    pub fn check_request<B>(
        &self,
        request: &Request<B>,
    ) -> impl Future<Output = Verdict> + Send + 'static {
        let plan = self.plan_request(request);
        // Only the store (and the observer, if any) are needed after planning.
        let store = Arc::clone(&self.store);
        let observer = self.observer.clone();
        async move { evaluate(&*store, observer.as_deref(), &plan, Mode::Check).await }
    }

    /// Runs a plan against the store (see [`RateLimiter`] for the steps).
    pub async fn evaluate(&self, plan: &Plan, mode: Mode) -> Verdict {
        evaluate(&*self.store, self.observer.as_deref(), plan, mode).await
    }

    /// Settles `reservation` with the units each item actually used (`actual[i]` for item `i`):
    /// below the reserved cost gives the difference back, above charges it (see
    /// `docs/spec/reservations.md`), each item on the state it was reserved from. The one place
    /// a settle is made, counted and logged, as [`RateLimiter::evaluate`] is for checks.
    /// Returns each key's standing afterwards, in order.
    ///
    /// With a [`Claim`] the reservation is first claimed in the store: a second settle of it
    /// (here or in any process sharing the store) is [`SettleError::AlreadySettled`] and
    /// changes nothing. The claim comes first, so a store failure after it leaves the
    /// reservation spent, never settled twice.
    ///
    /// Metrics:
    /// - `floodgate_settles_total{rule, outcome}`, one per item: `refunded` (actual below
    ///   reserved), `exact`, `charged` (above), `replayed` (the claim was made before),
    ///   `error` (the store failed);
    /// - `floodgate_settled_units_total{rule, direction}`: the difference each settle asked
    ///   for, `reserved - actual` (`refunded`) or `actual - reserved` (`charged`); the state
    ///   applies it within its bounds, so a key may gain or lose less;
    /// - store failures in `floodgate_store_errors_total{kind}`, as for checks.
    ///
    /// # Errors
    /// [`SettleError::CostCount`] when `actual.len()` is not the number of items (nothing
    /// counted); [`SettleError::AlreadySettled`]; [`SettleError::Store`] when the store
    /// failed (including [`StoreError::InsufficientCapacity`] for an item reserving more
    /// than its policy's capacity, which no reservation did).
    pub async fn settle(
        &self,
        reservation: &Reservation,
        actual: &[u64],
    ) -> Result<Vec<SettledItem>, SettleError> {
        let items = &reservation.items;
        if actual.len() != items.len() {
            return Err(SettleError::CostCount {
                expected: items.len(),
                got: actual.len(),
            });
        }
        let count = |outcome: &'static str| {
            for item in items {
                count_settle(&item.rule, outcome);
            }
        };
        // A store failure: counted per item and as a store error, logged, returned.
        let failed = |error: StoreError| {
            count("error");
            count_store_error(&error);
            log_store_failure(&error, true);
            SettleError::from(error)
        };
        if let Some(claim) = &reservation.claim {
            match self.store.claim(&claim.id, claim.ttl).await {
                Ok(true) => {}
                Ok(false) => {
                    count("replayed");
                    tracing::debug!(id = %claim.id, "settle refused: the reservation was settled already");
                    return Err(SettleError::AlreadySettled);
                }
                Err(error) => return Err(failed(error)),
            }
        }
        let settle: Vec<SettleItem<'_>> = items
            .iter()
            .zip(actual)
            .map(|(item, &actual)| SettleItem {
                rule: &item.rule,
                policy: &item.policy,
                key: &item.key,
                reserved: item.cost,
                actual,
                scheduled_at: item.scheduled_at,
            })
            .collect();
        let decisions = self.store.settle(&settle).await.map_err(failed)?;
        let rules = self.rules.load();
        let settled = items
            .iter()
            .zip(actual)
            .zip(decisions)
            .map(|((item, &actual), decision)| {
                let (outcome, units) = match actual.cmp(&item.cost) {
                    std::cmp::Ordering::Less => (Some("refunded"), item.cost - actual),
                    std::cmp::Ordering::Equal => (None, 0),
                    std::cmp::Ordering::Greater => (Some("charged"), actual - item.cost),
                };
                count_settle(&item.rule, outcome.unwrap_or("exact"));
                if let Some(direction) = outcome {
                    metrics::counter!(
                        "floodgate_settled_units_total",
                        "rule" => Arc::clone(&item.rule),
                        "direction" => direction
                    )
                    .increment(units);
                }
                let current = rules
                    .rules
                    .iter()
                    .any(|r| r.name == item.rule && same_policy(&r.policy, &item.policy));
                tracing::debug!(
                    rule = %item.rule,
                    reserved = item.cost,
                    actual,
                    current,
                    remaining = decision.remaining,
                    "settled"
                );
                SettledItem {
                    rule: Arc::clone(&item.rule),
                    quota: *item.policy.quota(),
                    reserved: item.cost,
                    actual,
                    decision,
                    current,
                }
            })
            .collect();
        Ok(settled)
    }
}

/// [`RateLimiter::evaluate`] with the store.
pub(crate) async fn evaluate<S: Store>(
    store: &S,
    observer: Option<&dyn DenialObserver>,
    plan: &Plan,
    mode: Mode,
) -> Verdict {
    let set = &*plan.rules;
    let rules = &set.rules;
    let checks = plan.checks.as_slice();
    let consume = mode != Mode::Peek;
    // Decisions are counted only when they are made: a peek decides nothing.
    let count = |rule: usize, outcome: Outcome| {
        if consume {
            set.count(rule, outcome);
        }
    };
    let is_shadow = |c: &&PlannedCheck| rules[c.rule].shadow;
    let enforcing = || checks.iter().enumerate().filter(|(_, c)| !is_shadow(c));
    let mut outcomes = Vec::with_capacity(checks.len());
    let mut action = Action::Admit;
    let mut store_error = None;
    let mut store_full = None;
    let mut wait = None;

    // A cost that cannot be read, or that the rule can never admit, refuses the request
    // before any rule is charged.
    if let Some(refusal) = &plan.refusal {
        let rule = &rules[refusal.rule];
        let action = match &refusal.error {
            CostRefusal::AmbiguousKey(header) => {
                count(refusal.rule, Outcome::AmbiguousKey);
                Action::AmbiguousKey {
                    rule: Arc::clone(&rule.name),
                    header: header.clone(),
                }
            }
            CostRefusal::NoClientAddress => {
                count(refusal.rule, Outcome::NoClientAddress);
                log_no_client_address(&rule.name);
                Action::NoClientAddress {
                    rule: Arc::clone(&rule.name),
                }
            }
            CostRefusal::Invalid(header) => {
                count(refusal.rule, Outcome::InvalidCost);
                Action::InvalidCost {
                    rule: Arc::clone(&rule.name),
                    header: header.clone(),
                }
            }
            CostRefusal::ExceedsCapacity { cost, capacity } => {
                count(refusal.rule, Outcome::CostExceedsCapacity);
                Action::CostExceedsCapacity {
                    rule: rule.name.to_string(),
                    cost: *cost,
                    capacity: *capacity,
                    check: refusal.check,
                }
            }
        };
        return Verdict {
            action,
            outcomes,
            store_error,
            store_full,
            wait: None,
        };
    }

    if let Some((_, first)) = enforcing().next() {
        let item = |c| check_item(rules, c);
        // The usual request meets one enforcing rule: its batch is a one-item array, not a Vec.
        let one;
        let many: Vec<CheckItem<'_>>;
        let items: &[CheckItem<'_>] = if enforcing().nth(1).is_none() {
            one = [item(first)];
            &one
        } else {
            many = enforcing().map(|(_, c)| item(c)).collect();
            &many
        };
        // Timed here, not by an async wrapper taking the future as an argument: that would
        // hold the store's (possibly kilobytes large) future twice, as argument and awaitee.
        // Latency measurement is the one place that needs a monotonic clock rather than the
        // limiter's (possibly manual) time source.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        // Per enforcing item, in order: the scheduled time of a granted reservation.
        let mut scheduled: Vec<Timestamp> = Vec::new();
        let result = match mode {
            Mode::Check => store.check(items).await,
            // Boxed: the rarer paths keep their own (possibly large) store futures off this one.
            Mode::Peek => Box::pin(store.peek(items)).await,
            Mode::Reserve { max_wait } => {
                Box::pin(store.reserve(items, max_wait))
                    .await
                    .map(|reservation| {
                        wait = reservation.wait;
                        scheduled = reservation.scheduled_at;
                        reservation.batch
                    })
            }
        };
        set.record_decision_duration(started.elapsed());
        match result {
            Ok(batch) => {
                if !batch.allowed {
                    // A denied reservation consumed nothing and waits for nothing.
                    wait = None;
                    scheduled.clear();
                }
                if !batch.allowed {
                    action = Action::Deny;
                }
                store_full = batch.store_full;
                // A batch refused because the store is full of live keys is not the keys' own
                // doing: its denials are counted apart, so dashboards do not read them as
                // clients over their limits.
                let refused_full = store_full == Some(OnFull::Reject);
                for (position, ((index, c), decision)) in
                    enforcing().zip(batch.decisions).enumerate()
                {
                    let rule = &rules[c.rule];
                    count(
                        c.rule,
                        match (decision.allowed, batch.allowed, refused_full) {
                            (true, true, _) => Outcome::Allowed,
                            // Another rule refused the request: nothing was charged here.
                            (true, false, _) => Outcome::NotCharged,
                            (false, _, true) => Outcome::StoreFull,
                            (false, _, false) => {
                                if let (true, Some(observer)) = (consume, observer) {
                                    observer.denied(&rule.name, &c.key);
                                }
                                Outcome::Denied
                            }
                        },
                    );
                    // A decision of a local fallback describes its own, smaller quota.
                    let (quota, policy_item) = match enforced_quota(&rule.policy, &decision) {
                        None => (*rule.policy.quota(), Some(set.policy_item(c.rule))),
                        Some(quota) => (quota, None),
                    };
                    outcomes.push(RuleOutcome {
                        rule: Arc::clone(&rule.name),
                        quota,
                        decision,
                        shadow: false,
                        policy_item,
                        check: index,
                        scheduled_at: scheduled.get(position).copied(),
                    });
                }
            }
            Err(StoreError::InsufficientCapacity {
                rule,
                cost,
                capacity,
            }) => {
                // The store names the rule it refused; count it under that enforcing rule.
                if let Some((_, c)) = enforcing().find(|(_, c)| *rules[c.rule].name == *rule) {
                    count(c.rule, Outcome::CostExceedsCapacity);
                }
                action = Action::CostExceedsCapacity {
                    rule,
                    cost,
                    capacity,
                    check: None,
                };
            }
            Err(error) => {
                count_store_error(&error);
                let closed =
                    enforcing().any(|(_, c)| rules[c.rule].failure_mode == FailureMode::Closed);
                // Each rule is counted by its own mode, so `error_open` of a rule always means
                // "this rule would have admitted": the request's fate (503 when any rule fails
                // closed) is the batch's, the label is the rule's.
                for (_, c) in enforcing() {
                    count(
                        c.rule,
                        match rules[c.rule].failure_mode {
                            FailureMode::Closed => Outcome::ErrorClosed,
                            FailureMode::Open => Outcome::ErrorOpen,
                        },
                    );
                }
                log_store_failure(&error, closed);
                if closed {
                    action = Action::Unavailable;
                }
                store_error = Some(error);
            }
        }
    }

    // Shadow rules: charged only when the request really goes through, so that their
    // counters show what enforcing them would have done.
    let charge_shadow = consume && action == Action::Admit;
    let mut any_shadow = false;
    for (index, c) in checks.iter().enumerate().filter(|(_, c)| is_shadow(c)) {
        any_shadow = true;
        let rule = &rules[c.rule];
        let one = [check_item(rules, c)];
        // Boxed: a store's future can be kilobytes (a remote store's state machine), and every
        // await point of this future would otherwise hold its own copy of one, making every
        // request's future (moved into the service's box) that much larger. Shadow rules are
        // the rare case; the enforcing batch above is awaited in place.
        let pending: Pin<Box<dyn Future<Output = _> + Send + '_>> = if charge_shadow {
            Box::pin(store.check(&one))
        } else {
            Box::pin(store.peek(&one))
        };
        match pending.await {
            Ok(batch) => {
                let decision = batch.decisions[0];
                count(
                    c.rule,
                    if decision.allowed {
                        Outcome::ShadowAllowed
                    } else {
                        Outcome::ShadowDenied
                    },
                );
                outcomes.push(RuleOutcome {
                    rule: Arc::clone(&rule.name),
                    quota: *rule.policy.quota(),
                    decision,
                    shadow: true,
                    policy_item: None,
                    check: index,
                    scheduled_at: None,
                });
            }
            Err(StoreError::InsufficientCapacity { .. }) => {
                count(c.rule, Outcome::CostExceedsCapacity);
            }
            Err(error) => {
                // Counted and logged as every store failure; a shadow rule never enforces, so
                // it fails open.
                count_store_error(&error);
                log_store_failure(&error, false);
                count(c.rule, Outcome::ErrorOpen);
            }
        }
    }
    if any_shadow {
        // Outcomes in plan order (enforcing and shadow items interleave in it).
        outcomes.sort_by_key(|o| o.check);
    }

    // A reservation with nothing to enforce (no rule applied, or only shadow rules) is
    // admitted at once.
    if matches!(mode, Mode::Reserve { .. })
        && action == Action::Admit
        && enforcing().next().is_none()
    {
        wait = Some(0);
    }
    Verdict {
        action,
        outcomes,
        store_error,
        store_full,
        wait,
    }
}

fn check_item<'a>(rules: &'a [crate::Rule], c: &'a PlannedCheck) -> CheckItem<'a> {
    let rule = &rules[c.rule];
    CheckItem {
        rule: &rule.name,
        policy: &rule.policy,
        key: &c.key,
        cost: c.cost,
    }
}

/// Adds 1 to `floodgate_settles_total{rule, outcome}`.
fn count_settle(rule: &Arc<str>, outcome: &'static str) {
    metrics::counter!(
        "floodgate_settles_total",
        "rule" => Arc::clone(rule),
        "outcome" => outcome
    )
    .increment(1);
}

/// Counts a store failure in `floodgate_store_errors_total{kind}` (`unavailable`, `timeout`,
/// `other`): every failed store call that decides or shadows a request, whichever way its
/// rule's failure mode answers it.
fn count_store_error(error: &StoreError) {
    let kind = match error {
        StoreError::Unavailable { .. } => "unavailable",
        StoreError::Timeout { .. } => "timeout",
        _ => "other",
    };
    metrics::counter!("floodgate_store_errors_total", "kind" => kind).increment(1);
}

/// Logs a missing client address at `error`, at most once a minute per process.
fn log_no_client_address(rule: &str) {
    use floodgate_core::{Clock, SystemClock};
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_US: AtomicU64 = AtomicU64::new(0);
    let now = SystemClock.now();
    let last = LAST_US.load(Ordering::Relaxed);
    if (last == 0 || now.saturating_sub(last) >= 60_000_000)
        && LAST_US
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::error!(
            rule,
            "a rule counts by client IP but requests carry no peer address: every such \
             request is answered 500; serve the app with \
             into_make_service_with_connect_info::<SocketAddr>() (axum) or insert a PeerAddr"
        );
    }
}

/// Logs a store failure at `warn` at most once per second per process (the rest at `debug`),
/// so that a dead Redis under load does not turn every request into a log line. Every failure
/// is still counted in `floodgate_store_errors_total`.
fn log_store_failure(error: &floodgate_store::StoreError, fail_closed: bool) {
    use floodgate_core::{Clock, SystemClock};
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_WARN_US: AtomicU64 = AtomicU64::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let now = SystemClock.now();
    let last = LAST_WARN_US.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= 1_000_000
        && LAST_WARN_US
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
        tracing::warn!(%error, fail_closed, suppressed, "rate-limit store failed");
    } else {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%error, fail_closed, "rate-limit store failed");
    }
}

/// A held request's reservation: given back (settled with actual cost 0) when the request is
/// dropped before its slot (the client went away).
struct Held<S: Store> {
    limiter: RateLimiter<S>,
    /// `None` once the slot came (the units are used).
    reservation: Option<Reservation>,
    /// Given back (the gauge and the bound) when this is dropped.
    _slot: Slot,
}

impl<S: Store> Held<S> {
    /// The slot came: the reservation is used.
    fn pass(mut self) {
        self.reservation = None;
        count_delayed("passed");
    }
}

impl<S: Store> Drop for Held<S> {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        count_delayed("cancelled");
        // Settled on the runtime the request ran on, through the one settle path (counted
        // there in floodgate_settles_total). Without a runtime (the process is going away)
        // the reservation simply stands, spent.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = self.limiter.clone();
            runtime.spawn(async move {
                // A failure is counted and logged by settle; the units then stay spent.
                let _ = limiter
                    .settle(&reservation, &reservation.nothing_used())
                    .await;
            });
        }
    }
}

impl<S: Store> RateLimiter<S> {
    /// Decides `plan` for a request that is passed on when admitted, the way every front end
    /// that forwards requests does (the tower `RateLimit` service, and in the
    /// `floodgate` service forward-auth and the reverse proxy).
    ///
    /// Without a delay ([`Plan::delay`] 0) it is [`RateLimiter::evaluate`] with
    /// [`Mode::Check`]. In the delay mode the enforcing items are reserved
    /// ([`Mode::Reserve`] with the plan's delay as `max_wait`) and the returned future
    /// completes at the reservation's scheduled time (tokio's timer, or the clock given to
    /// [`RateLimiter::with_delay_clock`]) with an admitting verdict; a request that would not
    /// fit within the delay is refused at once, consuming nothing, as a check refuses it.
    /// Dropping the future while it waits (the client went away) gives the reservation back
    /// (settled with actual cost 0, on a task of the current tokio runtime).
    ///
    /// At most [`RateLimiter::with_max_delayed`] requests are in the delay mode at once; one
    /// more is decided as a plain check (admitted when it fits now, else refused with the
    /// check's 429).
    ///
    /// Counted: `floodgate_requests_delayed_total{outcome}` (`passed`: held, then admitted at
    /// its slot; `cancelled`: dropped while held, its slot given back; `queue_full`: refused
    /// because the bound was reached, where its check's `retry_after` was within the delay)
    /// and the `floodgate_requests_waiting` gauge (requests held now), beside the decisions
    /// [`RateLimiter::evaluate`] counts.
    pub async fn admit(&self, plan: Plan) -> Verdict {
        let delay = plan.delay();
        if delay == 0 {
            return self.evaluate(&plan, Mode::Check).await;
        }
        let Some(mut slot) = self.delays().take() else {
            let verdict = self.evaluate(&plan, Mode::Check).await;
            if verdict.action == Action::Deny && verdict.store_full.is_none() {
                let retry =
                    most_restrictive(&verdict.outcomes).and_then(|o| o.decision.retry_after);
                if retry.is_some_and(|r| r <= delay) {
                    count_delayed("queue_full");
                }
            }
            return verdict;
        };
        let verdict = self
            .evaluate(&plan, Mode::Reserve { max_wait: delay })
            .await;
        let wait = match verdict.wait {
            Some(wait) if wait > 0 => wait,
            // Admitted at once, refused, or failed: nothing to hold.
            _ => return verdict,
        };
        slot.hold();
        let scheduled = verdict.outcomes.iter().filter_map(|o| o.scheduled_at).max();
        let held = Held {
            limiter: self.clone(),
            reservation: Reservation::from_verdict(&plan, &verdict),
            _slot: slot,
        };
        drop(plan);
        self.delays().timer.wait(wait, scheduled).await;
        held.pass();
        verdict
    }
}
