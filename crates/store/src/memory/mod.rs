//! [`MemoryStore`]: the embedded store, one authority per process, safe for many threads.
//!
//! # Layout
//! - `shards` (a power of two, default 64) cache-line-aligned `parking_lot::Mutex`es, each over a
//!   `hashbrown` map. A batch locks only the shards its items hash to, in increasing index order
//!   (so two batches can never deadlock), decides everything, writes back and unlocks: the
//!   critical section is a few map look-ups and integer decisions, never I/O or an `.await`.
//! - Map key: a 64-bit fingerprint of `(rule, key)`: SipHash-1-3 under a random per-process
//!   128-bit secret, over `len(rule) || rule || key`. It is fixed size whatever the key length
//!   (no heap allocation per key, no attacker-controlled memory per key). Two distinct keys
//!   share state only if their fingerprints collide: about `n^2 / 2^65` for `n` keys held at
//!   once (3 x 10^-8 at a million keys, 3 x 10^-4 at a hundred million), and an attacker who
//!   does not know the secret cannot aim at a collision. (A 128-bit fingerprint would make
//!   that 10^-26, at 8 more bytes per key: about 17 more bytes per key at a million keys.)
//!   Bits 32 and up choose the shard; the map uses the fingerprint as its hash, as it is. The
//!   price: the store cannot list key names.
//! - One map per algorithm in each shard, each holding that algorithm's own state type `S` and
//!   the time the entry becomes equivalent to a fresh key: stored beside the state
//!   (`Entry<S>`, 8 bytes), except for GCRA, whose expiry is its arrival time (`GcraSlot`).
//!   A bucket (fingerprint + entry) is **24 bytes** for GCRA, 32 for the token bucket, leaky
//!   bucket and fixed window, 40 for the sliding window counter, 72 plus the entries' heap
//!   buffer for the sliding log (checked by a unit test). hashbrown adds one control byte per
//!   bucket and keeps its tables between 44% and 87.5% full, so at a million keys (about 48%
//!   full) a GCRA key costs about `25 / 0.48 = 52` bytes and a token bucket key 69
//!   (`floodgate bench --what memory` measures it).
//!
//! # Expiry and the cap
//! An entry's `expires_at` is `now + reset_after` of its last consuming decision: from then on
//! it is equivalent to a fresh key, so dropping it changes no decision. Expired entries are
//! dropped lazily when a batch touches them, by [`MemoryStore::sweep`] (one shard per call,
//! bounded work), and when the store is full and a new key needs room. **Nothing else is ever
//! dropped**: a live key (one that still counts consumption, limited or not) is never evicted,
//! because eviction would forgive it ("evict-to-reset"). When the store is full of live keys, a
//! new key is handled by [`OnFull`].
//!
//! `max_keys` is an exact hard cap on the keys held by the whole store, counted with one atomic
//! that changes only when a key is added or dropped (never on a check of an existing key). When
//! it is reached, the expired entries of the shards the batch has locked are dropped first;
//! expired entries in other shards are reclaimed by the periodic sweep.

use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use floodgate_core::{
    Algorithm, AlgorithmKind, Clock, Decision, FixedWindowState, GcraState, LeakyBucketState,
    Micros, Policy, SlidingLogState, SlidingWindowState, State, Timestamp, TokenBucketState,
};
use hashbrown::HashMap;
use parking_lot::{Mutex, MutexGuard};
use siphasher::sip::SipHasher13;

use crate::{BatchDecision, CheckItem, OnFull, Store, StoreError};

/// Settings of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// Hard cap on keys held by the whole store. Default 1,000,000.
    pub max_keys: usize,
    /// Number of lock shards, rounded up to a power of two and down to at most `max_keys`.
    /// Default 64: on a few cores two threads rarely wait for the same shard.
    pub shards: usize,
    /// What happens to a new key when its shard is full of live keys. Default [`OnFull::Reject`].
    pub on_full: OnFull,
    /// `retry_after` (microseconds) reported to a request rejected because the store is full.
    /// Default 1 second.
    pub full_retry_after: Micros,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            shards: 64,
            on_full: OnFull::Reject,
            full_retry_after: 1_000_000,
        }
    }
}

/// A snapshot of a [`MemoryStore`]'s size and counters (counters are totals since creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Keys held now, expired ones not yet dropped included.
    pub keys: usize,
    /// The configured cap.
    pub max_keys: usize,
    /// Number of shards.
    pub shards: usize,
    /// Expired entries dropped to make room in a full shard.
    pub evictions: u64,
    /// Expired entries dropped by a sweep or when touched.
    pub expirations: u64,
    /// New keys rejected because their shard was full ([`OnFull::Reject`]).
    pub full_rejections: u64,
    /// New keys admitted without state because their shard was full
    /// ([`OnFull::AdmitUntracked`]).
    pub full_untracked: u64,
}

