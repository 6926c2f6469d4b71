//! What a check or a settle is made of ([`CheckItem`], [`SettleItem`]), what it answers
//! ([`BatchDecision`], [`BatchReservation`]), the checks every store makes first and what a full
//! store does ([`OnFull`]): a leaf below the stores and the [`Store`](crate::Store) trait.

use std::fmt;
use std::str::FromStr;

use floodgate_core::{Decision, Micros, Policy, Timestamp};

use crate::error::StoreError;

/// One item of a check batch: charge `cost` units to partition `key` of rule `rule`.
///
/// `key` is the already-encoded partition key (see `floodgate_tower::key`); the store treats it
/// as opaque bytes. State is identified by `(rule, policy, key)` in every store: two rules never
/// share state even when their keys are equal, and a rule given a new algorithm or quota (limit,
/// period or burst) starts from fresh keys, since a state means something else under another
/// policy (the old state expires on its own; going back to the old policy before then finds
/// it again).
#[derive(Debug, Clone, Copy)]
pub struct CheckItem<'a> {
    /// The rule's name, e.g. `"per-ip"`.
    pub rule: &'a str,
    /// The rule's algorithm and quota.
    pub policy: &'a Policy,
    /// The encoded partition key, e.g. `"ip=203.0.113.7"`.
    pub key: &'a str,
    /// Units to consume, `0..=policy.capacity()`. Cost 0 only reports the remaining allowance.
    pub cost: u64,
}

/// Rejects a batch that can never be admitted, before any state is touched.
///
/// Items naming the same `(rule, key)` share one state and are consumed together, so what must
/// fit is the *sum* of their costs: two items of cost 6 on one key of a capacity-10 policy ask
/// for 12 units at once, which no amount of waiting can grant (a denial with a `retry_after`
/// would be a lie). Costs are summed per `(rule, key)` (saturating at `u64::MAX`) and compared
/// with the capacity of that group's policy ([`Policy::capacity`]: the burst or the limit); if
/// items of one group carry different policies (which keep separate states), the smallest
/// capacity still applies: a conservative refusal of a batch no caller sends. Groups are
/// checked in order of their first item. `O(n²)` in the batch length, without allocation;
/// batches are a handful of items.
///
/// Every [`Store`](crate::Store) implementation calls this first in `check` and `peek`.
///
/// # Errors
/// [`StoreError::InsufficientCapacity`] for the first group whose summed cost exceeds its
/// capacity, carrying the rule name, the summed `cost` and the `capacity`.
pub fn validate_batch(items: &[CheckItem<'_>]) -> Result<(), StoreError> {
    for (i, item) in items.iter().enumerate() {
        let same = |other: &&CheckItem<'_>| other.rule == item.rule && other.key == item.key;
        // Only the first item of a group does the work, so every group is reported once.
        if items[..i].iter().any(|o| same(&o)) {
            continue;
        }
        let (cost, capacity) =
            items[i..]
                .iter()
                .filter(same)
                .fold((0u64, u64::MAX), |(cost, capacity), o| {
                    (
                        cost.saturating_add(o.cost),
                        capacity.min(o.policy.capacity()),
                    )
                });
        if cost > capacity {
            return Err(StoreError::InsufficientCapacity {
                rule: item.rule.to_string(),
                cost,
                capacity,
            });
        }
    }
    Ok(())
}

/// The answer to a check (or peek) batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDecision {
    /// `true` when every item admitted; then (for a check) every item's cost was consumed.
    pub allowed: bool,
    /// One decision per item, in the order given.
    ///
    /// When the batch is admitted they are the decisions after consumption. When it is denied,
    /// nothing was consumed and each decision is a peek: items that would have admitted on their
    /// own say `allowed: true` with their unchanged `remaining`; the items that caused the denial
    /// say `allowed: false` with their `retry_after`. Items sharing `(rule, policy, key)` are
    /// decided in order, each seeing the earlier ones' (tentative) consumption.
    pub decisions: Vec<Decision>,
    /// `Some` when a new key could not be stored because the store was full of live keys, and
    /// what was done about it (see [`OnFull`]). `None` in the normal case.
    pub store_full: Option<OnFull>,
}

impl BatchDecision {
    /// Indices of the items that denied (empty when the batch was admitted).
    pub fn denied_items(&self) -> impl Iterator<Item = usize> + '_ {
        self.decisions
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.allowed)
            .map(|(i, _)| i)
    }
}

