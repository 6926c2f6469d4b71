//! The decision path of a check whose enforcing items include leased ones: each leased item
//! is spent from its key's lease (taking one from the store when there is none), the other
//! items are checked by the store as one batch, and the plan stays all or nothing (units of a
//! request another item denied go back).

use std::sync::Arc;

use floodgate_core::{Decision, Timestamp};
use floodgate_store::{BatchDecision, BatchReservation, CheckItem, SettleItem, Store, StoreError};

use super::table::{Begin, Denial, Ended, Leases, Live, Outcome};
use super::Lease;
use crate::plan::PlannedCheck;
use crate::rule::Rule;
use crate::store_errors::{count_store_error, log_store_failure};

/// The lease deciding `c`, if any: the rule's, unless the rule only observes (shadow), the
/// item carries a policy of its own, or it is a peek of cost 0.
fn leased<'a>(rules: &'a [Rule], c: &PlannedCheck) -> Option<&'a Lease> {
    let rule = &rules[c.rule];
    if rule.shadow || c.policy.is_some() || c.cost == 0 {
        return None;
    }
    rule.lease.as_ref()
}

/// Whether any of `checks` is decided through a lease.
pub(crate) fn applies<'c>(
    rules: &[Rule],
    mut checks: impl Iterator<Item = &'c PlannedCheck>,
) -> bool {
    checks.any(|c| leased(rules, c).is_some())
}

/// Stands for a decision a store did not return (every store returns one per item).
const NO_ANSWER: Decision = Decision {
    allowed: false,
    limit: 0,
    remaining: 0,
    reset_after: 0,
    retry_after: None,
};

/// What admitted a leased item, to undo when another item denies the plan.
enum Drawn {
    /// Spent from lease `generation` of item `index`.
    Lease { index: usize, generation: u64 },
    /// Reserved by the store alone (a take of this key was on its way), for `scheduled_at`.
    Store {
        index: usize,
        scheduled_at: Timestamp,
    },
}

/// One leased item's answer.
enum Drawing {
    Admitted(Decision, Drawn),
    Denied(Decision),
}

