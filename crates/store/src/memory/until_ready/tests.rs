use std::sync::Arc;

use floodgate_core::{AlgorithmKind, Clock, Policy, SystemClock};

use super::*;
use crate::MemoryStore;

/// A limiter of `limit` on the system clock (these tests wait for real, briefly).
fn limiter(algorithm: AlgorithmKind, limit: &str) -> KeyedLimiter {
    let store = MemoryStore::with_clock(Arc::new(SystemClock));
    let policy = Policy::new(algorithm, limit.parse().unwrap()).unwrap();
    store.limiter("r", &policy)
}

/// 20/s is one unit every 50 ms after the burst of 20: four more units take at least
/// 150 ms (the first of them is due 50 ms after the burst started, minus the time the
/// burst took), each admitted, none early.
#[tokio::test]
async fn until_ready_waits_for_each_slot_and_admits() {
    for algorithm in [AlgorithmKind::Gcra, AlgorithmKind::TokenBucket] {
        let l = limiter(algorithm, "20/s");
        let start = SystemClock.now();
        for _ in 0..20 {
            assert!(l.check("k", 1).unwrap().allowed);
        }
        for _ in 0..4 {
            let d = l.until_ready("k").await.unwrap();
            assert!(d.allowed);
        }
        let elapsed = SystemClock.now() - start;
        assert!(elapsed >= 150_000, "{algorithm:?}: {elapsed} µs");
        // The waiting consumed only what was admitted: the key is spent again.
        assert!(!l.check("k", 1).unwrap().allowed, "{algorithm:?}");
    }
}

#[tokio::test]
async fn until_n_ready_waits_for_n_units_and_refuses_more_than_the_capacity() {
    let l = limiter(AlgorithmKind::Gcra, "20/s");
    let start = SystemClock.now();
    assert!(l.check("k", 20).unwrap().allowed);
    // Five units are due 250 ms after the burst.
    let d = l.until_n_ready("k", 5).await.unwrap();
    assert!(d.allowed);
    assert!(SystemClock.now() - start >= 250_000);
    let e = l.until_n_ready("k", 21).await.unwrap_err();
    assert!(matches!(
        e,
        StoreError::InsufficientCapacity {
            cost: 21,
            capacity: 20,
            ..
        }
    ));
}

#[tokio::test]
async fn jitter_adds_at_least_its_minimum_to_every_wait() {
    let l = limiter(AlgorithmKind::Gcra, "20/s");
    let start = SystemClock.now();
    assert!(l.check("k", 20).unwrap().allowed);
    let jitter = Jitter::new(Duration::from_millis(40), Duration::from_millis(20));
    // The first unit is due 50 ms after the burst: denied at once, so the wait is that
    // distance plus at least 40 ms of jitter. (Later units may already be due when a late
    // wake-up returns, so only the first wait has a lower bound on a loaded machine.)
    assert!(
        l.until_ready_with_jitter("k", jitter)
            .await
            .unwrap()
            .allowed
    );
    let elapsed = SystemClock.now() - start;
    assert!(elapsed >= 50_000 + 40_000, "{elapsed} µs");
    for _ in 0..100 {
        let s = jitter.sample();
        assert!((40_000..=60_000).contains(&s), "{s}");
    }
    assert_eq!(Jitter::NONE.sample(), 0);
    assert_eq!(Jitter::up_to(Duration::from_micros(0)).sample(), 0);
}
