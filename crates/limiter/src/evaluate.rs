//! [`evaluate`]: one plan against the store, decided, counted and logged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use floodgate_core::Timestamp;
use floodgate_store::{BatchDecision, CheckItem, OnFull, Store, StoreError};

use crate::metrics::Outcome;
use crate::plan::{CostRefusal, Plan, PlannedCheck, Refusal};
use crate::rule::{FailureMode, RuleSet};
use crate::verdict::{enforced_quota, Action, Mode, RuleOutcome, Verdict};

// Moved below the leases, which count store failures too (no import circle).
pub(crate) use crate::store_errors::{count_store_error, log_store_failure};

/// Told of every key an enforcing rule denies (counted `denied`), e.g. to keep a bounded list
/// of the busiest denied keys. Called on the decision path, after the decision: it must be
/// quick and must not block. `key` is the store key (`ip=203.0.113.7`, `key=alice`), which can
/// be personal data: keep such a view opt-in.
pub trait DenialObserver: Send + Sync + std::fmt::Debug {
    /// `rule` denied `key`.
    fn denied(&self, rule: &str, key: &str);
}

/// [`RateLimiter::evaluate`](crate::RateLimiter::evaluate) with the store.
///
/// The store futures are awaited here, in place (the enforcing batch) or boxed (the rarer
/// paths), and what their answers mean is worked out by the synchronous [`Tally`] methods:
/// an async helper per step would add its own state machine (holding a store future) to
/// every request's future.
pub(crate) async fn evaluate<S: Store>(
    store: &S,
    leases: &crate::lease::Leases,
    observer: Option<&dyn DenialObserver>,
    plan: &Plan,
    mode: Mode,
) -> Verdict {
    let set = &**plan.rules();
    let rules = &set.rules;
    let checks = plan.checks();
    // A blocked plan is decided without consuming: its items are only peeked.
    let decides = mode != Mode::Peek;
    let mode = if plan.is_blocked() { Mode::Peek } else { mode };
    let is_shadow = |c: &&PlannedCheck| rules[c.rule].shadow;
    let enforcing = || checks.iter().enumerate().filter(|(_, c)| !is_shadow(c));
    let mut tally = Tally {
        set,
        observer,
        // Decisions are counted only when they are made: a peek decides nothing.
        consume: mode != Mode::Peek,
        verdict: Verdict {
            action: Action::Admit,
            // One outcome inline (the usual request), a `Vec` from the second.
            outcomes: crate::SmallList::default(),
            store_error: None,
            store_full: None,
            wait: None,
        },
    };

    // A cost that cannot be read, or that the rule can never admit, or a reservation a rule
    // cannot take, refuses the request before any rule is charged.
    if let Some(action) = refused_before_store(plan, mode, tally.consume) {
        tally.verdict.action = action;
        return tally.verdict;
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
        let mut asked = true;
        let result = match mode {
            // Leased rules spend units taken beforehand (docs/spec/leases.md).
            Mode::Check if crate::lease::applies(rules, enforcing().map(|(_, c)| c)) => {
                let checks: Vec<&PlannedCheck> = enforcing().map(|(_, c)| c).collect();
                let (result, store_asked) =
                    Box::pin(crate::lease::check(leases, store, rules, &checks, items)).await;
                asked = store_asked;
                result
            }
            Mode::Check => store.check(items).await,
            // Boxed: the rarer paths keep their own (possibly large) store futures off this one.
            Mode::Peek => Box::pin(store.peek(items)).await,
            Mode::Reserve { max_wait } => {
                Box::pin(store.reserve(items, max_wait))
                    .await
                    .map(|reservation| {
                        tally.verdict.wait = reservation.wait;
                        scheduled = reservation.scheduled_at;
                        reservation.batch
                    })
            }
        };
        if asked {
            set.record_decision_duration(started.elapsed());
        }
        match result {
            Ok(batch) => tally.enforced(enforcing(), batch, &mut scheduled),
            Err(error) => tally.enforcing_failed(enforcing(), error),
        }
    }

    // Shadow rules: charged only when the request really goes through, so that their
    // counters show what enforcing them would have done.
    let charge_shadow = tally.consume && tally.verdict.action == Action::Admit;
    let mut any_shadow = false;
    for (index, c) in checks.iter().enumerate().filter(|(_, c)| is_shadow(c)) {
        any_shadow = true;
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
        tally.shadowed(index, c, pending.await);
    }
    if any_shadow {
        // Outcomes in plan order (enforcing and shadow items interleave in it).
        tally.verdict.outcomes.sort_by_key(|o| o.item);
    }
    tally.finish(plan, mode, decides, enforcing().next().is_none())
}

