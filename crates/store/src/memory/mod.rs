//! [`MemoryStore`]: the embedded store, one authority per process, safe for many threads; and
//! [`KeyedLimiter`], its handle for one rule, the allocation-free hot path.
//!
//! # Layout
//! - One **table per rule**: per `(rule name, policy)` pair the store has seen, created on
//!   first use and kept for the store's life (a few KiB of shard locks; a table whose keys
//!   have all expired and been swept frees its buckets). A table knows its algorithm and
//!   quota, so it holds that algorithm's own state type and derives each key's expiry from the
//!   state (see below). Two rules never share state, even for equal keys, and a rule whose
//!   policy changes (another algorithm or quota) gets a new, empty table: no state is ever
//!   read under a policy it was not made by. The tables are found through a small append-only
//!   registry read without any lock (a linked list of `OnceLock`s); [`MemoryStore::limiter`]
//!   resolves the rule once and returns a [`KeyedLimiter`] that skips even that.
//! - A table is `shards` (a power of two, default 64) cache-line-aligned spin locks, each over
//!   a `hashbrown::HashTable` of `(fingerprint, state)` entries (`fpmap.rs`) that takes the
//!   fingerprint itself as its hash (it is already a uniform secret hash: no second hashing)
//!   and recognises an entry by comparing the stored fingerprint. Taking a lock is one
//!   compare-and-swap, releasing it a plain store; a waiter spins 128 times, then yields its
//!   core (a holder may have been preempted). A batch locks only the shards its items hash
//!   to, in increasing `(table, shard)` order (so two batches can never deadlock), decides
//!   everything, writes back and unlocks: the critical section is a few look-ups and integer
//!   decisions, never I/O, an allocation other than a table growing, or an `.await`.
//! - Map key: a 64-bit fingerprint of the client key alone (the table already stands for the
//!   rule): SipHash-1-3 under a random per-process 128-bit secret (the `siphasher` crate's
//!   one-shot `SipHasher13::hash`, one pass over the bytes with no streaming buffer). It is
//!   fixed size whatever the key length (no heap allocation per key, no attacker-controlled
//!   memory per key). Two distinct keys of one rule share state only if their fingerprints
//!   collide: about `n^2 / 2^65` for `n` keys held at once by that rule (3 x 10^-8 at a
//!   million keys, 3 x 10^-4 at a hundred million), and because SipHash is a keyed
//!   pseudo-random function (Aumasson and Bernstein, 2012), an attacker who does not know the
//!   secret cannot aim at a collision faster than by chance. (A 128-bit fingerprint would
//!   make that 10^-26, at 8 more bytes per key: about 17 more bytes per key at a million
//!   keys.) Bits 32 and up choose the shard; the shard's table takes its bucket index from
//!   the low bits and its 7-bit control tag from the top 7. The price: the store cannot list
//!   key names.
//! - A bucket is the fingerprint and the state, nothing else, for five algorithms: the time
//!   from which a state decides exactly like a fresh key is a function of the state and the
//!   quota (GCRA: its arrival time; token and leaky bucket: the last refill or leak plus the
//!   time to refill or drain; fixed window: the end of the window; sliding window counter: the
//!   last microsecond of the next window). Only the sliding log stores its expiry (8 bytes).
//!   A bucket is **24 bytes** for the token bucket, leaky bucket and fixed window, 32 for
//!   GCRA (its arrival time in whole microseconds and ticks, and its last admission time,
//!   which a stale `now` is read as) and the sliding window counter, 80 plus the log's heap
//!   buffer for the sliding log (checked by a unit test), plus hashbrown's 1 control byte per bucket. A table keeps at
//!   most 7/8 of its buckets in use and doubles past it (so 7/16 to 7/8 are live after its
//!   first growth); at a million keys a shard of about 15,600 keys has 32,768 buckets (48%
//!   full), so a key costs about `25 / 0.48 = 52` bytes, a GCRA or sliding window key 69
//!   (`floodgate bench --what memory` measures both with allocator overhead). A sweep that
//!   leaves a table empty frees its buckets, one that leaves it at most 1/8 full shrinks it.
//!
//! # Expiry and the cap
//! A key's expiry is the time from which its state decides exactly like a fresh key's, so
//! dropping it changes no decision; it only grows while the key lives. Expired entries are
//! dropped lazily when a batch touches them (a one-item check reuses the slot in place), by
//! [`MemoryStore::sweep`] (one shard index per call, bounded work), and when the store is full
//! and a new key needs room. **Nothing else is ever dropped**: a live key (one that still
//! counts consumption, limited or not) is never evicted, because eviction would forgive it
//! ("evict-to-reset"). When the store is full of live keys, a new key is handled by
//! [`OnFull`](crate::OnFull).
//!
//! `max_keys` is an exact hard cap on the keys held by the whole store (every rule's table
//! together), counted with one atomic that changes only when a key is added or dropped (never
//! on a check of an existing key). When it is reached, the expired entries of the shards the
//! batch has locked are dropped first; expired entries in other shards are reclaimed by the
//! periodic sweep.
//!
//! A rule may also have a cap of its own ([`MemoryStore::set_rule_max_keys`]), so that one
//! rule flooded with new keys cannot take the others' room: every rule name has its own key
//! count beside the store's, changed at the same moments (a new key reserves room in both, or
//! in neither; the table that drops a key takes it off its rule's count), so a check of a held
//! key still touches no counter. When a rule's own cap is reached, the expired entries of
//! every shard of that rule are dropped first (O(1) per shard when none has expired).
//!
//! # Files
//! `config.rs` (settings, stats), `registry.rs` (the rule tables), `shared.rs` (what every
//! table shares: caps, counters, the one-item decision), `table.rs` and `fpmap.rs` (one rule's
//! shards), `batch.rs` (a batch of several items), `reserve.rs` (reservations and settles),
//! `keyed.rs` ([`KeyedLimiter`]), `claims.rs` (reservation claims).

