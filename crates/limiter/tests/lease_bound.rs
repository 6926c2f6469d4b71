//! Quota leases against their bound (`docs/spec/leases.md`): several `RateLimiter`s (the
//! instances) on one shared MemoryStore and one ManualClock, random traffic, all six
//! algorithms. What clients were admitted, replayed at the times they were admitted on a
//! fresh key of the exact algorithm with its capacity raised by the bound `D`, is admitted in
//! full; and leases do cut the store's work for a hot key.

mod common;

use std::sync::Arc;

use common::lease::{drive, leased_rules, request, steps, within_bound, ALGORITHMS};
use common::{counted, with_metrics, T0};
use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_limiter::{KeySource, Lease, RateLimiter, Rule, RuleSet};
use floodgate_store::{MemoryStore, Store};
use proptest::prelude::*;

struct Setup {
    clock: ManualClock,
    store: Arc<MemoryStore>,
    instances: Vec<RateLimiter<MemoryStore>>,
}

fn setup(policy: &Policy, lease: Lease, instances: usize) -> Setup {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let instances = (0..instances)
        .map(|_| {
            RateLimiter::new(Arc::clone(&store), leased_rules(policy, lease))
                .with_lease_clock(Arc::new(clock.clone()))
        })
        .collect();
    Setup {
        clock,
        store,
        instances,
    }
}

fn run(
    kind: AlgorithmKind,
    limit: u64,
    lifetime_pct: u64,
    share_pct: u64,
    instances: usize,
    steps: &[common::lease::Step],
) -> Result<(), TestCaseError> {
    let period = 1_000_000;
    let policy = Policy::new(kind, Quota::new(limit, period).unwrap()).unwrap();
    let lease = Lease::new(
        period * lifetime_pct / 100,
        &policy,
        share_pct as f64 / 100.0,
    )
    .unwrap();
    let bound = lease.bound(&policy, instances as u64);
    let s = setup(&policy, lease, instances);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let admitted = rt.block_on(drive(&s.clock, &s.instances, limit, steps));
    within_bound(&policy, bound, T0, &admitted)
}

macro_rules! bound_holds {
    ($($name:ident: $kind:expr,)*) => {$(
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]
            #[test]
            fn $name(
                limit in 4u64..40,
                lifetime_pct in 1u64..60,
                share_pct in 5u64..=100,
                (instances, steps) in (1usize..=4).prop_flat_map(|n| (Just(n), steps(n, 60_000, 300))),
            ) {
                run($kind, limit, lifetime_pct, share_pct, instances, &steps)?;
            }
        }
    )*};
}

bound_holds! {
    fixed_window_stays_within_the_bound: ALGORITHMS[0],
    sliding_window_stays_within_the_bound: ALGORITHMS[1],
    sliding_log_stays_within_the_bound: ALGORITHMS[2],
    token_bucket_stays_within_the_bound: ALGORITHMS[3],
    leaky_bucket_stays_within_the_bound: ALGORITHMS[4],
    gcra_stays_within_the_bound: ALGORITHMS[5],
}

#[tokio::test]
async fn a_lease_spent_after_the_window_edge_is_what_the_bound_allows() {
    // 10 per window, leases of 5: instance 0 takes 5 just before the edge and spends 4 of
    // them after it, when the next window's 10 are all there too. Clients see 14 in one
    // window: the exact count plus 4, within the bound of 5 (one instance).
    let policy = Policy::parse(AlgorithmKind::FixedWindow, "10/s").unwrap();
    let lease = Lease::new(100_000, &policy, 0.5).unwrap();
    let s = setup(&policy, lease, 2);
    let edge = (T0 / 1_000_000 + 1) * 1_000_000;
    s.clock.set(edge - 2_000);
    // Warm instance 0 up: the second request takes a lease of 5 (its rate, scaled, capped).
    assert!(request(&s.instances[0], 1).await);
    s.clock.set(edge - 1_000);
    assert!(request(&s.instances[0], 1).await);
    s.clock.set(edge + 1_000);
    let mut after_edge = 0;
    // Instance 1 first: instance 0 renewing its lease would take units of the new window.
    for _ in 0..12 {
        after_edge += u64::from(request(&s.instances[1], 1).await);
    }
    for _ in 0..4 {
        after_edge += u64::from(request(&s.instances[0], 1).await);
    }
    assert_eq!(after_edge, 14, "10 of the new window and 4 carried over");
    assert!(after_edge - 10 <= lease.bound(&policy, 1));
    assert!(after_edge - 10 > 0, "the bound is reached, not only stated");
}

#[test]
fn a_hot_key_takes_a_lease_per_lifetime_not_a_store_call_per_request() {
    let recorded = with_metrics(|| async {
        let policy = Policy::parse(AlgorithmKind::Gcra, "200000/s").unwrap();
        let lease = Lease::new(20_000, &policy, 0.1).unwrap();
        let s = setup(&policy, lease, 1);
        // 100,000 per second for 200 ms: 20,000 requests, every one admitted.
        for _ in 0..20_000 {
            s.clock.advance(10);
            assert!(request(&s.instances[0], 1).await);
        }
        s.instances[0].return_leases().await;
    });
    let takes = counted(&recorded, "floodgate_lease_takes_total", &[("rule", "hot")]);
    let leased = counted(
        &recorded,
        "floodgate_lease_units_total",
        &[("state", "leased")],
    );
    let used = counted(
        &recorded,
        "floodgate_lease_units_total",
        &[("state", "used")],
    );
    let returned = counted(
        &recorded,
        "floodgate_lease_units_total",
        &[("state", "returned")],
    );
    assert!(takes * 50 <= 20_000, "{takes} takes for 20,000 requests");
    assert_eq!(used, 20_000);
    assert_eq!(leased, used + returned);
    assert_eq!(
        counted(
            &recorded,
            "floodgate_decisions_total",
            &[("outcome", "allowed")]
        ),
        20_000
    );
}

#[tokio::test]
async fn returned_leases_give_their_unused_units_back_to_the_store() {
    let policy = Policy::parse(AlgorithmKind::TokenBucket, "100/s").unwrap();
    let lease = Lease::new(50_000, &policy, 0.5).unwrap();
    let s = setup(&policy, lease, 1);
    let inspect = || s.store.inspect("hot", &policy, "k");
    assert!(
        request(&s.instances[0], 1).await,
        "a cold key: a lease of 1"
    );
    s.clock.advance(10_000);
    // 1 unit in 10 ms is 5 per 50 ms: a lease of 5 (1 token refilled meanwhile).
    assert!(request(&s.instances[0], 1).await);
    assert_eq!(inspect().await.unwrap().remaining, 100 - 1 + 1 - 5);
    assert_eq!(s.instances[0].return_leases().await, 1);
    assert_eq!(inspect().await.unwrap().remaining, 100 - 2 + 1);
    assert_eq!(s.instances[0].leased_keys(), 0);
}

#[tokio::test]
async fn a_rule_without_a_lease_asks_the_store_every_time() {
    let policy = Policy::parse(AlgorithmKind::FixedWindow, "3/s").unwrap();
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let limiter = RateLimiter::new(
        Arc::clone(&store),
        RuleSet::new(vec![Rule::new(
            "hot",
            policy.clone(),
            KeySource::Constant("all".into()),
        )]),
    );
    for remaining in [2, 1, 0] {
        assert!(request(&limiter, 1).await);
        assert_eq!(
            store.inspect("hot", &policy, "k").await.unwrap().remaining,
            remaining
        );
    }
    assert!(!request(&limiter, 1).await);
    assert_eq!(limiter.leased_keys(), 0);
}
