//! The local fallback of a RedisStore against real redis-server processes started by each
//! test: divided limits, the instances last seen in Redis, fallback for some rules only.
#![cfg(feature = "testing")]

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock};
use floodgate_store::fallback::FallbackStore;
use floodgate_store::redis::testing::{current_thread_runtime, RedisServer};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{Store, StoreError};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use common::*;

#[test]
fn local_fallback_divides_the_limit_and_counts_degraded_decisions() {
    let mut server = RedisServer::start().unwrap();
    server.kill();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let admitted = metrics::with_local_recorder(&recorder, || {
        current_thread_runtime().unwrap().block_on(async {
            let clock = Arc::new(ManualClock::new(T0));
            let redis =
                RedisStore::new(RedisStoreConfig::standalone(server.url()), clock.clone()).unwrap();
            let store = FallbackStore::new(redis, 4, clock);
            let p = policy(AlgorithmKind::FixedWindow, "100/10s");
            let mut admitted = 0;
            for _ in 0..40 {
                let d = store.check(&[item("fb", &p, "k", 1)]).await.unwrap();
                admitted += u64::from(d.allowed);
            }
            admitted
        })
    });
    // 100 / 4 instances = 25 locally.
    assert_eq!(admitted, 25);
    let degraded: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == "floodgate_store_degraded_total"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "mode" && l.value() == "local")
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(n) => n,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(degraded, 40);
}

/// Issue 14: instances discovered, not configured. Three stores (three processes) announce
/// themselves in one Redis; each sees 3 live; the local fallback of one divides by the 3 it
/// last saw once Redis is gone (30 / 3 = 10 admitted locally). An instance that stops
/// announcing is forgotten after the announcement's TTL (caller time, so the manual clock
/// expires it), and the count falls back to what is live.
#[test]
fn the_local_fallback_divides_by_the_instances_last_seen_in_redis() {
    let mut server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let clock = Arc::new(ManualClock::new(T0));
        let stores: Vec<RedisStore> = (0..3)
            .map(|_| {
                let mut config = slow_ok(&server);
                config.timeout = Duration::from_millis(300);
                config.time_source = TimeSource::Caller;
                RedisStore::new(config, clock.clone()).unwrap()
            })
            .collect();
        assert_eq!(stores[0].live_instances().load(Ordering::Relaxed), 0);
        assert_eq!(stores[0].announce().await.unwrap(), 1);
        assert_eq!(stores[1].announce().await.unwrap(), 2);
        assert_eq!(stores[2].announce().await.unwrap(), 3);
        assert_eq!(
            stores[0].announce().await.unwrap(),
            3,
            "refreshing adds nobody"
        );
        // One key, with a TTL.
        let mut con = raw(&server).await;
        assert_eq!(all_keys(&mut con).await, ["fg:instances"]);
        assert!(pttl(&mut con, "fg:instances").await > 0);
        // The third stops announcing; 3 s later only two are live.
        clock.advance(2_000_000);
        assert_eq!(stores[0].announce().await.unwrap(), 3);
        assert_eq!(stores[1].announce().await.unwrap(), 3);
        clock.advance(1_000_000);
        assert_eq!(stores[0].announce().await.unwrap(), 2);
        assert_eq!(stores[2].announce().await.unwrap(), 3, "back again");

        let mut stores = stores.into_iter();
        let first = stores.next().unwrap();
        let live = first.live_instances();
        assert_eq!(live.load(Ordering::Relaxed), 2, "what the first saw last");
        assert_eq!(first.announce().await.unwrap(), 3);
        let fallback = FallbackStore::discovered(first, live, 1, clock.clone());
        assert_eq!(fallback.instances(), 3);
        // Redis dies between two refreshes: the count stays at what was last seen.
        server.kill();
        assert!(fallback.primary().announce().await.is_err());
        assert_eq!(fallback.instances(), 3);
        let p = policy(AlgorithmKind::FixedWindow, "30/10s");
        let mut admitted = 0;
        for _ in 0..20 {
            let d = fallback.check(&[item("fb", &p, "k", 1)]).await.unwrap();
            admitted += u64::from(d.allowed);
        }
        assert_eq!(admitted, 10);
        // Never seen anything: the count given for that case.
        let mut config = slow_ok(&server);
        config.time_source = TimeSource::Caller;
        let fresh = RedisStore::new(config, clock.clone()).unwrap();
        let live = fresh.live_instances();
        assert_eq!(
            FallbackStore::discovered(fresh, live, 4, clock).instances(),
            4
        );
    });
}

#[tokio::test]
async fn local_fallback_can_be_limited_to_some_rules() {
    let mut server = RedisServer::start().unwrap();
    server.kill();
    let clock = Arc::new(ManualClock::new(T0));
    let redis = RedisStore::new(RedisStoreConfig::standalone(server.url()), clock.clone()).unwrap();
    let store = FallbackStore::new(redis, 2, clock).only_rules(|rule| rule == "local-rule");
    let p = policy(AlgorithmKind::TokenBucket, "10/s");
    let local = item("local-rule", &p, "k", 1);
    let open = item("open-rule", &p, "k", 1);
    // Only local rules: decided locally with 10 / 2 = 5.
    let d = store.check(&[local]).await.unwrap();
    assert_eq!(
        (d.allowed, d.decisions[0].limit, d.decisions[0].remaining),
        (true, 5, 4)
    );
    // Any other rule in the batch: the primary's error, for the caller's failure mode.
    assert!(matches!(
        store.check(&[local, open]).await,
        Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. })
    ));
    assert!(store.inspect("open-rule", &p, "k").await.is_err());
    assert_eq!(
        store
            .inspect("local-rule", &p, "k")
            .await
            .unwrap()
            .remaining,
        4
    );
}

/// Issue 23: a divided quota the buckets refuse (a sub-microsecond emission interval the
/// divided burst cannot hold exactly) was replaced by the undivided one, so during an outage
/// each of N instances admitted the whole limit. Now the divided limit is rounded down to the
/// nearest exact one: 10,000,000/s burst 10 on 3 instances is 3,000,000/s burst 3 locally
/// (3 admitted at once, not 10); 7,800,000/s burst 9 is 2,500,000/s burst 3.
#[test]
fn a_divided_quota_that_cannot_be_exact_is_rounded_down_never_undivided() {
    let mut server = RedisServer::start().unwrap();
    server.kill();
    current_thread_runtime().unwrap().block_on(async {
        let clock = Arc::new(ManualClock::new(T0));
        let redis =
            RedisStore::new(RedisStoreConfig::standalone(server.url()), clock.clone()).unwrap();
        let store = FallbackStore::new(redis, 3, clock);
        for (quota, local_limit) in [
            ("10000000/s burst 10", 3_000_000),
            ("7800000/s burst 9", 2_500_000),
        ] {
            for kind in [AlgorithmKind::TokenBucket, AlgorithmKind::Gcra] {
                let p = policy(kind, quota);
                let local = *store.local_policy(&p).unwrap().quota();
                assert_eq!(
                    (local.limit(), local.period(), local.burst()),
                    (local_limit, 1_000_000, 3),
                    "{kind:?} {quota}"
                );
                let key = format!("{kind:?}-{quota}");
                let mut admitted = 0;
                for _ in 0..12 {
                    let d = store.check(&[item("fb", &p, &key, 1)]).await.unwrap();
                    admitted += u64::from(d.allowed);
                }
                assert_eq!(admitted, 3, "{kind:?} {quota}");
            }
        }
    });
}
