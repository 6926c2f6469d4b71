//! One load run of Redis-backed decisions for `scripts/peers`: Floodgate's `RedisStore` or
//! limitador's `AsyncRedisStorage`, driven by the same closed loop as the Node and Python
//! drivers beside it.
//!
//! ```text
//! redis-peer IMPL URL CLIENTS SECONDS KEYS
//!   IMPL     floodgate:<algorithm> (fixed_window, sliding_log, sliding_window, gcra, ...)
//!            or limitador (fixed window counters)
//!   CLIENTS  concurrent callers (1 = one sequential client), sharing one client object;
//!            0 = probe: one decision on each of KEYS distinct keys, then exit (for
//!            MEMORY USAGE per key)
//!   SECONDS  length of the measured run (after 0.2 s of warm-up)
//!   KEYS     distinct keys `user:NNNNNN`, visited in a fixed scrambled order
//! ```
//!
//! Prints one JSON line: `{"decisions": n, "seconds": s, "p50_us": .., "p99_us": ..,
//! "denied": n,
//! "total": n}` (`total`: every decision made, warm-up included). Quota: 1,000,000 per 60 s
//! per key, so every decision admits and writes; the probe uses 1 per 60 s, so that every
//! algorithm's state outlives it.

#[cfg(feature = "limitador")]
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use floodgate_core::{AlgorithmKind, Policy, Quota, SystemClock};
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::{CheckItem, Store};
#[cfg(feature = "limitador")]
use limitador::{
    counter::Counter,
    limit::{Context, Limit},
    storage::redis::AsyncRedisStorage,
    storage::{AsyncCounterStorage, Authorization},
};

enum Peer {
    Floodgate(Arc<RedisStore>, Arc<Policy>),
    #[cfg(feature = "limitador")]
    Limitador(Arc<AsyncRedisStorage>, Arc<Limit>),
}

impl Peer {
    /// One decision for `key`: `true` when admitted.
    async fn decide(&self, key: &str) -> anyhow::Result<bool> {
        match self {
            Peer::Floodgate(store, policy) => {
                let item = CheckItem {
                    rule: "peers",
                    policy,
                    key,
                    cost: 1,
                };
                Ok(store.check(&[item]).await?.allowed)
            }
            #[cfg(feature = "limitador")]
            Peer::Limitador(storage, limit) => {
                // What limitador's rate limiter hands its storage for one request.
                let ctx: Context = HashMap::from([("user".to_string(), key.to_string())]).into();
                let counter = Counter::new(limit.clone(), &ctx)
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .context("the limit applies")?;
                let mut counters = vec![counter];
                Ok(matches!(
                    storage
                        .check_and_update(&mut counters, 1)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                    Authorization::Ok
                ))
            }
        }
    }
}

/// limitador's Redis storage with one fixed-window limit per `user`.
#[cfg(feature = "limitador")]
async fn limitador_peer(url: &str) -> anyhow::Result<Peer> {
    let storage = AsyncRedisStorage::new(url).await?;
    let limit = Limit::new(
        "peers",
        1_000_000,
        60,
        Vec::<limitador::limit::Predicate>::new(),
        vec!["user".try_into()?],
    );
    Ok(Peer::Limitador(Arc::new(storage), Arc::new(limit)))
}

#[cfg(not(feature = "limitador"))]
async fn limitador_peer(_url: &str) -> anyhow::Result<Peer> {
    bail!("built without the limitador feature")
}

#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed time
#[tokio::main(worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [imp, url, clients, seconds, keys] = args.as_slice() else {
        bail!("usage: redis-peer IMPL URL CLIENTS SECONDS KEYS");
    };
    let clients: u64 = clients.parse().context("CLIENTS")?;
    let seconds: f64 = seconds.parse().context("SECONDS")?;
    let keys: u64 = keys.parse().context("KEYS")?;
    let peer = if let Some(alg) = imp.strip_prefix("floodgate:") {
        let kind: AlgorithmKind = alg.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut config = RedisStoreConfig::standalone(url.clone());
        config.timeout = Duration::from_secs(2);
        config.connect_timeout = Duration::from_secs(2);
        let store = RedisStore::new(config, Arc::new(SystemClock))?;
        store.startup_check().await?;
        // The probe: a quota whose state outlives the probe (at 1,000,000 per minute a GCRA
        // key is fresh again, and expires, 60 us after one admission).
        let quota = if clients == 0 {
            Quota::new(1, 60_000_000)?
        } else {
            Quota::new(1_000_000, 60_000_000)?
        };
        Peer::Floodgate(Arc::new(store), Arc::new(Policy::new(kind, quota)?))
    } else if cfg!(feature = "limitador") && imp == "limitador" {
        limitador_peer(url).await?
    } else {
        bail!("unknown IMPL {imp} (limitador: built without its feature)");
    };
    let peer = Arc::new(peer);
    if clients == 0 {
        for n in 0..keys {
            peer.decide(&format!("user:{n:06}")).await?;
        }
        println!("{}", serde_json::json!({ "total": keys }));
        return Ok(());
    }
    let next = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (peer, next, measuring, stop) =
            (peer.clone(), next.clone(), measuring.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut denied = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let key = format!("user:{:06}", n.wrapping_mul(2_654_435_761) % keys);
                let t = Instant::now();
                let admitted = peer.decide(&key).await?;
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(t.elapsed().as_micros() as u64);
                    denied += u64::from(!admitted);
                }
            }
            anyhow::Ok((latencies, denied))
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut denied = 0;
    for t in tasks {
        let (l, d) = t.await??;
        all.extend(l);
        denied += d;
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{}",
        serde_json::json!({
            "decisions": all.len(),
            "seconds": elapsed,
            "p50_us": pct(0.5),
            "p99_us": pct(0.99),
            "denied": denied,
            // Every decision made, warm-up included: Redis' counters cover them all.
            "total": next.load(Ordering::Relaxed),
        })
    );
    Ok(())
}
