//! # floodgate-store
//!
//! Where per-key rate-limit state lives. The [`Store`] trait is what the tower middleware and the
//! `floodgate` service talk to; [`MemoryStore`] is the embedded, sharded, in-process store (one
//! authority per process), and [`KeyedLimiter`] (from [`MemoryStore::limiter`]) its
//! allocation-free handle on one rule's keys, for callers that check one rule per request. The
//! Redis store (feature `redis`) implements the same trait.
//!
//! A check is a *batch* of [`CheckItem`]s decided all-or-nothing: the batch is admitted only if
//! every item admits, and when any item denies nothing is consumed in any item. One request that
//! matches a per-user and a per-route rule is therefore either charged to both or to neither.
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::{AlgorithmKind, ManualClock, Policy};
//! use floodgate_store::{CheckItem, MemoryStore, MemoryStoreConfig};
//!
//! let clock = ManualClock::new(1_700_000_000_000_000);
//! let store = MemoryStore::new(MemoryStoreConfig::default(), Arc::new(clock.clone()));
//! let policy = Policy::new(AlgorithmKind::Gcra, "2/s".parse().unwrap()).unwrap();
//! let item = CheckItem { rule: "per-user", policy: &policy, key: "user=alice", cost: 1 };
//! assert!(store.check_now(&[item]).unwrap().allowed);
//! assert!(store.check_now(&[item]).unwrap().allowed);
//! let third = store.check_now(&[item]).unwrap();
//! assert!(!third.allowed);
//! assert_eq!(third.decisions[0].retry_after, Some(500_000));
//! clock.advance(500_000);
//! assert!(store.check_now(&[item]).unwrap().allowed);
//! ```

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use floodgate_core::{Decision, Micros, Policy, Timestamp};

#[cfg(feature = "redis")]
mod any;
pub mod calendar;
pub mod error;
pub mod fallback;
pub mod memory;
pub mod per_second;
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "redis")]
pub use any::AnyStore;
pub use error::StoreError;
#[cfg(feature = "tokio")]
pub use memory::Jitter;
pub use memory::{KeyedLimiter, MemoryStore, MemoryStoreConfig, StoreStats};

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
/// Every [`Store`] implementation calls this first in `check` and `peek`.
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

/// The answer to a reservation batch ([`Store::reserve`]).
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

/// One item of a settle ([`Store::settle`]): the reservation of `reserved` units for
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

