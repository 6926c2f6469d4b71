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
//! [`OnFull`].
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

mod claims;
mod fpmap;
mod table;
#[cfg(feature = "tokio")]
mod until_ready;

use std::hash::BuildHasher;
use std::iter::successors;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use floodgate_core::{Clock, Decision, Micros, Policy, State, Timestamp};
use parking_lot::Mutex;
use siphasher::sip::SipHasher13;

use crate::{BatchDecision, BatchReservation, CheckItem, OnFull, SettleItem, Store, StoreError};
use table::{AnyLocked, AnyTable, Held, Kind, RuleKeys, Table};
#[cfg(feature = "tokio")]
pub use until_ready::Jitter;

/// Settings of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// Hard cap on keys held by the whole store. Default 1,000,000.
    pub max_keys: usize,
    /// Number of lock shards of each rule's table, rounded up to a power of two and down to at
    /// most `max_keys`. Default 64: on a few cores two threads rarely wait for the same shard.
    pub shards: usize,
    /// What happens to a new key when the store is full of live keys. Default
    /// [`OnFull::Reject`].
    pub on_full: OnFull,
    /// `retry_after` (microseconds) reported to a request rejected because the store is full.
    /// Default 1 second.
    pub full_retry_after: Micros,
    /// Most live reservation claims held at once ([`Store::claim`]), apart from `max_keys`:
    /// claims outlive the keys they settle. Default 1,000,000 (about 100 bytes each).
    pub max_claims: usize,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            shards: 64,
            on_full: OnFull::Reject,
            full_retry_after: 1_000_000,
            max_claims: 1_000_000,
        }
    }
}

/// A snapshot of a [`MemoryStore`]'s size and counters (counters are totals since creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Keys held now (all rules), expired ones not yet dropped included.
    pub keys: usize,
    /// The configured cap.
    pub max_keys: usize,
    /// Number of shards per rule table.
    pub shards: usize,
    /// Expired entries dropped to make room in a full store.
    pub evictions: u64,
    /// Expired entries dropped by a sweep or when touched.
    pub expirations: u64,
    /// New keys rejected because the store was full ([`OnFull::Reject`]).
    pub full_rejections: u64,
    /// New keys admitted without state because the store was full
    /// ([`OnFull::AdmitUntracked`]).
    pub full_untracked: u64,
}

#[derive(Debug, Default)]
struct Counters {
    evictions: AtomicU64,
    expirations: AtomicU64,
    full_rejections: AtomicU64,
    full_untracked: AtomicU64,
}

/// Which cap a new key met: the rule's own (the index of its pair in the reservation) or the
/// store's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cap {
    Rule(usize),
    Store,
}

/// Each rule's count of the new keys among `new` (one `(rule, n)` pair per rule, in order of
/// first appearance). Rules are few per batch: a linear scan.
fn per_rule<'a>(new: impl Iterator<Item = &'a RuleKeys>) -> Vec<(&'a RuleKeys, usize)> {
    let mut out: Vec<(&RuleKeys, usize)> = Vec::new();
    for rule in new {
        match out.iter_mut().find(|(r, _)| std::ptr::eq(*r, rule)) {
            Some((_, n)) => *n += 1,
            None => out.push((rule, 1)),
        }
    }
    out
}

/// The key fingerprint: SipHash-1-3 under the store's secret 128-bit key, built once per
/// store (see the module docs for why a keyed hash).
#[derive(Clone)]
struct Fingerprinter(SipHasher13);

impl std::fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret (siphasher's own Debug prints it): never print it.
        f.write_str("Fingerprinter(..)")
    }
}

/// What every table of a store shares: the clock, the fingerprint secret, the key cap and the
/// counters.
#[derive(Debug)]
struct Shared {
    clock: Arc<dyn Clock>,
    fingerprinter: Fingerprinter,
    config: MemoryStoreConfig,
    /// Entries held across all tables; at most `config.max_keys`.
    keys: AtomicUsize,
    counters: Counters,
    registry: Registry,
    /// Per rule name, its key count and own cap (created on first use or when a cap is set;
    /// read only when a table is created or a cap changes).
    rule_keys: Mutex<Vec<Arc<RuleKeys>>>,
    /// `floodgate_store_expirations_total`, registered with the metrics recorder on first use
    /// (a handle taken before the application installs its recorder would count nowhere): a
    /// reused expired slot is a per-request event, and the macro hashes the name every call.
    expirations_metric: OnceLock<metrics::Counter>,
}

