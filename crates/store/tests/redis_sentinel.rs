//! RedisStore on Redis Sentinel: a real master, a replica and three sentinels (all started by
//! the test); the master is killed under load and the store follows the failover to the
//! promoted replica. The time from the kill to the first decision on the new master is
//! printed (BENCHMARKS.md), never asserted.
#![cfg(feature = "testing")]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Policy, SystemClock};
use floodgate_store::redis::testing::{multi_thread_runtime, RedisSentinel, RedisServer};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, RedisTarget};
use floodgate_store::{CheckItem, Store};

/// Polls `ready` every 50 ms for up to `within` (outside processes: real time).
async fn until(within: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = tokio::time::Instant::now();
    while start.elapsed() < within {
        if ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

// Over 120 lines: one failover in order (master, replica, three sentinels, load, the kill,
// the promotion, decisions resuming) on the same processes.
#[test]
fn the_store_follows_a_sentinel_failover_under_load() {
    let mut master = RedisServer::start().unwrap();
    let master_port = master.port().to_string();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master_port]).unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        assert!(
            until(Duration::from_secs(10), || replica
                .cli(&["INFO", "replication"])
                .is_ok_and(
                    |i| field(&i, "master_link_status").as_deref() == Some("up")
                ))
            .await,
            "the replica never synced"
        );
        let sentinels: Vec<RedisSentinel> = (0..3)
            .map(|_| RedisSentinel::start(master.port()).unwrap())
            .collect();
        // Each sentinel knows the replica and the two other sentinels before the kill.
        for s in &sentinels {
            let known = until(Duration::from_secs(20), || {
                s.cli(&["SENTINEL", "MASTER", RedisSentinel::MASTER_NAME])
                    .is_ok_and(|out| {
                        let lines: Vec<&str> = out.lines().collect();
                        let value = |k: &str| {
                            lines
                                .iter()
                                .position(|l| *l == k)
                                .and_then(|i| lines.get(i + 1))
                                .map(|v| v.to_string())
                        };
                        value("num-slaves").as_deref() == Some("1")
                            && value("num-other-sentinels").as_deref() == Some("2")
                    })
            })
            .await;
            assert!(known, "sentinel {} never saw the others", s.url());
        }

        let mut config = RedisStoreConfig::with_target(RedisTarget::Sentinel {
            sentinels: sentinels.iter().map(RedisSentinel::url).collect(),
            master_name: RedisSentinel::MASTER_NAME.into(),
        });
        config.timeout = Duration::from_millis(200);
        let store = Arc::new(RedisStore::new(config, Arc::new(SystemClock)).unwrap());
        let policy =
            Arc::new(Policy::new(AlgorithmKind::Gcra, "1000000/h".parse().unwrap()).unwrap());
        // Load: 4 clients checking one key each, counting successes and errors.
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for c in 0..4 {
            let (store, policy, stop, ok, errors) = (
                store.clone(),
                policy.clone(),
                stop.clone(),
                ok.clone(),
                errors.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let key = format!("client{c}");
                while !stop.load(Ordering::Relaxed) {
                    let item = CheckItem {
                        rule: "sentinel",
                        policy: &policy,
                        key: &key,
                        cost: 1,
                    };
                    match store.check(&[item]).await {
                        Ok(d) => {
                            assert!(d.allowed);
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
            }));
        }
        // (1,000,000 per hour: every key lives for a while, so both masters can be counted.)
        assert!(
            until(Duration::from_secs(10), || ok.load(Ordering::Relaxed) > 100
                && master.cli(&["DBSIZE"]).is_ok_and(|n| n == "4"))
            .await,
            "no decisions on the first master for all four keys"
        );

        master.kill();
        let killed = tokio::time::Instant::now();
        let before = ok.load(Ordering::Relaxed);
        let errors_before = errors.load(Ordering::Relaxed);
        // Decisions resume once the sentinels promoted the replica and the store followed.
        let back = until(Duration::from_secs(30), || {
            replica
                .cli(&["INFO", "replication"])
                .is_ok_and(|i| field(&i, "role").as_deref() == Some("master"))
                && ok.load(Ordering::Relaxed) > before + 100
        })
        .await;
        let took = killed.elapsed();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            back,
            "no decisions on the promoted replica within 30 s of the kill"
        );
        println!(
            "sentinel failover: decisions back on the promoted replica {} ms after the master \
             was killed (within 50 ms polling); {} failed checks meanwhile",
            took.as_millis(),
            errors.load(Ordering::Relaxed) - errors_before
        );
        // The new master holds the keys and every decision since.
        assert_eq!(replica.cli(&["DBSIZE"]).unwrap(), "4");
    });
}
