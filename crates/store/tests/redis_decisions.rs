//! RedisStore decisions against real redis-server processes started by each test: TTLs on every
//! key, server time, clocks that lag or skew, old stored values, reset and inspect, a changed
//! quota, exact limits under concurrency, the largest sliding log, key prefixes, `holds`.
#![cfg(feature = "testing")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Clock, ManualClock, SystemClock};
use floodgate_store::redis::testing::{
    current_thread_runtime, multi_thread_runtime, Flavor, RedisServer,
};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{Store, StoreError};

use common::*;

#[tokio::test]
async fn every_written_key_has_a_ttl_equal_to_reset_after() {
    let server = RedisServer::start().unwrap();
    let store = RedisStore::new(slow_ok(&server), Arc::new(SystemClock)).unwrap();
    let mut con = raw(&server).await;
    for kind in AlgorithmKind::ALL {
        let p = policy(kind, "10/20s");
        let d = store
            .check(&[item("ttl", &p, "user=alice", 3)])
            .await
            .unwrap();
        assert!(d.allowed, "{kind}");
        let name = store.key_name("ttl", &p, "user=alice");
        let pttl = pttl(&mut con, &name).await;
        let expected_ms = d.decisions[0].reset_after.div_ceil(1000) as i64;
        assert!(pttl > 0, "{kind}: {name} has PTTL {pttl}");
        // PTTL counts down from ceil(reset_after / 1000) ms set a moment ago.
        assert!(
            pttl <= expected_ms && pttl > expected_ms - 1000,
            "{kind}: PTTL {pttl} ms, reset_after {} us",
            d.decisions[0].reset_after
        );
        let kind_of: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(kind_of, "string", "{kind}");
        // The fixed window keeps one integer, which Redis stores in the object header; so does
        // GCRA when its last admission left it a whole number of cells ahead (here 3), its
        // last admission time included (docs/redis.md, "Values").
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&name)
            .query_async(&mut con)
            .await
            .unwrap();
        let packed = matches!(kind, AlgorithmKind::FixedWindow | AlgorithmKind::Gcra);
        assert_eq!(encoding == "int", packed, "{kind}: {encoding}");
    }
    // Denials and peeks write nothing: still exactly six keys, every one with a TTL.
    let p = policy(AlgorithmKind::FixedWindow, "1/h");
    assert!(
        store
            .check(&[item("deny", &p, "k", 1)])
            .await
            .unwrap()
            .allowed
    );
    assert!(
        !store
            .check(&[item("deny", &p, "k", 1)])
            .await
            .unwrap()
            .allowed
    );
    store.peek(&[item("peek-only", &p, "k", 1)]).await.unwrap();
    let keys = all_keys(&mut con).await;
    assert_eq!(keys.len(), 7, "{keys:?}");
    for k in keys {
        let pttl = pttl(&mut con, &k).await;
        assert!(pttl > 0, "{k} has no TTL ({pttl})");
    }
}

#[tokio::test]
async fn server_time_decides_and_retry_after_is_consistent() {
    let server = RedisServer::start().unwrap();
    // The store's own clock is far in the past: with TimeSource::Server it must not matter.
    let store = RedisStore::new(slow_ok(&server), Arc::new(ManualClock::new(1))).unwrap();
    let p = policy(AlgorithmKind::Gcra, "2/10s");
    let i = item("server-time", &p, "k", 1);
    assert!(store.check(&[i]).await.unwrap().allowed);
    assert!(store.check(&[i]).await.unwrap().allowed);
    let denied = store.check(&[i]).await.unwrap();
    assert!(!denied.allowed);
    let retry = denied.decisions[0].retry_after.unwrap();
    // One unit refills every 5 s; a few ms passed at most.
    assert!(retry > 4_000_000 && retry <= 5_000_000, "{retry}");
    // The state holds a server-clock TAT (about now + 10 s), not one near the store's clock.
    let mut con = raw(&server).await;
    // 2/10s: the emission interval is 5 s in lowest terms 5_000_000/1, so the stored integer
    // tat x den + tat_ticks is tat itself; tat - (the time of the last admission) follows a
    // ':'.
    let value: String = redis::cmd("GET")
        .arg(store.key_name("server-time", &p, "k"))
        .query_async(&mut con)
        .await
        .unwrap();
    let (tat, lag) = value.split_once(':').unwrap();
    let (tat, lag): (u64, u64) = (tat.parse().unwrap(), lag.parse().unwrap());
    // Two admissions a moment apart: the second one is less than 10 s before tat.
    assert!(lag <= 10_000_000 && lag > 9_000_000, "{value}");
    let now = SystemClock.now();
    assert!(
        tat > now + 9_000_000 && tat <= now + 10_000_000,
        "tat {tat}, now {now}"
    );
}