/// A place that keeps per-key state and decides check batches atomically.
///
/// Implementations must make each batch one atomic step with respect to every other operation on
/// the same keys (no lost updates, no partial consumption), read time from their own clock, and
/// never hold a lock across an `.await`.
pub trait Store: Send + Sync + 'static {
    /// Checks every item and, when all admit, consumes all of them; otherwise consumes nothing.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of the items naming one
    /// `(rule, key)` exceeds its policy's capacity (see [`validate_batch`]; raised before any
    /// state is touched); [`StoreError::Unavailable`] /
    /// [`StoreError::Timeout`] from remote stores.
    fn check(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send;

    /// Answers what [`Store::check`] would answer for `items`, consuming nothing.
    ///
    /// # Errors
    /// As [`Store::check`].
    fn peek(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send;

    /// Forgets the state of `key` under rule `rule` and its policy `policy` (it becomes a fresh
    /// key), the state [`Store::check`] keeps for items with these three values. Returns
    /// whether any state was held. A store may forget the key under the rule's other policies
    /// too ([`MemoryStore`] does; the Redis store cannot name them and leaves them to expire).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] from remote stores.
    fn reset(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The current standing of `key` under `rule`: a cost-0 peek (`allowed: true`, the current
    /// `remaining` and `reset_after`). For admin APIs.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] from remote stores.
    fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Whether the store holds live state for `key` under `rule` and `policy`: `Some(false)`
    /// for a key never charged (or only peeked, or expired), whose standing is a fresh key's
    /// full quota; `None` when this store cannot tell (the default). For admin APIs, which
    /// tell an unknown key from one whose quota is full again.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] from remote stores.
    fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<Option<bool>, StoreError>> + Send {
        let _ = (rule, policy, key);
        std::future::ready(Ok(None))
    }

    /// A check that may wait: reserves every item for the shortest wait after which all of
    /// them fit, when that is at most `max_wait` microseconds (clamped per item to
    /// [`Policy::max_wait`]), consuming the units now for that time; otherwise denies as
    /// [`Store::check`] does, consuming nothing. `max_wait = 0` answers exactly as a check.
    /// All or nothing, like a check. See `docs/spec/reservations.md`.
    ///
    /// The default (a store without reservations) returns [`StoreError::Unsupported`].
    ///
    /// # Errors
    /// As [`Store::check`].
    fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: Micros,
    ) -> impl Future<Output = Result<BatchReservation, StoreError>> + Send {
        let _ = (items, max_wait);
        std::future::ready(Err(StoreError::Unsupported {
            operation: "reserve",
        }))
    }

    /// Settles reservations with their actual costs, each item atomically: gives back
    /// `reserved - actual` (never beyond what the state can hold), or charges
    /// `actual - reserved` unconditionally (up to the bounded debt of one capacity). Returns
    /// each key's standing afterwards (a cost-0 peek), in order.
    ///
    /// The default (a store without reservations) returns [`StoreError::Unsupported`].
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when an item's `reserved` exceeds its policy's
    /// capacity (nothing is settled); [`StoreError::Unavailable`] / [`StoreError::Timeout`]
    /// from remote stores.
    fn settle(
        &self,
        items: &[SettleItem<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        let _ = items;
        std::future::ready(Err(StoreError::Unsupported {
            operation: "settle",
        }))
    }

    /// Claims `id` for `ttl` microseconds: `true` the first time, `false` while an earlier
    /// claim of the same `id` stands (until its `ttl` ends). Atomic across every process
    /// sharing the store: of two concurrent claims exactly one gets `true`. What the service
    /// uses so that a reservation token is settled at most once (`floodgate_tower::Reservation`);
    /// `id` is opaque to the store (the service passes a token's random id). A `ttl` of 0 is
    /// read as 1 microsecond.
    ///
    /// The default (a store without claims) returns [`StoreError::Unsupported`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] from remote stores (then nothing
    /// is known about the claim: the caller must not settle).
    fn claim(
        &self,
        id: &str,
        ttl: Micros,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (id, ttl);
        std::future::ready(Err(StoreError::Unsupported { operation: "claim" }))
    }

    /// Gives rule `rule` a cap of its own on the keys it holds (all its policies together),
    /// inside the store's own cap; `None` removes it. Returns whether this store keeps such
    /// caps: `false` (the default) for a store without them, which ignores the call, so a
    /// caller can say that the caps it was given do not apply. [`MemoryStore`] keeps them
    /// ([`MemoryStore::set_rule_max_keys`] says when a new cap applies).
    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        let _ = (rule, max_keys);
        false
    }

    /// The store's size and counters ([`MemoryStore::stats`], which also publishes the
    /// `floodgate_store_keys` gauge), for metrics and status pages; `None` (the default) for a
    /// store that does not count its keys (Redis expires them on its own).
    fn stats(&self) -> Option<StoreStats> {
        None
    }
}

/// Rejects settle items whose `reserved` exceeds their policy's capacity (no reservation was
/// ever that large), before any state is touched. Every [`Store::settle`] calls it first.
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

impl<S: Store> Store for Arc<S> {
    fn check(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send {
        (**self).check(items)
    }

    fn peek(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send {
        (**self).peek(items)
    }

    fn reset(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).reset(rule, policy, key)
    }

    fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        (**self).inspect(rule, policy, key)
    }

    fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<Option<bool>, StoreError>> + Send {
        (**self).holds(rule, policy, key)
    }

    fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: Micros,
    ) -> impl Future<Output = Result<BatchReservation, StoreError>> + Send {
        (**self).reserve(items, max_wait)
    }

    fn settle(
        &self,
        items: &[SettleItem<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        (**self).settle(items)
    }

    fn claim(
        &self,
        id: &str,
        ttl: Micros,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).claim(id, ttl)
    }

    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        (**self).set_rule_max_keys(rule, max_keys)
    }

    fn stats(&self) -> Option<StoreStats> {
        (**self).stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::AlgorithmKind;

    fn policy(quota: &str) -> Policy {
        Policy::new(AlgorithmKind::FixedWindow, quota.parse().unwrap()).unwrap()
    }

    fn item<'a>(rule: &'a str, policy: &'a Policy, key: &'a str, cost: u64) -> CheckItem<'a> {
        CheckItem {
            rule,
            policy,
            key,
            cost,
        }
    }

    #[test]
    fn validate_batch_sums_costs_per_rule_and_key() {
        let ten = policy("10/min");
        let five = policy("5/min");
        assert_eq!(validate_batch(&[]), Ok(()));
        assert_eq!(validate_batch(&[item("r", &ten, "k", 10)]), Ok(()));
        // 6 + 4 = 10 fits exactly; 6 + 6 = 12 never can.
        assert_eq!(
            validate_batch(&[item("r", &ten, "k", 6), item("r", &ten, "k", 4)]),
            Ok(())
        );
        let err = validate_batch(&[
            item("r", &ten, "other", 9),
            item("r", &ten, "k", 6),
            item("s", &ten, "k", 9),
            item("r", &ten, "k", 6),
        ]);
        assert_eq!(
            err,
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: 12,
                capacity: 10,
            })
        );
        // A single item above capacity, as before.
        assert_eq!(
            validate_batch(&[item("r", &five, "k", 6)]),
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: 6,
                capacity: 5,
            })
        );
        // Mixed policies on one (rule, key): the smaller capacity applies.
        assert_eq!(
            validate_batch(&[item("r", &ten, "k", 3), item("r", &five, "k", 3)]),
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: 6,
                capacity: 5,
            })
        );
        // Sums saturate instead of wrapping round to a small number.
        let huge = policy("1000/min");
        assert_eq!(
            validate_batch(&[item("r", &huge, "k", u64::MAX), item("r", &huge, "k", 2)]),
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: u64::MAX,
                capacity: 1000,
            })
        );
    }
}
