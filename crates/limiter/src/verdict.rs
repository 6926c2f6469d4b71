//! What an evaluation answers: a [`Verdict`] (an [`Action`] and one [`RuleOutcome`] per
//! decided item), the [`Mode`] it was made in, and the helpers that read outcomes.

use std::sync::Arc;

use floodgate_core::{Decision, Micros, Policy, Quota, Timestamp};
use floodgate_store::{OnFull, StoreError};
use http::HeaderValue;

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
        /// The item that asked for it, when it was one alone ([`RuleOutcome::item`]'s
        /// numbering); `None` when several items of one rule and key together exceed it.
        item: Option<usize>,
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
    /// A [`Mode::Reserve`] of a plan with an item whose rule counts in calendar periods
    /// ([`Plan::calendar_item`](crate::Plan::calendar_item)), which take no reservation (a
    /// settle could not give units back into a period that has ended): answer 400
    /// (`floodgate_tower::response::no_reservation`; the JSON API names the member that asked
    /// for the reservation); nothing was charged or counted.
    NoReservation {
        /// The calendar rule.
        rule: Arc<str>,
        /// The item of that rule, in plan order.
        item: usize,
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
    pub item: usize,
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
    /// One outcome per item that was decided, in plan order ([`RuleOutcome::item`]). Empty
    /// when no rule applied or the store failed; a shadow item whose store call failed has
    /// none. A [`SmallList`](crate::SmallList): the usual request's one outcome is kept inline,
    /// without an allocation.
    pub outcomes: crate::SmallList<RuleOutcome>,
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
    /// failure, or only shadow items (never reserved). The one rule [`Reservation::from_verdict`](crate::Reservation::from_verdict)
    /// and a decision API handing out reservation tokens both follow.
    pub fn reserved(&self) -> impl Iterator<Item = (usize, Timestamp)> + '_ {
        let granted = self.is_admitted() && self.wait.is_some();
        self.outcomes
            .iter()
            .filter(move |o| granted && !o.shadow)
            .filter_map(|o| Some((o.item, o.scheduled_at?)))
    }

    /// Whether every enforcing (non-shadow) outcome allowed the request: the `allowed` of a
    /// decision API's answer (also for a peek, whose action is never a denial). True when no
    /// enforcing outcome exists.
    pub fn outcomes_allow(&self) -> bool {
        self.outcomes
            .iter()
            .filter(|o| !o.shadow)
            .all(|o| o.decision.allowed)
    }

    /// The outcome that binds the request, the one a decision API repeats at the top level:
    /// when [`outcomes_allow`](Self::outcomes_allow), the enforcing outcome with the fewest
    /// units remaining (the first outcome when none enforces); otherwise the
    /// [`most_restrictive`] denying one. `None` without outcomes.
    pub fn binding_outcome(&self) -> Option<&RuleOutcome> {
        if self.outcomes_allow() {
            self.outcomes
                .iter()
                .filter(|o| !o.shadow)
                .min_by_key(|o| o.decision.remaining)
                .or(self.outcomes.first())
        } else {
            most_restrictive_of(self.outcomes.iter())
        }
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
    /// ([`Store::reserve`](floodgate_store::Store::reserve)) for the shortest wait within `max_wait` microseconds after which
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