/// The answer to a reservation batch ([`Store::reserve`](crate::Store::reserve)).
///
/// Every item of a granted batch is reserved for the same `wait` after its key's effective
/// `now` (the store's `now`, or the later time a key last moved to when that `now` is stale:
/// "no time passed" for that key), so the caller runs the request once, `wait` microseconds
/// from now, and each rule counts it at that moment of its own time line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReservation {
    /// As for a check: `allowed` when every item's units were reserved; the decisions after
    /// the reservation (then `remaining` is 0 for a key holding units reserved for later), or
    /// the peeks when denied (nothing was consumed).
    pub batch: BatchDecision,
    /// Microseconds until the reserved units may be used: 0 when at once; `None` when denied.
    /// At most the `max_wait` asked for.
    pub wait: Option<Micros>,
    /// Per item, in order: the scheduled time (microseconds since the Unix epoch) it was
    /// reserved for (its key's effective `now` + `wait`; the same for every item unless a
    /// key's state is ahead of the store's `now`). Empty when denied. A settle passes each
    /// back ([`SettleItem::scheduled_at`]).
    pub scheduled_at: Vec<Timestamp>,
}

/// One item of a settle ([`Store::settle`](crate::Store::settle)): the reservation of `reserved` units for
/// `(rule, policy, key)` at `scheduled_at` actually cost `actual`.
///
/// The store trusts these values: a caller must only settle what it reserved (the service
/// signs its reservation tokens; see `docs/spec/reservations.md`).
#[derive(Debug, Clone, Copy)]
pub struct SettleItem<'a> {
    /// The rule's name.
    pub rule: &'a str,
    /// The rule's algorithm and quota (as reserved).
    pub policy: &'a Policy,
    /// The encoded partition key.
    pub key: &'a str,
    /// The units reserved: the item's `cost` in the reservation (`<= policy.capacity()`).
    pub reserved: u64,
    /// The units actually used: below `reserved` gives the difference back, above charges it.
    pub actual: u64,
    /// The item's [`BatchReservation::scheduled_at`] in the reservation.
    pub scheduled_at: Timestamp,
}

/// What a store does with a *new* key when it already holds `max_keys` live keys (none of which
/// may be evicted, because eviction would forgive a key that is still counting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnFull {
    /// Deny the batch (the new key's decision has `allowed: false`, `remaining: 0` and the
    /// store's `full_retry_after`). The default: the limiter keeps its promise that no key ever
    /// gets more than its quota, and a key-cardinality flood cannot switch limiting off. The cost
    /// is that new clients are refused while the store is full; it is counted in
    /// `floodgate_store_full_total{action="reject"}` so that it pages someone.
    #[default]
    Reject,
    /// Admit the request as if the key were fresh, without storing any state. Keeps new clients
    /// served, at the price that an attacker who fills the store is no longer limited on new
    /// keys. Counted in `floodgate_store_full_total{action="admit_untracked"}`.
    AdmitUntracked,
}

impl OnFull {
    /// `"reject"` or `"admit_untracked"`, as written in configuration and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFull::Reject => "reject",
            OnFull::AdmitUntracked => "admit_untracked",
        }
    }
}

impl fmt::Display for OnFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnFull {
    type Err = String;

    /// Accepts `reject` and `admit_untracked` (also with `-`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "reject" => Ok(OnFull::Reject),
            "admit_untracked" => Ok(OnFull::AdmitUntracked),
            _ => Err(format!(
                "unknown on_full {s:?}; expected \"reject\" or \"admit_untracked\""
            )),
        }
    }
}

/// Rejects settle items whose `reserved` exceeds their policy's capacity (no reservation was
/// ever that large), before any state is touched. Every [`Store::settle`](crate::Store::settle) calls it first.
///
/// # Errors
/// [`StoreError::InsufficientCapacity`] for the first such item.
pub fn validate_settle(items: &[SettleItem<'_>]) -> Result<(), StoreError> {
    for item in items {
        let capacity = item.policy.capacity();
        if item.reserved > capacity {
            return Err(StoreError::InsufficientCapacity {
                rule: item.rule.to_string(),
                cost: item.reserved,
                capacity,
            });
        }
    }
    Ok(())
}
