//! RedisStore readiness against real redis-server processes started by each test: the
//! maxmemory-policy check at startup, evictions seen by the readiness probe, at most one probe
//! a second, not ready while the breaker is open.
#![cfg(feature = "testing")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, SystemClock};
use floodgate_store::redis::testing::{current_thread_runtime, multi_thread_runtime, RedisServer};
use floodgate_store::redis::RedisStore;
use floodgate_store::Store;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use common::*;

#[tokio::test]
async fn startup_check_warns_about_evicting_policies() {
    let safe = RedisServer::start().unwrap();
    let store = RedisStore::new(slow_ok(&safe), Arc::new(SystemClock)).unwrap();
    let check = store.startup_check().await.unwrap();
    assert_eq!(check.maxmemory_policies, ["noeviction"]);
    assert!(!check.may_evict);

    for policy in ["allkeys-lru", "volatile-ttl"] {
        let risky = RedisServer::start_with_args(&["--maxmemory-policy", policy]).unwrap();
        let store = RedisStore::new(slow_ok(&risky), Arc::new(SystemClock)).unwrap();
        let check = store.startup_check().await.unwrap();
        assert_eq!(check.maxmemory_policies, [policy]);
        assert!(check.may_evict, "{policy}");
    }
}

/// Issue 14: under `allkeys-lru`, a flood of new keys evicted used-up counters, which were
/// then admitted again with full allowances, and nothing showed it. The readiness probe reads
/// `INFO stats` `evicted_keys`: a rise is counted in `floodgate_store_redis_evicted_keys_total`
/// (and logged, rate-limited).
#[test]
fn evictions_are_detected_by_the_readiness_probe() {
    let server =
        RedisServer::start_with_args(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"])
            .unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // The debugging recorder's snapshot takes each counter's increments since the last one.
    let evicted = |snapshotter: &metrics_util::debugging::Snapshotter| -> u64 {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "floodgate_store_redis_evicted_keys_total")
            .map(|(.., v)| match v {
                DebugValue::Counter(n) => n,
                other => panic!("{other:?}"),
            })
            .sum()
    };
    metrics::with_local_recorder(&recorder, || {
        current_thread_runtime().unwrap().block_on(async {
            let clock = Arc::new(ManualClock::new(T0));
            let store = RedisStore::new(slow_ok(&server), clock.clone()).unwrap();
            store.readiness().await.unwrap();
            assert_eq!(evicted(&snapshotter), 0);
            let p = policy(AlgorithmKind::Gcra, "10/h");
            // Write until Redis has evicted some keys (at most 100,000).
            let mut con = raw(&server).await;
            let mut n = 0u64;
            loop {
                for _ in 0..500 {
                    let key = format!("flood={n}");
                    store.check(&[item("evict", &p, &key, 1)]).await.unwrap();
                    n += 1;
                }
                let info: String = redis::cmd("INFO")
                    .arg("stats")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                if !info.contains("evicted_keys:0\r") {
                    break;
                }
                assert!(n < 100_000, "nothing evicted");
            }
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .query_async(&mut con)
                .await
                .unwrap();
            let redis_count: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("evicted_keys:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // The next probe (a second later) sees them.
            clock.advance(1_000_000);
            store.readiness().await.unwrap();
            assert_eq!(evicted(&snapshotter), redis_count);
            // No new evictions: nothing more counted.
            clock.advance(1_000_000);
            store.readiness().await.unwrap();
            assert_eq!(evicted(&snapshotter), 0);
        })
    });
}

#[test]
fn readiness_follows_redis_with_at_most_one_ping_a_second() {
    let mut server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let (store, clock, _) = breaker_store(&server, Duration::from_millis(200)).await;
        store.readiness().await.unwrap();
        server.kill();
        // Within the second of the last PING: the cached answer, no traffic, still ready.
        clock.advance(999_999);
        store.readiness().await.unwrap();
        clock.advance(1);
        let e = store.readiness().await.unwrap_err();
        assert!(e.to_string().contains("readiness probe"), "{e}");
        // Cached: the failure is reported again without a new PING.
        let e = store.readiness().await.unwrap_err();
        assert!(e.to_string().contains("within the last second"), "{e}");

        server.restart().unwrap();
        let ready = eventually(&clock, 1_000_000, Duration::from_millis(50), || async {
            store.readiness().await.is_ok()
        })
        .await;
        assert!(ready, "not ready within about 5 s of the restart");
    });
}

