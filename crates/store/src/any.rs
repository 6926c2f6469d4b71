//! [`AnyStore`]: the store chosen at run time (configuration, command line), as one closed enum
//! so that services stay generic over nothing and pay no dynamic dispatch.

use std::sync::Arc;

use floodgate_core::{Decision, Micros, Policy};

use crate::fallback::FallbackStore;
use crate::per_second::PerSecondStore;
use crate::redis::RedisStore;
use crate::{
    BatchDecision, BatchReservation, CheckItem, MemoryStore, SettleItem, Store, StoreError,
};

/// One of the stores, picked at run time. Cheap to clone (an `Arc`).
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// The in-process store: one authority per process.
    Memory(Arc<MemoryStore>),
    /// Redis or Redis Cluster: one authority for every process sharing it.
    Redis(Arc<RedisStore>),
    /// Redis, falling back to a local store with divided limits when Redis fails.
    RedisWithFallback(Arc<FallbackStore<RedisStore>>),
    /// Two Redis stores: per-second rules on the second, the rest on the first
    /// ([`PerSecondStore`], envoyproxy/ratelimit's `REDIS_PERSECOND`).
    RedisPerSecond(Arc<PerSecondStore<RedisStore, RedisStore>>),
}

impl AnyStore {
    /// `"memory"` or `"redis"`, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(_) | AnyStore::RedisWithFallback(_) | AnyStore::RedisPerSecond(_) => {
                "redis"
            }
        }
    }
}

