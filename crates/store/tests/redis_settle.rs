//! The Redis settle path against a real redis-server: the bucket scripts keep the scheduled
//! time of the latest reservation for later only while it lies ahead (the value then carries a
//! `;<offset>` suffix), and settles never give back what a later reservation stands on
//! (`docs/spec/reservations.md`, "Settle never mints capacity").
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::redis::testing::RedisServer;
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{CheckItem, SettleItem};

const T0: u64 = 1_699_920_000_000_000;

const BUCKETS: [AlgorithmKind; 3] = [
    AlgorithmKind::TokenBucket,
    AlgorithmKind::LeakyBucket,
    AlgorithmKind::Gcra,
];

fn store(server: &RedisServer) -> RedisStore {
    let mut config = RedisStoreConfig::standalone(server.url());
    config.time_source = TimeSource::Caller;
    // Caller time does not follow real time: keep keys for the whole test.
    config.ttl_extra = Duration::from_secs(3600);
    config.timeout = Duration::from_secs(5);
    RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
}

async fn value_and_memory(server: &RedisServer, name: &str) -> (String, u64) {
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let value: String = redis::cmd("GET")
        .arg(name)
        .query_async(&mut con)
        .await
        .unwrap();
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(name)
        .query_async(&mut con)
        .await
        .unwrap();
    (value, bytes)
}

/// The second case through `reserve.lua` and `settle.lua`: `5/s`, reserve 3, reserve 3
/// for 200 ms ahead, settle the first with 0, reserve 3: scheduled 400 ms ahead (not 200).
/// The value carries the latest scheduled time while it is ahead and drops it afterwards.
#[tokio::test]
async fn give_back_keeps_room_a_later_reservation_is_scheduled_behind_in_redis() {
    let server = RedisServer::start().unwrap();
    let store = store(&server);
    for kind in BUCKETS {
        let p = Policy::new(kind, "5/s".parse().unwrap()).unwrap();
        let item = |cost| CheckItem {
            rule: "settle",
            policy: &p,
            key: "k",
            cost,
        };
        let name = store.key_name("settle", &p, "k");
        let first = store.reserve_at(&[item(3)], T0, 0).await.unwrap();
        assert_eq!(first.scheduled_at, [T0], "{kind}");
        let (plain, plain_bytes) = value_and_memory(&server, &name).await;
        assert!(!plain.contains(';'), "{kind}: {plain}");
        let second = store.reserve_at(&[item(3)], T0, 1_000_000).await.unwrap();
        assert_eq!(second.scheduled_at, [T0 + 200_000], "{kind}");
        let (ahead, ahead_bytes) = value_and_memory(&server, &name).await;
        assert!(ahead.ends_with(";200000"), "{kind}: {ahead}");
        // 88 B and 104 B with Redis 7 and a 14-byte name: the suffix costs one allocation
        // class, only while a reservation lies ahead. (GCRA's first reservation left it a
        // whole 3 cells ahead: one integer, 56 B, then the two-number form with the suffix.)
        if plain.starts_with('-') {
            assert_eq!(kind, AlgorithmKind::Gcra, "{plain}");
            assert!(
                plain_bytes < ahead_bytes,
                "{kind}: {plain_bytes} -> {ahead_bytes}"
            );
        } else {
            assert!(
                ahead_bytes <= plain_bytes + 16,
                "{kind}: {plain_bytes} -> {ahead_bytes}"
            );
        }
        let settle = SettleItem {
            rule: "settle",
            policy: &p,
            key: "k",
            reserved: 3,
            actual: 0,
            scheduled_at: T0,
        };
        let d = store.settle_at(&[settle], T0).await.unwrap();
        assert_eq!((d[0].remaining, d[0].reset_after), (1, 800_000), "{kind}");
        let third = store.reserve_at(&[item(3)], T0, 1_000_000).await.unwrap();
        assert_eq!(third.scheduled_at, [T0 + 400_000], "{kind}");
        // Once the latest scheduled time passed, the next write drops it.
        let later = store.check_at(&[item(1)], T0 + 1_400_000).await.unwrap();
        assert!(later.allowed, "{kind}");
        let (after, _) = value_and_memory(&server, &name).await;
        assert!(!after.contains(';'), "{kind}: {after}");
    }
}