impl Shared {
    /// When the store is full: drops the expired slots of shard index `shard` in every rule's
    /// table whose lock is free (the caller's own locked shards are skipped: `try_lock` fails
    /// on them, and they were handled already). Shard `i` of every table together hold the keys
    /// whose fingerprint has the same shard bits, as one shard of a single table would. Cheap
    /// when nothing has expired (one `try_lock` and one comparison per table).
    fn drop_expired_elsewhere(&self, shard: usize, now: Timestamp) -> usize {
        self.registry
            .iter()
            .map(|e| e.table.try_drop_expired(shard, now))
            .sum()
    }

    /// The 64-bit fingerprint of a client key: its identity in every rule's table.
    #[inline]
    fn fingerprint(&self, key: &str) -> u64 {
        self.fingerprinter.0.hash(key.as_bytes())
    }

    /// Accounts for `n` expired entries dropped by a sweep or a touch.
    fn count_expired(&self, n: usize) {
        if n > 0 {
            self.keys.fetch_sub(n, Ordering::Relaxed);
            self.count_reused(n);
        }
    }

    /// Counts `n` expirations that did not change the key count (an expired slot reused).
    fn count_reused(&self, n: usize) {
        self.counters
            .expirations
            .fetch_add(n as u64, Ordering::Relaxed);
        self.expirations_metric
            .get_or_init(|| metrics::counter!("floodgate_store_expirations_total"))
            .increment(n as u64);
    }

    /// Reserves room for new keys: `wants` pairs a rule's key count with how many new keys it
    /// needs (one pair per rule). Each rule's own cap and the store's cap must all have room,
    /// or nothing is reserved. When one is full, first drops the expired entries of the shards
    /// this operation has locked and of the same shard index elsewhere (`drop_expired`), and,
    /// when a rule's own cap is the one reached, of every shard of that rule (its keys are all
    /// it can free); these are counted as evictions. Then tries again. `Err` names the cap that
    /// is still reached.
    fn reserve(
        &self,
        wants: &[(&RuleKeys, usize)],
        now: Timestamp,
        drop_expired: impl FnOnce(Timestamp) -> usize,
    ) -> Result<(), Cap> {
        let cap = match self.try_reserve(wants) {
            Ok(()) => return Ok(()),
            Err(cap) => cap,
        };
        let mut dropped = drop_expired(now);
        if let Cap::Rule(i) = cap {
            dropped += self.drop_expired_of_rule(wants[i].0, now);
        }
        if dropped > 0 {
            self.keys.fetch_sub(dropped, Ordering::Relaxed);
            self.counters
                .evictions
                .fetch_add(dropped as u64, Ordering::Relaxed);
            metrics::counter!("floodgate_store_evictions_total").increment(dropped as u64);
        }
        self.try_reserve(wants)
    }

