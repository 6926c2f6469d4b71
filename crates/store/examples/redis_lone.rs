//! Where a lone sequential client's time goes above the round trip, in counts that do not depend
//! on how busy the machine is: per decision, the context switches of this process's threads
//! (each is a thread that went to sleep waiting: a task hand-off between threads, or waiting for
//! Redis), the bytes Redis read and wrote, and Redis' own time in the script (`INFO
//! commandstats`, `usec_per_call`, which the load skews far less than wall time).
//!
//! Starts its own redis-server (see `floodgate_store::redis::testing`) and checks `N` keys one
//! after another through one `RedisStore` (GCRA, every check admitted), after a warm-up of
//! 1,000 checks. Run with
//!
//! ```text
//! cargo run --release -p floodgate-store --features redis --example redis_lone -- [N] [WORKERS]
//! ```
//!
//! `COALESCE=N` sets `RedisStoreConfig::coalesce` (0: off). `REDIS_URL=redis://...` uses a running server instead of starting one. `N` defaults to 20,000 and `WORKERS` (tokio worker threads) to 2. For the system calls per
//! decision, run it twice under `strace -f -c -o FILE` with two values of `N` and divide the
//! difference of the counts by the difference of `N`s; for instructions, the same under
//! `valgrind --tool=callgrind` (see BENCHMARKS.md, "Weakness 2").

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Policy, SystemClock};
use floodgate_store::redis::testing::RedisServer;
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::{CheckItem, Store};

/// Voluntary and involuntary context switches of every thread of this process so far.
fn context_switches() -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return total;
    };
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let value = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            };
            if line.starts_with("voluntary_ctxt_switches") {
                total.0 += value(line).unwrap_or(0);
            } else if line.starts_with("nonvoluntary_ctxt_switches") {
                total.1 += value(line).unwrap_or(0);
            }
        }
    }
    total
}

/// A field of `INFO <section>` as a number (`name:value` lines), or of a `cmdstat_` line's
/// `key=value` list.
fn info_field(info: &str, line_start: &str, key: Option<&str>) -> f64 {
    for line in info.lines() {
        let Some(rest) = line.strip_prefix(line_start) else {
            continue;
        };
        let rest = rest.trim_start_matches(':');
        return match key {
            None => rest.trim().parse().unwrap_or(0.0),
            Some(k) => rest
                .split(',')
                .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
        };
    }
    0.0
}

async fn info(con: &mut redis::aio::MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("all")
        .query_async(con)
        .await
        .expect("INFO")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let checks: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let workers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(checks));
}

async fn run(checks: u64) {
    // `REDIS_URL` names a running server instead (so that `strace -f` counts this process only).
    let server = match std::env::var("REDIS_URL") {
        Ok(_) => None,
        Err(_) => Some(RedisServer::start().expect("start redis-server")),
    };
    let url = std::env::var("REDIS_URL")
        .unwrap_or_else(|_| server.as_ref().map(RedisServer::url).unwrap_or_default());
    let mut config = RedisStoreConfig::standalone(url.clone());
    config.timeout = Duration::from_secs(1);
    // `COALESCE=0` turns the coalescer off (each check its own `batch.lua` call).
    if let Some(n) = std::env::var("COALESCE").ok().and_then(|v| v.parse().ok()) {
        config.coalesce = n;
    }
    let store = Arc::new(RedisStore::new(config, Arc::new(SystemClock)).expect("store"));
    store.startup_check().await.expect("redis answers");
    let mut con = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let policy = Policy::new(AlgorithmKind::Gcra, "1000000/s".parse().expect("quota")).expect("ok");
    // One client task, as the bench's sequential client (and a request handler) runs.
    let client = {
        let store = Arc::clone(&store);
        move |from: u64, n: u64| {
            let store = Arc::clone(&store);
            let policy = policy.clone();
            tokio::spawn(async move {
                for n in from..from + n {
                    let key = format!("user:{:06}", n.wrapping_mul(2_654_435_761) % 100_000);
                    let item = CheckItem {
                        rule: "bench",
                        policy: &policy,
                        key: &key,
                        cost: 1,
                    };
                    let d = store.check(&[item]).await.expect("decided");
                    assert!(d.allowed);
                }
            })
        }
    };
    // Warm-up, then one sequential client.
    client(0, 1_000).await.expect("task");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut con)
        .await
        .expect("RESETSTAT");
    let before_info = info(&mut con).await;
    let before = context_switches();
    client(1_000, checks).await.expect("task");
    let after = context_switches();
    let after_info = info(&mut con).await;
    let per = |x: f64| x / checks as f64;
    let field = |i: &str, name: &str, key: Option<&str>| info_field(i, name, key);
    let delta = |name: &str| field(&after_info, name, None) - field(&before_info, name, None);
    println!("checks: {checks}");
    println!(
        "context switches per decision: voluntary {:.3}, involuntary {:.3}",
        per((after.0 - before.0) as f64),
        per((after.1 - before.1) as f64)
    );
    for cmd in ["evalsha", "eval", "time"] {
        let line = format!("cmdstat_{cmd}");
        let calls = field(&after_info, &line, Some("calls"));
        if calls > 0.0 {
            println!(
                "redis {cmd}: calls per decision {:.3}, usec_per_call {:.2}",
                per(calls),
                field(&after_info, &line, Some("usec_per_call"))
            );
        }
    }
    println!(
        "redis bytes per decision: read {:.1}, written {:.1}",
        per(delta("total_net_input_bytes")),
        per(delta("total_net_output_bytes"))
    );
}
