//! What every table of a store shares ([`Shared`]): the clock, the fingerprint secret, the
//! registry, the key caps and the counters, and the one-item decision behind every one-item
//! path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use floodgate_core::{Clock, Decision, Timestamp};
use parking_lot::Mutex;
use siphasher::sip::SipHasher13;

use super::config::MemoryStoreConfig;
use super::registry::Registry;
use super::table::{AnyTable, Kind, RuleKeys, Table};
use crate::OnFull;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) evictions: AtomicU64,
    pub(super) expirations: AtomicU64,
    pub(super) full_rejections: AtomicU64,
    pub(super) full_untracked: AtomicU64,
}

/// Which cap a new key met: the rule's own (the index of its pair in the reservation) or the
/// store's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cap {
    Rule(usize),
    Store,
}

/// Each rule's count of the new keys among `new` (one `(rule, n)` pair per rule, in order of
/// first appearance). Rules are few per batch: a linear scan.
pub(super) fn per_rule<'a>(new: impl Iterator<Item = &'a RuleKeys>) -> Vec<(&'a RuleKeys, usize)> {
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
pub(super) struct Fingerprinter(pub(super) SipHasher13);

impl std::fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret (siphasher's own Debug prints it): never print it.
        f.write_str("Fingerprinter(..)")
    }
}

/// What every table of a store shares: the clock, the fingerprint secret, the key cap and the
/// counters.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) clock: Arc<dyn Clock>,
    pub(super) fingerprinter: Fingerprinter,
    pub(super) config: MemoryStoreConfig,
    /// Entries held across all tables; at most `config.max_keys`.
    pub(super) keys: AtomicUsize,
    pub(super) counters: Counters,
    pub(super) registry: Registry,
    /// Per rule name, its key count and own cap (created on first use or when a cap is set;
    /// read only when a table is created or a cap changes). A map: a reload sets the cap of
    /// every rule, and a scan per rule made 50,000 rules minutes of work.
    pub(super) rule_keys: Mutex<HashMap<Box<str>, Arc<RuleKeys>>>,
    /// `floodgate_store_expirations_total`, registered with the metrics recorder on first use
    /// (a handle taken before the application installs its recorder would count nowhere): a
    /// reused expired slot is a per-request event, and the macro hashes the name every call.
    pub(super) expirations_metric: OnceLock<metrics::Counter>,
}

impl Shared {
    /// When the store is full: drops the expired slots of shard index `shard` in every rule's
    /// table whose lock is free (the caller's own locked shards are skipped: `try_lock` fails
    /// on them, and they were handled already). Shard `i` of every table together hold the keys
    /// whose fingerprint has the same shard bits, as one shard of a single table would. Cheap
    /// when nothing has expired (one `try_lock` and one comparison per table).
    pub(super) fn drop_expired_elsewhere(&self, shard: usize, now: Timestamp) -> usize {
        self.registry
            .iter()
            .map(|e| e.table.try_drop_expired(shard, now))
            .sum()
    }

    /// The 64-bit fingerprint of a client key: its identity in every rule's table.
    #[inline]
    pub(super) fn fingerprint(&self, key: &str) -> u64 {
        self.fingerprinter.0.hash(key.as_bytes())
    }

    /// Accounts for `n` expired entries dropped by a sweep or a touch.
    pub(super) fn count_expired(&self, n: usize) {
        if n > 0 {
            self.keys.fetch_sub(n, Ordering::Relaxed);
            self.count_reused(n);
        }
    }

    /// Counts `n` expirations that did not change the key count (an expired slot reused).
    pub(super) fn count_reused(&self, n: usize) {
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
    pub(super) fn reserve(
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
    pub(super) fn count_full(&self, rule: &RuleKeys, n: usize, cap: Cap) {
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
    pub(super) fn rule_keys(&self, rule: &str) -> Arc<RuleKeys> {
        let mut all = self.rule_keys.lock();
        if let Some(found) = all.get(rule) {
            return Arc::clone(found);
        }
        let keys = Arc::new(RuleKeys::new(rule.into()));
        all.insert(rule.into(), Arc::clone(&keys));
        keys
    }

    /// The decision for a new key refused because the store is full.
    pub(super) fn full_denial(&self, capacity: u64) -> Decision {
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
    pub(super) fn single_any(
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
    pub(super) fn remove(&self, table: &AnyTable, fp: u64) -> Option<Timestamp> {
        let removed = table.remove(fp);
        if removed.is_some() {
            self.keys.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }
}
