//! Helpers shared by the Redis store's integration tests (`redis_*.rs`): policies and items,
//! store configurations, waits for an outside server, raw connections.
// Each test binary uses some of these helpers.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::redis::testing::RedisServer;
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::{CheckItem, Store};

pub const T0: u64 = 1_700_000_000_000_000;

pub fn policy(kind: AlgorithmKind, quota: &str) -> Policy {
    Policy::new(kind, quota.parse().unwrap()).unwrap()
}

pub fn item<'a>(rule: &'a str, policy: &'a Policy, key: &'a str, cost: u64) -> CheckItem<'a> {
    CheckItem {
        rule,
        policy,
        key,
        cost,
    }
}

/// Defaults with a generous timeout, for tests that are not about timeouts (the 50 ms default
/// can expire on a busy 2-core machine, e.g. while the first call connects).
pub fn slow_ok(server: &RedisServer) -> RedisStoreConfig {
    let mut config = RedisStoreConfig::standalone(server.url());
    config.timeout = Duration::from_secs(2);
    config
}

/// A store on `server` with call timeout `timeout`, already connected (the lazy connection is
/// made by the first call, here `startup_check`). Decisions use Redis' clock; the breaker uses
/// the returned manual clock (at `T0`) so the test controls its cool-down, also returned.
pub async fn breaker_store(
    server: &RedisServer,
    timeout: Duration,
) -> (RedisStore, Arc<ManualClock>, Duration) {
    let breaker_clock = Arc::new(ManualClock::new(T0));
    let mut config = RedisStoreConfig::standalone(server.url());
    config.timeout = timeout;
    let cool_down = config.breaker_cool_down;
    let store = RedisStore::new(config, breaker_clock.clone()).unwrap();
    store.startup_check().await.unwrap();
    (store, breaker_clock, cool_down)
}

/// Whether `store` admits a check of `item` again after its server came back (see
/// [`eventually`]; each attempt first advances the breaker clock by one cool-down, so an open
/// breaker lets one probe through).
pub async fn recovers(
    store: &RedisStore,
    item: CheckItem<'_>,
    breaker_clock: &ManualClock,
    cool_down: Duration,
    pause: Duration,
) -> bool {
    eventually(
        breaker_clock,
        cool_down.as_micros() as u64,
        pause,
        || async { store.check(&[item]).await.is_ok() },
    )
    .await
}

/// Whether `probe` comes true within 100 attempts after an outside event (a redis-server
/// process restarting): before each attempt advances `clock` by `step_us`, and between attempts
/// waits `pause` of real time, because the server is an outside process that our clock does
/// not drive. True at the first attempt that succeeds.
pub async fn eventually<F, Fut>(
    clock: &ManualClock,
    step_us: u64,
    pause: Duration,
    mut probe: F,
) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        clock.advance(step_us);
        if probe().await {
            return true;
        }
        tokio::time::sleep(pause).await;
    }
    false
}

/// The default breaker window, in µs of the breaker clock.
pub fn window_us() -> u64 {
    RedisStoreConfig::standalone("redis://unused")
        .breaker_window
        .as_micros() as u64
}

pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// `PTTL key`: milliseconds to live, -1 without expiry, -2 when absent.
pub async fn pttl(con: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(con).await.unwrap()
}

pub async fn all_keys(con: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(con).await.unwrap();
    keys.sort();
    keys
}

/// `calls` of `INFO commandstats` for `cmd` (e.g. "evalsha"), 0 when never called.
pub async fn command_calls(con: &mut redis::aio::MultiplexedConnection, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// The `kill -STOP` / `kill -CONT` of a test Redis.
pub fn signaller(server: &RedisServer) -> impl Fn(&str) {
    let info = server.cli(&["INFO", "server"]).unwrap();
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .to_string();
    move |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }
}

/// Waits (polling, up to 5 s of real time: the subscription is made by a background task on
/// a real server) until `store`'s deny cache has made `n` subscriptions and is live.
pub async fn deny_cache_subscribed(store: &RedisStore, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !(store.deny_cache_live() && store.deny_cache_subscriptions() >= n) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "deny cache not subscribed (subscription {n}) within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits (polling, up to 5 s) until `store`'s deny cache has received `n` invalidations.
pub async fn deny_cache_received(store: &RedisStore, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.deny_cache_invalidations() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "deny cache: {} of {n} invalidations within 5 s",
            store.deny_cache_invalidations()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
