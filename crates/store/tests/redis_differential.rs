//! The Redis scripts decide exactly like the Rust reference: random (time, key, cost, peek)
//! sequences through `floodgate-core` and through `RedisStore` (caller-supplied time) give
//! identical decisions for every algorithm, for checks, peeks, reservations and settles; random
//! multi-item batches (checks and reservations with settles) give identical answers on
//! `MemoryStore` and `RedisStore`. Every test runs on Redis and again on Valkey (`valkey_*`).
#![cfg(feature = "testing")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota, State};
use floodgate_store::redis::testing::{
    current_thread_runtime, proptest_cases, replay_against_memory,
    replay_reservations_against_memory, BatchStep, Flavor, RedisServer, ReserveStep,
};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{CheckItem, SettleItem, StoreError};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000_000;

/// One server, runtime and store per test function (dropped, and the server killed, at its end).
struct Harness {
    _server: RedisServer,
    rt: tokio::runtime::Runtime,
    store: RedisStore,
}

fn harness(flavor: Flavor) -> Harness {
    let server = RedisServer::start_flavor(flavor)
        .unwrap_or_else(|e| panic!("start {}: {e}", flavor.binary()));
    let rt = current_thread_runtime().unwrap();
    let mut config = RedisStoreConfig::standalone(server.url());
    config.time_source = TimeSource::Caller;
    // Caller time does not follow real time: keep keys for the whole run.
    config.ttl_extra = Duration::from_secs(3600);
    config.timeout = Duration::from_secs(5);
    // The deny cache is on: it must never change a decision (nor any number of one).
    config.deny_cache = true;
    let store = {
        let _guard = rt.enter();
        RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
    };
    // The cache answers once its subscription to the invalidations is made (a background
    // task on the real server: polled, up to 5 s).
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !store.deny_cache_live() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "deny cache not live"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    Harness {
        _server: server,
        rt,
        store,
    }
}

/// A fresh rule name per case, so cases never share keys.
fn fresh_rule() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("rule{}", N.fetch_add(1, Ordering::Relaxed))
}

const QUOTAS: &[&str] = &[
    "1/s",
    "3/s",
    "7/s",
    "10/10s",
    "3/20s burst 5",
    "5/s burst 2",
    "100/min",
    "1000/h",
    "2/ms",
    // Large emission-interval denominators: GCRA's packed tat x den + tat_ticks passes 2^53
    // (7/s already), then 2^63 (7777/s: stored as a plain string), and den > 2^23 (and a
    // fixed window limit >= 2^23) takes the '<a>:<b>' fallback.
    "7777/s",
    "9999991/10s",
];

#[derive(Debug, Clone)]
struct Req {
    dt: i64,
    key: usize,
    cost: u64,
    peek: bool,
}

fn requests(max_cost: u64) -> impl Strategy<Value = Vec<Req>> {
    prop::collection::vec(
        (
            // mostly forward, sometimes at the same microsecond (which a range almost never
            // draws), sometimes backwards, sometimes a long idle gap
            prop_oneof![
                6 => 0i64..400_000,
                2 => Just(0i64),
                1 => -300_000i64..0,
                1 => 0i64..30_000_000,
            ],
            0usize..2,
            0..=max_cost + 1,
            prop::bool::weighted(0.2),
        )
            .prop_map(|(dt, key, cost, peek)| Req {
                dt,
                key,
                cost,
                peek,
            }),
        1..40,
    )
}