/// The identity of `(rule, key)` inside the store: a keyed 64-bit hash (see the module docs).
/// Bits 32 and up choose the shard; the map uses the whole value as its hash (its bucket index
/// comes from the low bits, its control byte from the top 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint(u64);

impl Hash for Fingerprint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Already a uniformly distributed secret hash: hand it to the map as is.
        state.write_u64(self.0);
    }
}

/// A hasher that passes a `u64` through; only [`Fingerprint`] is ever hashed with it.
#[derive(Debug, Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by Fingerprint; kept correct (if slow) for completeness.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// How a table stores one key: its state and the time from which it is equivalent to a fresh
/// key (microseconds since the epoch; at or after it the entry may be dropped).
trait Stored {
    type State;
    fn new(expires_at: Timestamp, state: Self::State) -> Self;
    fn expires_at(&self) -> Timestamp;
    /// Moves the expiry to `expires_at` if that is later (a live key's life never shortens).
    fn extend(&mut self, expires_at: Timestamp);
    fn state(&self) -> &Self::State;
    fn state_mut(&mut self) -> &mut Self::State;
}

/// A state with its expiry stored beside it.
#[derive(Debug, Clone)]
struct Entry<S> {
    expires_at: Timestamp,
    state: S,
}

impl<S> Stored for Entry<S> {
    type State = S;
    fn new(expires_at: Timestamp, state: S) -> Self {
        Self { expires_at, state }
    }
    fn expires_at(&self) -> Timestamp {
        self.expires_at
    }
    fn extend(&mut self, expires_at: Timestamp) {
        self.expires_at = self.expires_at.max(expires_at);
    }
    fn state(&self) -> &S {
        &self.state
    }
    fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }
}

/// A GCRA state alone: a GCRA key is fresh again exactly at its theoretical arrival time
/// rounded up to the microsecond (`tat + (tat_ticks > 0)`), which is `now + reset_after` of its
/// last admission, so the expiry is derived rather than stored (16 bytes instead of 24).
#[derive(Debug, Clone)]
struct GcraSlot(GcraState);

impl Stored for GcraSlot {
    type State = GcraState;
    fn new(_expires_at: Timestamp, state: GcraState) -> Self {
        Self(state)
    }
    fn expires_at(&self) -> Timestamp {
        self.0.tat.saturating_add(u64::from(self.0.tat_ticks > 0))
    }
    fn extend(&mut self, _expires_at: Timestamp) {
        // Derived from the state, which the decision has just moved: an admission at `now`
        // leaves tat + (tat_ticks > 0) = now + reset_after, and tat never moves backwards.
    }
    fn state(&self) -> &GcraState {
        &self.0
    }
    fn state_mut(&mut self) -> &mut GcraState {
        &mut self.0
    }
}

type Table<E> = HashMap<Fingerprint, E, BuildHasherDefault<PassThrough>>;

