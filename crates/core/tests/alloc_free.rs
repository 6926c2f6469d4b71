//! The check hot path allocates nothing: counted with an instrumented global allocator.
//!
//! One `#[test]` only: the allocator counts every thread, and libtest runs tests in parallel.
//! Even so the harness's own thread may allocate while the test starts, so each figure is the
//! fewest allocations over three consecutive runs of the same loop: an allocation on the hot
//! path shows in every run, a stray one from another thread in at most one.

use std::alloc::System;

use floodgate_core::{
    Algorithm, AlgorithmKind, Clock, FixedWindow, Gcra, LeakyBucket, ManualClock, Policy, Quota,
    SlidingLog, SlidingWindow, TokenBucket,
};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations (plus reallocations) made by `f`.
fn allocations(f: impl FnOnce()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let stats = region.change();
    stats.allocations + stats.reallocations
}

/// Three runs of 1,000 checks 1 ms apart against 100/s: the first 100 admit, then one in ten
/// admits; for the sliding log the queue reaches its steady length during `warm` and is reused
/// after.
fn steady<A: Algorithm>(warm: usize) -> usize {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let alg = A::new(Quota::per_second(100).expect("valid")).expect("fits");
    let mut state = alg.initial_state();
    let mut admitted = 0;
    for _ in 0..warm {
        admitted += usize::from(alg.check(&mut state, clock.now(), 1).expect("fits").allowed);
        clock.advance(1_000);
    }
    // The fewest over three runs (see the module docs): a stray allocation by another thread
    // shows in one run at most.
    let n = (0..3)
        .map(|_| {
            allocations(|| {
                for _ in 0..1_000 {
                    admitted +=
                        usize::from(alg.check(&mut state, clock.now(), 1).expect("fits").allowed);
                    clock.advance(1_000);
                }
            })
        })
        .min()
        .expect("three runs");
    assert!(
        admitted >= 100,
        "{}: the quota admitted {admitted}",
        A::KIND
    );
    n
}

#[test]
fn checks_allocate_nothing() {
    assert_eq!(steady::<FixedWindow>(0), 0, "fixed_window");
    assert_eq!(steady::<SlidingWindow>(0), 0, "sliding_window");
    assert_eq!(steady::<TokenBucket>(0), 0, "token_bucket");
    assert_eq!(steady::<LeakyBucket>(0), 0, "leaky_bucket");
    assert_eq!(steady::<Gcra>(0), 0, "gcra");
    // The sliding log grows its queue while filling the first window (2 s of warm-up covers
    // that); afterwards expired words are dropped and the capacity reused.
    assert_eq!(steady::<SlidingLog>(2_000), 0, "sliding_log after warm-up");

    // Run-time dispatch through Policy is allocation-free too.
    let clock = ManualClock::new(1_700_000_000_000_000);
    let policy =
        Policy::new(AlgorithmKind::Gcra, Quota::per_second(100).expect("valid")).expect("fits");
    let mut state = policy.initial_state();
    let n = (0..3)
        .map(|_| {
            allocations(|| {
                for _ in 0..1_000 {
                    let _ = policy.check(&mut state, clock.now(), 1).expect("fits");
                    clock.advance(1_000);
                }
            })
        })
        .min()
        .expect("three runs");
    assert_eq!(n, 0, "Policy::check");
}
