//! [`KeyedLimiter`]: a handle on one rule's keys, the allocation-free hot path.

use std::sync::Arc;

use floodgate_core::{Decision, Policy, Timestamp};

use super::shared::Shared;
use super::table::AnyTable;
use crate::StoreError;

/// A handle on one rule's keys in a [`MemoryStore`](super::MemoryStore), from
/// [`MemoryStore::limiter`](super::MemoryStore::limiter): the allocation-free hot path.
/// `Clone`, `Send` and `Sync`: share it between threads (clones are two reference-count
/// increments and share the same state).
///
/// # Examples
/// Four threads share one handle; of their 20 checks of one key, exactly the limit is
/// admitted.
///
/// ```
/// use std::sync::Arc;
/// use floodgate_core::{AlgorithmKind, ManualClock, Policy};
/// use floodgate_store::MemoryStore;
///
/// let t0 = 1_700_000_000_000_000;
/// let store = MemoryStore::with_clock(Arc::new(ManualClock::new(t0)));
/// let policy = Policy::new(AlgorithmKind::FixedWindow, "10/s".parse().unwrap()).unwrap();
/// let per_key = store.limiter("per-api-key", &policy);
/// let workers: Vec<_> = (0..4)
///     .map(|_| {
///         let limiter = per_key.clone();
///         std::thread::spawn(move || {
///             (0..5).filter(|_| limiter.check("key=k1", 1).unwrap().allowed).count()
///         })
///     })
///     .collect();
/// let admitted: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
/// assert_eq!(admitted, 10);
/// assert_eq!(per_key.peek_at("key=k1", 0, t0).unwrap().remaining, 0);
/// assert!(per_key.reset("key=k1")); // a fresh key again
/// assert!(per_key.check("key=k1", 1).unwrap().allowed);
/// ```
#[derive(Debug, Clone)]
pub struct KeyedLimiter {
    pub(super) shared: Arc<Shared>,
    pub(super) table: Arc<AnyTable>,
    pub(super) rule: Arc<str>,
    pub(super) policy: Policy,
    pub(super) capacity: u64,
}

impl KeyedLimiter {
    /// Checks `cost` units for client `key` at the store clock's current time and consumes
    /// them if admitted. Cost 0 reports the remaining allowance and consumes nothing. Same
    /// decision and state change as [`MemoryStore::check_one`](super::MemoryStore::check_one)
    /// on this rule and policy, including the store's full denial for a new key when the store
    /// holds `max_keys` live keys (with [`OnFull::Reject`](crate::OnFull::Reject)).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when `cost` exceeds the policy's capacity.
    #[inline]
    pub fn check(&self, key: &str, cost: u64) -> Result<Decision, StoreError> {
        self.check_at(key, cost, self.shared.clock.now())
    }

    /// [`KeyedLimiter::check`] at a caller-supplied `now` (microseconds since the epoch).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when `cost` exceeds the policy's capacity.
    #[inline]
    pub fn check_at(&self, key: &str, cost: u64, now: Timestamp) -> Result<Decision, StoreError> {
        self.decide(key, cost, now, true)
    }

    /// What [`KeyedLimiter::check_at`] would answer, consuming nothing.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when `cost` exceeds the policy's capacity.
    pub fn peek_at(&self, key: &str, cost: u64, now: Timestamp) -> Result<Decision, StoreError> {
        self.decide(key, cost, now, false)
    }

    /// Forgets `key` under this rule and policy (it becomes a fresh key). Returns whether live
    /// state was held.
    pub fn reset(&self, key: &str) -> bool {
        let now = self.shared.clock.now();
        let fp = self.shared.fingerprint(key);
        self.shared
            .remove(&self.table, fp)
            .is_some_and(|expires_at| expires_at > now)
    }

    /// The rule name this handle checks.
    pub fn rule(&self) -> &str {
        &self.rule
    }

    /// The policy this handle checks.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    #[inline]
    fn decide(
        &self,
        key: &str,
        cost: u64,
        now: Timestamp,
        commit: bool,
    ) -> Result<Decision, StoreError> {
        if cost > self.capacity {
            return Err(self.too_costly(cost));
        }
        let fp = self.shared.fingerprint(key);
        Ok(self.shared.single_any(&self.table, fp, now, cost, commit).0)
    }

    #[cold]
    fn too_costly(&self, cost: u64) -> StoreError {
        StoreError::InsufficientCapacity {
            rule: self.rule.to_string(),
            cost,
            capacity: self.capacity,
        }
    }
}
