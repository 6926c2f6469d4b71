//! Quota leases on a real redis-server (`docs/spec/leases.md`): the bound holds for all six
//! algorithms with several instances (each its own RedisStore, as separate processes are) on
//! one manual clock; concurrent requests of a hot key wait for one take instead of each going
//! to Redis; a key at its limit costs no more Redis calls with a lease than without; and
//! requests waiting for a take that times out fail by the rule's failure mode.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::lease::{drive, leased_rules, request, steps, within_bound, ALGORITHMS};
use common::T0;
use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_limiter::{FailureMode, KeySource, Lease, Mode, Plan, RateLimiter, Rule, RuleSet};
use floodgate_store::redis::testing::{
    current_thread_runtime, multi_thread_runtime, proptest_cases, RedisServer,
};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::Store;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A store on `server` deciding at `clock`'s time, its keys under `prefix`.
fn store(server: &RedisServer, clock: &ManualClock, prefix: &str) -> Arc<RedisStore> {
    let mut config = RedisStoreConfig::standalone(server.url());
    config.time_source = TimeSource::Caller;
    config.timeout = Duration::from_secs(2);
    // The caller clock does not follow real time; keep the keys in real time too.
    config.ttl_extra = Duration::from_secs(3600);
    config.prefix = prefix.into();
    Arc::new(RedisStore::new(config, Arc::new(clock.clone())).unwrap())
}

