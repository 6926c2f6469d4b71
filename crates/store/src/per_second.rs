//! [`PerSecondStore`]: two stores, one for the rules whose period is a second or less, one for
//! the rest, as envoyproxy/ratelimit's `REDIS_PERSECOND` keeps its per-second counters on a
//! Redis of their own (the busiest keys, which also expire soonest).
//!
//! Each item goes to the store its policy names ([`is_per_second`]); a batch whose items all
//! go to one store is that store's batch, atomic as ever. A batch that spans both is decided
//! all or nothing in two steps: the per-second store first (a reservation without a wait,
//! which decides as a check does and says when it was taken), then the main store; when the
//! main store refuses (or fails), the units taken on the per-second store are given back (a
//! settle of the reservation with an actual cost of 0). Nothing stays charged for a refused
//! request, but between the two steps a concurrent request on the same per-second key sees
//! the units taken, as it would for a request admitted then.
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::{AlgorithmKind, ManualClock, Policy};
//! use floodgate_store::per_second::PerSecondStore;
//! use floodgate_store::{CheckItem, MemoryStore, Store};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
//! let (main, fast) = (MemoryStore::with_clock(clock.clone()), MemoryStore::with_clock(clock));
//! let store = PerSecondStore::new(main, fast);
//! let per_second = Policy::new(AlgorithmKind::FixedWindow, "10/s".parse().unwrap()).unwrap();
//! let per_hour = Policy::new(AlgorithmKind::FixedWindow, "1/h".parse().unwrap()).unwrap();
//! let item = |rule, policy| CheckItem { rule, policy, key: "k", cost: 1 };
//! let batch = [item("fast", &per_second), item("slow", &per_hour)];
//! assert!(store.check(&batch).await.unwrap().allowed);
//! // The hourly rule refuses the second batch: the per-second unit is given back.
//! assert!(!store.check(&batch).await.unwrap().allowed);
//! assert_eq!(store.per_second().inspect("fast", &per_second, "k").await.unwrap().remaining, 9);
//! # });
//! ```

use floodgate_core::{Decision, Micros, Policy, Timestamp};

use crate::{
    validate_batch, BatchDecision, BatchReservation, CheckItem, SettleItem, Store, StoreError,
};

/// The longest period that goes to the per-second store: one second.
pub const PER_SECOND_PERIOD: Micros = 1_000_000;

/// `true` when `policy`'s period is [`PER_SECOND_PERIOD`] or shorter.
pub fn is_per_second(policy: &Policy) -> bool {
    policy.quota().period() <= PER_SECOND_PERIOD
}

/// A [`Store`] that keeps the state of per-second policies ([`is_per_second`]) in
/// `per_second` and every other in `main`. Claims and stats are `main`'s.
#[derive(Debug)]
pub struct PerSecondStore<M, S> {
    main: M,
    per_second: S,
}

impl<M: Store, S: Store> PerSecondStore<M, S> {
    /// `per_second` for the rules whose period is a second or less, `main` for the rest.
    pub fn new(main: M, per_second: S) -> Self {
        Self { main, per_second }
    }

    /// The store of every policy longer than a second.
    pub fn main(&self) -> &M {
        &self.main
    }

    /// The store of the policies of a second or less.
    pub fn per_second(&self) -> &S {
        &self.per_second
    }