/// Issue 17, case 1, across processes: two stores ("nodes") on one Redis with caller-supplied
/// time, one an hour (or 10 ms) behind the other. With 4 of 5 cells free the lagging node gets
/// exactly 4 more on GCRA, as on the token and leaky buckets (it used to be refused every one,
/// each with `Retry-After: 1`).
#[tokio::test]
async fn gcra_with_a_node_whose_clock_lags_admits_what_the_buckets_admit() {
    let server = RedisServer::start().unwrap();
    let node = |clock: &Arc<ManualClock>| {
        let mut config = slow_ok(&server);
        config.time_source = TimeSource::Caller;
        config.ttl_extra = Duration::from_secs(3600);
        RedisStore::new(config, clock.clone()).unwrap()
    };
    for lag in [3_600_000_000u64, 10_000] {
        let (ahead_clock, behind_clock) = (
            Arc::new(ManualClock::new(T0)),
            Arc::new(ManualClock::new(T0 - lag)),
        );
        let (ahead, behind) = (node(&ahead_clock), node(&behind_clock));
        for kind in [
            AlgorithmKind::Gcra,
            AlgorithmKind::TokenBucket,
            AlgorithmKind::LeakyBucket,
        ] {
            let p = policy(kind, "5/s");
            let rule = format!("lag-{lag}");
            assert!(
                ahead
                    .check(&[item(&rule, &p, "k", 1)])
                    .await
                    .unwrap()
                    .allowed
            );
            let mut admitted = 0;
            for _ in 0..6 {
                if behind
                    .check(&[item(&rule, &p, "k", 1)])
                    .await
                    .unwrap()
                    .allowed
                {
                    admitted += 1;
                }
            }
            assert_eq!(admitted, 4, "{kind}, lag {lag} us");
        }
    }
}

/// A GCRA value written before `last_update` existed (one packed integer, or `<tat>:<ticks>`
/// for a denominator above 2^23) is read with `last_update = 0`: it decides as it did then
/// (a stale `now` bounded by the earliest consistent time), and the next admission writes the
/// new form.
#[tokio::test]
async fn a_gcra_value_stored_without_last_update_still_decides() {
    let server = RedisServer::start().unwrap();
    let mut config = slow_ok(&server);
    config.time_source = TimeSource::Caller;
    config.ttl_extra = Duration::from_secs(3600);
    let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
    let mut con = raw(&server).await;
    for (quota, old_value) in [
        // 2/s: den 1, the old value is tat itself: 1 s ahead of T0, the bucket is spent.
        ("2/s", format!("{}", T0 + 1_000_000)),
        // den 9,999,991 > 2^23: the old '<tat>:<tat_ticks>' form.
        ("9999991/10s burst 2", format!("{}:0", T0 + 1)),
    ] {
        let p = policy(AlgorithmKind::Gcra, quota);
        let name = store.key_name("legacy", &p, "k");
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg(&old_value)
            .query_async(&mut con)
            .await
            .unwrap();
        let mut at_t0 = p.initial_state();
        // The same state in the core: the tat, no last_update.
        if let floodgate_core::State::Gcra(g) = &mut at_t0 {
            let (tat, ticks) = match old_value.split_once(':') {
                Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                None => (old_value.parse::<u64>().unwrap(), 0),
            };
            *g = floodgate_core::GcraState {
                tat,
                tat_ticks: ticks,
                last_update: 0,
                last_scheduled_at: 0,
            };
        }
        for (dt, cost) in [(0u64, 1u64), (400_000, 1), (0, 2), (2_000_000, 1)] {
            let now = T0 - 500_000 + dt;
            let want = p.check(&mut at_t0, now, cost).unwrap();
            let got = store
                .check_at(&[item("legacy", &p, "k", cost)], now)
                .await
                .unwrap();
            assert_eq!(got.decisions[0], want, "{quota} at {dt} cost {cost}");
        }
        let value: String = redis::cmd("GET")
            .arg(&name)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_ne!(value, old_value, "{quota}: rewritten in the new form");
    }
}