/// Script calls (`EVALSHA`, `EVAL`, `FCALL`) since the last `CONFIG RESETSTAT`.
fn script_calls(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| {
            ["evalsha:", "eval:", "fcall:", "fcall_ro:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn reset_stats(server: &RedisServer) {
    server.cli(&["CONFIG", "RESETSTAT"]).unwrap();
}

fn bound_holds_on_redis(kind: AlgorithmKind) {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    // The stores connect on this runtime.
    let _runtime = rt.enter();
    let case = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config::with_cases(proptest_cases(12)));
    let strategy = (
        4u64..40,
        1u64..60,
        5u64..=100,
        (1usize..=4).prop_flat_map(|n| (Just(n), steps(n, 60_000, 150))),
    );
    let result = runner.run(
        &strategy,
        |(limit, lifetime_pct, share_pct, (instances, steps))| {
            let period = 1_000_000;
            let policy = Policy::new(kind, Quota::new(limit, period).unwrap()).unwrap();
            let lease = Lease::new(
                period * lifetime_pct / 100,
                &policy,
                share_pct as f64 / 100.0,
            )
            .unwrap();
            let bound = lease.bound(&policy, instances as u64);
            let clock = ManualClock::new(T0);
            // A fresh key space per case; one store per instance, as one per process.
            let prefix = format!("lb{}:", case.fetch_add(1, Ordering::Relaxed));
            let limiters: Vec<_> = (0..instances)
                .map(|_| {
                    RateLimiter::new(
                        store(&server, &clock, &prefix),
                        leased_rules(&policy, lease),
                    )
                    .with_lease_clock(Arc::new(clock.clone()))
                })
                .collect();
            let admitted = rt.block_on(drive(&clock, &limiters, limit, &steps));
            within_bound(&policy, bound, T0, &admitted)
        },
    );
    if let Err(e) = result {
        panic!("{kind:?} on redis-server: {e}");
    }
}

#[test]
fn fixed_window_stays_within_the_bound_on_redis() {
    bound_holds_on_redis(ALGORITHMS[0]);
}

#[test]
fn sliding_window_stays_within_the_bound_on_redis() {
    bound_holds_on_redis(ALGORITHMS[1]);
}

#[test]
fn sliding_log_stays_within_the_bound_on_redis() {
    bound_holds_on_redis(ALGORITHMS[2]);
}

#[test]
fn token_bucket_stays_within_the_bound_on_redis() {
    bound_holds_on_redis(ALGORITHMS[3]);
}

#[test]
fn leaky_bucket_stays_within_the_bound_on_redis() {
    bound_holds_on_redis(ALGORITHMS[4]);
}

#[test]
fn gcra_stays_within_the_bound_on_redis() {
    bound_holds_on_redis(ALGORITHMS[5]);
}

#[test]
fn concurrent_requests_of_a_hot_key_wait_for_one_take() {
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    // The stores connect on this runtime.
    let _runtime = rt.enter();
    // The clock stands still: a lease lives as long as its units last.
    let clock = ManualClock::new(T0);
    let policy = Policy::parse(AlgorithmKind::TokenBucket, "100000000/s").unwrap();
    let lease = Lease::new(20_000, &policy, 0.1).unwrap();
    let store = store(&server, &clock, "cc:");
    let limiter = RateLimiter::new(Arc::clone(&store), leased_rules(&policy, lease))
        .with_lease_clock(Arc::new(clock.clone()));
    let (clients, each) = (64, 100);
    rt.block_on(async {
        // Connect first: the counted calls are the decisions'.
        store.inspect("hot", &policy, "k").await.unwrap();
        reset_stats(&server);
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..each {
                        admitted += u64::from(request(&limiter, 1).await);
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        assert_eq!(admitted, clients * each, "every check fits the quota");
        assert_eq!(limiter.return_leases().await, 1);
        let calls = script_calls(&server);
        eprintln!("{calls} Redis calls for {} decisions", clients * each);
        // The first take is the cold key's cost; every request arriving meanwhile waits for
        // it, and the second take counts them (and the rate): a few calls in all, where one
        // per waiting request was made before.
        assert!(
            calls <= 8,
            "{calls} Redis calls for {} decisions",
            clients * each
        );
        // The shared state is exact: what was used is what the bucket lost.
        let left = store.inspect("hot", &policy, "k").await.unwrap().remaining;
        assert_eq!(left, 100_000_000 - clients * each);
    });
}

/// Requests every `T / 4` on one key of GCRA `1000/s` for 2 s through `limiter`: (admitted,
/// script calls).
async fn at_four_times_the_limit(
    server: &RedisServer,
    clock: &ManualClock,
    limiter: &RateLimiter<RedisStore>,
) -> (u64, u64) {
    reset_stats(server);
    let mut admitted = 0;
    for i in 0..8_000 {
        clock.advance(250);
        admitted += u64::from(request(limiter, 1).await);
        // The service's timer: every lease lifetime (20 ms).
        if i % 80 == 79 {
            limiter.end_expired_leases().await;
        }
    }
    limiter.return_leases().await;
    (admitted, script_calls(server))
}

#[test]
fn a_gcra_key_at_its_limit_costs_fewer_redis_calls_with_a_lease() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    // The stores connect on this runtime.
    let _runtime = rt.enter();
    let clock = ManualClock::new(T0);
    let policy = Policy::parse(AlgorithmKind::Gcra, "1000/s").unwrap();
    let lease = Lease::new(20_000, &policy, 0.1).unwrap();
    rt.block_on(async {
        let plain = RateLimiter::new(
            store(&server, &clock, "pl:"),
            RuleSet::new(vec![Rule::new(
                "hot",
                policy.clone(),
                KeySource::Constant("all".into()),
            )]),
        );
        let leased = RateLimiter::new(store(&server, &clock, "le:"), leased_rules(&policy, lease))
            .with_lease_clock(Arc::new(clock.clone()));
        for limiter in [&plain, &leased] {
            limiter.store().inspect("hot", &policy, "k").await.unwrap();
        }
        let (admitted_plain, calls_plain) = at_four_times_the_limit(&server, &clock, &plain).await;
        let (admitted_leased, calls_leased) =
            at_four_times_the_limit(&server, &clock, &leased).await;
        assert!(
            calls_plain <= 8_000,
            "at most one call per decision without a lease"
        );
        assert!(
            calls_leased < calls_plain,
            "{calls_leased} calls with a lease, {calls_plain} without"
        );
        // The exact count (burst 1000 and 1 per ms over 2 s) plus at most the bound.
        assert!(admitted_plain <= 3_001, "{admitted_plain}");
        assert!(
            admitted_leased <= admitted_plain + lease.bound(&policy, 1),
            "{admitted_leased} admitted with a lease, {admitted_plain} without"
        );
        eprintln!(
            "at 4x the limit: {calls_plain} calls and {admitted_plain} admitted without a \
             lease, {calls_leased} calls and {admitted_leased} admitted with"
        );
    });
}

#[test]
fn requests_waiting_for_a_take_that_times_out_fail_by_the_failure_mode() {
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    // The stores connect on this runtime.
    let _runtime = rt.enter();
    let clock = ManualClock::new(T0);
    let policy = Policy::parse(AlgorithmKind::TokenBucket, "1000/s").unwrap();
    let lease = Lease::new(20_000, &policy, 0.1).unwrap();
    let mut config = RedisStoreConfig::standalone(server.url());
    config.time_source = TimeSource::Caller;
    config.timeout = Duration::from_millis(100);
    config.ttl_extra = Duration::from_secs(3600);
    config.prefix = "to:".into();
    let store = Arc::new(RedisStore::new(config, Arc::new(clock.clone())).unwrap());
    let rules = RuleSet::new(vec![Rule::new(
        "hot",
        policy.clone(),
        KeySource::Constant("all".into()),
    )
    .with_lease(lease)
    .with_failure_mode(FailureMode::Closed)]);
    let limiter =
        RateLimiter::new(Arc::clone(&store), rules).with_lease_clock(Arc::new(clock.clone()));
    rt.block_on(async {
        store.inspect("hot", &policy, "k").await.unwrap();
        // Redis stops answering for 3 s: the take times out after 100 ms.
        server.cli(&["CLIENT", "PAUSE", "3000", "ALL"]).unwrap();
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut plan = Plan::new(limiter.rules());
                    plan.push(0, "k".into(), 1);
                    limiter.evaluate(&plan, Mode::Check).await
                })
            })
            .collect();
        for t in tasks {
            // Bounded by the store's timeout, not by the pause: a hang fails here.
            let verdict = tokio::time::timeout(Duration::from_secs(2), t)
                .await
                .expect("a request waiting for the take hung")
                .unwrap();
            assert!(!verdict.is_admitted(), "failure mode closed");
            assert!(verdict.store_error.is_some(), "{verdict:?}");
        }
        server.cli(&["CLIENT", "UNPAUSE"]).unwrap();
    });
}