macro_rules! tables {
    ($($field:ident: $variant:ident($state:ty) in $slot:ty),* $(,)?) => {
        /// One map per algorithm, each holding that algorithm's own state type, so that a GCRA
        /// key costs 16 bytes of state rather than the size of the largest [`State`] variant.
        #[derive(Debug, Default)]
        struct Tables {
            $($field: Table<$slot>,)*
        }

        impl Tables {
            fn len(&self) -> usize {
                0 $(+ self.$field.len())*
            }

            /// The entry of `fp` in `kind`'s table, as `(expires_at, state)`.
            fn get(&self, kind: AlgorithmKind, fp: &Fingerprint) -> Option<(Timestamp, State)> {
                match kind {
                    $(AlgorithmKind::$variant => self
                        .$field
                        .get(fp)
                        .map(|e| (e.expires_at(), State::$variant(e.state().clone()))),)*
                }
            }

            /// Removes `fp` from `kind`'s table.
            fn remove(&mut self, kind: AlgorithmKind, fp: &Fingerprint) {
                match kind {
                    $(AlgorithmKind::$variant => {
                        self.$field.remove(fp);
                    })*
                }
            }

            /// Removes `fp` from every table; returns how many entries that was and the latest
            /// `expires_at` among them.
            fn remove_all(&mut self, fp: &Fingerprint) -> (usize, Option<Timestamp>) {
                let removed = [$(self.$field.remove(fp).map(|e| e.expires_at()),)*];
                (
                    removed.iter().flatten().count(),
                    removed.into_iter().flatten().max(),
                )
            }

            /// Decides in place on the live entry of `fp` in `policy`'s table, with no copy of
            /// the state (a sliding log's can be large). A consuming admission extends the
            /// entry's expiry. An expired entry is dropped and reported as absent.
            fn decide_held(
                &mut self,
                policy: &Policy,
                fp: &Fingerprint,
                now: Timestamp,
                cost: u64,
                consume: bool,
            ) -> Held {
                match policy {
                    $(Policy::$variant(algorithm) => match self.$field.get_mut(fp) {
                        Some(entry) if entry.expires_at() > now => {
                            let d = algorithm.decide(entry.state_mut(), now, cost, consume);
                            if consume && d.allowed {
                                // A stale `now` must never shorten a live key's life.
                                entry.extend(now.saturating_add(d.reset_after));
                            }
                            Held::Live(d)
                        }
                        Some(_) => {
                            self.$field.remove(fp);
                            Held::Absent { expired: true }
                        }
                        None => Held::Absent { expired: false },
                    },)*
                }
            }

            /// Decides in place on the entry of `fp` in `policy`'s table, if there is one. An
            /// expired entry is decided as a fresh key *in its slot* (state reset to the initial
            /// one): equivalent to dropping it and inserting a fresh one, without the two table
            /// operations or a change to the key count. Its expiry only grows, so the shard's
            /// `earliest_expiry` bound stays valid. `None` when `fp` is not held; the flag says
            /// whether the entry had expired.
            #[inline]
            fn decide_reusing(
                &mut self,
                policy: &Policy,
                fp: &Fingerprint,
                now: Timestamp,
                cost: u64,
                consume: bool,
            ) -> Option<(Decision, bool)> {
                match policy {
                    $(Policy::$variant(algorithm) => {
                        let entry = self.$field.get_mut(fp)?;
                        let expired = entry.expires_at() <= now;
                        if expired {
                            *entry.state_mut() = algorithm.initial_state();
                        }
                        let d = algorithm.decide(entry.state_mut(), now, cost, consume);
                        if consume && d.allowed {
                            // A stale `now` must never shorten a live key's life.
                            entry.extend(now.saturating_add(d.reset_after));
                        }
                        Some((d, expired))
                    })*
                }
            }

            /// Stores `state` in its algorithm's table.
            fn insert(&mut self, fp: Fingerprint, expires_at: Timestamp, state: State) {
                match state {
                    $(State::$variant(state) => {
                        self.$field.insert(fp, <$slot as Stored>::new(expires_at, state));
                    })*
                }
            }

            /// Drops entries expired at `now`; returns how many, and the earliest `expires_at`
            /// among those kept.
            fn retain_live(&mut self, now: Timestamp) -> (usize, Timestamp) {
                let before = self.len();
                let mut earliest = Timestamp::MAX;
                $(self.$field.retain(|_, e| {
                    let expires_at = e.expires_at();
                    let keep = expires_at > now;
                    if keep {
                        earliest = earliest.min(expires_at);
                    }
                    keep
                });)*
                (before - self.len(), earliest)
            }
        }
    };
}

/// What [`Tables::decide_held`] found.
enum Held {
    /// The key was held and live; this is its decision (already applied).
    Live(Decision),
    /// No live entry; `expired` when an expired one was just dropped.
    Absent { expired: bool },
}

tables! {
    fixed_window: FixedWindow(FixedWindowState) in Entry<FixedWindowState>,
    sliding_log: SlidingLog(SlidingLogState) in Entry<SlidingLogState>,
    sliding_window: SlidingWindow(SlidingWindowState) in Entry<SlidingWindowState>,
    token_bucket: TokenBucket(TokenBucketState) in Entry<TokenBucketState>,
    leaky_bucket: LeakyBucket(LeakyBucketState) in Entry<LeakyBucketState>,
    gcra: Gcra(GcraState) in GcraSlot,
}

#[derive(Debug)]
struct Shard {
    tables: Tables,
    /// A lower bound on every entry's `expires_at`: while `now` is below it nothing in the
    /// shard has expired and a sweep can skip the shard. Valid because an entry's expiry only
    /// ever grows while it lives.
    earliest_expiry: Timestamp,
}

impl Shard {
    /// Drops every entry expired at `now`; returns how many. O(entries) when something may have
    /// expired, O(1) otherwise.
    fn drop_expired(&mut self, now: Timestamp) -> usize {
        if now < self.earliest_expiry {
            return 0;
        }
        let (dropped, earliest) = self.tables.retain_live(now);
        self.earliest_expiry = earliest;
        dropped
    }
}

/// Shards sit on their own cache lines so that two threads locking neighbouring shards do not
/// contend for one line.
#[derive(Debug)]
#[repr(align(64))]
struct Padded(Mutex<Shard>);

#[derive(Debug, Default)]
struct Counters {
    evictions: AtomicU64,
    expirations: AtomicU64,
    full_rejections: AtomicU64,
    full_untracked: AtomicU64,
}