/// Decides `items` (the plan's enforcing items, `checks` their planned checks, in order) as
/// one all-or-nothing check with leases. Returns the batch's answer and whether the store was
/// asked at all. When a lease take fails, the whole plan is decided by the store's local
/// fallback ([`Store::fallback_check`]), as a check without leases is.
///
/// # Errors
/// As [`Store::check`]; units already drawn for the plan are put back first.
pub(crate) async fn check<S: Store>(
    leases: &Leases,
    store: &S,
    rules: &[Rule],
    checks: &[&PlannedCheck],
    items: &[CheckItem<'_>],
) -> (Result<BatchDecision, StoreError>, bool) {
    if let Err(error) = floodgate_store::validate_batch(items) {
        return (Err(error), false);
    }
    let mut asked = false;
    let mut decisions: Vec<Option<Decision>> = vec![None; items.len()];
    let mut drawn: Vec<Drawn> = Vec::new();
    let mut denied = false;
    for (index, (c, item)) in checks.iter().zip(items).enumerate() {
        let Some(lease) = leased(rules, c) else {
            continue;
        };
        match draw(
            leases,
            store,
            &rules[c.rule].name,
            lease,
            item,
            index,
            &mut asked,
        )
        .await
        {
            Ok(Drawing::Admitted(decision, d)) => {
                decisions[index] = Some(decision);
                drawn.push(d);
            }
            Ok(Drawing::Denied(decision)) => {
                decisions[index] = Some(decision);
                denied = true;
                break;
            }
            Err(error) => {
                // A take that failed (or the take this request waited for): the plan follows
                // the store's local fallback, as a plain check does (its divided share), or
                // fails by the rule's failure mode without one.
                put_back(leases, store, items, drawn).await;
                return (store.fallback_check(items, error), asked);
            }
        }
    }
    let rest: Vec<usize> = (0..items.len())
        .filter(|&i| decisions[i].is_none())
        .collect();
    let rest_items: Vec<CheckItem<'_>> = rest.iter().map(|&i| items[i]).collect();
    let mut store_full = None;
    let allowed = if rest.is_empty() {
        !denied
    } else {
        asked = true;
        // Denied already: the other items' standings are peeked, nothing is charged.
        let answer = if denied {
            Box::pin(store.peek(&rest_items)).await
        } else {
            Box::pin(store.check(&rest_items)).await
        };
        match answer {
            Ok(batch) => {
                for (&i, decision) in rest.iter().zip(batch.decisions) {
                    decisions[i] = Some(decision);
                }
                store_full = batch.store_full;
                batch.allowed && !denied
            }
            Err(error) => {
                put_back(leases, store, items, drawn).await;
                return (Err(error), asked);
            }
        }
    };
    if !allowed {
        put_back(leases, store, items, drawn).await;
    }
    let batch = BatchDecision {
        allowed,
        decisions: decisions
            .into_iter()
            .map(|d| d.unwrap_or(NO_ANSWER))
            .collect(),
        store_full,
    };
    (Ok(batch), asked)
}

/// Spends `item` from its key's lease, taking a lease first when there is none with room;
/// while a take of the key is on its way, waits for it (at most the store's
/// [`Store::round_trip_deadline`]: longer fails as the store would, by the rule's failure
/// mode) and begins again.
async fn draw<S: Store>(
    leases: &Leases,
    store: &S,
    rule: &Arc<str>,
    lease: &Lease,
    item: &CheckItem<'_>,
    index: usize,
    asked: &mut bool,
) -> Result<Drawing, StoreError> {
    let mut deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let mut waited = false;
    loop {
        let now = leases.now();
        match leases.begin(rule, item.policy, item.key, item.cost, lease, now, waited) {
            Begin::Wait(taking) => {
                waited = true;
                let limit = store.round_trip_deadline();
                if deadline.is_none() {
                    deadline = limit.map(|d| Box::pin(tokio::time::sleep(d)));
                }
                wait(taking, deadline.as_mut(), limit).await?;
            }
            begun => {
                return begun_draw(leases, store, rule, lease, item, index, asked, begun).await
            }
        }
    }
}

/// Waits for a take on its way to end (`taking`), at most until `deadline`.
///
/// # Errors
/// [`StoreError::Timeout`] past the deadline, [`StoreError::Unavailable`] when the take
/// failed.
async fn wait(
    mut taking: tokio::sync::watch::Receiver<Outcome>,
    deadline: Option<&mut std::pin::Pin<Box<tokio::time::Sleep>>>,
    limit: Option<std::time::Duration>,
) -> Result<(), StoreError> {
    let ended = taking.wait_for(|o| *o != Outcome::Pending);
    let outcome = match deadline {
        Some(deadline) => tokio::select! {
            ended = ended => ended.map(|o| *o),
            () = deadline.as_mut() => {
                let after_ms = limit.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                return Err(StoreError::Timeout { after_ms });
            }
        },
        None => ended.await.map(|o| *o),
    };
    match outcome {
        Ok(Outcome::Failed) => Err(StoreError::Unavailable {
            reason: "the lease take this request waited for failed".into(),
        }),
        // Done, or the take was given up (its future dropped): begin again.
        _ => Ok(()),
    }
}

/// [`draw`] after [`Leases::begin`] said what to do (anything but wait).
#[allow(clippy::too_many_arguments)]
async fn begun_draw<S: Store>(
    leases: &Leases,
    store: &S,
    rule: &Arc<str>,
    lease: &Lease,
    item: &CheckItem<'_>,
    index: usize,
    asked: &mut bool,
    begun: Begin,
) -> Result<Drawing, StoreError> {
    let now = leases.now();
    let (size, ended) = match begun {
        Begin::Spent(decision, generation) => {
            return Ok(Drawing::Admitted(
                decision,
                Drawn::Lease { index, generation },
            ));
        }
        Begin::Denied(decision) => return Ok(Drawing::Denied(decision)),
        Begin::SpentRenew(decision, generation, size) => {
            renew(leases, store, rule, lease, item, size, now).await;
            return Ok(Drawing::Admitted(
                decision,
                Drawn::Lease { index, generation },
            ));
        }
        Begin::Wait(_) | Begin::Plain => {
            *asked = true;
            let reserved = store.reserve(std::slice::from_ref(item), 0).await?;
            let (decision, granted) = answer(&reserved);
            return Ok(match granted {
                Some(scheduled_at) => Drawing::Admitted(
                    decision,
                    Drawn::Store {
                        index,
                        scheduled_at,
                    },
                ),
                _ => Drawing::Denied(decision),
            });
        }
        Begin::Take { size, ended } => (size, ended),
    };
    // From here the slot is "taking": the guard clears that if this future is dropped or fails.
    let mut guard = TakeGuard {
        leases,
        rule,
        key: item.key,
        denial: None,
        failed: false,
        done: false,
    };
    *asked = true;
    if let Some(ended) = ended {
        settle_ended(store, std::slice::from_ref(&*ended)).await;
    }
    let take = |cost| CheckItem { cost, ..*item };
    let mut size = size;
    let mut reserved = store.reserve(&[take(size)], 0).await;
    if reserved.as_ref().is_ok_and(|r| !r.batch.allowed) && size > item.cost {
        // A lease the key cannot give: the request alone may still fit.
        size = item.cost;
        reserved = store.reserve(&[take(size)], 0).await;
    }
    // A failed take fails the requests waiting for it too (by the rule's failure mode).
    guard.failed = reserved.is_err();
    let (decision, granted) = answer(&reserved?);
    let Some(scheduled_at) = granted else {
        // Until the store's retry_after: it admits nothing of this cost before then (unless
        // units are given back), so a key at its limit costs one call per retry_after.
        guard.denial = Some(Denial {
            at: now,
            until: now.saturating_add(decision.retry_after.unwrap_or(0)),
            cost: item.cost,
            decision,
        });
        return Ok(Drawing::Denied(decision));
    };
    let taken = Taken {
        size,
        used: item.cost,
        scheduled_at,
        decision,
        now,
    };
    guard.done = true;
    let (generation, live) = install(leases, store, rule, item.key, lease, taken).await;
    Ok(Drawing::Admitted(
        live.decision(now),
        Drawn::Lease { index, generation },
    ))
}

/// Takes the successor of a key's live lease (`size` units, asked at `now`) after this request
/// was spent from it; the other requests go on spending the old one meanwhile. Granted: the
/// new lease replaces the old, whose rest is settled. Denied or failed: the old lease lives
/// out its time (no second renewal); a failure is counted and logged, and the next take
/// meets it.
async fn renew<S: Store>(
    leases: &Leases,
    store: &S,
    rule: &Arc<str>,
    lease: &Lease,
    item: &CheckItem<'_>,
    size: u64,
    now: Timestamp,
) {
    let mut guard = TakeGuard {
        leases,
        rule,
        key: item.key,
        denial: None,
        failed: false,
        done: false,
    };
    let reserved = match store
        .reserve(
            &[CheckItem {
                cost: size,
                ..*item
            }],
            0,
        )
        .await
    {
        Ok(reserved) => reserved,
        Err(error) => {
            count_store_error(&error);
            log_store_failure(&error, false);
            return;
        }
    };
    let (decision, Some(scheduled_at)) = answer(&reserved) else {
        return;
    };
    let taken = Taken {
        size,
        used: 0,
        scheduled_at,
        decision,
        now,
    };
    guard.done = true;
    install(leases, store, rule, item.key, lease, taken).await;
}

/// The store's answer to a one-item reservation: its decision, and the scheduled time when
/// it was granted.
fn answer(reserved: &BatchReservation) -> (Decision, Option<Timestamp>) {
    let decision = reserved
        .batch
        .decisions
        .first()
        .copied()
        .unwrap_or(NO_ANSWER);
    let granted = reserved
        .scheduled_at
        .first()
        .copied()
        .filter(|_| reserved.batch.allowed);
    (decision, granted)
}

/// A lease the store just granted: `size` units taken at `now`, `used` of them by the request
/// that took it.
struct Taken {
    size: u64,
    used: u64,
    scheduled_at: Timestamp,
    decision: Decision,
    now: Timestamp,
}

/// Counts and installs a lease just taken, and settles the one it replaced; returns its
/// generation and the lease.
async fn install<S: Store>(
    leases: &Leases,
    store: &S,
    rule: &Arc<str>,
    key: &str,
    lease: &Lease,
    taken: Taken,
) -> (u64, Live) {
    let Taken {
        size,
        used,
        scheduled_at,
        decision,
        now,
    } = taken;
    super::counters::taken(rule, size);
    let live = Live {
        size,
        used,
        scheduled_at,
        taken_at: now,
        expires_at: now.saturating_add(lease.lifetime),
        store_remaining: decision.remaining,
        reset_at: now.saturating_add(decision.reset_after),
        limit: decision.limit,
        renewing: false,
    };
    let (generation, replaced) = leases.install(rule, key, live);
    if let Some(replaced) = replaced {
        settle_ended(store, std::slice::from_ref(&replaced)).await;
    }
    (generation, live)
}

/// Clears a slot's take when the take did not install a lease.
struct TakeGuard<'a> {
    leases: &'a Leases,
    rule: &'a str,
    key: &'a str,
    denial: Option<Denial>,
    /// The store failed (a dropped future gives up: its waiters begin again).
    failed: bool,
    done: bool,
}