    /// A reservation (at most `max_wait`) of a batch that spans both stores; see the module
    /// docs. Only `max_wait = 0` (a check) is supported: a common wait on two stores would
    /// need both to agree on it first.
    async fn reserve_split(
        &self,
        items: &[CheckItem<'_>],
        fast: &[usize],
        slow: &[usize],
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        if max_wait > 0 {
            return Err(StoreError::Unsupported {
                operation: "a wait (reserve) for items on both the per-second and the main store",
            });
        }
        let pick = |idx: &[usize]| idx.iter().map(|&i| items[i]).collect::<Vec<_>>();
        let (fast_items, slow_items) = (pick(fast), pick(slow));
        let first = self.per_second.reserve(&fast_items, 0).await?;
        if !first.batch.allowed {
            let rest = self.main.peek(&slow_items).await?;
            return Ok(denied(items.len(), (fast, first.batch), (slow, rest)));
        }
        let second = match self.main.reserve(&slow_items, 0).await {
            Ok(second) if second.batch.allowed => second,
            other => {
                let back = self.give_back(&fast_items, &first).await;
                let second = other?;
                let given_back = BatchDecision {
                    allowed: true,
                    decisions: back?,
                    store_full: first.batch.store_full,
                };
                return Ok(denied(
                    items.len(),
                    (fast, given_back),
                    (slow, second.batch),
                ));
            }
        };
        let store_full = first.batch.store_full.or(second.batch.store_full);
        let decisions = merge(
            items.len(),
            (fast, first.batch.decisions),
            (slow, second.batch.decisions),
        );
        let scheduled_at = merge(
            items.len(),
            (fast, first.scheduled_at),
            (slow, second.scheduled_at),
        );
        Ok(BatchReservation {
            batch: BatchDecision {
                allowed: true,
                decisions,
                store_full,
            },
            wait: Some(0),
            scheduled_at,
        })
    }

    /// Settles `granted` (a reservation of `items` on the per-second store) with an actual
    /// cost of 0: every unit it took is given back. The standings after it, in order.
    async fn give_back(
        &self,
        items: &[CheckItem<'_>],
        granted: &BatchReservation,
    ) -> Result<Vec<Decision>, StoreError> {
        let settle: Vec<SettleItem<'_>> = items
            .iter()
            .zip(&granted.scheduled_at)
            .map(|(item, &scheduled_at)| SettleItem {
                rule: item.rule,
                policy: item.policy,
                key: item.key,
                reserved: item.cost,
                actual: 0,
                scheduled_at,
            })
            .collect();
        self.per_second.settle(&settle).await
    }
}

/// The indices of `policies` that go to the per-second store, and those that go to main.
fn split<'p>(policies: impl Iterator<Item = &'p Policy>) -> (Vec<usize>, Vec<usize>) {
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    for (i, p) in policies.enumerate() {
        if is_per_second(p) {
            fast.push(i);
        } else {
            slow.push(i);
        }
    }
    (fast, slow)
}

/// `a`'s values at its indices and `b`'s at its, as one list of `n` in the original order.
fn merge<T: Copy>(n: usize, a: (&[usize], Vec<T>), b: (&[usize], Vec<T>)) -> Vec<T> {
    let mut out = vec![None; n];
    for (idx, values) in [a, b] {
        for (&i, v) in idx.iter().zip(values) {
            out[i] = Some(v);
        }
    }
    // The two index lists cover 0..n between them: every slot is filled.
    out.into_iter().flatten().collect()
}

/// A refused reservation of `n` items whose parts decided `a` and `b`.
fn denied(
    n: usize,
    a: (&[usize], BatchDecision),
    b: (&[usize], BatchDecision),
) -> BatchReservation {
    let store_full = a.1.store_full.or(b.1.store_full);
    BatchReservation {
        batch: BatchDecision {
            allowed: false,
            decisions: merge(n, (a.0, a.1.decisions), (b.0, b.1.decisions)),
            store_full,
        },
        wait: None,
        scheduled_at: Vec::new(),
    }
}

impl<M: Store, S: Store> Store for PerSecondStore<M, S> {
    async fn check(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        validate_batch(items)?;
        let (fast, slow) = split(items.iter().map(|i| i.policy));
        if fast.is_empty() {
            return self.main.check(items).await;
        }
        if slow.is_empty() {
            return self.per_second.check(items).await;
        }
        Ok(self.reserve_split(items, &fast, &slow, 0).await?.batch)
    }

