//! Measures the Redis store on this machine: `MEMORY USAGE` per key for each algorithm (and the
//! sliding log against the plain one-member-per-request sorted set), and decisions per second
//! for one sequential client and for concurrent clients sharing the pipelined, coalescing store.
//!
//! Starts its own redis-server (see `floodgate_store::redis::testing`). Run with
//!
//! ```text
//! cargo run --release -p floodgate-store --features redis --example redis_bench
//! ```
//!
//! Optional arguments: `<checks per run>` (default 50000).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Policy, SystemClock};
use floodgate_store::redis::testing::RedisServer;
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::{CheckItem, Store};

/// Wall-clock seconds since `start` (the benchmark measures real time on purpose).
#[allow(clippy::disallowed_methods)]
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

async fn memory_usage(con: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(con)
        .await
        .unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let checks: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000);
    let server = RedisServer::start().expect("start redis-server");
    let mut config = RedisStoreConfig::standalone(server.url());
    config.timeout = Duration::from_secs(1);
    let store = Arc::new(RedisStore::new(config, Arc::new(SystemClock)).unwrap());
    store.startup_check().await.unwrap();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    println!("## MEMORY USAGE per key (Redis 7.0.15, SAMPLES 0)");
    println!("key: rule \"per-user\", partition key \"user=alice\"");
    println!("| algorithm | quota | state | key name bytes | MEMORY USAGE |");
    println!("|---|---|---|---|---|");
    for kind in AlgorithmKind::ALL {
        let quota = "1000/min";
        let policy = Policy::new(kind, quota.parse().unwrap()).unwrap();
        let item = CheckItem {
            rule: "per-user",
            policy: &policy,
            key: "user=alice",
            cost: 1,
        };
        store.check(&[item]).await.unwrap();
        let name = store.key_name("per-user", &policy, "user=alice");
        let bytes = memory_usage(&mut con, &name).await;
        println!(
            "| {kind} | {quota} | after 1 request | {} | {bytes} B |",
            name.len()
        );
    }
    // Sliding log at 1,000/min, full: 1,000 requests at distinct microseconds.
    let policy = Policy::new(AlgorithmKind::SlidingLog, "1000/min".parse().unwrap()).unwrap();
    let item = CheckItem {
        rule: "full",
        policy: &policy,
        key: "user=alice",
        cost: 1,
    };
    let mut admitted = 0;
    while admitted < 1000 {
        if store.check(&[item]).await.unwrap().allowed {
            admitted += 1;
        }
    }
    let name = store.key_name("full", &policy, "user=alice");
    let packed = memory_usage(&mut con, &name).await;
    // The plain sorted set: one member per request (score = timestamp, member unique).
    let zset_key = "rl:log:user=alice";
    let base: u64 = 1_700_000_000_000_000;
    for i in 0..1000u64 {
        let _: i64 = redis::cmd("ZADD")
            .arg(zset_key)
            .arg(base + i * 60_000)
            .arg(format!("{}-{i}", base + i * 60_000))
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let zset = memory_usage(&mut con, zset_key).await;
    println!(
        "| sliding_log | 1000/min | full (1,000 entries) | {} | {packed} B |",
        name.len()
    );
    println!(
        "| sorted set (ZADD per request, for comparison) | 1000/min | full (1,000 members) | {} | {zset} B |",
        zset_key.len()
    );

    // At scale: used_memory growth per key over 100,000 keys (includes the keyspace and
    // expires dictionaries, which MEMORY USAGE leaves out).
    println!();
    println!(
        "| algorithm | used_memory growth per key, 100,000 keys after 1 request each (10/h) |"
    );
    println!("|---|---|");
    for kind in AlgorithmKind::ALL {
        let _: () = redis::cmd("FLUSHALL")
            .arg("SYNC")
            .query_async(&mut con)
            .await
            .unwrap();
        let before = used_memory(&mut con).await;
        // 10/h: even the buckets' TTL (one unit's refill, 6 min) outlasts the measurement.
        let policy = Arc::new(Policy::new(kind, "10/h".parse().unwrap()).unwrap());
        let n = 100_000u64;
        fill(&store, &policy, n).await;
        let after = used_memory(&mut con).await;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
        assert_eq!(keys, n, "{kind}");
        println!("| {kind} | {:.0} B |", (after - before) as f64 / n as f64);
    }

    println!();
    println!("## Decisions per second ({checks} checks per run, keys drawn from 100,000)");
    println!("| algorithm | 1 sequential client | 64 concurrent clients (1 store, pipelined and coalesced) | 256 concurrent clients |");
    println!("|---|---|---|---|");
    for kind in AlgorithmKind::ALL {
        let policy = Arc::new(Policy::new(kind, "100/s".parse().unwrap()).unwrap());
        let seq = run(&store, &policy, 1, checks / 5).await;
        let c64 = run(&store, &policy, 64, checks).await;
        let c256 = run(&store, &policy, 256, checks).await;
        println!("| {kind} | {seq:.0}/s | {c64:.0}/s | {c256:.0}/s |");
    }
}

async fn used_memory(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(con)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// One check on each of `n` distinct keys (`user=0` .. `user=n-1`), 64 at a time.
async fn fill(store: &Arc<RedisStore>, policy: &Arc<Policy>, n: u64) {
    drive(store, policy, "per-user", 64, n, |i| i).await;
}

/// `clients` tasks share `total` checks on one store; returns decisions per second.
async fn run(store: &Arc<RedisStore>, policy: &Arc<Policy>, clients: u64, total: u64) -> f64 {
    let started = now();
    // A cheap scramble over 100,000 keys.
    drive(store, policy, "bench", clients, total, |n| {
        n.wrapping_mul(2_654_435_761) % 100_000
    })
    .await;
    total as f64 / started.elapsed().as_secs_f64()
}

/// `clients` tasks share checks number `0..total` of rule `rule` on one store; check `n`
/// charges key `user=<key_of(n)>` one unit.
async fn drive(
    store: &Arc<RedisStore>,
    policy: &Arc<Policy>,
    rule: &'static str,
    clients: u64,
    total: u64,
    key_of: fn(u64) -> u64,
) {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (store, policy, next) = (store.clone(), policy.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let key = format!("user={}", key_of(n));
                let item = CheckItem {
                    rule,
                    policy: &policy,
                    key: &key,
                    cost: 1,
                };
                store.check(&[item]).await.expect("check");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