/// A GCRA value in the form of the previous version, `<tat x den + tat_ticks>:<tat -
/// last_update>`, still decides exactly as its state, stale `now`s included, and its next
/// admission writes the compact form when that is exact (a rolling upgrade: the old form is
/// read, never reset).
#[tokio::test]
async fn a_gcra_value_in_the_two_number_form_still_decides() {
    let server = RedisServer::start().unwrap();
    let mut config = slow_ok(&server);
    config.time_source = TimeSource::Caller;
    config.ttl_extra = Duration::from_secs(3600);
    let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
    let mut con = raw(&server).await;
    // (quota, tat, tat_ticks, last_update): 2/s (den 1) one cell and a fifth ahead; 7/s (den 7,
    // interval 1,000,000 ticks) with a fraction of a microsecond.
    for (quota, tat, ticks, last_update) in [
        ("2/s", T0 + 600_000, 0u64, T0),
        ("7/s", T0 + 200_000, 3u64, T0 + 100_000),
    ] {
        let p = policy(AlgorithmKind::Gcra, quota);
        let den = match quota {
            "7/s" => 7,
            _ => 1,
        };
        let value = format!("{}:{}", tat * den + ticks, tat - last_update);
        let name = store.key_name("two", &p, "k");
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg(&value)
            .query_async(&mut con)
            .await
            .unwrap();
        let mut state = p.initial_state();
        if let floodgate_core::State::Gcra(g) = &mut state {
            *g = floodgate_core::GcraState {
                tat,
                tat_ticks: ticks,
                last_update,
                last_scheduled_at: 0,
            };
        }
        // A stale now first (before last_update: no time passed), then forward.
        for (at, cost) in [
            (T0 - 3_600_000_000, 1u64),
            (T0 - 1, 0),
            (last_update + 50_000, 1),
            (T0 - 5, 1),
            (T0 + 5_000_000, 2),
            (T0 + 1_000, 1),
        ] {
            let want = p.check(&mut state, at, cost).unwrap();
            let got = store
                .check_at(&[item("two", &p, "k", cost)], at)
                .await
                .unwrap();
            assert_eq!(got.decisions[0], want, "{quota} at {at} cost {cost}");
        }
        let stored: String = redis::cmd("GET")
            .arg(&name)
            .query_async(&mut con)
            .await
            .unwrap();
        // 2/s: the last admission (cost 2 at T0 + 5 s, on an empty bucket) left it two whole
        // cells ahead: the compact form, one integer. 7/s: the stale cost-1 check after it was
        // admitted at T0 + 5 s (3 cells ahead), but tat x 7 passes 2^53: the two-number form.
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&name)
            .query_async(&mut con)
            .await
            .unwrap();
        if den == 1 {
            assert_eq!(stored, format!("-2{:016}", T0 + 6_000_000), "{quota}");
            assert_eq!(encoding, "int", "{quota}: {stored}");
        } else {
            assert_eq!(stored, format!("{}:428571", (T0 + 5_428_571) * 7 + 3));
            assert_eq!(encoding, "embstr", "{quota}: {stored}");
        }
    }
}