/// The embedded, sharded, in-process [`Store`]. See the [module docs](self) for the layout,
/// expiry and the key cap.
///
/// Time comes from the injected [`Clock`]; the `*_at` methods take `now` from the caller instead
/// (for simulations). All methods are synchronous and quick; the [`Store`] impl wraps them in
/// ready futures.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Padded]>,
    shard_mask: usize,
    sip_keys: (u64, u64),
    clock: Arc<dyn Clock>,
    config: MemoryStoreConfig,
    sweep_cursor: AtomicUsize,
    /// Entries held across all shards; at most `config.max_keys`.
    keys: AtomicUsize,
    counters: Counters,
}

/// Per distinct `(rule, key)` of a batch: the working copy of its state.
struct Slot {
    fp: Fingerprint,
    /// Index into the batch's locked guards.
    guard: usize,
    state: State,
    /// `Some(expires_at)` when the key was held (and live) before this batch.
    held: Option<Timestamp>,
    /// `reset_after` of the last consuming decision on this slot, when any consumed.
    consumed_reset_after: Option<Micros>,
}

impl MemoryStore {
    /// A store with `config`, reading time from `clock`.
    pub fn new(config: MemoryStoreConfig, clock: Arc<dyn Clock>) -> Self {
        let max_keys = config.max_keys.max(1);
        let mut n = config.shards.max(1).next_power_of_two();
        while n > max_keys {
            n /= 2;
        }
        let shards = (0..n)
            .map(|_| {
                Padded(Mutex::new(Shard {
                    tables: Tables::default(),
                    earliest_expiry: Timestamp::MAX,
                }))
            })
            .collect();
        // Two outputs of std's randomly keyed SipHash make a per-process secret.
        let random = RandomState::new();
        let sip_keys = (random.hash_one(0x5eed_u64), random.hash_one(0xf100d_u64));
        Self {
            shards,
            shard_mask: n - 1,
            sip_keys,
            clock,
            config: MemoryStoreConfig {
                max_keys,
                shards: n,
                ..config
            },
            sweep_cursor: AtomicUsize::new(0),
            keys: AtomicUsize::new(0),
            counters: Counters::default(),
        }
    }