mod batch;
mod calendar_expiry;
mod claims;
mod config;
mod fpmap;
mod keyed;
mod registry;
mod reserve;
mod shared;
mod table;
#[cfg(feature = "tokio")]
mod until_ready;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use floodgate_core::{Clock, Decision, Micros, Policy, Timestamp};
use parking_lot::Mutex;
use siphasher::sip::SipHasher13;

use crate::{BatchDecision, BatchReservation, CheckItem, SettleItem, Store, StoreError};
pub use config::{MemoryStoreConfig, StoreStats};
pub use keyed::KeyedLimiter;
use registry::{Registry, RuleEntry};
use shared::{Counters, Fingerprinter, Shared};
#[cfg(feature = "tokio")]
pub use until_ready::Jitter;

/// The embedded, sharded, in-process [`Store`]. See the [module docs](self) for the layout,
/// expiry and the key cap.
///
/// Time comes from the injected [`Clock`]; the `*_at` methods take `now` from the caller instead
/// (for simulations). All methods are synchronous and quick; the [`Store`] impl wraps them in
/// ready futures.
///
/// # Examples
/// A request checked against two rules at once: both are charged, or neither.
///
/// ```
/// use std::sync::Arc;
/// use floodgate_core::{AlgorithmKind, ManualClock, Policy};
/// use floodgate_store::{CheckItem, MemoryStore};
///
/// let t0 = 1_700_000_000_000_000;
/// let clock = ManualClock::new(t0);
/// let store = MemoryStore::with_clock(Arc::new(clock.clone()));
/// let per_user = Policy::new(AlgorithmKind::Gcra, "2/s".parse().unwrap()).unwrap();
/// let global = Policy::new(AlgorithmKind::FixedWindow, "100/min".parse().unwrap()).unwrap();
/// let request = [
///     CheckItem { rule: "per-user", policy: &per_user, key: "user=alice", cost: 1 },
///     CheckItem { rule: "global", policy: &global, key: "all", cost: 1 },
/// ];
/// assert!(store.check_now(&request).unwrap().allowed);
/// assert!(store.check_now(&request).unwrap().allowed);
/// // The third within the second: the per-user rule denies, and the global rule is not charged.
/// let denied = store.check_now(&request).unwrap();
/// assert!(!denied.allowed);
/// assert_eq!(denied.decisions[0].retry_after, Some(500_000));
/// assert_eq!(store.inspect_at("global", &global, "all", t0).remaining, 98);
/// clock.advance(500_000);
/// assert!(store.check_now(&request).unwrap().allowed);
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    sweep_cursor: AtomicUsize,
    /// Reservation claims ([`Store::claim`]).
    claims: claims::Claims,
}