    async fn peek(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        validate_batch(items)?;
        let (fast, slow) = split(items.iter().map(|i| i.policy));
        if fast.is_empty() {
            return self.main.peek(items).await;
        }
        if slow.is_empty() {
            return self.per_second.peek(items).await;
        }
        let pick = |idx: &[usize]| idx.iter().map(|&i| items[i]).collect::<Vec<_>>();
        let a = self.per_second.peek(&pick(&fast)).await?;
        let b = self.main.peek(&pick(&slow)).await?;
        let allowed = a.allowed && b.allowed;
        let mut out = denied(items.len(), (&fast, a), (&slow, b)).batch;
        out.allowed = allowed;
        Ok(out)
    }

    async fn reset(&self, rule: &str, policy: &Policy, key: &str) -> Result<bool, StoreError> {
        if is_per_second(policy) {
            self.per_second.reset(rule, policy, key).await
        } else {
            self.main.reset(rule, policy, key).await
        }
    }

    async fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> Result<Decision, StoreError> {
        if is_per_second(policy) {
            self.per_second.inspect(rule, policy, key).await
        } else {
            self.main.inspect(rule, policy, key).await
        }
    }

    async fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> Result<Option<bool>, StoreError> {
        if is_per_second(policy) {
            self.per_second.holds(rule, policy, key).await
        } else {
            self.main.holds(rule, policy, key).await
        }
    }

    async fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        validate_batch(items)?;
        let (fast, slow) = split(items.iter().map(|i| i.policy));
        if fast.is_empty() {
            return self.main.reserve(items, max_wait).await;
        }
        if slow.is_empty() {
            return self.per_second.reserve(items, max_wait).await;
        }
        self.reserve_split(items, &fast, &slow, max_wait).await
    }

    async fn settle(&self, items: &[SettleItem<'_>]) -> Result<Vec<Decision>, StoreError> {
        let (fast, slow) = split(items.iter().map(|i| i.policy));
        let pick = |idx: &[usize]| idx.iter().map(|&i| items[i]).collect::<Vec<_>>();
        let a = if fast.is_empty() {
            Vec::new()
        } else {
            self.per_second.settle(&pick(&fast)).await?
        };
        let b = if slow.is_empty() {
            Vec::new()
        } else {
            self.main.settle(&pick(&slow)).await?
        };
        Ok(merge(items.len(), (&fast, a), (&slow, b)))
    }

    async fn claim(&self, id: &str, ttl: Micros) -> Result<bool, StoreError> {
        self.main.claim(id, ttl).await
    }

    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        let main = self.main.set_rule_max_keys(rule, max_keys);
        let fast = self.per_second.set_rule_max_keys(rule, max_keys);
        main && fast
    }

    fn stats(&self) -> Option<crate::StoreStats> {
        self.main.stats()
    }

    fn is_shared(&self) -> bool {
        self.main.is_shared() || self.per_second.is_shared()
    }

