//! The rule tables of a store: an append-only registry of one [`RuleEntry`] per
//! `(rule name, policy)`, read without a lock.

use std::iter::successors;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use floodgate_core::Policy;
use parking_lot::Mutex;

use super::table::{AnyTable, RuleKeys};

/// One rule's table in the registry.
#[derive(Debug)]
pub(super) struct RuleEntry {
    /// Position in the registry: batches lock shards in `(id, shard)` order.
    pub(super) id: usize,
    pub(super) rule: Arc<str>,
    pub(super) policy: Policy,
    pub(super) table: Arc<AnyTable>,
    pub(super) next: OnceLock<Box<RuleEntry>>,
}

impl RuleEntry {
    #[inline]
    fn matches(&self, rule: &str, policy: &Policy) -> bool {
        self.rule.len() == rule.len()
            && self.policy.kind() == policy.kind()
            && self.policy.quota() == policy.quota()
            && *self.rule == *rule
            // a calendar (zone, unit, first weekday) is part of the policy's identity
            && self.policy.calendar() == policy.calendar()
    }
}

/// The rule tables: an append-only linked list, read without a lock (each link is a
/// `OnceLock`, so a reader sees a fully built entry or none); appends are serialised by a
/// mutex. Rules are few (a configuration's worth, plus one per policy change), so a linear
/// scan that compares lengths first is as fast as a map.
#[derive(Debug, Default)]
pub(super) struct Registry {
    head: OnceLock<Box<RuleEntry>>,
    len: AtomicUsize,
    append: Mutex<()>,
}

impl Registry {
    pub(super) fn iter(&self) -> impl Iterator<Item = &RuleEntry> {
        successors(self.head.get().map(|b| &**b), |e| {
            e.next.get().map(|b| &**b)
        })
    }

    #[inline]
    pub(super) fn find(&self, rule: &str, policy: &Policy) -> Option<&RuleEntry> {
        self.iter().find(|e| e.matches(rule, policy))
    }

    pub(super) fn get_or_insert(
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