#[tokio::test]
async fn reset_and_inspect() {
    let server = RedisServer::start().unwrap();
    let mut config = RedisStoreConfig::standalone(server.url());
    config.time_source = TimeSource::Caller;
    config.prefix = "test:".into();
    let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
    let p = policy(AlgorithmKind::TokenBucket, "5/s");
    store.check(&[item("r", &p, "k", 4)]).await.unwrap();
    let seen = store.inspect("r", &p, "k").await.unwrap();
    assert_eq!(
        (seen.allowed, seen.remaining, seen.reset_after),
        (true, 1, 800_000)
    );
    let name = store.key_name("r", &p, "k");
    assert!(name.starts_with("test:") && name.len() == 5 + 11, "{name}");
    // Another policy of the rule names another key: nothing of it to reset.
    let other = policy(AlgorithmKind::TokenBucket, "6/s");
    assert!(!store.reset("r", &other, "k").await.unwrap());
    assert_eq!(store.inspect("r", &p, "k").await.unwrap().remaining, 1);
    assert!(store.reset("r", &p, "k").await.unwrap());
    assert!(!store.reset("r", &p, "k").await.unwrap());
    assert_eq!(store.inspect("r", &p, "k").await.unwrap().remaining, 5);
}

/// A library user changes a rule's quota under the same name: 7/s (emission interval 1/7 s,
/// denominator 7) to 10/s (denominator 1) and back. Each policy has its own key, so neither
/// reads the other's packed value under the wrong denominator (a GCRA arrival time read 7
/// times too far ahead, the key denied until its TTL ends; the other way, forgiven). Every
/// algorithm decides exactly like the memory store, which keeps one table per policy.
#[tokio::test]
async fn a_changed_quota_under_the_same_rule_name_starts_fresh_like_the_memory_store() {
    let server = RedisServer::start().unwrap();
    let mut config = slow_ok(&server);
    config.time_source = TimeSource::Caller;
    config.ttl_extra = Duration::from_secs(3600);
    let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
    let memory = floodgate_store::MemoryStore::with_clock(Arc::new(ManualClock::new(T0)));
    for kind in AlgorithmKind::ALL {
        let seven = policy(kind, "7/s");
        let ten = policy(kind, "10/s");
        let rule = format!("r-{kind}");
        assert_ne!(
            store.key_name(&rule, &seven, "k"),
            store.key_name(&rule, &ten, "k")
        );
        // (policy, cost, then allowed and remaining, by hand), all at T0: 7/s is used up,
        // 10/s starts full (den 7 -> 1) and is used up, then 7/s finds its own empty state
        // (den 1 -> 7: not forgiven), and 10/s its own.
        let steps = [
            (&seven, 7, true, 0),
            (&ten, 1, true, 9),
            (&ten, 9, true, 0),
            (&seven, 1, false, 0),
            (&ten, 1, false, 0),
        ];
        for (n, &(p, cost, allowed, remaining)) in steps.iter().enumerate() {
            let batch = [item(&rule, p, "k", cost)];
            let got = store.check_at(&batch, T0).await.unwrap();
            let want = memory.check_at(&batch, T0).unwrap();
            assert_eq!(got, want, "{kind} step {n}");
            let d = got.decisions[0];
            assert_eq!(
                (d.allowed, d.remaining),
                (allowed, remaining),
                "{kind} step {n}"
            );
        }
        // GCRA by hand: 10/s refills one unit every 100 ms, 7/s every 1/7 s (142,857.14 us).
        if kind == AlgorithmKind::Gcra {
            for (p, retry_after) in [(&ten, 100_000), (&seven, 142_858)] {
                let batch = [item(&rule, p, "k", 1)];
                let d = store.peek_at(&batch, T0).await.unwrap().decisions[0];
                assert_eq!(d.retry_after, Some(retry_after), "{}", p.quota());
            }
        }
        // Resetting one policy's key leaves the other's.
        assert!(store.reset(&rule, &seven, "k").await.unwrap());
        assert_eq!(
            store.inspect(&rule, &seven, "k").await.unwrap().remaining,
            7
        );
        assert_eq!(store.inspect(&rule, &ten, "k").await.unwrap().remaining, 0);
    }
}