    /// Adds each rule's new keys to its count and their sum to the store's, unless that would
    /// pass a cap (then nothing is added).
    fn try_reserve(&self, wants: &[(&RuleKeys, usize)]) -> Result<(), Cap> {
        let needed: usize = wants.iter().map(|&(_, n)| n).sum();
        if needed == 0 {
            return Ok(());
        }
        for (i, &(rule, n)) in wants.iter().enumerate() {
            if n > 0 && !rule.try_add(n) {
                wants[..i].iter().for_each(|&(r, n)| r.sub(n));
                return Err(Cap::Rule(i));
            }
        }
        let max = self.config.max_keys;
        let added = self
            .keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + needed <= max).then_some(held + needed)
            })
            .is_ok();
        if added {
            Ok(())
        } else {
            wants.iter().for_each(|&(r, n)| r.sub(n));
            Err(Cap::Store)
        }
    }

    /// When a rule's own cap is reached: drops the expired slots of every shard of every table
    /// of that rule whose lock is free (the caller's own locked shards are skipped). O(1) per
    /// shard when nothing in it has expired.
    fn drop_expired_of_rule(&self, rule: &RuleKeys, now: Timestamp) -> usize {
        self.registry
            .iter()
            .filter(|e| std::ptr::eq(&**e.table.keys(), rule))
            .map(|e| {
                (0..e.table.shard_count())
                    .map(|shard| e.table.try_drop_expired(shard, now))
                    .sum::<usize>()
            })
            .sum()
    }

    /// Counts `n` new keys of `rule` that found a cap reached (`cap`).
    fn count_full(&self, rule: &RuleKeys, n: usize, cap: Cap) {
        if n == 0 {
            return;
        }
        let (counter, action) = match self.config.on_full {
            OnFull::Reject => (&self.counters.full_rejections, "reject"),
            OnFull::AdmitUntracked => (&self.counters.full_untracked, "admit_untracked"),
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        let cap = match cap {
            Cap::Rule(_) => "rule",
            Cap::Store => "store",
        };
        metrics::counter!(
            "floodgate_store_full_total",
            "action" => action,
            "rule" => rule.name.to_string(),
            "cap" => cap
        )
        .increment(n as u64);
    }

    /// The key count of rule name `rule`, created (without a cap of its own) on first use.
    fn rule_keys(&self, rule: &str) -> Arc<RuleKeys> {
        let mut all = self.rule_keys.lock();
        if let Some(found) = all.iter().find(|k| *k.name == *rule) {
            return Arc::clone(found);
        }
        let keys = Arc::new(RuleKeys::new(rule.into()));
        all.push(Arc::clone(&keys));
        keys
    }

    /// The decision for a new key refused because the store is full.
    fn full_denial(&self, capacity: u64) -> Decision {
        Decision {
            allowed: false,
            limit: capacity,
            remaining: 0,
            reset_after: 0,
            retry_after: Some(self.config.full_retry_after),
        }
    }

    /// The one-item decision behind every one-item path: one lock, the decision made in place
    /// on the stored state (an expired slot is reused), one insert for a new key. No
    /// allocation unless the shard's table grows. The second value is `Some` when a new key
    /// found the store full. Equivalent to the batch path for one item (a consuming decision
    /// that denies is its peek and leaves the state untouched).
    #[inline]
    fn single<A: Kind>(
        &self,
        table: &Table<A>,
        fp: u64,
        now: Timestamp,
        cost: u64,
        commit: bool,
    ) -> (Decision, Option<OnFull>) {
        let mut shard = table.lock(table.shard_of(fp));
        let consume = commit && cost > 0;
        if let Some((decision, expired)) = shard.decide_reusing(fp, now, cost, consume) {
            drop(shard);
            if expired {
                // The old entry expired and a fresh one took its slot: an expiration, though
                // the key count is unchanged.
                self.count_reused(1);
            }
            return (decision, None);
        }
        // A fresh key: decide on the initial state, store it only if something was consumed.
        let mut state = table.alg.initial_state();
        let decision = table.alg.decide(&mut state, now, cost, consume);
        if consume && decision.allowed {
            let index = table.shard_of(fp);
            let room = self.reserve(&[(&table.keys, 1)], now, |now| {
                shard.drop_expired(now) + self.drop_expired_elsewhere(index, now)
            });
            if let Err(cap) = room {
                drop(shard);
                self.count_full(&table.keys, 1, cap);
                return match self.config.on_full {
                    OnFull::Reject => {
                        (self.full_denial(table.alg.capacity()), Some(OnFull::Reject))
                    }
                    OnFull::AdmitUntracked => (decision, Some(OnFull::AdmitUntracked)),
                };
            }
            shard.insert(fp, state, now.saturating_add(decision.reset_after));
        }
        (decision, None)
    }

    /// [`Shared::single`] on a table of any algorithm.
    #[inline]
    fn single_any(
        &self,
        table: &AnyTable,
        fp: u64,
        now: Timestamp,
        cost: u64,
        commit: bool,
    ) -> (Decision, Option<OnFull>) {
        match table {
            AnyTable::FixedWindow(t) => self.single(t, fp, now, cost, commit),
            AnyTable::SlidingLog(t) => self.single(t, fp, now, cost, commit),
            AnyTable::SlidingWindow(t) => self.single(t, fp, now, cost, commit),
            AnyTable::TokenBucket(t) => self.single(t, fp, now, cost, commit),
            AnyTable::LeakyBucket(t) => self.single(t, fp, now, cost, commit),
            AnyTable::Gcra(t) => self.single(t, fp, now, cost, commit),
        }
    }

    /// Removes `fp` from `table`; returns its expiry when it was held.
    fn remove(&self, table: &AnyTable, fp: u64) -> Option<Timestamp> {
        let removed = table.remove(fp);
        if removed.is_some() {
            self.keys.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }
}

/// One rule's table in the registry.
#[derive(Debug)]
struct RuleEntry {
    /// Position in the registry: batches lock shards in `(id, shard)` order.
    id: usize,
    rule: Arc<str>,
    policy: Policy,
    table: Arc<AnyTable>,
    next: OnceLock<Box<RuleEntry>>,
}

impl RuleEntry {
    #[inline]
    fn matches(&self, rule: &str, policy: &Policy) -> bool {
        self.rule.len() == rule.len()
            && self.policy.kind() == policy.kind()
            && self.policy.quota() == policy.quota()
            && *self.rule == *rule
    }
}

/// The rule tables: an append-only linked list, read without a lock (each link is a
/// `OnceLock`, so a reader sees a fully built entry or none); appends are serialised by a
/// mutex. Rules are few (a configuration's worth, plus one per policy change), so a linear
/// scan that compares lengths first is as fast as a map.
#[derive(Debug, Default)]
struct Registry {
    head: OnceLock<Box<RuleEntry>>,
    len: AtomicUsize,
    append: Mutex<()>,
}

impl Registry {
    fn iter(&self) -> impl Iterator<Item = &RuleEntry> {
        successors(self.head.get().map(|b| &**b), |e| {
            e.next.get().map(|b| &**b)
        })
    }

    #[inline]
    fn find(&self, rule: &str, policy: &Policy) -> Option<&RuleEntry> {
        self.iter().find(|e| e.matches(rule, policy))
    }

    fn get_or_insert(
        &self,
        rule: &str,
        policy: &Policy,
        shards: usize,
        keys: impl FnOnce() -> Arc<RuleKeys>,
    ) -> &RuleEntry {
        if let Some(e) = self.find(rule, policy) {
            return e;
        }
        let _append = self.append.lock();
        if let Some(e) = self.find(rule, policy) {
            return e;
        }
        let link = match self.iter().last() {
            Some(last) => &last.next,
            None => &self.head,
        };
        let id = self.len.load(Ordering::Relaxed);
        let entry = link.get_or_init(|| {
            Box::new(RuleEntry {
                id,
                rule: rule.into(),
                policy: policy.clone(),
                table: Arc::new(AnyTable::new(policy, shards, keys())),
                next: OnceLock::new(),
            })
        });
        self.len.store(id + 1, Ordering::Release);
        entry
    }
}

/// The embedded, sharded, in-process [`Store`]. See the [module docs](self) for the layout,
/// expiry and the key cap.
///
/// Time comes from the injected [`Clock`]; the `*_at` methods take `now` from the caller instead
/// (for simulations). All methods are synchronous and quick; the [`Store`] impl wraps them in
/// ready futures.
#[derive(Debug)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    sweep_cursor: AtomicUsize,
    /// Reservation claims ([`Store::claim`]).
    claims: claims::Claims,
}