fn run_against_core(
    h: &Harness,
    kind: AlgorithmKind,
    quota: &str,
    reqs: &[Req],
) -> Result<(), TestCaseError> {
    let quota: Quota = quota.parse().unwrap();
    let Ok(policy) = Policy::new(kind, quota) else {
        return Ok(()); // e.g. a sliding window quota that is not exact
    };
    let rule = fresh_rule();
    let mut states: HashMap<usize, State> = HashMap::new();
    let mut now = T0 as i64;
    for (n, r) in reqs.iter().enumerate() {
        now += r.dt;
        let key = ["a", "b"][r.key];
        let state = states
            .entry(r.key)
            .or_insert_with(|| policy.initial_state());
        let want = if r.peek {
            policy.peek(state, now as u64, r.cost)
        } else {
            policy.check(state, now as u64, r.cost)
        };
        let item = CheckItem {
            rule: &rule,
            policy: &policy,
            key,
            cost: r.cost,
        };
        let got = h.rt.block_on(async {
            if r.peek {
                h.store.peek_at(&[item], now as u64).await
            } else {
                h.store.check_at(&[item], now as u64).await
            }
        });
        match (want, got) {
            (Ok(w), Ok(g)) => {
                prop_assert_eq!(g.decisions.len(), 1);
                prop_assert_eq!(
                    w,
                    g.decisions[0],
                    "{} {} request #{}: {:?}",
                    kind,
                    quota,
                    n + 1,
                    r
                );
                prop_assert_eq!(w.allowed, g.allowed);
            }
            (Err(_), Err(StoreError::InsufficientCapacity { .. })) => {}
            (w, g) => prop_assert!(false, "request #{}: core {:?}, redis {:?}", n + 1, w, g),
        }
    }
    Ok(())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: proptest_cases(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn matches_core(flavor: Flavor, kind: AlgorithmKind) {
    let h = harness(flavor);
    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&(0..QUOTAS.len(), requests(6)), |(q, reqs)| {
            run_against_core(&h, kind, QUOTAS[q], &reqs)
        })
        .unwrap();
}

/// One test on Redis and one on Valkey.
macro_rules! on_both {
    ($redis:ident, $valkey:ident, $body:path $(, $arg:expr)*) => {
        #[test]
        fn $redis() {
            $body(Flavor::Redis $(, $arg)*);
        }

        #[test]
        fn $valkey() {
            $body(Flavor::Valkey $(, $arg)*);
        }
    };
}

on_both!(
    fixed_window_matches_core,
    valkey_fixed_window_matches_core,
    matches_core,
    AlgorithmKind::FixedWindow
);
on_both!(
    sliding_log_matches_core,
    valkey_sliding_log_matches_core,
    matches_core,
    AlgorithmKind::SlidingLog
);
on_both!(
    sliding_window_matches_core,
    valkey_sliding_window_matches_core,
    matches_core,
    AlgorithmKind::SlidingWindow
);
on_both!(
    token_bucket_matches_core,
    valkey_token_bucket_matches_core,
    matches_core,
    AlgorithmKind::TokenBucket
);
on_both!(
    leaky_bucket_matches_core,
    valkey_leaky_bucket_matches_core,
    matches_core,
    AlgorithmKind::LeakyBucket
);
on_both!(
    gcra_matches_core,
    valkey_gcra_matches_core,
    matches_core,
    AlgorithmKind::Gcra
);
on_both!(
    sliding_log_with_large_costs_spills_records_like_the_core,
    valkey_sliding_log_with_large_costs_spills_records_like_the_core,
    large_sliding_log_costs
);
on_both!(
    batches_match_the_memory_store,
    valkey_batches_match_the_memory_store,
    batches_match
);

fn large_sliding_log_costs(flavor: Flavor) {
    let h = harness(flavor);
    // Costs above 2^19 - 1 take several 8-byte records; same-microsecond requests merge.
    let policy = Policy::new(AlgorithmKind::SlidingLog, "2000000/s".parse().unwrap()).unwrap();
    let rule = fresh_rule();
    let mut state = policy.initial_state();
    for (dt, cost) in [
        (0, 600_000),
        (0, 600_000),
        (10, 524_287),
        (999_999, 300_000),
        (1_000_000, 1_000_000),
        (1_000_010, 1_000_000),
    ] {
        let now = T0 + dt;
        let want = policy.check(&mut state, now, cost).unwrap();
        let item = CheckItem {
            rule: &rule,
            policy: &policy,
            key: "k",
            cost,
        };
        let got = h.rt.block_on(h.store.check_at(&[item], now)).unwrap();
        assert_eq!(got.decisions[0], want, "at +{dt} cost {cost}");
    }
}

/// A random batch run: 1 to 24 [`BatchStep`]s, each advancing time by under 300 ms (one in
/// five not at all) and holding 1 to 4 items `(rule 0..3, key 0..2, cost 0..4)`; one step in
/// five is a peek.
fn batches() -> impl Strategy<Value = Vec<BatchStep>> {
    prop::collection::vec(
        (
            prop_oneof![4 => 0u64..300_000, 1 => Just(0u64)],
            prop::collection::vec((0usize..3, 0usize..2, 0u64..4), 1..5),
            prop::bool::weighted(0.2),
        ),
        1..25,
    )
}

/// Multi-item batches (same-key items see each other's tentative consumption; all or nothing)
/// decide identically on the memory store and on Redis, with time moving forward.
fn batches_match(flavor: Flavor) {
    let h = harness(flavor);
    let strategy = (
        prop::collection::vec(0usize..6, 3),
        prop::collection::vec(0..QUOTAS.len(), 3),
        batches(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&strategy, |(kinds, q, steps)| {
            let policies: Vec<Policy> = (0..3)
                .map(|i| {
                    let quota: Quota = QUOTAS[q[i]].parse().unwrap();
                    Policy::new(AlgorithmKind::ALL[kinds[i]], quota)
                        .unwrap_or_else(|_| Policy::new(AlgorithmKind::Gcra, quota).unwrap())
                })
                .collect();
            let rules: Vec<String> = (0..3).map(|_| fresh_rule()).collect();
            replay_against_memory(&h.rt, &h.store, &rules, &policies, T0, &steps)
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// One random request of a reservation run: a check, a peek, a reservation with a wait bound,
/// or a settle of one of the granted reservations not settled yet (in any order: `pick` 0 is
/// the latest, 1 the one before, modulo their number) with an actual cost.
#[derive(Debug, Clone)]
enum Op {
    Check { peek: bool },
    Reserve { max_wait: u64 },
    Settle { actual: u64, pick: usize },
}

fn reservation_requests(max_cost: u64) -> impl Strategy<Value = Vec<(Req, Op)>> {
    let op = prop_oneof![
        2 => prop::bool::weighted(0.2).prop_map(|peek| Op::Check { peek }),
        3 => prop_oneof![Just(0u64), 0u64..3_000_000, Just(u64::MAX)]
            .prop_map(|max_wait| Op::Reserve { max_wait }),
        2 => (0..=2 * max_cost + 1, any::<usize>())
            .prop_map(|(actual, pick)| Op::Settle { actual, pick }),
    ];
    (requests(max_cost), prop::collection::vec(op, 40))
        .prop_map(|(reqs, ops)| reqs.into_iter().zip(ops).collect())
}

/// Reservations and settles, with time stepping back now and then, decide identically in the
/// core and in the Lua scripts.
fn run_reservations_against_core(
    h: &Harness,
    kind: AlgorithmKind,
    quota: &str,
    reqs: &[(Req, Op)],
) -> Result<(), TestCaseError> {
    let quota: Quota = quota.parse().unwrap();
    let Ok(policy) = Policy::new(kind, quota) else {
        return Ok(());
    };
    let rule = fresh_rule();
    let mut states: HashMap<usize, State> = HashMap::new();
    // The granted reservations not settled yet, per key: (scheduled_at, cost).
    let mut granted: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    let mut now = T0 as i64;
    for (n, (r, op)) in reqs.iter().enumerate() {
        now += r.dt;
        let at = now as u64;
        let key = ["a", "b"][r.key];
        let state = states
            .entry(r.key)
            .or_insert_with(|| policy.initial_state());
        let cost = r.cost.min(policy.capacity());
        let item = CheckItem {
            rule: &rule,
            policy: &policy,
            key,
            cost,
        };
        let label = format!("{kind} {quota} request #{}: {r:?} {op:?}", n + 1);
        match op {
            Op::Check { peek } => {
                let want = if *peek {
                    policy.peek(state, at, cost)
                } else {
                    policy.check(state, at, cost)
                }
                .unwrap();
                let got = h.rt.block_on(async {
                    if *peek {
                        h.store.peek_at(&[item], at).await
                    } else {
                        h.store.check_at(&[item], at).await
                    }
                });
                prop_assert_eq!(want, got.unwrap().decisions[0], "{}", label);
            }
            Op::Reserve { max_wait } => {
                let want = policy.reserve(state, at, cost, *max_wait).unwrap();
                let got =
                    h.rt.block_on(h.store.reserve_at(&[item], at, *max_wait))
                        .unwrap();
                prop_assert_eq!(want.decision, got.batch.decisions[0], "{}", label);
                prop_assert_eq!(want.wait, got.wait, "{}", label);
                prop_assert_eq!(
                    want.scheduled_at,
                    got.scheduled_at.first().copied(),
                    "{}",
                    label
                );
                if let Some(at) = want.scheduled_at {
                    granted.entry(r.key).or_default().push((at, cost));
                }
            }
            Op::Settle { actual, pick } => {
                let open = granted.entry(r.key).or_default();
                if open.is_empty() {
                    continue;
                }
                let (scheduled_at, reserved) = open.remove(open.len() - 1 - pick % open.len());
                let want = policy
                    .settle(state, at, scheduled_at, reserved, *actual)
                    .unwrap();
                let settle = SettleItem {
                    rule: &rule,
                    policy: &policy,
                    key,
                    reserved,
                    actual: *actual,
                    scheduled_at,
                };
                let got = h.rt.block_on(h.store.settle_at(&[settle], at)).unwrap();
                prop_assert_eq!(want, got[0], "{}", label);
            }
        }
    }
    Ok(())
}

/// Reservations and settles of `kind` on `flavor` decide as the core does.
fn reservations_match_core(flavor: Flavor, kind: AlgorithmKind) {
    let h = harness(flavor);
    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&(0..QUOTAS.len(), reservation_requests(6)), |(q, reqs)| {
            run_reservations_against_core(&h, kind, QUOTAS[q], &reqs)
        })
        .unwrap();
}

macro_rules! reservations_differential {
    ($name:ident, $kind:expr) => {
        #[test]
        fn $name() {
            reservations_match_core(Flavor::Redis, $kind);
        }
    };
}

/// The scripts reserve and settle alike on Valkey: the six algorithms in one test (each its own
/// property run), to keep the suite's server count down.
#[test]
fn valkey_reservations_match_core() {
    for kind in AlgorithmKind::ALL {
        reservations_match_core(Flavor::Valkey, kind);
    }
}

reservations_differential!(
    fixed_window_reservations_match_core,
    AlgorithmKind::FixedWindow
);
reservations_differential!(
    sliding_log_reservations_match_core,
    AlgorithmKind::SlidingLog
);
reservations_differential!(
    sliding_window_reservations_match_core,
    AlgorithmKind::SlidingWindow
);
reservations_differential!(
    token_bucket_reservations_match_core,
    AlgorithmKind::TokenBucket
);
reservations_differential!(
    leaky_bucket_reservations_match_core,
    AlgorithmKind::LeakyBucket
);
reservations_differential!(gcra_reservations_match_core, AlgorithmKind::Gcra);

/// A sequence proptest found (shrunk): with the deny cache on, a check's denial was cached,
/// then a granted reservation on that key moved its `retry_after` one window later, and the
/// next check was answered from the stale entry (one window short). Kept so it runs every time.
#[test]
fn a_granted_reservation_drops_the_cached_denial() {
    use Op::*;
    let h = harness(Flavor::Redis);
    // (dt, key, cost, peek, op)
    #[rustfmt::skip]
    let reqs: Vec<(Req, Op)> = [
        (3234, 1, 3, true, Reserve { max_wait: 0 }),
        (342451, 0, 7, false, Check { peek: false }),
        (5183619, 0, 6, false, Settle { actual: 13, pick: 0 }),
        (336227, 1, 6, false, Check { peek: false }),
        (15635168, 0, 1, false, Check { peek: false }),
        (-122235, 1, 1, false, Reserve { max_wait: 2123947 }),
        (171815, 0, 6, true, Check { peek: false }),
        (259379, 0, 3, false, Settle { actual: 13, pick: 0 }),
        (153964, 0, 1, false, Check { peek: false }),
        (0, 0, 3, false, Reserve { max_wait: 2100904 }),
        (291444, 1, 7, false, Reserve { max_wait: u64::MAX }),
        (0, 1, 7, true, Settle { actual: 4, pick: 0 }),
        (-118014, 1, 3, true, Settle { actual: 12, pick: 0 }),
        (-284923, 0, 1, false, Reserve { max_wait: 276814 }),
        (25911, 0, 2, false, Reserve { max_wait: u64::MAX }),
        (1112859, 0, 0, false, Reserve { max_wait: 2871701 }),
        (186215, 0, 4, true, Reserve { max_wait: 187192 }),
        (0, 0, 1, false, Check { peek: false }),
        (347134, 0, 7, false, Reserve { max_wait: u64::MAX }),
        (-157481, 0, 2, false, Check { peek: false }),
        (181880, 1, 2, true, Settle { actual: 3, pick: 0 }),
        (257945, 0, 3, true, Reserve { max_wait: 0 }),
        (0, 0, 3, false, Settle { actual: 10, pick: 0 }),
        (283115, 1, 5, true, Reserve { max_wait: 0 }),
        (130123, 0, 5, false, Check { peek: false }),
        (38440, 1, 1, false, Reserve { max_wait: u64::MAX }),
        (42097, 0, 5, true, Reserve { max_wait: u64::MAX }),
        (327159, 0, 1, false, Check { peek: false }),
    ]
    .into_iter()
    .map(|(dt, key, cost, peek, op)| (Req { dt, key, cost, peek }, op))
    .collect();
    run_reservations_against_core(&h, AlgorithmKind::SlidingWindow, "1/s", &reqs).unwrap();
}

/// Random multi-item reservation batches (one scheduled time for all items, all or nothing)
/// and their settles decide identically on the memory store and on Redis.
fn reservation_batches_match_the_memory_store(flavor: Flavor) {
    let h = harness(flavor);
    let steps = prop::collection::vec(
        (
            prop_oneof![4 => 0u64..300_000, 1 => Just(0u64)],
            prop::collection::vec((0usize..3, 0usize..2, 0u64..4), 1..5),
            prop_oneof![Just(0u64), 0u64..2_000_000],
            prop::option::weighted(0.3, any::<u64>()),
        ),
        1..25,
    );
    let strategy = (
        prop::collection::vec(0usize..6, 3),
        prop::collection::vec(0..QUOTAS.len(), 3),
        steps,
    );
    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&strategy, |(kinds, q, steps)| {
            let policies: Vec<Policy> = (0..3)
                .map(|i| {
                    let quota: Quota = QUOTAS[q[i]].parse().unwrap();
                    Policy::new(AlgorithmKind::ALL[kinds[i]], quota)
                        .unwrap_or_else(|_| Policy::new(AlgorithmKind::Gcra, quota).unwrap())
                })
                .collect();
            let rules: Vec<String> = (0..3).map(|_| fresh_rule()).collect();
            let steps: Vec<ReserveStep> = steps;
            replay_reservations_against_memory(&h.rt, &h.store, &rules, &policies, T0, &steps)
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

on_both!(
    reservation_batches_match_the_memory_store_on_redis,
    valkey_reservation_batches_match_the_memory_store,
    reservation_batches_match_the_memory_store
);