    /// A store with the default configuration reading time from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self::new(MemoryStoreConfig::default(), clock)
    }

    /// The configuration in force (`shards` and `max_keys` as adjusted by [`MemoryStore::new`]).
    pub fn config(&self) -> &MemoryStoreConfig {
        &self.config
    }

    /// The clock the store reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// [`Store::check`] at the clock's current time, synchronously.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of one `(rule, key)` exceeds
    /// its policy's capacity (see [`crate::validate_batch`]).
    pub fn check_now(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        self.check_at(items, self.clock.now())
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

    /// Checks one item at the clock's current time: the allocation-free fast path for the
    /// common one-rule request. Same decision and state change as `check_now(&[item])`
    /// (whose [`BatchDecision`] costs a `Vec`); a new key refused because the store is full is
    /// the store's full denial (`allowed: false`, `retry_after` of
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
        self.check_one_at(item, self.clock.now())
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
        Ok(self.single(item, now, true).0)
    }

    /// [`Store::peek`] at the clock's current time, synchronously.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when the summed cost of one `(rule, key)` exceeds
    /// its policy's capacity (see [`crate::validate_batch`]).
    pub fn peek_now(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        self.peek_at(items, self.clock.now())
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

    /// [`Store::reset`], synchronously: forgets `(rule, key)`. Returns whether live state was
    /// held.
    pub fn reset_key(&self, rule: &str, key: &str) -> bool {
        let now = self.clock.now();
        let fp = self.fingerprint(rule, key);
        let mut shard = self.shards[self.shard_of(fp)].0.lock();
        let (removed, latest) = shard.tables.remove_all(&fp);
        drop(shard);
        self.keys.fetch_sub(removed, Ordering::Relaxed);
        matches!(latest, Some(expires_at) if expires_at > now)
    }

    /// [`Store::inspect`] at a caller-supplied `now`: a cost-0 peek of `(rule, key)`.
    pub fn inspect_at(&self, rule: &str, policy: &Policy, key: &str, now: Timestamp) -> Decision {
        let fp = self.fingerprint(rule, key);
        let shard = self.shards[self.shard_of(fp)].0.lock();
        let mut state = match shard.tables.get(policy.kind(), &fp) {
            Some((expires_at, state)) if expires_at > now => state,
            _ => policy.initial_state(),
        };
        drop(shard);
        policy.decide(&mut state, now, 0, false)
    }

    /// Drops the expired entries of one shard (the next in turn) and returns how many. Call it
    /// periodically (e.g. every 100 ms): each call locks one shard once, for at most
    /// `max_keys / shards` entry visits, and skips a shard in O(1) when nothing in it can have
    /// expired yet. A full cycle takes `shards` calls.
    pub fn sweep(&self, now: Timestamp) -> usize {
        let i = self.sweep_cursor.fetch_add(1, Ordering::Relaxed) & self.shard_mask;
        let dropped = self.shards[i].0.lock().drop_expired(now);
        self.count_expired(dropped);
        dropped
    }

    /// Runs [`MemoryStore::sweep`] over every shard once; returns the entries dropped.
    pub fn sweep_all(&self, now: Timestamp) -> usize {
        (0..self.shards.len()).map(|_| self.sweep(now)).sum()
    }

    /// Current size and counters (no lock taken); also publishes the `floodgate_store_keys`
    /// gauge.
    pub fn stats(&self) -> StoreStats {
        let keys = self.keys.load(Ordering::Relaxed);
        metrics::gauge!("floodgate_store_keys").set(keys as f64);
        StoreStats {
            keys,
            max_keys: self.config.max_keys,
            shards: self.shards.len(),
            evictions: self.counters.evictions.load(Ordering::Relaxed),
            expirations: self.counters.expirations.load(Ordering::Relaxed),
            full_rejections: self.counters.full_rejections.load(Ordering::Relaxed),
            full_untracked: self.counters.full_untracked.load(Ordering::Relaxed),
        }
    }

    fn fingerprint(&self, rule: &str, key: &str) -> Fingerprint {
        let mut h = SipHasher13::new_with_keys(self.sip_keys.0, self.sip_keys.1);
        // The length prefix makes (rule, key) -> bytes injective: ("ab", "c") != ("a", "bc").
        h.write(&(rule.len() as u64).to_le_bytes());
        h.write(rule.as_bytes());
        h.write(key.as_bytes());
        Fingerprint(h.finish())
    }

    fn shard_of(&self, fp: Fingerprint) -> usize {
        ((fp.0 >> 32) as usize) & self.shard_mask
    }

    /// Accounts for `n` expired entries dropped by a sweep or a touch.
    fn count_expired(&self, n: usize) {
        if n > 0 {
            self.keys.fetch_sub(n, Ordering::Relaxed);
            self.counters
                .expirations
                .fetch_add(n as u64, Ordering::Relaxed);
            metrics::counter!("floodgate_store_expirations_total").increment(n as u64);
        }
    }

    /// The state of `fp` for `policy`'s algorithm, and `Some(expires_at)` when it was held and
    /// live. An expired entry is dropped on the way (equivalent to a fresh key); the third value
    /// says whether that happened.
    fn load(
        shard: &mut Shard,
        policy: &Policy,
        fp: &Fingerprint,
        now: Timestamp,
    ) -> (State, Option<Timestamp>, bool) {
        let kind = policy.kind();
        match shard.tables.get(kind, fp) {
            Some((expires_at, state)) if expires_at > now => (state, Some(expires_at), false),
            Some(_) => {
                shard.tables.remove(kind, fp);
                (policy.initial_state(), None, true)
            }
            None => (policy.initial_state(), None, false),
        }
    }

    /// Stores a consumed state. `expires_at` is `now + reset_after`, never earlier than the
    /// entry's previous expiry: a stale `now` must not shorten a live key's life.
    fn save(
        shard: &mut Shard,
        fp: Fingerprint,
        held: Option<Timestamp>,
        reset_after: Micros,
        state: State,
        now: Timestamp,
    ) {
        let expires_at = now.saturating_add(reset_after).max(held.unwrap_or(0));
        if held.is_none() {
            shard.earliest_expiry = shard.earliest_expiry.min(expires_at);
        }
        shard.tables.insert(fp, expires_at, state);
    }

    /// Reserves room for `needed` new keys under the global cap. When the store is full, first
    /// drops the expired entries of `shards` (the ones this batch has locked; counted as
    /// evictions) and tries again. Returns false when there is still no room.
    fn reserve<'a>(
        &self,
        needed: usize,
        now: Timestamp,
        shards: impl IntoIterator<Item = &'a mut Shard>,
    ) -> bool {
        if needed == 0 || self.try_reserve(needed) {
            return true;
        }
        let dropped: usize = shards.into_iter().map(|s| s.drop_expired(now)).sum();
        if dropped > 0 {
            self.keys.fetch_sub(dropped, Ordering::Relaxed);
            self.counters
                .evictions
                .fetch_add(dropped as u64, Ordering::Relaxed);
            metrics::counter!("floodgate_store_evictions_total").increment(dropped as u64);
        }
        self.try_reserve(needed)
    }

    /// Adds `needed` to the key count unless that would pass `max_keys`.
    fn try_reserve(&self, needed: usize) -> bool {
        let max = self.config.max_keys;
        self.keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + needed <= max).then_some(held + needed)
            })
            .is_ok()
    }

    /// Counts `n` new keys that found the store full.
    fn count_full(&self, n: usize) {
        let (counter, action) = match self.config.on_full {
            OnFull::Reject => (&self.counters.full_rejections, "reject"),
            OnFull::AdmitUntracked => (&self.counters.full_untracked, "admit_untracked"),
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        metrics::counter!("floodgate_store_full_total", "action" => action).increment(n as u64);
    }

    /// The decision for a new key refused because the store is full.
    fn full_denial(&self, policy: &Policy) -> Decision {
        Decision {
            allowed: false,
            limit: policy.capacity(),
            remaining: 0,
            reset_after: 0,
            retry_after: Some(self.config.full_retry_after),
        }
    }

    /// A batch of one item: one lock, one decision made in place on the stored state, no
    /// copies. Equivalent to the general path (for one item, a consuming decision that denies
    /// is its peek, and leaves the state untouched).
    fn run_single(&self, item: &CheckItem<'_>, now: Timestamp, commit: bool) -> BatchDecision {
        let (decision, store_full) = self.single(item, now, commit);
        BatchDecision {
            allowed: decision.allowed,
            decisions: vec![decision],
            store_full,
        }
    }

    /// The one-item decision behind [`MemoryStore::check_one_at`] and one-item batches: no
    /// allocation for a held key (an expired one is reused in its slot), one insert for a new
    /// one. The second value is `Some` when a new key found the store full.
    fn single(
        &self,
        item: &CheckItem<'_>,
        now: Timestamp,
        commit: bool,
    ) -> (Decision, Option<OnFull>) {
        let fp = self.fingerprint(item.rule, item.key);
        let mut shard = self.shards[self.shard_of(fp)].0.lock();
        let consume = commit && item.cost > 0;
        if let Some((decision, expired)) =
            shard
                .tables
                .decide_reusing(item.policy, &fp, now, item.cost, consume)
        {
            drop(shard);
            if expired {
                // The old entry expired and a fresh one took its slot: an expiration, though the
                // key count is unchanged.
                self.counters.expirations.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("floodgate_store_expirations_total").increment(1);
            }
            return (decision, None);
        }
        // A fresh key: decide on the initial state, store it only if something was consumed.
        let mut state = item.policy.initial_state();
        let decision = item.policy.decide(&mut state, now, item.cost, consume);
        if consume && decision.allowed {
            if !self.reserve(1, now, [&mut *shard]) {
                drop(shard);
                self.count_full(1);
                return match self.config.on_full {
                    OnFull::Reject => (self.full_denial(item.policy), Some(OnFull::Reject)),
                    OnFull::AdmitUntracked => (decision, Some(OnFull::AdmitUntracked)),
                };
            }
            Self::save(&mut shard, fp, None, decision.reset_after, state, now);
        }
        (decision, None)
    }

    /// A batch whose items all have different `(rule, key)`: peek every item in place, then, if
    /// all admit, consume every item in place. No state is copied; the shards stay locked
    /// throughout, so the second pass sees exactly the states the first one judged.
    fn run_distinct(
        &self,
        items: &[CheckItem<'_>],
        fps: &[Fingerprint],
        guard_index: &[usize],
        guards: &mut [MutexGuard<'_, Shard>],
        now: Timestamp,
        commit: bool,
    ) -> BatchDecision {
        let mut peeks = Vec::with_capacity(items.len());
        let mut held = Vec::with_capacity(items.len());
        let mut expired = 0;
        for ((item, fp), &g) in items.iter().zip(fps).zip(guard_index) {
            match guards[g]
                .tables
                .decide_held(item.policy, fp, now, item.cost, false)
            {
                Held::Live(d) => {
                    peeks.push(d);
                    held.push(true);
                }
                Held::Absent { expired: e } => {
                    expired += usize::from(e);
                    let mut fresh = item.policy.initial_state();
                    peeks.push(item.policy.decide(&mut fresh, now, item.cost, false));
                    held.push(false);
                }
            }
        }
        self.count_expired(expired);
        let allowed = peeks.iter().all(|d| d.allowed);
        if !allowed || !commit {
            return BatchDecision {
                allowed,
                decisions: peeks,
                store_full: None,
            };
        }

        let is_new = |i: usize| !held[i] && items[i].cost > 0;
        let new_keys = (0..items.len()).filter(|&i| is_new(i)).count();
        let full = !self.reserve(new_keys, now, guards.iter_mut().map(|g| &mut **g));
        if full {
            self.count_full(new_keys);
            if self.config.on_full == OnFull::Reject {
                let decisions = (0..items.len())
                    .map(|i| {
                        if is_new(i) {
                            self.full_denial(items[i].policy)
                        } else {
                            peeks[i]
                        }
                    })
                    .collect();
                return BatchDecision {
                    allowed: false,
                    decisions,
                    store_full: Some(OnFull::Reject),
                };
            }
        }

        let mut decisions = Vec::with_capacity(items.len());
        for (i, ((item, &fp), &g)) in items.iter().zip(fps).zip(guard_index).enumerate() {
            if item.cost == 0 {
                decisions.push(peeks[i]);
                continue;
            }
            let shard = &mut guards[g];
            if held[i] {
                if let Held::Live(d) =
                    shard
                        .tables
                        .decide_held(item.policy, &fp, now, item.cost, true)
                {
                    decisions.push(d);
                    continue;
                }
                // Unreachable: the entry was live a moment ago under the same lock. Should
                // it ever happen, deciding as a fresh key below is the safe fallback.
                debug_assert!(false, "a live entry vanished under its shard lock");
            }
            let mut state = item.policy.initial_state();
            let d = item.policy.decide(&mut state, now, item.cost, true);
            if !full {
                Self::save(shard, fp, None, d.reset_after, state, now);
            }
            decisions.push(d);
        }
        BatchDecision {
            allowed: true,
            decisions,
            store_full: full.then_some(OnFull::AdmitUntracked),
        }
    }

    /// The whole batch algorithm: validate, lock, decide on working copies, then (for a check
    /// whose every item admitted) make room for new keys and write everything back.
    fn run(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
        commit: bool,
    ) -> Result<BatchDecision, StoreError> {
        // Summed per (rule, key): repeated items of one key must fit together.
        crate::validate_batch(items)?;
        if let [item] = items {
            return Ok(self.run_single(item, now, commit));
        }
        let fps: Vec<Fingerprint> = items
            .iter()
            .map(|it| self.fingerprint(it.rule, it.key))
            .collect();

        // Lock the involved shards in increasing index order: every batch acquires locks in
        // the same global order, so no two batches can wait on each other in a cycle.
        let mut shard_ids: Vec<usize> = fps.iter().map(|&fp| self.shard_of(fp)).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> =
            shard_ids.iter().map(|&i| self.shards[i].0.lock()).collect();
        let guard_of = |fp: Fingerprint| {
            shard_ids
                .binary_search(&self.shard_of(fp))
                .expect("every item's shard is locked")
        };

        let distinct = fps.iter().enumerate().all(|(i, fp)| !fps[..i].contains(fp));
        if distinct {
            let guard_index: Vec<usize> = fps.iter().map(|&fp| guard_of(fp)).collect();
            return Ok(self.run_distinct(items, &fps, &guard_index, &mut guards, now, commit));
        }

        // Phase 1: decide every item on working copies. Items sharing (rule, key) share a slot
        // and see each other's tentative consumption, in order.
        let mut slots: Vec<Slot> = Vec::with_capacity(items.len());
        let mut slot_of_item = Vec::with_capacity(items.len());
        let mut peeks = Vec::with_capacity(items.len());
        let mut consumed = Vec::with_capacity(items.len());
        let mut expired = 0;
        for (item, &fp) in items.iter().zip(&fps) {
            let slot_index = match slots.iter().position(|s| s.fp == fp) {
                Some(i) => i,
                None => {
                    let g = guard_of(fp);
                    let (state, held, was_expired) =
                        Self::load(&mut guards[g], item.policy, &fp, now);
                    expired += usize::from(was_expired);
                    slots.push(Slot {
                        fp,
                        guard: g,
                        state,
                        held,
                        consumed_reset_after: None,
                    });
                    slots.len() - 1
                }
            };
            let slot = &mut slots[slot_index];
            let peek = item.policy.decide(&mut slot.state, now, item.cost, false);
            let after = if peek.allowed && item.cost > 0 {
                let d = item.policy.decide(&mut slot.state, now, item.cost, true);
                slot.consumed_reset_after = Some(d.reset_after);
                d
            } else {
                peek
            };
            slot_of_item.push(slot_index);
            peeks.push(peek);
            consumed.push(after);
        }
        self.count_expired(expired);

        let allowed = peeks.iter().all(|d| d.allowed);
        if !allowed || !commit {
            return Ok(BatchDecision {
                allowed,
                decisions: peeks,
                store_full: None,
            });
        }

        // Phase 2: every item admitted. New keys need room; reserve it before writing
        // anything, so that a rejection leaves every key untouched.
        let new_keys = slots
            .iter()
            .filter(|s| s.held.is_none() && s.consumed_reset_after.is_some())
            .count();
        let full = !self.reserve(new_keys, now, guards.iter_mut().map(|g| &mut **g));
        let is_untracked = |slot: &Slot| full && slot.held.is_none();
        let untracked_items = slot_of_item
            .iter()
            .filter(|&&s| is_untracked(&slots[s]) && slots[s].consumed_reset_after.is_some())
            .count();
        let mut store_full = None;
        if untracked_items > 0 {
            self.count_full(untracked_items);
            if self.config.on_full == OnFull::Reject {
                let decisions = items
                    .iter()
                    .zip(&slot_of_item)
                    .zip(peeks)
                    .map(|((item, &s), peek)| {
                        if is_untracked(&slots[s]) && item.cost > 0 {
                            self.full_denial(item.policy)
                        } else {
                            peek
                        }
                    })
                    .collect();
                return Ok(BatchDecision {
                    allowed: false,
                    decisions,
                    store_full: Some(OnFull::Reject),
                });
            }
            store_full = Some(OnFull::AdmitUntracked);
        }

        // Phase 3: write back every slot that consumed (skipping untracked new keys).
        for slot in slots {
            let Some(reset_after) = slot.consumed_reset_after else {
                continue;
            };
            if is_untracked(&slot) {
                continue;
            }
            Self::save(
                &mut guards[slot.guard],
                slot.fp,
                slot.held,
                reset_after,
                slot.state,
                now,
            );
        }
        drop(guards);
        Ok(BatchDecision {
            allowed: true,
            decisions: consumed,
            store_full,
        })
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

    fn reset(
        &self,
        rule: &str,
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
        std::future::ready(Ok(self.inspect_at(rule, policy, key, self.clock.now())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_separates_rule_and_key() {
        let store = MemoryStore::with_clock(Arc::new(floodgate_core::ManualClock::new(0)));
        assert_ne!(store.fingerprint("ab", "c"), store.fingerprint("a", "bc"));
        assert_eq!(store.fingerprint("a", "b"), store.fingerprint("a", "b"));
    }

    /// GCRA stores no expiry: the one derived from its state must be exactly what a stored
    /// one would be (the latest `now + reset_after` of an admission), for fractional emission
    /// intervals, bursts, costs above one and stale clocks.
    #[test]
    fn gcra_derived_expiry_equals_the_stored_one() {
        use floodgate_core::{Algorithm, Gcra, Quota};
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        for (limit, period, burst) in [
            (7, 2, 5),
            (1, 1_000_000, 1),
            (3, 1_000_000, 10),
            (1_000, 60_000_000, 50),
        ] {
            let gcra = Gcra::new(Quota::with_burst(limit, period, burst).unwrap()).unwrap();
            let mut slot = GcraSlot(gcra.initial_state());
            let mut stored = 0u64;
            let mut now = 1_700_000_000_000_000u64;
            for _ in 0..2_000 {
                now = if next(8) == 0 {
                    now - next(1_000)
                } else {
                    now + next(period / 2 + 2)
                };
                let cost = 1 + next(burst);
                let d = gcra.check(slot.state_mut(), now, cost).unwrap();
                if d.allowed {
                    stored = stored.max(now + d.reset_after);
                }
                if stored > 0 {
                    assert_eq!(slot.expires_at(), stored, "{limit}/{period} burst {burst}");
                }
            }
        }
    }

    #[test]
    fn entry_sizes_are_as_documented() {
        // What one hashbrown bucket holds: the key and the value.
        fn bucket<E>() -> usize {
            std::mem::size_of::<(Fingerprint, E)>()
        }
        assert_eq!(bucket::<GcraSlot>(), 24);
        assert_eq!(bucket::<Entry<TokenBucketState>>(), 32);
        assert_eq!(bucket::<Entry<LeakyBucketState>>(), 32);
        assert_eq!(bucket::<Entry<FixedWindowState>>(), 32);
        assert_eq!(bucket::<Entry<SlidingWindowState>>(), 40);
        assert_eq!(bucket::<Entry<SlidingLogState>>(), 72);
    }

    #[test]
    fn shards_are_a_power_of_two_no_more_than_max_keys() {
        let clock = Arc::new(floodgate_core::ManualClock::new(0));
        let cfg = |max_keys, shards| MemoryStoreConfig {
            max_keys,
            shards,
            ..MemoryStoreConfig::default()
        };
        assert_eq!(
            MemoryStore::new(cfg(1000, 60), clock.clone())
                .config()
                .shards,
            64
        );
        assert_eq!(
            MemoryStore::new(cfg(5, 64), clock.clone()).config().shards,
            4
        );
        assert_eq!(MemoryStore::new(cfg(0, 64), clock).config().max_keys, 1);
    }
}