impl Drop for TakeGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.leases
                .abandon(self.rule, self.key, self.denial.take(), self.failed);
        }
    }
}

/// Undoes what `drawn` admitted: units back into their lease, or a store reservation settled
/// with nothing used.
async fn put_back<S: Store>(
    leases: &Leases,
    store: &S,
    items: &[CheckItem<'_>],
    drawn: Vec<Drawn>,
) {
    let mut settle = Vec::new();
    for d in drawn {
        match d {
            Drawn::Lease { index, generation } => {
                let item = &items[index];
                leases.put_back(item.rule, item.key, generation, item.cost);
            }
            Drawn::Store {
                index,
                scheduled_at,
            } => {
                let item = &items[index];
                settle.push(SettleItem {
                    rule: item.rule,
                    policy: item.policy,
                    key: item.key,
                    reserved: item.cost,
                    actual: 0,
                    scheduled_at,
                });
            }
        }
    }
    if !settle.is_empty() {
        if let Err(error) = store.settle(&settle).await {
            count_store_error(&error);
            log_store_failure(&error, false);
        }
    }
}

/// Settles ended leases that did not spend every unit (the rest given back, as far as the
/// state still holds them), and counts every ended lease's used and returned units. A store
/// failure is counted and logged: the units then stay spent.
pub(crate) async fn settle_ended<S: Store>(store: &S, ended: &[Ended]) {
    for e in ended {
        super::counters::ended(&e.rule, e.live.used, e.live.size - e.live.used);
    }
    let items: Vec<SettleItem<'_>> = ended
        .iter()
        .filter(|e| e.live.used < e.live.size)
        .map(|e| SettleItem {
            rule: &e.rule,
            policy: &e.policy,
            key: &e.key,
            reserved: e.live.size,
            actual: e.live.used,
            scheduled_at: e.live.scheduled_at,
        })
        .collect();
    for chunk in items.chunks(64) {
        if let Err(error) = store.settle(chunk).await {
            count_store_error(&error);
            log_store_failure(&error, false);
        }
    }
}
