//! The RedisStore deny cache against real redis-server processes started by each test: exact
//! answers without a round trip, and the commands a one-key flood costs.
#![cfg(feature = "testing")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, SystemClock};
use floodgate_store::redis::testing::{current_thread_runtime, multi_thread_runtime, RedisServer};
use floodgate_store::redis::{RedisStore, TimeSource};
use floodgate_store::Store;

use common::*;

/// The deny cache: after Redis denies a cost-1 check, later cost-1 checks of that key before
/// its `retry_after` are answered without a round trip and decide exactly like the memory
/// store (every number too), for every algorithm; a reset through this store invalidates it;
/// once `retry_after` has passed, Redis is asked again.
#[test]
fn the_deny_cache_answers_like_redis_without_a_round_trip() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let mut config = slow_ok(&server);
        config.time_source = TimeSource::Caller;
        config.ttl_extra = Duration::from_secs(3600);
        config.deny_cache = true;
        let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
        store.startup_check().await.unwrap();
        deny_cache_subscribed(&store, 1).await;
        let memory = floodgate_store::MemoryStore::with_clock(Arc::new(ManualClock::new(T0)));
        let mut con = raw(&server).await;
        // One clock for the whole test: a call at a `now` earlier than one the store has seen
        // bypasses the cache (a stale `now` is "no time passed" for its key).
        let mut t = T0;
        for kind in AlgorithmKind::ALL {
            let p = policy(kind, "3/s");
            let rule = format!("cache-{kind}");
            let batch = [item(&rule, &p, "k", 1)];
            // Used up, then denied once by Redis (cached).
            for _ in 0..4 {
                let got = store.check_at(&batch, t).await.unwrap();
                assert_eq!(got, memory.check_at(&batch, t).unwrap(), "{kind}");
            }
            let before = command_calls(&mut con, "evalsha").await;
            let mut hits = 0;
            // Denied from the cache, the numbers shortened by the time elapsed, until Redis
            // would admit again; then Redis decides (and admits).
            loop {
                t += 37_003;
                let want = memory.check_at(&batch, t).unwrap();
                let got = store.check_at(&batch, t).await.unwrap();
                assert_eq!(got, want, "{kind} at +{}", t - T0);
                if want.allowed {
                    break;
                }
                hits += 1;
            }
            let calls = command_calls(&mut con, "evalsha").await - before;
            assert!(hits >= 3, "{kind}: {hits}");
            assert_eq!(calls, 1, "{kind}: only the admission went to Redis");
            // Used up again and cached; a reset through the store forgets it.
            while store.check_at(&batch, t).await.unwrap().allowed {}
            assert!(store.reset(&rule, &p, "k").await.unwrap());
            memory.reset(&rule, &p, "k").await.unwrap();
            let got = store.check_at(&batch, t + 1).await.unwrap();
            assert!(got.allowed, "{kind}: reset, then admitted");
            assert_eq!(got, memory.check_at(&batch, t + 1).unwrap(), "{kind}");
            t += 1;
        }
    });
}

/// Redis commands under a one-key flood (one key used up, 20,000 cost-1 checks from one
/// client) with the deny cache off and on, on Redis' clock; printed for BENCHMARKS.md.
#[test]
fn the_deny_cache_under_a_one_key_flood() {
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let mut con = raw(&server).await;
        for on in [false, true] {
            let mut config = slow_ok(&server);
            config.deny_cache = on;
            let store = RedisStore::new(config, Arc::new(SystemClock)).unwrap();
            store.startup_check().await.unwrap();
            if on {
                deny_cache_subscribed(&store, 1).await;
            }
            // 10 per hour: no unit comes back during the run, however slow the machine.
            let p = policy(AlgorithmKind::Gcra, "10/h");
            let rule = format!("flood-{on}");
            let batch = [item(&rule, &p, "abuser", 1)];
            let before: u64 = redis::cmd("INFO")
                .arg("stats")
                .query_async::<String>(&mut con)
                .await
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let started = tokio::time::Instant::now();
            let mut denied = 0u64;
            for _ in 0..20_000 {
                denied += u64::from(!store.check(&batch).await.unwrap().allowed);
            }
            let secs = started.elapsed().as_secs_f64();
            let after: u64 = redis::cmd("INFO")
                .arg("stats")
                .query_async::<String>(&mut con)
                .await
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // The two INFO commands themselves are not counted.
            let commands = after - before - 1;
            assert_eq!(denied, 20_000 - 10, "deny cache {on}");
            if on {
                assert!(commands < 100, "{commands} commands with the cache on");
            }
            println!(
                "deny cache {}: 20000 checks of one key (10 admitted) in {:.2} s: {} Redis \
                 commands, {:.0} commands/s, {:.0} checks/s",
                if on { "on" } else { "off" },
                secs,
                commands,
                commands as f64 / secs,
                20_000.0 / secs
            );
        }
    });
}