/// A batch's locked shards: each item's key fingerprint and the index of its shard's guard.
struct LockedBatch<'s> {
    fps: Vec<u64>,
    /// Each item's rule key count.
    rules: Vec<&'s RuleKeys>,
    guards: Vec<Box<dyn AnyLocked + 's>>,
    guard_index: Vec<usize>,
}

/// Per distinct `(table, key)` of a batch: the working copy of its state.
struct Slot {
    fp: u64,
    /// The first item of the batch on this slot (its rule is the slot's).
    item: usize,
    /// Index into the batch's locked guards.
    guard: usize,
    state: State,
    /// Whether the key was held (and live) before this batch.
    held: bool,
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
                rule_keys: Mutex::new(Vec::new()),
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
        all.iter()
            .find(|k| *k.name == *rule)
            .map_or(0, |k| k.held.load(Ordering::Relaxed))
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

    /// [`Store::reserve`] at a caller-supplied `now`, synchronously: every item reserved for
    /// the shortest wait after which all of them fit, when it is at most `max_wait`.
    ///
    /// Two passes on working copies under the batch's locks: the first finds each item's
    /// shortest wait (in order, each seeing the earlier items' tentative reservations); the
    /// second reserves every item for the longest of them ([`Policy::reserve_at`]); an item
    /// that does not fit then denies the batch. A granted
    /// batch is written as a check is (new keys need room in the store).
    ///
    /// # Errors
    /// As [`MemoryStore::check_at`].
    pub fn reserve_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        crate::validate_batch(items)?;
        let LockedBatch {
            fps,
            rules,
            mut guards,
            guard_index,
        } = self.lock_batch(items);
        let mut slots: Vec<Slot> = Vec::with_capacity(items.len());
        let mut slot_of_item = Vec::with_capacity(items.len());
        let mut expired = 0;
        for (i, item) in items.iter().enumerate() {
            let (fp, g) = (fps[i], guard_index[i]);
            let index = match slots.iter().position(|s| s.guard == g && s.fp == fp) {
                Some(index) => index,
                None => {
                    let (loaded, was_expired) = guards[g].load_any(fp, now);
                    expired += usize::from(was_expired);
                    slots.push(Slot {
                        fp,
                        item: i,
                        guard: g,
                        held: loaded.is_some(),
                        state: loaded.map_or_else(|| item.policy.initial_state(), |(s, _)| s),
                        consumed_reset_after: None,
                    });
                    slots.len() - 1
                }
            };
            slot_of_item.push(index);
        }
        self.shared.count_expired(expired);