#[test]
fn concurrent_processes_admit_exactly_the_capacity() {
    concurrent_processes_admit_exactly_the_capacity_on(Flavor::Redis);
}

#[test]
fn valkey_concurrent_processes_admit_exactly_the_capacity() {
    concurrent_processes_admit_exactly_the_capacity_on(Flavor::Valkey);
}

fn concurrent_processes_admit_exactly_the_capacity_on(flavor: Flavor) {
    // Four stores (four multiplexed connections, like four service processes) and 200
    // concurrent clients sending 2,000 requests at one key, at one frozen caller time.
    let server = RedisServer::start_flavor(flavor).unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let clock = Arc::new(ManualClock::new(T0));
        let stores: Vec<Arc<RedisStore>> = (0..4)
            .map(|_| {
                let mut config = RedisStoreConfig::standalone(server.url());
                config.time_source = TimeSource::Caller;
                config.timeout = Duration::from_secs(5);
                Arc::new(RedisStore::new(config, clock.clone()).unwrap())
            })
            .collect();
        for kind in AlgorithmKind::ALL {
            let p = Arc::new(policy(kind, "100/10s"));
            let admitted = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for client in 0..200 {
                let store = stores[client % 4].clone();
                let (p, admitted) = (p.clone(), admitted.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..10 {
                        let d = store.check(&[item("hot", &p, "k", 1)]).await.unwrap();
                        if d.allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(
                admitted.load(Ordering::Relaxed),
                100,
                "{} {kind}",
                flavor.name()
            );
        }
    });
}

#[tokio::test]
async fn insufficient_capacity_is_raised_before_redis_is_asked() {
    // No server at all: the error must come from validation, not from a connection attempt.
    let store = RedisStore::new(
        RedisStoreConfig::standalone("redis://127.0.0.1:1"),
        Arc::new(SystemClock),
    )
    .unwrap();
    let p = policy(AlgorithmKind::Gcra, "5/s");
    let e = store.check(&[item("r", &p, "k", 6)]).await.unwrap_err();
    assert_eq!(
        e,
        StoreError::InsufficientCapacity {
            rule: "r".into(),
            cost: 6,
            capacity: 5
        }
    );
}

#[test]
fn processes_with_skewed_clocks_agree_on_server_time() {
    // Four stores whose own clocks are 5 s behind, 2 s behind, 2 s ahead and 5 s ahead: with
    // the server clock (the default) they still share one exact sliding log.
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let now = SystemClock.now();
        let stores: Vec<Arc<RedisStore>> = [-5_000_000i64, -2_000_000, 2_000_000, 5_000_000]
            .into_iter()
            .map(|skew| {
                let clock = Arc::new(ManualClock::new(now.saturating_add_signed(skew)));
                Arc::new(RedisStore::new(slow_ok(&server), clock).unwrap())
            })
            .collect();
        let p = Arc::new(policy(AlgorithmKind::SlidingLog, "100/10s"));
        let admitted = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for client in 0..200 {
            let store = stores[client % 4].clone();
            let (p, admitted) = (p.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    if store
                        .check(&[item("skew", &p, "k", 1)])
                        .await
                        .unwrap()
                        .allowed
                    {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // Exact as long as the run takes less than the 10 s window (it takes well under 1 s).
        assert_eq!(admitted.load(Ordering::Relaxed), 100);
    });
}

#[tokio::test]
async fn a_full_sliding_log_at_the_largest_limit_stays_fast_in_redis() {
    // The server caps the sliding log at 10,000; a full log of 10,000 distinct timestamps is
    // 80 KB, and every call on it stays far below the 10 ms SLOWLOG threshold.
    let server = RedisServer::start().unwrap();
    let mut config = slow_ok(&server);
    config.time_source = TimeSource::Caller;
    config.ttl_extra = Duration::from_secs(3600);
    let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
    let p = policy(AlgorithmKind::SlidingLog, "10000/h");
    for i in 0..10_000u64 {
        let d = store
            .check_at(&[item("big", &p, "k", 1)], T0 + i)
            .await
            .unwrap();
        assert!(d.allowed);
    }
    // Worst cases: a denial of the whole capacity walks every entry; admissions after entries
    // expire rewrite the log.
    let denied = store
        .check_at(&[item("big", &p, "k", 10_000)], T0 + 20_000)
        .await
        .unwrap();
    assert_eq!(
        denied.decisions[0].retry_after,
        Some(3_600_000_000 - 20_000 + 9_999)
    );
    for i in 0..100u64 {
        // By `at`, the entries at T0 .. T0 + 5i + 4 have expired: room for 5 more each time.
        let at = T0 + 3_600_000_000 + 4 + i * 5;
        assert!(
            store
                .check_at(&[item("big", &p, "k", 5)], at)
                .await
                .unwrap()
                .allowed
        );
    }
    // The script's work per call, counted (not timed: a timed bound fails on a loaded
    // machine): the commands it runs inside Redis, per script call, from INFO commandstats.
    // A script whose work grows with the log (a loop of calls over its entries) runs
    // thousands; the sliding log runs a handful whatever the log holds.
    let mut con = raw(&server).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await
        .unwrap();
    let calls = |l: &str| -> u64 {
        l.split("calls=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let (mut scripts, mut inner) = (0u64, 0u64);
    for line in stats.lines().filter_map(|l| l.strip_prefix("cmdstat_")) {
        let name = line.split(':').next().unwrap_or_default();
        match name {
            "evalsha" | "eval" => scripts += calls(line),
            "info" | "config" | "script" | "hello" | "client" | "select" | "ping" | "memory" => {}
            _ => inner += calls(line),
        }
    }
    assert!(scripts >= 100, "{stats}");
    assert!(
        inner <= scripts * 8,
        "{inner} commands in {scripts} script calls: {stats}"
    );
    let bytes: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(store.key_name("big", &p, "k"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(bytes < 100_000, "{bytes} B");
}

#[tokio::test]
async fn a_prefix_with_braces_is_refused() {
    let mut config = RedisStoreConfig::standalone("redis://127.0.0.1:1");
    config.prefix = "fg{x}:".into();
    let e = RedisStore::new(config, Arc::new(SystemClock)).unwrap_err();
    assert!(e.to_string().contains("must not contain"), "{e}");
}

/// Issue 10 item 12: the admin API tells a key never seen from one whose quota is full again:
/// `holds` is false before the first check, after a peek and after a reset, and true while
/// state is held.
#[test]
fn holds_tells_an_unknown_key_from_a_held_one() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let mut config = slow_ok(&server);
        config.time_source = TimeSource::Caller;
        config.ttl_extra = Duration::ZERO;
        let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
        store.startup_check().await.unwrap();
        let p = policy(AlgorithmKind::FixedWindow, "5/s");
        assert!(!store.holds("r", &p, "k").await.unwrap());
        store.peek(&[item("r", &p, "k", 1)]).await.unwrap();
        assert!(
            !store.holds("r", &p, "k").await.unwrap(),
            "a peek stores nothing"
        );
        assert!(store.check(&[item("r", &p, "k", 1)]).await.unwrap().allowed);
        assert!(store.holds("r", &p, "k").await.unwrap());
        assert!(!store.holds("other", &p, "k").await.unwrap());
        assert!(store.reset("r", &p, "k").await.unwrap());
        assert!(!store.holds("r", &p, "k").await.unwrap());
        // The same through the Store trait, as an admin API asks whichever store it has.
        assert!(store.check(&[item("r", &p, "k", 1)]).await.unwrap().allowed);
        assert_eq!(
            Store::holds(&store, "r", &p, "k").await.unwrap(),
            Some(true)
        );
        let any = floodgate_store::AnyStore::Redis(Arc::new(store));
        assert_eq!(any.holds("r", &p, "k").await.unwrap(), Some(true));
        assert_eq!(any.holds("other", &p, "k").await.unwrap(), Some(false));
    });
}
