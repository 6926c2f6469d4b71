//! The [`Store`] trait every store implements (and `Arc` of one).

use std::future::Future;
use std::sync::Arc;

use floodgate_core::{Decision, Micros, Policy, Timestamp};

use crate::error::StoreError;
use crate::items::{BatchDecision, BatchReservation, CheckItem, SettleItem};
use crate::memory::StoreStats;
use crate::ready::{Readiness, ReadyState};

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
    /// `(rule, key)` exceeds its policy's capacity (see [`validate_batch`](crate::validate_batch); raised before any
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
    /// too ([`MemoryStore`](crate::MemoryStore) does; the Redis store cannot name them and leaves them to expire).
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
    /// caller can say that the caps it was given do not apply. [`MemoryStore`](crate::MemoryStore) keeps them
    /// ([`MemoryStore::set_rule_max_keys`](crate::MemoryStore::set_rule_max_keys) says when a new cap applies).
    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        let _ = (rule, max_keys);
        false
    }

    /// The store's size and counters ([`MemoryStore::stats`](crate::MemoryStore::stats), which also publishes the
    /// `floodgate_store_keys` gauge), for metrics and status pages; `None` (the default) for a
    /// store that does not count its keys (Redis expires them on its own).
    fn stats(&self) -> Option<StoreStats> {
        None
    }

    /// Whether other processes share this store's state (every instance on one Redis): then
    /// what the processes must agree on (the reservation secret) goes through it
    /// ([`Store::shared_secret`]), and a claim made here holds for all of them. `false` (the
    /// default) for a store in this process.
    fn is_shared(&self) -> bool {
        false
    }

    /// The secret every process sharing the store signs with: the one stored, or `candidate`
    /// stored atomically when none is yet (so all of them end up with the same). `None` (the
    /// default) for a store not shared between processes, through which nothing is shared.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] from remote stores.
    fn shared_secret(
        &self,
        candidate: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        let _ = candidate;
        std::future::ready(Ok(None))
    }

    /// What a readiness probe reports ([`ReadyState`]): [`Readiness::NotChecked`] and no shards
    /// (the default) for a store in this process, else whether the remote store answers and,
    /// for a store spread over shards (a Redis Cluster), each shard's recent calls.
    fn ready_state(&self) -> impl Future<Output = ReadyState> + Send {
        std::future::ready(ReadyState::of(Readiness::NotChecked))
    }

    /// Drops some expired state, as of `now`: what a store whose keys do not expire on their
    /// own needs now and then (`floodgate serve` calls it every 100 ms; the memory store
    /// sweeps one shard of each rule). Nothing (the default) for a store whose keys carry
    /// their own TTL.
    fn sweep_some(&self, now: Timestamp) {
        let _ = now;
    }

    /// For a store with a local fallback ([`FallbackStore`](crate::fallback::FallbackStore)):
    /// the count each limit is divided by while the primary fails. `None` (the default)
    /// without a fallback.
    fn fallback_instances(&self) -> Option<u64> {
        None
    }

    /// Decides `items` as a [`Store::check`] whose primary call failed with `error`, without
    /// asking the primary again: a store with a local fallback
    /// ([`FallbackStore`](crate::fallback::FallbackStore)) decides them there, under the
    /// divided limits, as its own `check` would have; any other store (the default) returns
    /// `error`. For a caller whose own call to the primary failed (a quota lease's take), so
    /// that its items follow the fallback as a plain check does.
    ///
    /// # Errors
    /// `error`, when there is no fallback or it cannot decide these items.
    fn fallback_check(
        &self,
        items: &[CheckItem<'_>],
        error: StoreError,
    ) -> Result<BatchDecision, StoreError> {
        let _ = items;
        Err(error)
    }

    /// The longest one call to this store may take before it fails with
    /// [`StoreError::Timeout`]: what a request waiting for another request's call (a quota
    /// lease's take) waits at most. `None` (the default) for a store in this process, whose
    /// calls never wait on I/O.
    fn round_trip_deadline(&self) -> Option<std::time::Duration> {
        None
    }
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

    fn is_shared(&self) -> bool {
        (**self).is_shared()
    }

    fn shared_secret(
        &self,
        candidate: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        (**self).shared_secret(candidate)
    }

    fn ready_state(&self) -> impl Future<Output = ReadyState> + Send {
        (**self).ready_state()
    }

    fn sweep_some(&self, now: Timestamp) {
        (**self).sweep_some(now);
    }

    fn fallback_instances(&self) -> Option<u64> {
        (**self).fallback_instances()
    }

    fn fallback_check(
        &self,
        items: &[CheckItem<'_>],
        error: StoreError,
    ) -> Result<BatchDecision, StoreError> {
        (**self).fallback_check(items, error)
    }

    fn round_trip_deadline(&self) -> Option<std::time::Duration> {
        (**self).round_trip_deadline()
    }
}