    fn round_trip_deadline(&self) -> Option<std::time::Duration> {
        match (
            self.main.round_trip_deadline(),
            self.per_second.round_trip_deadline(),
        ) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    async fn shared_secret(&self, candidate: &str) -> Result<Option<String>, StoreError> {
        // Reservations are claimed and signed through the main store.
        self.main.shared_secret(candidate).await
    }

    /// Both stores' readiness; the shards are the main store's.
    async fn ready_state(&self) -> crate::ReadyState {
        use crate::Readiness;
        let (main, fast) = (
            self.main.ready_state().await,
            self.per_second.ready_state().await,
        );
        let shards = main.shards;
        let readiness = match (main.readiness, fast.readiness) {
            (Readiness::Down(why), _) => Readiness::Down(format!("main: {why}")),
            (_, Readiness::Down(why)) => Readiness::Down(format!("per-second: {why}")),
            (Readiness::Degraded(why), _) => Readiness::Degraded(format!("main: {why}")),
            (_, Readiness::Degraded(why)) => Readiness::Degraded(format!("per-second: {why}")),
            (Readiness::NotChecked, Readiness::NotChecked) => Readiness::NotChecked,
            _ => Readiness::Up,
        };
        crate::ReadyState { readiness, shards }
    }

    fn sweep_some(&self, now: Timestamp) {
        self.main.sweep_some(now);
        self.per_second.sweep_some(now);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use floodgate_core::{AlgorithmKind, ManualClock};

    use super::*;
    use crate::MemoryStore;

    fn policy(quota: &str) -> Policy {
        Policy::new(AlgorithmKind::FixedWindow, quota.parse().unwrap()).unwrap()
    }

    fn stores() -> PerSecondStore<MemoryStore, MemoryStore> {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
        PerSecondStore::new(
            MemoryStore::with_clock(clock.clone()),
            MemoryStore::with_clock(clock),
        )
    }

    #[tokio::test]
    async fn each_item_lands_on_the_store_of_its_period_and_decisions_keep_their_order() {
        let store = stores();
        let (hour, second, tenth) = (policy("5/h"), policy("3/s"), policy("2/100ms"));
        let items = [
            CheckItem {
                rule: "h",
                policy: &hour,
                key: "k",
                cost: 1,
            },
            CheckItem {
                rule: "s",
                policy: &second,
                key: "k",
                cost: 2,
            },
            CheckItem {
                rule: "t",
                policy: &tenth,
                key: "k",
                cost: 1,
            },
        ];
        let batch = store.check(&items).await.unwrap();
        assert!(batch.allowed);
        let remaining: Vec<u64> = batch.decisions.iter().map(|d| d.remaining).collect();
        assert_eq!(remaining, [4, 1, 1]);
        assert_eq!(
            store
                .main()
                .inspect("h", &hour, "k")
                .await
                .unwrap()
                .remaining,
            4
        );
        assert_eq!(
            store
                .main()
                .inspect("s", &second, "k")
                .await
                .unwrap()
                .remaining,
            3
        );
        assert_eq!(
            store
                .per_second()
                .inspect("s", &second, "k")
                .await
                .unwrap()
                .remaining,
            1
        );
        assert_eq!(
            store
                .per_second()
                .inspect("h", &hour, "k")
                .await
                .unwrap()
                .remaining,
            5
        );
        assert_eq!(store.inspect("t", &tenth, "k").await.unwrap().remaining, 1);
    }

    #[tokio::test]
    async fn a_refusal_on_either_store_leaves_nothing_charged_on_the_other() {
        let store = stores();
        let (hour, second) = (policy("1/h"), policy("1/s"));
        let both = |kh, ks| {
            [
                CheckItem {
                    rule: "h",
                    policy: &hour,
                    key: kh,
                    cost: 1,
                },
                CheckItem {
                    rule: "s",
                    policy: &second,
                    key: ks,
                    cost: 1,
                },
            ]
        };
        assert!(store.check(&both("a", "a")).await.unwrap().allowed);
        // The hourly key is spent: the per-second unit taken first is given back.
        let refused = store.check(&both("a", "b")).await.unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.denied_items().collect::<Vec<_>>(), [0]);
        assert_eq!(store.inspect("s", &second, "b").await.unwrap().remaining, 1);
        // The per-second key is spent: the main store is only peeked.
        let refused = store.check(&both("b", "a")).await.unwrap();
        assert_eq!(refused.denied_items().collect::<Vec<_>>(), [1]);
        assert_eq!(store.inspect("h", &hour, "b").await.unwrap().remaining, 1);
        assert!(store.check(&both("b", "b")).await.unwrap().allowed);
        // A wait across both stores is refused, naming why; a wait on one store is its own.
        let err = store.reserve(&both("c", "c"), 1_000).await.unwrap_err();
        assert!(matches!(err, StoreError::Unsupported { .. }), "{err}");
        assert!(
            store
                .reserve(&both("c", "c")[1..], 1_000)
                .await
                .unwrap()
                .batch
                .allowed
        );
    }
}