/// What one evaluation has decided so far, and where it counts it.
struct Tally<'a> {
    set: &'a RuleSet,
    observer: Option<&'a dyn DenialObserver>,
    /// The store is charged (not a peek): decisions are counted.
    consume: bool,
    verdict: Verdict,
}

impl Tally<'_> {
    fn count(&self, c: &PlannedCheck, outcome: Outcome) {
        if self.consume {
            self.set.count(c.rule, outcome);
            if let Some(label) = &c.label {
                crate::metrics::count_labelled(&self.set.rules[c.rule].name, label, outcome);
            }
        }
    }

    /// The enforcing batch's answer: each rule's outcome, counted.
    fn enforced<'c>(
        &mut self,
        enforcing: impl Iterator<Item = (usize, &'c PlannedCheck)>,
        batch: BatchDecision,
        scheduled: &mut Vec<Timestamp>,
    ) {
        let rules = &self.set.rules;
        if !batch.allowed {
            // A denied reservation consumed nothing and waits for nothing.
            self.verdict.wait = None;
            scheduled.clear();
            self.verdict.action = Action::Deny;
        }
        self.verdict.store_full = batch.store_full;
        // A batch refused because the store is full of live keys is not the keys' own
        // doing: its denials are counted apart, so dashboards do not read them as
        // clients over their limits.
        let refused_full = batch.store_full == Some(OnFull::Reject);
        for (position, ((index, c), decision)) in enforcing.zip(batch.decisions).enumerate() {
            let rule = &rules[c.rule];
            let outcome = match (decision.allowed, batch.allowed, refused_full) {
                (true, true, _) => Outcome::Allowed,
                // Another rule refused the request: nothing was charged here.
                (true, false, _) => Outcome::NotCharged,
                (false, _, true) => Outcome::StoreFull,
                (false, _, false) => {
                    if let (true, Some(observer)) = (self.consume, self.observer) {
                        observer.denied(&rule.name, &c.key);
                    }
                    Outcome::Denied
                }
            };
            self.count(c, outcome);
            // A decision of a local fallback describes its own, smaller quota.
            let (quota, policy_item) =
                match (enforced_quota(policy_of(rules, c), &decision), &c.policy) {
                    (None, None) => (*rule.policy.quota(), Some(self.set.policy_item(c.rule))),
                    (None, Some(own)) => {
                        let quota = *own.quota();
                        (quota, Some(crate::header::policy_item(&rule.name, &quota)))
                    }
                    (Some(quota), _) => (quota, None),
                };
            self.verdict.outcomes.push(RuleOutcome {
                rule: Arc::clone(&rule.name),
                quota,
                decision,
                shadow: false,
                policy_item,
                item: index,
                scheduled_at: scheduled.get(position).copied(),
            });
        }
    }

    /// The enforcing batch failed: a cost the store refuses, or the store itself.
    fn enforcing_failed<'c>(
        &mut self,
        mut enforcing: impl Iterator<Item = (usize, &'c PlannedCheck)> + Clone,
        error: StoreError,
    ) {
        let rules = &self.set.rules;
        if let StoreError::InsufficientCapacity {
            rule,
            cost,
            capacity,
        } = error
        {
            // The store names the rule it refused; count it under that enforcing rule.
            if let Some((_, c)) = enforcing.find(|(_, c)| *rules[c.rule].name == *rule) {
                self.count(c, Outcome::CostExceedsCapacity);
            }
            self.verdict.action = Action::CostExceedsCapacity {
                rule,
                cost,
                capacity,
                item: None,
            };
            return;
        }
        count_store_error(&error);
        let closed = enforcing
            .clone()
            .any(|(_, c)| rules[c.rule].failure_mode == FailureMode::Closed);
        // Each rule is counted by its own mode, so `error_open` of a rule always means
        // "this rule would have admitted": the request's fate (503 when any rule fails
        // closed) is the batch's, the label is the rule's.
        for (_, c) in enforcing {
            self.count(
                c,
                match rules[c.rule].failure_mode {
                    FailureMode::Closed => Outcome::ErrorClosed,
                    FailureMode::Open => Outcome::ErrorOpen,
                },
            );
        }
        log_store_failure(&error, closed);
        if closed {
            self.verdict.action = Action::Unavailable;
        }
        self.verdict.store_error = Some(error);
    }

    /// A shadow rule's answer, counted; it never enforces, so a failure fails open.
    fn shadowed(
        &mut self,
        index: usize,
        c: &PlannedCheck,
        result: Result<BatchDecision, StoreError>,
    ) {
        let rule = &self.set.rules[c.rule];
        match result {
            Ok(batch) => {
                let decision = batch.decisions[0];
                self.count(
                    c,
                    if decision.allowed {
                        Outcome::ShadowAllowed
                    } else {
                        Outcome::ShadowDenied
                    },
                );
                self.verdict.outcomes.push(RuleOutcome {
                    rule: Arc::clone(&rule.name),
                    quota: *policy_of(&self.set.rules, c).quota(),
                    decision,
                    shadow: true,
                    policy_item: None,
                    item: index,
                    scheduled_at: None,
                });
            }
            Err(StoreError::InsufficientCapacity { .. }) => {
                self.count(c, Outcome::CostExceedsCapacity);
            }
            Err(error) => {
                // Counted and logged as every store failure.
                count_store_error(&error);
                log_store_failure(&error, false);
                self.count(c, Outcome::ErrorOpen);
            }
        }
    }

    /// The verdict, once every item is decided: a reservation with nothing to enforce waits
    /// for nothing, and a blocked plan is denied (its block-list entries counted).
    fn finish(mut self, plan: &Plan, mode: Mode, decides: bool, nothing_enforced: bool) -> Verdict {
        // A reservation with nothing to enforce (no rule applied, or only shadow rules) is
        // admitted at once.
        if matches!(mode, Mode::Reserve { .. })
            && self.verdict.action == Action::Admit
            && nothing_enforced
        {
            self.verdict.wait = Some(0);
        }
        if plan.is_blocked() && matches!(self.verdict.action, Action::Admit | Action::Deny) {
            self.verdict.action = Action::Deny;
            if decides {
                for name in plan.blocked() {
                    crate::metrics::counter(name, Outcome::Denied).increment(1);
                }
            }
        }
        self.verdict
    }
}

