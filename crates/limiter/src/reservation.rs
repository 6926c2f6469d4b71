//! [`Reservation`]: what a granted reservation holds, and what a settle of it returns.

use std::sync::Arc;

use floodgate_core::{Decision, Micros, Policy, Quota, Timestamp};
use floodgate_store::StoreError;

use crate::plan::Plan;
use crate::verdict::Verdict;

/// A granted reservation, owned: what [`RateLimiter::settle`](crate::RateLimiter::settle) needs to give units back or
/// charge more once the actual cost is known. Made from the plan and the verdict of a granted
/// [`Mode::Reserve`](crate::Mode::Reserve) evaluation ([`Reservation::from_verdict`]), or from its parts
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
    /// ([`RuleOutcome::scheduled_at`](crate::RuleOutcome::scheduled_at)).
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
pub(crate) fn same_policy(a: &Policy, b: &Policy) -> bool {
    a.kind() == b.kind() && a.quota() == b.quota()
}

/// Makes a [`Reservation`] settle at most once, across every process sharing the store:
/// [`RateLimiter::settle`](crate::RateLimiter::settle) first claims `id` for `ttl` microseconds ([`Store::claim`](floodgate_store::Store::claim)) and
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
    /// The reservation of a granted [`Mode::Reserve`](crate::Mode::Reserve) evaluation: one item per
    /// [`Verdict::reserved`] entry, with its rule, policy, key and cost taken from `plan` (the
    /// plan that was evaluated). `None` when nothing was reserved.
    pub fn from_verdict(plan: &Plan, verdict: &Verdict) -> Option<Self> {
        let checks = plan.checks();
        let rules = &plan.rules().rules;
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
    /// Units actually used (as given to [`RateLimiter::settle`](crate::RateLimiter::settle)).
    pub actual: u64,
    /// The key's standing after the settle: a cost-0 peek (`allowed`, `remaining`,
    /// `reset_after`) under the reservation's policy.
    pub decision: Decision,
    /// `false` when the rule set in force no longer has this rule with the reservation's
    /// algorithm and quota (a reload removed or changed it): the units were still given back
    /// to (or charged on) the state they were reserved from, which no longer limits anyone.
    pub current: bool,
}

/// Why [`RateLimiter::settle`](crate::RateLimiter::settle) settled nothing.
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
