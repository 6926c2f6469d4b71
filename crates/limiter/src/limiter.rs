//! [`RateLimiter`]: the one place a rate-limit decision is made, counted and logged (its docs
//! give the steps).

use std::future::Future;
use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate_store::{SettleItem, Store, StoreError};
use http::{HeaderMap, Request};

use crate::delay::{count_delayed, DelaySlot, DelayTimer, Delays, DEFAULT_MAX_DELAYED};
use crate::evaluate::{count_store_error, evaluate, log_store_failure, DenialObserver};
use crate::modes::evaluate_modes;
use crate::plan::Plan;
use crate::reservation::{same_policy, Reservation, SettleError, SettledItem};
use crate::rule::RuleSet;
use crate::verdict::{most_restrictive, Action, Mode, Verdict};

/// Evaluates requests against a hot-swappable [`RuleSet`] using store `S`. Cheap to clone
/// (reference counts only); clones share rules, store, observer and the delay mode's bound.
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
/// to its `max_wait` for a slot; [`Verdict::wait`], [`RuleOutcome::scheduled_at`](crate::RuleOutcome::scheduled_at)) and is
/// otherwise a check, counted the same way.
///
/// A [`Mode::Peek`] evaluation consumes nothing anywhere and counts no decision (a peek
/// decides nothing); store failures are still counted in `floodgate_store_errors_total` and
/// logged.
///
/// Store errors follow the rules' [`FailureMode`](crate::FailureMode): if any enforcing rule in
/// the failed batch fails closed the request gets a 503, otherwise it is admitted. Each rule's
/// outcome is counted by its own mode (`error_open` / `error_closed`), whatever the request's
/// fate. A denial because the store is full of live keys ([`OnFull::Reject`](floodgate_store::OnFull::Reject)) is counted as
/// `store_full`, not `denied`.
///
/// Metrics (via the `metrics` facade, never with per-key labels):
/// - `floodgate_decisions_total{rule, outcome}`, one per rule per evaluated request, with the
///   outcomes of [`Outcome`](crate::Outcome) (`allowed` only when the rule's units were charged; a rule that
///   would admit a request another rule refused counts `not_charged`);
/// - `floodgate_store_errors_total{kind}` (`unavailable`, `timeout`, `other`);
/// - `floodgate_decision_duration_seconds` (histogram of the store batch round trip).
///
/// # Examples
///
/// Two explicit items of one rule, decided as one all-or-nothing batch:
///
/// ```
/// use std::sync::Arc;
/// use floodgate_core::{AlgorithmKind, ManualClock, Policy};
/// use floodgate_limiter::{Action, KeySource, Mode, Plan, RateLimiter, Rule, RuleSet};
/// use floodgate_store::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let clock = ManualClock::new(1_700_000_000_000_000);
/// let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
/// let policy = Policy::new(AlgorithmKind::TokenBucket, "5/s".parse().unwrap()).unwrap();
/// let limiter = RateLimiter::new(store, RuleSet::new(vec![
///     Rule::new("per-key", policy, KeySource::Constant("all".into())),
/// ]));
///
/// let mut plan = Plan::new(limiter.rules());
/// plan.push(0, "key=alice".into(), 3);
/// plan.push(0, "key=bob".into(), 5);
/// let verdict = limiter.evaluate(&plan, Mode::Check).await;
/// assert!(verdict.is_admitted());
/// assert_eq!(verdict.outcomes[1].decision.remaining, 0);
///
/// // bob is spent: the batch is refused and alice is not charged either.
/// let verdict = limiter.evaluate(&plan, Mode::Check).await;
/// assert_eq!(verdict.action, Action::Deny);
/// assert_eq!(verdict.outcomes[0].decision.remaining, 2);
/// # });
/// ```
#[derive(Debug)]
pub struct RateLimiter<S> {
    store: Arc<S>,
    rules: Arc<ArcSwap<RuleSet>>,
    observer: Option<Arc<dyn DenialObserver>>,
    /// The delay mode's waiting requests: their bound, count and timer.
    delays: Arc<Delays>,
    /// This instance's quota leases (`docs/spec/leases.md`).
    leases: Arc<crate::lease::Leases>,
}

/// A clone copies four reference-counted pointers (store, rules, denial observer, delay
/// queue): it shares all of them with the original.
impl<S> Clone for RateLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            rules: Arc::clone(&self.rules),
            observer: self.observer.clone(),
            delays: Arc::clone(&self.delays),
            leases: Arc::clone(&self.leases),
        }
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
            leases: Arc::new(crate::lease::Leases::new(
                Arc::new(floodgate_core::SystemClock),
                crate::lease::DEFAULT_MAX_LEASED_KEYS,
            )),
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

    /// The leases' state.
    pub(crate) fn leases(&self) -> &Arc<crate::lease::Leases> {
        &self.leases
    }

    /// This limiter with `leases` instead of its own.
    pub(crate) fn with_leases(mut self, leases: Arc<crate::lease::Leases>) -> Self {
        self.leases = leases;
        self
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
        Plan::for_request(self.rules.load_full(), method, uri, headers, extensions)
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
        let leases = Arc::clone(&self.leases);
        async move { evaluate(&*store, &leases, observer.as_deref(), &plan, Mode::Check).await }
    }

    /// Runs a plan against the store (see [`RateLimiter`] for the steps).
    pub async fn evaluate(&self, plan: &Plan, mode: Mode) -> Verdict {
        if plan.modes.is_plain() {
            evaluate(
                &*self.store,
                &self.leases,
                self.observer.as_deref(),
                plan,
                mode,
            )
            .await
        } else {
            // Boxed: the rare path keeps its two store futures off every request's future.
            Box::pin(evaluate_modes(
                &*self.store,
                &self.leases,
                self.observer.as_deref(),
                plan,
                mode,
            ))
            .await
        }
    }

    /// Settles `reservation` with the units each item actually used (`actual[i]` for item `i`):
    /// below the reserved cost gives the difference back, above charges it (see
    /// `docs/spec/reservations.md`), each item on the state it was reserved from. The one place
    /// a settle is made, counted and logged, as [`RateLimiter::evaluate`] is for checks.
    /// Returns each key's standing afterwards, in order.
    ///
    /// With a [`Claim`](crate::Claim) the reservation is first claimed in the store: a second settle of it
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
        let items = reservation.items();
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
        if let Some(claim) = reservation.claim() {
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

/// Adds 1 to `floodgate_settles_total{rule, outcome}`.
fn count_settle(rule: &Arc<str>, outcome: &'static str) {
    metrics::counter!(
        "floodgate_settles_total",
        "rule" => Arc::clone(rule),
        "outcome" => outcome
    )
    .increment(1);
}

/// A held request's reservation: given back (settled with actual cost 0) when the request is
/// dropped before its slot (the client went away).
struct Held<S: Store> {
    limiter: RateLimiter<S>,
    /// `None` once the slot came (the units are used).
    reservation: Option<Reservation>,
    /// Given back (the gauge and the bound) when this is dropped.
    _slot: DelaySlot,
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