/// The action of a plan refused before the store is asked: a cost refusal ([`refused`]), or a
/// reservation ([`Mode::Reserve`]) of a plan with a calendar item, which takes none (a
/// calendar period is counted at once), on every store alike.
fn refused_before_store(plan: &Plan, mode: Mode, consume: bool) -> Option<Action> {
    let set = &**plan.rules();
    if let Some(refusal) = &plan.refusal {
        return Some(refused(set, refusal, consume));
    }
    let item = plan
        .calendar_item()
        .filter(|_| matches!(mode, Mode::Reserve { .. }))?;
    Some(Action::NoReservation {
        rule: Arc::clone(&set.rules[plan.checks()[item].rule].name),
        item,
    })
}

/// The action of a plan refused before the store is asked, counted (unless a peek) under the
/// refused rule.
fn refused(set: &RuleSet, refusal: &Refusal, consume: bool) -> Action {
    let count = |rule: usize, outcome: Outcome| {
        if consume {
            set.count(rule, outcome);
        }
    };
    let rules = &set.rules;
    let rule = &rules[refusal.rule];
    match &refusal.error {
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
                item: refusal.item,
            }
        }
    }
}

fn check_item<'a>(rules: &'a [crate::Rule], c: &'a PlannedCheck) -> CheckItem<'a> {
    let rule = &rules[c.rule];
    CheckItem {
        rule: &rule.name,
        policy: policy_of(rules, c),
        key: &c.key,
        cost: c.cost,
    }
}

/// The policy deciding `c`: its own (a request's limit override), else its rule's.
fn policy_of<'a>(rules: &'a [crate::Rule], c: &'a PlannedCheck) -> &'a floodgate_core::Policy {
    c.policy.as_deref().unwrap_or(&rules[c.rule].policy)
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