impl MemoryStore {
    /// A store with `config`, reading time from `clock`.
    pub fn new(config: MemoryStoreConfig, clock: Arc<dyn Clock>) -> Self {
        let max_keys = config.max_keys.max(1);
        let mut n = config.shards.max(1).next_power_of_two();
        while n > max_keys {
            n /= 2;
        }
        // Two outputs of std's randomly keyed SipHash make a per-process secret.
        let random = std::hash::RandomState::new();
        let fingerprinter = Fingerprinter(SipHasher13::new_with_keys(
            random.hash_one(0x5eed_u64),
            random.hash_one(0xf100d_u64),
        ));
        Self {
            shared: Arc::new(Shared {
                clock,
                fingerprinter,
                config: MemoryStoreConfig {
                    max_keys,
                    shards: n,
                    ..config
                },
                keys: AtomicUsize::new(0),
                counters: Counters::default(),
                registry: Registry::default(),
                rule_keys: Mutex::new(HashMap::new()),
                expirations_metric: OnceLock::new(),
            }),
            sweep_cursor: AtomicUsize::new(0),
            claims: claims::Claims::new(config.max_claims),
        }
    }

    /// A store with the default configuration reading time from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self::new(MemoryStoreConfig::default(), clock)
    }
}

/// The default configuration on the system clock ([`floodgate_core::SystemClock`]).
impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_clock(Arc::new(floodgate_core::SystemClock))
    }
}

impl MemoryStore {
    /// The configuration in force (`shards` and `max_keys` as adjusted by [`MemoryStore::new`]).
    pub fn config(&self) -> &MemoryStoreConfig {
        &self.shared.config
    }