/// Issue 30 (review): one readiness probe that timed out (a busy Redis, a loaded host) made
/// `/readyz` 503 for about 2 s while every decision was answered. One timeout now leaves the
/// store ready; two in a row make it not ready, and the next answered probe ready again.
#[test]
fn one_slow_probe_leaves_the_store_ready_and_two_in_a_row_do_not() {
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let (store, clock, _) = breaker_store(&server, Duration::from_millis(200)).await;
        store.readiness().await.unwrap();
        // Redis answers no command for 1.5 s: each probe times out after 200 ms.
        server.cli(&["CLIENT", "PAUSE", "1500", "ALL"]).unwrap();
        clock.advance(1_000_000);
        store.readiness().await.unwrap();
        clock.advance(1_000_000);
        let e = store.readiness().await.unwrap_err().to_string();
        assert!(
            e.contains("timed out after 200 ms (2 probes in a row)"),
            "{e}"
        );
        // Between probes the answer is the cached one.
        let e = store.readiness().await.unwrap_err().to_string();
        assert!(e.contains("within the last second"), "{e}");
        // Once Redis answers, the next probe makes it ready.
        let ready = eventually(&clock, 1_000_000, Duration::from_millis(50), || async {
            store.readiness().await.is_ok()
        })
        .await;
        assert!(ready, "not ready within about 5 s of the pause's end");
        // One slow probe again: still ready.
        server.cli(&["CLIENT", "PAUSE", "1000", "ALL"]).unwrap();
        clock.advance(1_000_000);
        store.readiness().await.unwrap();
    });
}

/// A new user's review: with Redis stopped, an idle process's next probe timed out on the
/// shared connection (which reconnects in the background) and one timeout is forgiven, so
/// `/readyz` said ready for one more poll. A timeout is forgiven only while Redis still
/// accepts a new connection; a stopped one refuses it.
#[test]
fn a_probe_that_times_out_on_a_stopped_redis_is_not_ready_at_once() {
    let mut server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let (store, clock, _) = breaker_store(&server, Duration::from_millis(200)).await;
        store.readiness().await.unwrap();
        server.kill();
        // Another call meets the closed connection first (in `serve`, the announcement every
        // second); the connection then reconnects in the background.
        let p = policy(AlgorithmKind::FixedWindow, "10/s");
        assert!(store.check(&[item("ready", &p, "k", 1)]).await.is_err());
        tokio::time::sleep(Duration::from_millis(300)).await;
        clock.advance(1_000_000);
        let e = store.readiness().await.unwrap_err().to_string();
        assert!(
            e.contains("timed out after 200 ms, and a new connection failed: "),
            "{e}"
        );
    });
}

#[test]
fn readiness_fails_while_the_breaker_is_open() {
    let mut server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let (store, clock, _) = breaker_store(&server, Duration::from_millis(200)).await;
        let p = policy(AlgorithmKind::FixedWindow, "10/s");
        let i = item("ready", &p, "k", 1);
        assert!(store.check(&[i]).await.unwrap().allowed);
        server.kill();
        for n in 0..5 {
            assert!(store.check(&[i]).await.is_err());
            if n == 0 {
                clock.advance(window_us());
            }
        }
        let e = store.readiness().await.unwrap_err();
        assert!(e.to_string().contains("circuit breaker"), "{e}");
    });
}
