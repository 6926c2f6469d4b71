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
//!
//! The ids of the rule set in force are resolved when it is built or reloaded
//! ([`VersionedStore::resolve`]): a check finds its rule's id by the address of the rule's name
//! (the rule set's `Arc<str>`, which the table keeps alive, so the address cannot be reused by
//! another name) and its policy, without a lock or a hash. Names from anywhere else take the
//! cached look-up by name.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use floodgate_core::{AlgorithmKind, Decision, Policy, Quota};
use floodgate_store::redis::AnyStore;
use floodgate_store::{BatchDecision, CheckItem, Store, StoreError};
use floodgate_tower::RuleSet;
use parking_lot::RwLock;

/// The state id of a rule: `name|algorithm|quota`.
pub fn state_id(name: &str, policy: &Policy) -> String {
    format!("{name}|{}|{}", policy.kind(), policy.quota())
}

/// The cached state id of one rule name: the algorithm and quota it was made for, and the id.
type CachedId = (AlgorithmKind, Quota, Arc<str>);

/// The state id of one rule of a resolved rule set.
#[derive(Debug)]
struct Resolved {
    /// The rule set's own name allocation (kept alive here, so its address identifies it).
    name: Arc<str>,
    kind: AlgorithmKind,
    quota: Quota,
    id: Arc<str>,
}

/// A store whose `rule` argument is namespaced by algorithm and quota (see the
/// [module docs](self)). [`Store::reset`] and [`Store::inspect`] take the rule's name and
/// policy, as checks do, and derive the state id from them.
#[derive(Debug)]
pub struct VersionedStore {
    inner: AnyStore,
    /// Name -> (algorithm, quota, state id), so the id is formatted once per rule version.
    ids: RwLock<HashMap<String, CachedId>>,
    /// The ids of the last rule set given to [`VersionedStore::resolve`].
    resolved: ArcSwap<Box<[Resolved]>>,
}

impl VersionedStore {
    /// Wraps `inner`.
    pub fn new(inner: AnyStore) -> Self {
        Self {
            inner,
            ids: RwLock::new(HashMap::new()),
            resolved: ArcSwap::from_pointee(Box::default()),
        }
    }

    /// Resolves the state ids of `rules` now, so that checks naming these rules (by the rule
    /// set's own `name` strings, as the limiter and `/v1/check` do) find them without a lock or
    /// a hash. Call it with every rule set before it is put in force; items of other rule sets
    /// (an older one still finishing its requests) take the look-up by name, with the same ids.
    pub fn resolve(&self, rules: &RuleSet) {
        let table: Box<[Resolved]> = rules
            .rules
            .iter()
            .map(|r| Resolved {
                name: Arc::clone(&r.name),
                kind: r.policy.kind(),
                quota: *r.policy.quota(),
                id: self.id(&r.name, &r.policy),
            })
            .collect();
        self.resolved.store(Arc::new(table));
    }

    /// The state id of `item`'s rule.
    #[inline]
    fn item_id(&self, item: &CheckItem<'_>) -> Arc<str> {
        let table = self.resolved.load();
        let found = table.iter().find(|r| {
            // Same address and length: the very string the table holds (alive, so not a
            // reused address), hence the same name.
            std::ptr::eq(r.name.as_ptr(), item.rule.as_ptr())
                && r.name.len() == item.rule.len()
                && r.kind == item.policy.kind()
                && r.quota == *item.policy.quota()
        });
        match found {
            Some(r) => Arc::clone(&r.id),
            None => self.id(item.rule, item.policy),
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
        items.iter().map(|i| self.item_id(i)).collect()
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

impl VersionedStore {
    /// Runs `f` on `items` with each rule replaced by its state id; a one-item batch (the
    /// usual request) without a `Vec`.
    fn with_ids<T>(&self, items: &[CheckItem<'_>], f: impl FnOnce(&[CheckItem<'_>]) -> T) -> T {
        match items {
            [item] => {
                let id = self.item_id(item);
                f(&[CheckItem { rule: &id, ..*item }])
            }
            _ => {
                let ids = self.ids(items);
                f(&mapped(items, &ids))
            }
        }
    }
}

/// The future of a [`VersionedStore`] call: the memory store decides at once, so its answer
/// is held as it is; a remote store's (large) future is boxed. Either way the future is small,
/// which matters because callers' futures hold it and are moved (copied) into boxes on every
/// request.
enum Pending<T, F> {
    Ready(Option<T>),
    Remote(Pin<Box<F>>),
}

// Nothing is pinned in place: the answer is moved out, the remote future is boxed.
impl<T, F> Unpin for Pending<T, F> {}

impl<T, F: Future<Output = T>> Future for Pending<T, F> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.get_mut() {
            Pending::Ready(answer) => Poll::Ready(answer.take().expect("polled after completion")),
            Pending::Remote(future) => future.as_mut().poll(cx),
        }
    }
}