impl Store for AnyStore {
    // The Redis futures are boxed: they are kilobytes (the connection's state machine), and
    // inline they would make this future, and every future awaiting it, as large even for the
    // memory store, which answers at once: each move of a caller's future would copy them
    // (callgrind: about 500 instructions of memcpy per `/v1/check`). One allocation beside a
    // network round trip costs nothing that matters.
    async fn check(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.check_now(items),
            AnyStore::Redis(s) => Box::pin(s.check(items)).await,
            AnyStore::RedisWithFallback(s) => Box::pin(s.check(items)).await,
            AnyStore::RedisPerSecond(s) => Box::pin(s.check(items)).await,
        }
    }

    async fn peek(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.peek_now(items),
            AnyStore::Redis(s) => Box::pin(s.peek(items)).await,
            AnyStore::RedisWithFallback(s) => Box::pin(s.peek(items)).await,
            AnyStore::RedisPerSecond(s) => Box::pin(s.peek(items)).await,
        }
    }

    async fn reset(&self, rule: &str, policy: &Policy, key: &str) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(s) => s.reset(rule, policy, key).await,
            AnyStore::Redis(s) => s.reset(rule, policy, key).await,
            AnyStore::RedisWithFallback(s) => s.reset(rule, policy, key).await,
            AnyStore::RedisPerSecond(s) => s.reset(rule, policy, key).await,
        }
    }

    async fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> Result<Decision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.inspect(rule, policy, key).await,
            AnyStore::Redis(s) => s.inspect(rule, policy, key).await,
            AnyStore::RedisWithFallback(s) => s.inspect(rule, policy, key).await,
            AnyStore::RedisPerSecond(s) => s.inspect(rule, policy, key).await,
        }
    }

    async fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> Result<Option<bool>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.holds(rule, policy, key).await,
            AnyStore::Redis(s) => s.holds(rule, policy, key).await,
            AnyStore::RedisWithFallback(s) => s.holds(rule, policy, key).await,
            AnyStore::RedisPerSecond(s) => s.holds(rule, policy, key).await,
        }
    }

    async fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        match self {
            AnyStore::Memory(s) => s.reserve(items, max_wait).await,
            AnyStore::Redis(s) => Box::pin(s.reserve(items, max_wait)).await,
            AnyStore::RedisWithFallback(s) => Box::pin(s.reserve(items, max_wait)).await,
            AnyStore::RedisPerSecond(s) => Box::pin(s.reserve(items, max_wait)).await,
        }
    }

    async fn settle(&self, items: &[SettleItem<'_>]) -> Result<Vec<Decision>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.settle(items).await,
            AnyStore::Redis(s) => s.settle(items).await,
            AnyStore::RedisWithFallback(s) => s.settle(items).await,
            AnyStore::RedisPerSecond(s) => s.settle(items).await,
        }
    }

    async fn claim(&self, id: &str, ttl: Micros) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(s) => s.claim(id, ttl).await,
            AnyStore::Redis(s) => s.claim(id, ttl).await,
            AnyStore::RedisWithFallback(s) => s.claim(id, ttl).await,
            AnyStore::RedisPerSecond(s) => s.claim(id, ttl).await,
        }
    }

    fn set_rule_max_keys(&self, rule: &str, max_keys: Option<usize>) -> bool {
        match self {
            AnyStore::Memory(s) => Store::set_rule_max_keys(s, rule, max_keys),
            AnyStore::Redis(s) => s.set_rule_max_keys(rule, max_keys),
            AnyStore::RedisWithFallback(s) => s.set_rule_max_keys(rule, max_keys),
            AnyStore::RedisPerSecond(s) => s.set_rule_max_keys(rule, max_keys),
        }
    }

    fn is_shared(&self) -> bool {
        match self {
            AnyStore::Memory(s) => Store::is_shared(s),
            AnyStore::Redis(s) => s.is_shared(),
            AnyStore::RedisWithFallback(s) => s.is_shared(),
            AnyStore::RedisPerSecond(s) => s.is_shared(),
        }
    }

    async fn shared_secret(&self, candidate: &str) -> Result<Option<String>, StoreError> {
        match self {
            AnyStore::Memory(s) => Store::shared_secret(s, candidate).await,
            AnyStore::Redis(s) => Box::pin(Store::shared_secret(s, candidate)).await,
            AnyStore::RedisWithFallback(s) => Box::pin(s.shared_secret(candidate)).await,
            AnyStore::RedisPerSecond(s) => Box::pin(s.shared_secret(candidate)).await,
        }
    }

    async fn ready_state(&self) -> crate::ReadyState {
        match self {
            AnyStore::Memory(s) => Store::ready_state(s).await,
            AnyStore::Redis(s) => Box::pin(Store::ready_state(s)).await,
            AnyStore::RedisWithFallback(s) => Box::pin(s.ready_state()).await,
            AnyStore::RedisPerSecond(s) => Box::pin(s.ready_state()).await,
        }
    }

    fn sweep_some(&self, now: floodgate_core::Timestamp) {
        match self {
            AnyStore::Memory(s) => Store::sweep_some(s, now),
            AnyStore::Redis(s) => s.sweep_some(now),
            // The local fallback's keys are few and short-lived (divided quotas while the
            // primary is down); they are not swept, as before.
            AnyStore::RedisWithFallback(_) => {}
            AnyStore::RedisPerSecond(s) => s.sweep_some(now),
        }
    }

    fn fallback_instances(&self) -> Option<u64> {
        match self {
            AnyStore::RedisWithFallback(s) => s.fallback_instances(),
            AnyStore::Memory(_) | AnyStore::Redis(_) | AnyStore::RedisPerSecond(_) => None,
        }
    }

    fn fallback_check(
        &self,
        items: &[CheckItem<'_>],
        error: StoreError,
    ) -> Result<BatchDecision, StoreError> {
        match self {
            AnyStore::RedisWithFallback(s) => s.fallback_check(items, error),
            AnyStore::Memory(_) | AnyStore::Redis(_) | AnyStore::RedisPerSecond(_) => Err(error),
        }
    }

    fn round_trip_deadline(&self) -> Option<std::time::Duration> {
        match self {
            AnyStore::Memory(s) => Store::round_trip_deadline(s),
            AnyStore::Redis(s) => s.round_trip_deadline(),
            AnyStore::RedisWithFallback(s) => s.round_trip_deadline(),
            AnyStore::RedisPerSecond(s) => s.round_trip_deadline(),
        }
    }

    fn stats(&self) -> Option<crate::StoreStats> {
        match self {
            AnyStore::Memory(s) => Store::stats(s),
            AnyStore::Redis(s) => s.stats(),
            AnyStore::RedisWithFallback(s) => s.stats(),
            AnyStore::RedisPerSecond(s) => s.stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::{AlgorithmKind, ManualClock};

    #[tokio::test]
    async fn the_memory_variant_decides_like_the_memory_store() {
        let store = AnyStore::Memory(Arc::new(MemoryStore::with_clock(Arc::new(
            ManualClock::new(1_700_000_000_000_000),
        ))));
        assert_eq!(store.kind(), "memory");
        assert_eq!(
            store.ready_state().await,
            crate::ReadyState::of(crate::Readiness::NotChecked)
        );
        let p = Policy::new(AlgorithmKind::FixedWindow, "1/h".parse().unwrap()).unwrap();
        let item = CheckItem {
            rule: "r",
            policy: &p,
            key: "k",
            cost: 1,
        };
        assert!(store.check(&[item]).await.unwrap().allowed);
        assert!(!store.check(&[item]).await.unwrap().allowed);
        assert_eq!(store.inspect("r", &p, "k").await.unwrap().remaining, 0);
        assert!(store.reset("r", &p, "k").await.unwrap());
        assert!(store.peek(&[item]).await.unwrap().allowed);
    }
}
