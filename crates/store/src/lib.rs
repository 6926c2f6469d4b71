//! # floodgate-store
//!
//! Where per-key rate-limit state lives. The [`Store`] trait is what the tower middleware and the
//! `floodgate` service talk to; [`MemoryStore`] is the embedded, sharded, in-process store (one
//! authority per process), and [`KeyedLimiter`] (from [`MemoryStore::limiter`]) its
//! allocation-free handle on one rule's keys, for callers that check one rule per request. The
//! Redis store (feature `redis`) implements the same trait.
//!
//! A check is a *batch* of [`CheckItem`]s decided all-or-nothing: the batch is admitted only if
//! every item admits, and when any item denies nothing is consumed in any item. One request that
//! matches a per-user and a per-route rule is therefore either charged to both or to neither.
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::{AlgorithmKind, ManualClock, Policy};
//! use floodgate_store::{CheckItem, MemoryStore, MemoryStoreConfig};
//!
//! let clock = ManualClock::new(1_700_000_000_000_000);
//! let store = MemoryStore::new(MemoryStoreConfig::default(), Arc::new(clock.clone()));
//! let policy = Policy::new(AlgorithmKind::Gcra, "2/s".parse().unwrap()).unwrap();
//! let item = CheckItem { rule: "per-user", policy: &policy, key: "user=alice", cost: 1 };
//! assert!(store.check_now(&[item]).unwrap().allowed);
//! assert!(store.check_now(&[item]).unwrap().allowed);
//! let third = store.check_now(&[item]).unwrap();
//! assert!(!third.allowed);
//! assert_eq!(third.decisions[0].retry_after, Some(500_000));
//! clock.advance(500_000);
//! assert!(store.check_now(&[item]).unwrap().allowed);
//! ```

#[cfg(feature = "redis")]
mod any;
pub mod calendar;
pub mod error;
pub mod fallback;
mod items;
pub mod memory;
pub mod per_second;
mod ready;
#[cfg(feature = "redis")]
pub mod redis;
mod store;

#[cfg(feature = "redis")]
pub use any::AnyStore;
pub use error::StoreError;
pub use items::{
    validate_batch, validate_settle, BatchDecision, BatchReservation, CheckItem, OnFull, SettleItem,
};
#[cfg(feature = "tokio")]
pub use memory::Jitter;
pub use memory::{KeyedLimiter, MemoryStore, MemoryStoreConfig, StoreStats};
pub use ready::{Readiness, ReadyState, ShardState};
pub use store::Store;

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::{AlgorithmKind, Policy};

    fn policy(quota: &str) -> Policy {
        Policy::new(AlgorithmKind::FixedWindow, quota.parse().unwrap()).unwrap()
    }

    fn item<'a>(rule: &'a str, policy: &'a Policy, key: &'a str, cost: u64) -> CheckItem<'a> {
        CheckItem {
            rule,
            policy,
            key,
            cost,
        }
    }

    #[test]
    fn validate_batch_sums_costs_per_rule_and_key() {
        let ten = policy("10/min");
        let five = policy("5/min");
        assert_eq!(validate_batch(&[]), Ok(()));
        assert_eq!(validate_batch(&[item("r", &ten, "k", 10)]), Ok(()));
        // 6 + 4 = 10 fits exactly; 6 + 6 = 12 never can.
        assert_eq!(
            validate_batch(&[item("r", &ten, "k", 6), item("r", &ten, "k", 4)]),
            Ok(())
        );
        let err = validate_batch(&[
            item("r", &ten, "other", 9),
            item("r", &ten, "k", 6),
            item("s", &ten, "k", 9),
            item("r", &ten, "k", 6),
        ]);
        assert_eq!(
            err,
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: 12,
                capacity: 10,
            })
        );
        // A single item above capacity, as before.
        assert_eq!(
            validate_batch(&[item("r", &five, "k", 6)]),
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: 6,
                capacity: 5,
            })
        );
        // Mixed policies on one (rule, key): the smaller capacity applies.
        assert_eq!(
            validate_batch(&[item("r", &ten, "k", 3), item("r", &five, "k", 3)]),
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: 6,
                capacity: 5,
            })
        );
        // Sums saturate instead of wrapping round to a small number.
        let huge = policy("1000/min");
        assert_eq!(
            validate_batch(&[item("r", &huge, "k", u64::MAX), item("r", &huge, "k", 2)]),
            Err(StoreError::InsufficientCapacity {
                rule: "r".into(),
                cost: u64::MAX,
                capacity: 1000,
            })
        );
    }
}
