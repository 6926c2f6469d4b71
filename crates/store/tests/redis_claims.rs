//! `Store::claim` on real redis-server processes (standalone, also on valkey-server, and a
//! 3-node cluster) started by each test: an id is claimed once across every store sharing the
//! server, the claim carries its TTL and then lapses, its key name holds no hash tag whatever
//! the id, and the local fallback never claims in memory.
#![cfg(feature = "testing")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::ManualClock;
use floodgate_store::fallback::FallbackStore;
use floodgate_store::redis::testing::{
    current_thread_runtime, multi_thread_runtime, Flavor, RedisCluster, RedisServer,
};
use floodgate_store::redis::{keys, RedisStore, RedisStoreConfig};
use floodgate_store::{Store, StoreError};

const T0: u64 = 1_700_000_000_000_000;

fn standalone(server: &RedisServer) -> RedisStore {
    let mut config = RedisStoreConfig::standalone(server.url());
    config.timeout = Duration::from_secs(2);
    RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
}

/// On redis-server and on valkey-server alike.
#[test]
fn an_id_is_claimed_once_with_its_ttl_in_redis_and_valkey() {
    for flavor in Flavor::ALL {
        claimed_once_with_its_ttl(flavor);
    }
}

fn claimed_once_with_its_ttl(flavor: Flavor) {
    let server = RedisServer::start_flavor(flavor)
        .unwrap_or_else(|e| panic!("start {}: {e}", flavor.binary()));
    current_thread_runtime().unwrap().block_on(async {
        let a = standalone(&server);
        let b = standalone(&server);
        assert!(a.claim("reservation-1", 60_000_000).await.unwrap());
        // A second claim, from this store or another process's, is refused.
        assert!(!a.claim("reservation-1", 60_000_000).await.unwrap());
        assert!(!b.claim("reservation-1", 60_000_000).await.unwrap());
        assert!(b.claim("reservation-2", 60_000_000).await.unwrap());
        // The key is the documented name, with the TTL asked for (in ms, rounded up).
        let name = keys::claim_key("fg:", "reservation-1");
        assert!(name.starts_with("fg:claim:"));
        assert_eq!(name.len(), "fg:claim:".len() + keys::CLAIM_HASH_CHARS);
        let pttl: i64 = server
            .cli(&["PTTL", &name])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!((59_000..=60_000).contains(&pttl), "PTTL {pttl}");
        assert_eq!(server.cli(&["GET", &name]).unwrap().trim(), "1");
        // A claim of 1 us still lives 1 ms in Redis; once it lapses the id is free again.
        assert!(a.claim("short", 1).await.unwrap());
        let short = keys::claim_key("fg:", "short");
        let pttl: i64 = server
            .cli(&["PTTL", &short])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!((-2..=1).contains(&pttl), "PTTL {pttl}");
        // Redis expires on its own clock: wait for it (real time, about 1 ms).
        let mut freed = false;
        for _ in 0..200 {
            if a.claim("short", 60_000_000).await.unwrap() {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(freed, "the 1 ms claim never lapsed");
    });
}

#[test]
fn of_many_concurrent_claims_of_one_id_exactly_one_wins() {
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let stores: Vec<Arc<RedisStore>> = (0..4).map(|_| Arc::new(standalone(&server))).collect();
        for round in 0..20 {
            let won = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for client in 0..40 {
                let store = Arc::clone(&stores[client % 4]);
                let won = Arc::clone(&won);
                tasks.push(tokio::spawn(async move {
                    if store
                        .claim(&format!("id-{round}"), 60_000_000)
                        .await
                        .unwrap()
                    {
                        won.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(won.load(Ordering::Relaxed), 1, "round {round}");
        }
    });
}

#[test]
fn claims_on_a_cluster_are_once_across_stores_and_ids_choose_no_slot() {
    let cluster = RedisCluster::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let store = || {
            let mut config = RedisStoreConfig::cluster(cluster.urls());
            config.timeout = Duration::from_secs(2);
            RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
        };
        let (a, b) = (store(), store());
        // Ids with braces would be hash tags in a raw name; hashed, they are not.
        for id in ["{victim}", "}{", "{fg:}", "plain", "a{b}c"] {
            let name = keys::claim_key("fg:", id);
            assert!(!name.contains('{') && !name.contains('}'), "{name}");
            assert!(a.claim(id, 60_000_000).await.unwrap(), "{id}");
            assert!(!b.claim(id, 60_000_000).await.unwrap(), "{id}");
            assert!(!a.claim(id, 60_000_000).await.unwrap(), "{id}");
        }
        // Many ids spread over the masters (the slot is CRC16 of the whole hashed name).
        for i in 0..64 {
            let id = format!("spread-{i}");
            assert!(b.claim(&id, 60_000_000).await.unwrap());
            assert!(!a.claim(&id, 60_000_000).await.unwrap());
        }
        for node in cluster.nodes() {
            let held = node.cli(&["KEYS", "fg:claim:*"]).unwrap();
            assert!(held.lines().count() > 5, "node {}: {held}", node.port());
        }
    });
}

#[test]
fn the_local_fallback_never_claims_in_memory() {
    let mut server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let clock = Arc::new(ManualClock::new(T0));
        let store = FallbackStore::new(standalone(&server), 2, clock);
        assert!(store.claim("before", 60_000_000).await.unwrap());
        server.kill();
        // With Redis gone a claim is an error (the settle is refused), never a local "yes"
        // another process could repeat.
        let err = store.claim("during", 60_000_000).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Unavailable { .. } | StoreError::Timeout { .. }
            ),
            "{err:?}"
        );
    });
}