impl Store for VersionedStore {
    fn check(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send {
        match &self.inner {
            // Decided now, like `AnyStore` does at its first poll.
            AnyStore::Memory(memory) => {
                Pending::Ready(Some(self.with_ids(items, |items| memory.check_now(items))))
            }
            _ => {
                let ids = self.ids(items);
                Pending::Remote(Box::pin(async move {
                    self.inner.check(&mapped(items, &ids)).await
                }))
            }
        }
    }

    fn peek(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl Future<Output = Result<BatchDecision, StoreError>> + Send {
        match &self.inner {
            AnyStore::Memory(memory) => {
                Pending::Ready(Some(self.with_ids(items, |items| memory.peek_now(items))))
            }
            _ => {
                let ids = self.ids(items);
                Pending::Remote(Box::pin(async move {
                    self.inner.peek(&mapped(items, &ids)).await
                }))
            }
        }
    }

    fn reset(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let id = self.id(rule, policy);
        async move { self.inner.reset(&id, policy, key).await }
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
        assert!(block_on(store.reset("r", &six, "k")).unwrap());
        assert!(!block_on(store.reset("r", &six, "k")).unwrap());
    }

    #[test]
    fn resolved_rules_share_state_with_the_look_up_by_name_and_a_changed_policy_does_not() {
        use floodgate_tower::{KeySource, Rule};
        let clock = ManualClock::new(1_000_000);
        let store = VersionedStore::new(AnyStore::Memory(Arc::new(
            floodgate_store::MemoryStore::with_clock(Arc::new(clock)),
        )));
        let five = policy("5/min");
        let rules = RuleSet::new(vec![Rule::new(
            "r",
            five.clone(),
            KeySource::Constant("c".into()),
        )]);
        store.resolve(&rules);
        let rule = &rules.rules[0];
        let check = |name: &str, p: &Policy, cost| {
            let item = CheckItem {
                rule: name,
                policy: p,
                key: "k",
                cost,
            };
            let d = block_on(store.check(&[item])).unwrap().decisions[0];
            (d.allowed, d.remaining)
        };
        // Through the rule set's own name (resolved) and through another copy of it.
        assert_eq!(check(&rule.name, &rule.policy, 2), (true, 3));
        assert_eq!(check(&String::from("r"), &five, 2), (true, 1));
        // The same name allocation under another quota is another state.
        assert_eq!(check(&rule.name, &policy("6/min"), 4), (true, 2));
        assert_eq!(check(&rule.name, &rule.policy, 1), (true, 0));
        // Two items (the batch path) find the same states.
        let six = policy("6/min");
        let items = [
            CheckItem {
                rule: &rule.name,
                policy: &rule.policy,
                key: "k",
                cost: 0,
            },
            CheckItem {
                rule: "r",
                policy: &six,
                key: "k",
                cost: 0,
            },
        ];
        let batch = block_on(store.check(&items)).unwrap();
        let remaining: Vec<u64> = batch.decisions.iter().map(|d| d.remaining).collect();
        assert_eq!(remaining, [0, 2]);
    }

    /// The memory store's futures are ready at once.
    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
