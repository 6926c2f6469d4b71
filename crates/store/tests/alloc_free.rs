//! `MemoryStore::check_one` and `KeyedLimiter::check` allocate nothing for a key they hold
//! (live or expired), counted with an instrumented global allocator.
//!
//! One `#[test]` only: the allocator counts every thread. Each figure is the fewest
//! allocations over three consecutive runs of the same loop, so a stray allocation by the test
//! harness's own thread cannot fail it, while one on the hot path shows in every run.

use std::alloc::System;
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_store::{CheckItem, MemoryStore};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const T0: u64 = 1_700_000_000_000_000;

/// Fewest allocations (plus reallocations) over three runs of `f`.
fn allocations(mut f: impl FnMut()) -> usize {
    (0..3)
        .map(|_| {
            let region = Region::new(GLOBAL);
            f();
            let stats = region.change();
            stats.allocations + stats.reallocations
        })
        .min()
        .expect("three runs")
}

#[test]
fn check_one_allocates_nothing_for_held_keys() {
    let keys: Vec<String> = (0..10).map(|i| format!("user:{i:06}")).collect();
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_clock(Arc::new(clock.clone()));
        let policy = Policy::new(kind, Quota::per_second(100).expect("valid")).expect("fits");
        let admitted = std::cell::Cell::new(0usize);
        let round = |n: usize| {
            for i in 0..n {
                let item = CheckItem {
                    rule: "per-user",
                    policy: &policy,
                    key: &keys[i % keys.len()],
                    cost: 1,
                };
                let allowed = store.check_one(&item).expect("fits").allowed;
                admitted.set(admitted.get() + usize::from(allowed));
                clock.advance(1_000);
            }
        };
        // Warm-up: every key is inserted, and a sliding log reaches its steady length.
        round(2_000);
        assert_eq!(allocations(|| round(1_000)), 0, "{kind}: live keys");
        // The handle decides on the same keys (same rule and policy), allocation-free too.
        let limiter = store.limiter("per-user", &policy);
        let handle_round = |n: usize| {
            for i in 0..n {
                let allowed = limiter
                    .check(&keys[i % keys.len()], 1)
                    .expect("fits")
                    .allowed;
                admitted.set(admitted.get() + usize::from(allowed));
                clock.advance(1_000);
            }
        };
        assert_eq!(allocations(|| handle_round(1_000)), 0, "{kind}: handle");
        // The counter does count: the batch API's answer is a Vec.
        let item = CheckItem {
            rule: "per-user",
            policy: &policy,
            key: &keys[0],
            cost: 1,
        };
        assert!(
            allocations(|| drop(store.check_now(&[item]))) >= 1,
            "{kind}"
        );
        assert!(
            admitted.get() > 1_000,
            "{kind}: admitted {}",
            admitted.get()
        );
        assert_eq!(store.stats().keys, keys.len(), "{kind}");

        if kind != AlgorithmKind::SlidingLog {
            // Every key expired: each is decided as fresh in its own slot, no insert. (A
            // sliding log's fresh state starts without a buffer, so it allocates one.)
            let n = allocations(|| {
                clock.advance(3_600_000_000);
                round(keys.len());
            });
            assert_eq!(n, 0, "{kind}: expired keys reused in place");
            assert_eq!(store.stats().keys, keys.len(), "{kind}");
            let n = allocations(|| {
                clock.advance(3_600_000_000);
                handle_round(keys.len());
            });
            assert_eq!(n, 0, "{kind}: handle, expired keys reused in place");
            assert_eq!(store.stats().keys, keys.len(), "{kind}");
        }
    }
}
