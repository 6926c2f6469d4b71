//! One load run of Redis-backed decisions for `scripts/peers`: Floodgate's `RedisStore` (or
//! its engine, `RateLimiter`, over it, with or without a quota lease) or limitador's
//! `AsyncRedisStorage`, driven by the same closed loop as the Node and Python drivers beside it.
//!
//! ```text
//! redis-peer IMPL URL CLIENTS SECONDS KEYS
//!   IMPL     floodgate:<algorithm> (fixed_window, sliding_log, sliding_window, gcra, ...):
//!            the store's check, one script call per decision;
//!            floodgate-engine:<algorithm>[:lease=<ms>]: RateLimiter::evaluate over the store,
//!            one rule (with a lease of <ms> ms, a tenth of the capacity at most, as
//!            `floodgate bench --what redis`'s hot-key rows; the leases are returned before
//!            exit, so their calls are counted);
//!            or limitador (fixed window counters)
//!   CLIENTS  concurrent callers (1 = one sequential client), sharing one client object;
//!            0 = probe: one decision on each of KEYS distinct keys, then exit (for
//!            MEMORY USAGE per key)
//!   SECONDS  length of the measured run (after 0.2 s of warm-up)
//!   KEYS     distinct keys `user:NNNNNN`, visited in a fixed scrambled order
//! ```
//!
//! Prints one JSON line: `{"decisions": n, "seconds": s, "p50_us": .., "p99_us": ..,
//! "denied": n, "store_errors": n, "total": n}` (`total`: every decision made, warm-up
//! included; `store_errors`: measured decisions whose store call failed, which the engine
//! admits by its failure mode: counted apart, neither admitted nor denied). Quota: 1,000,000 per 60 s
//! per key, so every decision admits and writes (`floodgate-engine`: 100,000,000 per 60 s, so
//! that a leased hot key stays far from its limit too); the probe uses 1 per 60 s, so that
//! every algorithm's state outlives it.

#[cfg(feature = "limitador")]
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use floodgate_core::{AlgorithmKind, Policy, Quota, SystemClock};
use floodgate_limiter::{KeySource, Lease, Mode, Plan, RateLimiter, Rule, RuleSet};
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
    Engine(RateLimiter<RedisStore>),
    #[cfg(feature = "limitador")]
    Limitador(Arc<AsyncRedisStorage>, Arc<Limit>),
}

impl Peer {
    /// One decision for `key`: `Some(true)` when admitted, `None` when the engine's store call
    /// failed (counted apart, neither admitted nor denied).
    async fn decide(&self, key: &str) -> anyhow::Result<Option<bool>> {
        match self {
            Peer::Floodgate(store, policy) => {
                let item = CheckItem {
                    rule: "peers",
                    policy,
                    key,
                    cost: 1,
                };
                Ok(Some(store.check(&[item]).await?.allowed))
            }
            Peer::Engine(limiter) => {
                let mut plan = Plan::new(limiter.rules());
                plan.push(0, key.to_string(), 1);
                let verdict = limiter.evaluate(&plan, Mode::Check).await;
                if verdict.store_error.is_some() {
                    return Ok(None);
                }
                Ok(Some(verdict.is_admitted()))
            }
            #[cfg(feature = "limitador")]
            Peer::Limitador(storage, limit) => {
                // What limitador's rate limiter hands its storage for one request.
                let ctx: Context = HashMap::from([("user".to_string(), key.to_string())]).into();
                let counter = Counter::new(limit.clone(), &ctx)
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .context("the limit applies")?;
                let mut counters = vec![counter];
                Ok(Some(matches!(
                    storage
                        .check_and_update(&mut counters, 1)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                    Authorization::Ok
                )))
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

/// Floodgate's engine over its Redis store: `spec` is `<algorithm>[:lease=<ms>]`.
async fn engine_peer(spec: &str, url: &str, clients: u64) -> anyhow::Result<Peer> {
    let (alg, lease_ms) = match spec.split_once(':') {
        Some((alg, lease)) => {
            let ms = lease
                .strip_prefix("lease=")
                .context("floodgate-engine:<algorithm>[:lease=<ms>]")?;
            (alg, Some(ms.parse::<u64>().context("lease=<ms>")?))
        }
        None => (spec, None),
    };
    let kind: AlgorithmKind = alg.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = Arc::new(redis_store(url).await?);
    let quota = if clients == 0 {
        Quota::new(1, 60_000_000)?
    } else {
        Quota::new(100_000_000, 60_000_000)?
    };
    let policy = Policy::new(kind, quota)?;
    let rule = Rule::new("peers", policy.clone(), KeySource::Constant("all".into()));
    let rule = match lease_ms {
        Some(ms) => rule.with_lease(Lease::new(ms * 1000, &policy, 0.1)?),
        None => rule,
    };
    Ok(Peer::Engine(RateLimiter::new(
        store,
        RuleSet::new(vec![rule]),
    )))
}

/// Floodgate's Redis store at `url`, checked.
async fn redis_store(url: &str) -> anyhow::Result<RedisStore> {
    let mut config = RedisStoreConfig::standalone(url.to_string());
    config.timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    let store = RedisStore::new(config, Arc::new(SystemClock))?;
    store.startup_check().await?;
    Ok(store)
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
    let peer = if let Some(spec) = imp.strip_prefix("floodgate-engine:") {
        engine_peer(spec, url, clients).await?
    } else if let Some(alg) = imp.strip_prefix("floodgate:") {
        let kind: AlgorithmKind = alg.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let store = redis_store(url).await?;
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
        if let Peer::Engine(limiter) = &*peer {
            limiter.return_leases().await;
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
            let (mut denied, mut errors) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let key = format!("user:{:06}", n.wrapping_mul(2_654_435_761) % keys);
                let t = Instant::now();
                let admitted = peer.decide(&key).await?;
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(t.elapsed().as_micros() as u64);
                    match admitted {
                        Some(a) => denied += u64::from(!a),
                        None => errors += 1,
                    }
                }
            }
            anyhow::Ok((latencies, denied, errors))
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
    let (mut denied, mut errors) = (0, 0);
    for t in tasks {
        let (l, d, e) = t.await??;
        all.extend(l);
        denied += d;
        errors += e;
    }
    if let Peer::Engine(limiter) = &*peer {
        // The units the lease still holds go back: their calls belong to the run.
        limiter.return_leases().await;
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
            "store_errors": errors,
            // Every decision made, warm-up included: Redis' counters cover them all.
            "total": next.load(Ordering::Relaxed),
        })
    );
    Ok(())
}
