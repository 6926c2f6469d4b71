//! `--what redis`, hot key: 64 concurrent clients checking ONE key through the engine
//! (`RateLimiter`) on the memory store, and on the Redis store without and with a quota lease
//! (`docs/spec/leases.md`): decisions per second, Redis script calls per decision (`INFO
//! commandstats`: `EVALSHA` and `EVAL`), admitted against the exact count (every check fits
//! the quota, so the exact algorithm admits all of them) and the lease's bound. Keys under the
//! prefix `fh:`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::{AlgorithmKind, Policy, Quota, SystemClock};
use floodgate_limiter::{KeySource, Lease, Mode, Plan, RateLimiter, Rule, RuleSet};
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::{MemoryStore, Store};
use serde_json::Value;

use super::report::{num, Section};

/// Concurrent clients on the hot key.
const CLIENTS: usize = 64;

/// Script calls (`EVALSHA`, `EVAL`: every decision, reservation and settle of the store)
/// since the last `CONFIG RESETSTAT`.
async fn calls(con: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| l.starts_with("evalsha:") || l.starts_with("eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// One run of `time`: decisions per second, admitted, decisions.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed time
async fn run_one<S: Store + 'static>(
    limiter: &RateLimiter<S>,
    time: Duration,
) -> anyhow::Result<(f64, u64, u64)> {
    let (admitted, decided) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (limiter, admitted, decided) = (limiter.clone(), admitted.clone(), decided.clone());
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < time {
                let mut plan = Plan::new(limiter.rules());
                plan.push(0, "hot".into(), 1);
                let verdict = limiter.evaluate(&plan, Mode::Check).await;
                decided.fetch_add(1, Ordering::Relaxed);
                if verdict.is_admitted() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    limiter.return_leases().await;
    let decided = decided.load(Ordering::Relaxed);
    Ok((
        decided as f64 / elapsed,
        admitted.load(Ordering::Relaxed),
        decided,
    ))
}

/// [`run_one`] on the Redis store: also Redis calls per decision.
async fn run_redis(
    limiter: &RateLimiter<RedisStore>,
    con: &mut redis::aio::MultiplexedConnection,
    time: Duration,
) -> anyhow::Result<(f64, f64, u64, u64)> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(con)
        .await?;
    let (rate, admitted, decided) = run_one(limiter, time).await?;
    let calls = calls(con).await?;
    let per = if decided == 0 {
        f64::NAN
    } else {
        calls as f64 / decided as f64
    };
    Ok((rate, per, admitted, decided))
}

/// The hot-key section for the Redis at `url`, each row running `time`.
///
/// # Errors
/// When the runtime cannot start or Redis fails.
pub(crate) fn run(url: &str, time: Duration) -> anyhow::Result<Section> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(section(url, time))
}

/// The hot-key section: a row on the memory store, and rows on Redis without and with a lease
/// of 20 ms (a tenth of the burst).
async fn section(url: &str, time: Duration) -> anyhow::Result<Section> {
    let mut section = Section::new(
        "redis_hot_key",
        format!("Redis store at {url}: one hot key, 64 concurrent clients, through the engine"),
        &[
            "rule",
            "decisions/s",
            "Redis calls per decision",
            "admitted",
            "exact count",
            "bound (units beyond exact, one instance)",
            "decisions/s with / without lease",
            "decisions/s against the memory store's",
        ],
    );
    let mut config = RedisStoreConfig::standalone(url.to_string());
    config.prefix = "fh:".into();
    config.timeout = Duration::from_secs(1);
    let store = Arc::new(RedisStore::new(config, Arc::new(SystemClock))?);
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    // Far above what 64 clients reach: the exact algorithm admits every check.
    let policy = Policy::new(
        AlgorithmKind::TokenBucket,
        Quota::new(100_000_000, 1_000_000)?,
    )?;
    let lease = Lease::new(20_000, &policy, 0.1)?;
    let name = "hot, memory store";
    let memory = Arc::new(MemoryStore::with_clock(Arc::new(SystemClock)));
    let rule = Rule::new(name, policy.clone(), KeySource::Constant("all".into()));
    let limiter = RateLimiter::new(memory, RuleSet::new(vec![rule]));
    let (in_memory, admitted, decided) = run_one(&limiter, time).await?;
    section.row(vec![
        Value::from(name),
        num(in_memory, 0),
        Value::from("-"),
        Value::from(admitted),
        Value::from(decided),
        Value::from(0),
        Value::from("-"),
        num(1.0, 2),
    ]);
    let mut without = f64::NAN;
    for (name, lease) in [("hot, no lease", None), ("hot, lease 20ms", Some(lease))] {
        let rule = Rule::new(name, policy.clone(), KeySource::Constant("all".into()));
        let rule = match lease {
            Some(l) => rule.with_lease(l),
            None => rule,
        };
        let limiter = RateLimiter::new(Arc::clone(&store), RuleSet::new(vec![rule]));
        let (rate, per, admitted, decided) = run_redis(&limiter, &mut con, time).await?;
        if lease.is_none() {
            without = rate;
        }
        section.row(vec![
            Value::from(name),
            num(rate, 0),
            num(per, 4),
            Value::from(admitted),
            Value::from(decided),
            lease.map_or(Value::from(0), |l| Value::from(l.bound(&policy, 1))),
            num(rate / without, 2),
            num(rate / in_memory, 2),
        ]);
    }
    section.note(
        "Every row: 64 tasks check one key of a token bucket 100000000/s (every check fits, so \
         the exact count is every decision) through RateLimiter (on the memory store, then on the \
         Redis store) for the run time; Redis calls from INFO commandstats (CONFIG RESETSTAT before each row), the \
         leases returned before counting. With the lease each instance takes up to a tenth of \
         the burst per store call, sized from its own rate over the last lease.",
    );
    Ok(section)
}