        // Pass 1: each item's shortest wait (after its key's effective now).
        let mut trial: Vec<State> = slots.iter().map(|s| s.state.clone()).collect();
        let mut peeks = Vec::with_capacity(items.len());
        let mut longest = Some(0);
        for (item, &slot) in items.iter().zip(&slot_of_item) {
            let state = &mut trial[slot];
            peeks.push(
                item.policy
                    .decide(&mut state.clone(), now, item.cost, false),
            );
            let r = item
                .policy
                .decide_reserve(state, now, item.cost, Micros::MAX);
            longest = match (longest, r.wait) {
                (Some(l), Some(wait)) => Some(wait.max(l)),
                _ => None,
            };
        }
        let denied = |peeks: Vec<Decision>| BatchReservation {
            batch: BatchDecision {
                allowed: false,
                decisions: peeks,
                store_full: None,
            },
            wait: None,
            scheduled_at: Vec::new(),
        };
        let Some(wait) = longest.filter(|&wait| wait <= max_wait) else {
            return Ok(denied(peeks));
        };

        // Pass 2: every item for that wait.
        let mut decisions = Vec::with_capacity(items.len());
        let mut scheduled_at = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let slot = &mut slots[slot_of_item[i]];
            let reserved = if item.cost == 0 {
                // Nothing to reserve: the standing of its key at this point of the batch.
                let mut state = slot.state.clone();
                item.policy.reserve_at(&mut state, now, 0, 0).map(|r| {
                    let at = r.scheduled_at.map(|t| t + wait);
                    (r.decision, at)
                })
            } else {
                item.policy
                    .reserve_at(&mut slot.state, now, item.cost, wait)
                    .map(|r| (r.decision, r.scheduled_at))
            };
            match reserved {
                Some((decision, Some(at))) => {
                    if item.cost > 0 {
                        slot.consumed_reset_after = Some(decision.reset_after);
                    }
                    decisions.push(decision);
                    scheduled_at.push(at);
                }
                _ => return Ok(denied(peeks)),
            }
        }
        let batch = self.commit_slots(
            items,
            &rules,
            slots,
            &slot_of_item,
            peeks,
            decisions,
            guards,
            &fps,
            now,
        );
        let granted = batch.allowed;
        Ok(BatchReservation {
            batch,
            wait: granted.then_some(wait),
            scheduled_at: if granted { scheduled_at } else { Vec::new() },
        })
    }

    /// [`Store::settle`] at a caller-supplied `now`, synchronously: each item under its shard's
    /// lock. A key that expired (or was never stored) gets nothing back; a charge on it starts
    /// it from a fresh state (if the store has room: a full store drops the charge, counted as
    /// a full-store event).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when an item's `reserved` exceeds its policy's
    /// capacity (nothing is settled).
    pub fn settle_at(
        &self,
        items: &[SettleItem<'_>],
        now: Timestamp,
    ) -> Result<Vec<Decision>, StoreError> {
        crate::validate_settle(items)?;
        let mut standings = Vec::with_capacity(items.len());
        for item in items {
            let entry = self.entry(item.rule, item.policy);
            let fp = self.shared.fingerprint(item.key);
            let shard = entry.table.shard_of(fp);
            let mut guard = entry.table.lock_any(shard);
            let (loaded, expired) = guard.load_any(fp, now);
            self.shared.count_expired(usize::from(expired));
            let held = loaded.is_some();
            let mut state = loaded.map_or_else(|| item.policy.initial_state(), |(s, _)| s);
            if !held && item.actual <= item.reserved {
                // Nothing to give back to a fresh key.
                standings.push(item.policy.decide(&mut state, now, 0, false));
                continue;
            }
            let d = item.policy.decide_settle(
                &mut state,
                now,
                item.scheduled_at,
                item.reserved,
                item.actual,
            );
            let rule = &**entry.table.keys();
            let room = if held {
                Ok(())
            } else {
                self.shared.reserve(&[(rule, 1)], now, |now| {
                    guard.drop_expired(now) + self.shared.drop_expired_elsewhere(shard, now)
                })
            };
            match room {
                Ok(()) => guard.save_any(fp, state, now.saturating_add(d.reset_after)),
                Err(cap) => self.shared.count_full(rule, 1, cap),
            }
            standings.push(d);
        }
        Ok(standings)
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

    /// When the store is full during a batch: [`Shared::drop_expired_elsewhere`] for the shard
    /// index of every item.
    fn drop_expired_near(&self, fps: &[u64], now: Timestamp) -> usize {
        // Every table has `config.shards` shards, so this is each table's `shard_of`.
        let mask = self.shared.config.shards - 1;
        let mut indices: Vec<usize> = fps.iter().map(|&fp| (fp >> 32) as usize & mask).collect();
        indices.sort_unstable();
        indices.dedup();
        indices
            .into_iter()
            .map(|i| self.shared.drop_expired_elsewhere(i, now))
            .sum()
    }

    /// A batch of one item: [`Shared::single`], wrapped.
    fn run_single(&self, item: &CheckItem<'_>, now: Timestamp, commit: bool) -> BatchDecision {
        let entry = self.entry(item.rule, item.policy);
        let fp = self.shared.fingerprint(item.key);
        let (decision, store_full) =
            self.shared
                .single_any(&entry.table, fp, now, item.cost, commit);
        BatchDecision {
            allowed: decision.allowed,
            decisions: vec![decision],
            store_full,
        }
    }

    /// A batch whose items all have different `(table, key)`: peek every item in place, then,
    /// if all admit, consume every item in place. No state is copied; the shards stay locked
    /// throughout, so the second pass sees exactly the states the first one judged.
    #[allow(clippy::too_many_arguments)]
    fn run_distinct(
        &self,
        items: &[CheckItem<'_>],
        rules: &[&RuleKeys],
        fps: &[u64],
        guard_index: &[usize],
        guards: &mut [Box<dyn AnyLocked + '_>],
        now: Timestamp,
        commit: bool,
    ) -> BatchDecision {
        let mut peeks = Vec::with_capacity(items.len());
        let mut held = Vec::with_capacity(items.len());
        let mut expired = 0;
        for ((item, &fp), &g) in items.iter().zip(fps).zip(guard_index) {
            match guards[g].decide_held(fp, now, item.cost, false) {
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
        self.shared.count_expired(expired);
        let allowed = peeks.iter().all(|d| d.allowed);
        if !allowed || !commit {
            return BatchDecision {
                allowed,
                decisions: peeks,
                store_full: None,
            };
        }

        let is_new = |i: usize| !held[i] && items[i].cost > 0;
        let wants = per_rule((0..items.len()).filter(|&i| is_new(i)).map(|i| rules[i]));
        let room = self.shared.reserve(&wants, now, |now| {
            let locked: usize = guards.iter_mut().map(|g| g.drop_expired(now)).sum();
            locked + self.drop_expired_near(fps, now)
        });
        let full = room.is_err();
        if let Err(cap) = room {
            for &(rule, n) in &wants {
                self.shared.count_full(rule, n, cap);
            }
            if self.shared.config.on_full == OnFull::Reject {
                let decisions = (0..items.len())
                    .map(|i| {
                        if is_new(i) {
                            self.shared.full_denial(items[i].policy.capacity())
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
                if let Held::Live(d) = shard.decide_held(fp, now, item.cost, true) {
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
                shard.save_any(fp, state, now.saturating_add(d.reset_after));
            }
            decisions.push(d);
        }
        BatchDecision {
            allowed: true,
            decisions,
            store_full: full.then_some(OnFull::AdmitUntracked),
        }
    }

    /// Locks the shards of every item's key, in increasing `(table, shard)` order: every batch
    /// acquires locks in the same global order, so no two batches can wait on each other in a
    /// cycle.
    fn lock_batch(&self, items: &[CheckItem<'_>]) -> LockedBatch<'_> {
        let entries: Vec<&RuleEntry> = items
            .iter()
            .map(|it| self.entry(it.rule, it.policy))
            .collect();
        let fps: Vec<u64> = items
            .iter()
            .map(|it| self.shared.fingerprint(it.key))
            .collect();

        let lock_of_item: Vec<(usize, usize)> = entries
            .iter()
            .zip(&fps)
            .map(|(e, &fp)| (e.id, e.table.shard_of(fp)))
            .collect();
        let mut locks = lock_of_item.clone();
        locks.sort_unstable();
        locks.dedup();
        let guards: Vec<Box<dyn AnyLocked + '_>> = locks
            .iter()
            .map(|&(id, shard)| {
                let entry = entries
                    .iter()
                    .find(|e| e.id == id)
                    .expect("every lock belongs to an item's table");
                entry.table.lock_any(shard)
            })
            .collect();
        let guard_index: Vec<usize> = lock_of_item
            .iter()
            .map(|l| {
                locks
                    .binary_search(l)
                    .expect("every item's shard is locked")
            })
            .collect();
        LockedBatch {
            fps,
            rules: entries.iter().map(|e| &**e.table.keys()).collect(),
            guards,
            guard_index,
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
        let LockedBatch {
            fps,
            rules,
            mut guards,
            guard_index,
        } = self.lock_batch(items);

        let same = |i: usize, j: usize| guard_index[i] == guard_index[j] && fps[i] == fps[j];
        let distinct = (0..items.len()).all(|i| (0..i).all(|j| !same(i, j)));
        if distinct {
            return Ok(self.run_distinct(
                items,
                &rules,
                &fps,
                &guard_index,
                &mut guards,
                now,
                commit,
            ));
        }

        // Phase 1: decide every item on working copies. Items sharing (table, key) share a
        // slot and see each other's tentative consumption, in order.
        let mut slots: Vec<Slot> = Vec::with_capacity(items.len());
        let mut slot_of_item = Vec::with_capacity(items.len());
        let mut peeks = Vec::with_capacity(items.len());
        let mut consumed = Vec::with_capacity(items.len());
        let mut expired = 0;
        for (i, item) in items.iter().enumerate() {
            let (fp, g) = (fps[i], guard_index[i]);
            let slot_index = match slots.iter().position(|s| s.guard == g && s.fp == fp) {
                Some(s) => s,
                None => {
                    let (loaded, was_expired) = guards[g].load_any(fp, now);
                    expired += usize::from(was_expired);
                    let held = loaded.is_some();
                    let state = loaded.map_or_else(|| item.policy.initial_state(), |(s, _)| s);
                    slots.push(Slot {
                        fp,
                        item: i,
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
        self.shared.count_expired(expired);

        let allowed = peeks.iter().all(|d| d.allowed);
        if !allowed || !commit {
            return Ok(BatchDecision {
                allowed,
                decisions: peeks,
                store_full: None,
            });
        }

        Ok(self.commit_slots(
            items,
            &rules,
            slots,
            &slot_of_item,
            peeks,
            consumed,
            guards,
            &fps,
            now,
        ))
    }

    /// Phases 2 and 3 of a consuming batch whose every item admitted, on the working copies
    /// `slots`: reserves room for new keys before writing anything (so that a rejection leaves
    /// every key untouched), then writes back every slot that consumed. `peeks` answer a
    /// batch the full store rejects, `consumed` an admitted one.
    #[allow(clippy::too_many_arguments)]
    fn commit_slots(
        &self,
        items: &[CheckItem<'_>],
        rules: &[&RuleKeys],
        slots: Vec<Slot>,
        slot_of_item: &[usize],
        peeks: Vec<Decision>,
        consumed: Vec<Decision>,
        mut guards: Vec<Box<dyn AnyLocked + '_>>,
        fps: &[u64],
        now: Timestamp,
    ) -> BatchDecision {
        // Phase 2: every item admitted. New keys need room; reserve it before writing
        // anything, so that a rejection leaves every key untouched.
        let wants = per_rule(
            slots
                .iter()
                .filter(|s| !s.held && s.consumed_reset_after.is_some())
                .map(|s| rules[s.item]),
        );
        let room = self.shared.reserve(&wants, now, |now| {
            let locked: usize = guards.iter_mut().map(|g| g.drop_expired(now)).sum();
            locked + self.drop_expired_near(fps, now)
        });
        let full = room.is_err();
        let is_untracked = |slot: &Slot| full && !slot.held;
        let untracked = per_rule(
            slot_of_item
                .iter()
                .enumerate()
                .filter(|&(_, &s)| {
                    is_untracked(&slots[s]) && slots[s].consumed_reset_after.is_some()
                })
                .map(|(i, _)| rules[i]),
        );
        let mut store_full = None;
        if let (Err(cap), false) = (room, untracked.is_empty()) {
            for &(rule, n) in &untracked {
                self.shared.count_full(rule, n, cap);
            }
            if self.shared.config.on_full == OnFull::Reject {
                let decisions = items
                    .iter()
                    .zip(slot_of_item)
                    .zip(peeks)
                    .map(|((item, &s), peek)| {
                        if is_untracked(&slots[s]) && item.cost > 0 {
                            self.shared.full_denial(item.policy.capacity())
                        } else {
                            peek
                        }
                    })
                    .collect();
                return BatchDecision {
                    allowed: false,
                    decisions,
                    store_full: Some(OnFull::Reject),
                };
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
            guards[slot.guard].save_any(slot.fp, slot.state, now.saturating_add(reset_after));
        }
        drop(guards);
        BatchDecision {
            allowed: true,
            decisions: consumed,
            store_full,
        }
    }
}

/// A handle on one rule's keys in a [`MemoryStore`], from [`MemoryStore::limiter`]: the
/// allocation-free hot path. `Clone`, `Send` and `Sync`: share it between threads (clones are
/// two reference-count increments and share the same state).
#[derive(Debug, Clone)]
pub struct KeyedLimiter {
    shared: Arc<Shared>,
    table: Arc<AnyTable>,
    rule: Arc<str>,
    policy: Policy,
    capacity: u64,
}

impl KeyedLimiter {
    /// Checks `cost` units for client `key` at the store clock's current time and consumes
    /// them if admitted. Cost 0 reports the remaining allowance and consumes nothing. Same
    /// decision and state change as [`MemoryStore::check_one`] on this rule and policy,
    /// including the store's full denial for a new key when the store holds `max_keys` live
    /// keys (with [`OnFull::Reject`]).
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
}

#[cfg(test)]
mod tests;
