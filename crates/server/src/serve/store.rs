//! [`VersionedStore`]: the store (memory or Redis, an [`AnyStore`]) with each rule's state
//! namespaced by its algorithm and quota, so that a hot reload keeps exactly the counters it
//! should.
//!
//! Store state is identified by `(rule, key)`. If `rule` were only the rule's name, a reload
//! that changes a rule's quota (say `5/min` to `6/min`) would reuse the old state under the new
//! quota, where it means something else (a token bucket's state is counted in ticks of the
//! quota's emission interval). So every item's rule is rewritten to its *state id*
//! `name|algorithm|quota` (e.g. `per-ip|token_bucket|10/10s`): a reloaded rule with the same
//! name, algorithm and quota finds its counters again; any change starts it fresh, and the old
//! entries expire on their own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, Decision, Policy, Quota};
use floodgate_store::redis::AnyStore;
use floodgate_store::{BatchDecision, CheckItem, Store, StoreError};
use parking_lot::RwLock;

/// The state id of a rule: `name|algorithm|quota`.
pub fn state_id(name: &str, policy: &Policy) -> String {
    format!("{name}|{}|{}", policy.kind(), policy.quota())
}

/// The cached state id of one rule name: the algorithm and quota it was made for, and the id.
type CachedId = (AlgorithmKind, Quota, Arc<str>);

/// A store whose `rule` argument is namespaced by algorithm and quota (see the
/// [module docs](self)). [`Store::reset`] takes the state id (see [`state_id`]), since it has no
/// policy to derive it from.
#[derive(Debug)]
pub struct VersionedStore {
    inner: AnyStore,
    /// Name -> (algorithm, quota, state id), so the id is formatted once per rule version.
    ids: RwLock<HashMap<String, CachedId>>,
}

impl VersionedStore {
    /// Wraps `inner`.
    pub fn new(inner: AnyStore) -> Self {
        Self {
            inner,
            ids: RwLock::new(HashMap::new()),
        }
    }

    fn id(&self, name: &str, policy: &Policy) -> Arc<str> {
        let (kind, quota) = (policy.kind(), *policy.quota());
        if let Some((k, q, id)) = self.ids.read().get(name) {
            if *k == kind && *q == quota {
                return Arc::clone(id);
            }
        }
        let id: Arc<str> = state_id(name, policy).into();
        self.ids
            .write()
            .insert(name.to_string(), (kind, quota, Arc::clone(&id)));
        id
    }

    fn ids(&self, items: &[CheckItem<'_>]) -> Vec<Arc<str>> {
        items.iter().map(|i| self.id(i.rule, i.policy)).collect()
    }
}

/// `items` with each rule replaced by its state id.
fn mapped<'a>(items: &[CheckItem<'a>], ids: &'a [Arc<str>]) -> Vec<CheckItem<'a>> {
    items
        .iter()
        .zip(ids)
        .map(|(item, id)| CheckItem { rule: id, ..*item })
        .collect()
}

impl Store for VersionedStore {
    fn check(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send {
        let ids = self.ids(items);
        async move { self.inner.check(&mapped(items, &ids)).await }
    }

    fn peek(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send {
        let ids = self.ids(items);
        async move { self.inner.peek(&mapped(items, &ids)).await }
    }

    fn reset(
        &self,
        rule: &str,
        key: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.reset(rule, key)
    }

    fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        let id = self.id(rule, policy);
        async move { self.inner.inspect(&id, policy, key).await }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ManualClock;

    fn policy(q: &str) -> Policy {
        Policy::new(AlgorithmKind::TokenBucket, q.parse().unwrap()).unwrap()
    }

    #[test]
    fn same_name_new_quota_is_fresh_state_and_old_quota_finds_its_state_again() {
        let clock = ManualClock::new(1_000_000);
        let store = VersionedStore::new(AnyStore::Memory(Arc::new(
            floodgate_store::MemoryStore::with_clock(Arc::new(clock)),
        )));
        let five = policy("5/min");
        let six = policy("6/min");
        let item = |p| CheckItem {
            rule: "r",
            policy: p,
            key: "k",
            cost: 3,
        };
        let run = |p| {
            let d = block_on(store.check(&[item(p)])).unwrap().decisions[0];
            (d.allowed, d.remaining)
        };
        assert_eq!(run(&five), (true, 2));
        assert_eq!(
            run(&six),
            (true, 3),
            "a new quota starts from a full bucket"
        );
        assert_eq!(
            run(&five),
            (false, 2),
            "back to 5/min finds its state: 2 left, so 3 more are denied"
        );
        assert_eq!(state_id("r", &five), "r|token_bucket|5/min");
        let id = state_id("r", &six);
        assert!(block_on(store.reset(&id, "k")).unwrap());
        assert!(!block_on(store.reset(&id, "k")).unwrap());
    }

    /// The memory store's futures are ready at once.
    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