    /// The clock the store reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// Gives rule `rule` a cap of its own: at most `max_keys` keys held under that rule name
    /// (all its policies together), inside the store's [`MemoryStoreConfig::max_keys`], so a
    /// flood of new keys on one rule cannot take the room of the others. `None` removes it
    /// (only the store's cap applies). May be called at any time (a configuration reload): a
    /// new cap applies to the next new key; keys already held are never dropped, so a cap set
    /// below the rule's current count refuses new keys until enough of them expire. A new key
    /// that meets the rule's cap is handled by [`MemoryStoreConfig::on_full`] exactly as one
    /// that meets the store's.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use floodgate_core::{AlgorithmKind, ManualClock, Policy};
    /// use floodgate_store::{CheckItem, MemoryStore};
    ///
    /// let store = MemoryStore::with_clock(Arc::new(ManualClock::new(1_700_000_000_000_000)));
    /// store.set_rule_max_keys("api", Some(2));
    /// let p = Policy::new(AlgorithmKind::Gcra, "10/s".parse().unwrap()).unwrap();
    /// let check = |rule, key| store.check_one(&CheckItem { rule, policy: &p, key, cost: 1 });
    /// assert!(check("api", "a").unwrap().allowed);
    /// assert!(check("api", "b").unwrap().allowed);
    /// assert!(!check("api", "c").unwrap().allowed); // the rule's cap
    /// assert!(check("web", "c").unwrap().allowed); // another rule keeps its room
    /// assert_eq!(store.rule_keys("api"), 2);
    /// ```
    pub fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) {
        let keys = self.shared.rule_keys(rule);
        keys.max
            .store(max_keys.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// Keys held now under rule name `rule` (all its policies; expired ones not yet dropped
    /// included); 0 for a rule never seen.
    pub fn rule_keys(&self, rule: &str) -> usize {
        let all = self.shared.rule_keys.lock();
        all.get(rule).map_or(0, |k| k.held.load(Ordering::Relaxed))
    }

    /// Whether the store holds live state for `key` under `rule` and `policy` (an expired
    /// entry, which decides exactly like a fresh key, is not live). A key never seen, or one
    /// only ever peeked, is not held.
    pub fn holds_at(&self, rule: &str, policy: &Policy, key: &str, now: Timestamp) -> bool {
        let fp = self.shared.fingerprint(key);
        self.shared
            .registry
            .find(rule, policy)
            .is_some_and(|e| e.table.get_live(fp, now).is_some())
    }

    /// A handle on the keys of rule `rule` under `policy`: checks through it skip the rule
    /// look-up and hash only the client key. It shares state with every other path of this
    /// store: `limiter(rule, &p).check(key, c)` and `check_one(&CheckItem { rule, policy: &p,
    /// key, cost: c })` decide on the same state, and the key cap, counters and sweeps cover
    /// it. Cheap to clone; holding one keeps the rule's table alive even after the store is
    /// dropped (it then only lacks sweeps).
    ///
    /// The rule's table is created on first use of `(rule, policy)`; a different policy under
    /// the same name (another algorithm or quota) is a different, initially empty table.
    ///
    /// Design: this is the in-process counterpart of governor's keyed `RateLimiter`. Resolving
    /// the rule once moves its name out of the per-check hash, and the handle knows its
    /// algorithm, so a check is one SipHash of the key, one shard lock, one probe and the
    /// algorithm's integer decision, with no allocation.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use floodgate_core::{AlgorithmKind, ManualClock, Policy};
    /// use floodgate_store::MemoryStore;
    ///
    /// let clock = ManualClock::new(1_700_000_000_000_000);
    /// let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    /// let policy = Policy::new(AlgorithmKind::Gcra, "2/s".parse().unwrap()).unwrap();
    /// let per_user = store.limiter("per-user", &policy);
    /// assert!(per_user.check("user=alice", 1).unwrap().allowed);
    /// assert!(per_user.check("user=alice", 1).unwrap().allowed);
    /// assert_eq!(per_user.check("user=alice", 1).unwrap().retry_after, Some(500_000));
    /// clock.advance(500_000);
    /// assert!(per_user.check("user=alice", 1).unwrap().allowed);
    /// ```
    pub fn limiter(&self, rule: &str, policy: &Policy) -> KeyedLimiter {
        let entry = self.entry(rule, policy);
        KeyedLimiter {
            shared: Arc::clone(&self.shared),
            table: Arc::clone(&entry.table),
            rule: Arc::clone(&entry.rule),
            policy: entry.policy.clone(),
            capacity: entry.policy.capacity(),
        }
    }

    #[inline]
    fn entry(&self, rule: &str, policy: &Policy) -> &RuleEntry {
        self.shared
            .registry
            .get_or_insert(rule, policy, self.shared.config.shards, || {
                self.shared.rule_keys(rule)
            })
    }

    /// [`Store::check`] at the clock's current time, synchronously.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of one `(rule, key)` exceeds
    /// its policy's capacity (see [`crate::validate_batch`]).
    pub fn check_now(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        self.check_at(items, self.shared.clock.now())
    }

    /// [`Store::check`] at a caller-supplied `now` (microseconds since the epoch).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of one `(rule, key)` exceeds
    /// its policy's capacity (see [`crate::validate_batch`]).
    pub fn check_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreError> {
        self.run(items, now, true)
    }

    /// Checks one item at the clock's current time: the allocation-free path for the common
    /// one-rule request when the caller holds no [`KeyedLimiter`] (this one also finds the
    /// rule's table, a short scan of the rule registry). Same decision and state change as
    /// `check_now(&[item])` (whose [`BatchDecision`] costs a `Vec`); a new key refused because
    /// the store is full is the store's full denial (`allowed: false`, `retry_after` of
    /// [`MemoryStoreConfig::full_retry_after`]), counted in the metrics as usual; use
    /// [`MemoryStore::check_now`] to tell it apart.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use floodgate_core::{AlgorithmKind, ManualClock, Policy};
    /// use floodgate_store::{CheckItem, MemoryStore};
    ///
    /// let store = MemoryStore::with_clock(Arc::new(ManualClock::new(1_700_000_000_000_000)));
    /// let policy = Policy::new(AlgorithmKind::Gcra, "1/s".parse().unwrap()).unwrap();
    /// let item = CheckItem { rule: "per-user", policy: &policy, key: "user=alice", cost: 1 };
    /// assert!(store.check_one(&item).unwrap().allowed);
    /// assert_eq!(store.check_one(&item).unwrap().retry_after, Some(1_000_000));
    /// ```
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when `item.cost` exceeds its policy's capacity.
    pub fn check_one(&self, item: &CheckItem<'_>) -> Result<Decision, StoreError> {
        self.check_one_at(item, self.shared.clock.now())
    }

    /// [`MemoryStore::check_one`] at a caller-supplied `now`.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when `item.cost` exceeds its policy's capacity.
    pub fn check_one_at(
        &self,
        item: &CheckItem<'_>,
        now: Timestamp,
    ) -> Result<Decision, StoreError> {
        let capacity = item.policy.capacity();
        if item.cost > capacity {
            return Err(StoreError::InsufficientCapacity {
                rule: item.rule.to_string(),
                cost: item.cost,
                capacity,
            });
        }
        let entry = self.entry(item.rule, item.policy);
        let fp = self.shared.fingerprint(item.key);
        Ok(self
            .shared
            .single_any(&entry.table, fp, now, item.cost, true)
            .0)
    }

    /// [`Store::peek`] at the clock's current time, synchronously.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of one `(rule, key)` exceeds
    /// its policy's capacity (see [`crate::validate_batch`]).
    pub fn peek_now(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        self.peek_at(items, self.shared.clock.now())
    }

    /// [`Store::peek`] at a caller-supplied `now`.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of one `(rule, key)` exceeds
    /// its policy's capacity (see [`crate::validate_batch`]).
    pub fn peek_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreError> {
        self.run(items, now, false)
    }

    /// [`Store::reset`], synchronously: forgets `key` under rule `rule` (under every policy
    /// the rule has had). Returns whether live state was held.
    pub fn reset_key(&self, rule: &str, key: &str) -> bool {
        let now = self.shared.clock.now();
        let fp = self.shared.fingerprint(key);
        let mut live = false;
        for entry in self.shared.registry.iter().filter(|e| *e.rule == *rule) {
            live |= self
                .shared
                .remove(&entry.table, fp)
                .is_some_and(|expires_at| expires_at > now);
        }
        live
    }

    /// [`Store::inspect`] at a caller-supplied `now`: a cost-0 peek of `(rule, key)`.
    pub fn inspect_at(&self, rule: &str, policy: &Policy, key: &str, now: Timestamp) -> Decision {
        let fp = self.shared.fingerprint(key);
        let mut state = self
            .shared
            .registry
            .find(rule, policy)
            .and_then(|e| e.table.get_live(fp, now))
            .unwrap_or_else(|| policy.initial_state());
        policy.decide(&mut state, now, 0, false)
    }

    /// Drops the expired entries of one shard index (the next in turn) of every rule's table
    /// and returns how many. Call it periodically (e.g. every 100 ms): each call locks one
    /// shard per rule, one at a time, for at most `max_keys / shards` entry visits each, and
    /// skips a shard in O(1) when nothing in it can have expired yet. A full cycle takes
    /// `shards` calls.
    pub fn sweep(&self, now: Timestamp) -> usize {
        let i = self.sweep_cursor.fetch_add(1, Ordering::Relaxed);
        let dropped = self
            .shared
            .registry
            .iter()
            .map(|e| e.table.drop_expired(i & (e.table.shard_count() - 1), now))
            .sum();
        self.shared.count_expired(dropped);
        dropped
    }

    /// Runs [`MemoryStore::sweep`] over every shard once; returns the entries dropped.
    pub fn sweep_all(&self, now: Timestamp) -> usize {
        (0..self.shared.config.shards)
            .map(|_| self.sweep(now))
            .sum()
    }

    /// Current size and counters (no lock taken); also publishes the `floodgate_store_keys`
    /// gauge.
    pub fn stats(&self) -> StoreStats {
        let keys = self.shared.keys.load(Ordering::Relaxed);
        metrics::gauge!("floodgate_store_keys").set(keys as f64);
        let c = &self.shared.counters;
        StoreStats {
            keys,
            max_keys: self.shared.config.max_keys,
            shards: self.shared.config.shards,
            evictions: c.evictions.load(Ordering::Relaxed),
            expirations: c.expirations.load(Ordering::Relaxed),
            full_rejections: c.full_rejections.load(Ordering::Relaxed),
            full_untracked: c.full_untracked.load(Ordering::Relaxed),
        }
    }
}

impl Store for MemoryStore {
    /// Decided synchronously when called (no lock outlives the call); the future is ready.
    fn check(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl std::future::Future<Output = Result<BatchDecision, StoreError>> + Send {
        std::future::ready(self.check_now(items))
    }

    fn peek(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl std::future::Future<Output = Result<BatchDecision, StoreError>> + Send {
        std::future::ready(self.peek_now(items))
    }

    /// Forgets `key` under every policy the rule has had ([`MemoryStore::reset_key`]).
    fn reset(
        &self,
        rule: &str,
        _policy: &Policy,
        key: &str,
    ) -> impl std::future::Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(Ok(self.reset_key(rule, key)))
    }

    fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Decision, StoreError>> + Send {
        std::future::ready(Ok(self.inspect_at(
            rule,
            policy,
            key,
            self.shared.clock.now(),
        )))
    }

    fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Option<bool>, StoreError>> + Send {
        let now = self.shared.clock.now();
        std::future::ready(Ok(Some(self.holds_at(rule, policy, key, now))))
    }

    fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: Micros,
    ) -> impl std::future::Future<Output = Result<BatchReservation, StoreError>> + Send {
        std::future::ready(self.reserve_at(items, self.shared.clock.now(), max_wait))
    }

    fn settle(
        &self,
        items: &[SettleItem<'_>],
    ) -> impl std::future::Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        std::future::ready(self.settle_at(items, self.shared.clock.now()))
    }

    /// Claims are held in this process only: one `MemoryStore` is one authority, as for
    /// its counters (see the `claims` module for the bounds).
    fn claim(
        &self,
        id: &str,
        ttl: Micros,
    ) -> impl std::future::Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(self.claims.claim(id, self.shared.clock.now(), ttl))
    }

    /// [`MemoryStore::set_rule_max_keys`]: this store keeps them.
    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        MemoryStore::set_rule_max_keys(self, rule, max_keys);
        true
    }

    /// [`MemoryStore::stats`].
    fn stats(&self) -> Option<StoreStats> {
        Some(MemoryStore::stats(self))
    }

    /// [`MemoryStore::sweep`].
    fn sweep_some(&self, now: Timestamp) {
        self.sweep(now);
    }
}

#[cfg(test)]
mod tests;
