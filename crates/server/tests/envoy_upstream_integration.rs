//! The behavioural part of envoyproxy/ratelimit's `test/integration/integration_test.go`
//! (commit f2fb15770f7fd1c88ca6c3a1b58ee513917ace96, its runtime directory in
//! `tests/fixtures/envoyproxy-ratelimit/integration/`), run against `floodgate serve
//! --envoy-ratelimit-env` with upstream's environment variables and real redis-servers:
//!
//! - `testBasicBaseConfig` (several descriptors, request `hits_addend`, statuses, the stats
//!   counters as `floodgate_decisions_total{rule, outcome}`, `duration_until_reset` counting
//!   down) in `TestBasicConfig`'s variants: without and with `REDIS_PERSECOND` (the per-second
//!   counters land on the second Redis, the others on the first), with `CACHE_KEY_PREFIX`,
//!   with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`; `TestBasicAuthConfig` (`REDIS_AUTH`,
//!   `REDIS_PERSECOND_AUTH` on servers with `requirepass`);
//!   `TestBasicAuthConfigWithRedisSentinel` (`REDIS_TYPE=sentinel`, `REDIS_AUTH` for the
//!   master, `REDIS_SENTINEL_AUTH` for the sentinel);
//! - `TestBasicReloadConfig` (a file added to the runtime directory and removed again, each a
//!   reload counted in `floodgate_config_reloads_total{result="ok"}`);
//! - `TestShareThreshold`;
//! - `TestBasicAuthConfigWithRedisCluster/WithPerSecondRedis` (two real Redis Clusters,
//!   without passwords) and `TestBasicTLSConfig/WithPerSecondRedisTLS` (`REDIS_TLS`,
//!   `REDIS_PERSECOND_TLS`, `REDIS_TLS_CACERT`).
//!
//! One expectation differs by design (docs/envoy.md, "envoyproxy/ratelimit's integration
//! suite"): in `testBasicBaseConfig`'s two-descriptor loop a request refused by `key3` charges
//! nothing under `key2` (all or nothing), so `key2`'s `limit_remaining` stays 10 and its
//! refused requests are not counted, which is what upstream expects only with
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`. The local cache variants are not run
//! (`LOCAL_CACHE_SIZE_IN_BYTES` is the deny cache, tested in `denycache.rs` and the store's
//! `redis_deny_cache_shared.rs`; they assert upstream's `ratelimit.localcache.*` gauges), nor memcache, xDS and `EXTRA_TAGS`
//! (refused at start, named). The clock is the manual one (`--manual-clock`): upstream's
//! `time.Sleep(2 * time.Second)` is an advance of 2 s.

mod envoy_env_support;
mod serve_support;

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_env_support::{EnvMode, Runtime};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use floodgate_store::redis::testing::{RedisCluster, RedisSentinel, RedisServer, TestCerts};
use serde_json::json;
use serve_support::{client, START_US};
use tonic::transport::Channel;

const BASIC: &str = include_str!("fixtures/envoyproxy-ratelimit/integration/config/basic.yaml");
const ANOTHER: &str = include_str!("fixtures/envoyproxy-ratelimit/integration/config/another.yaml");
const SHARE: &str =
    include_str!("fixtures/envoyproxy-ratelimit/integration/config/share_threshold.yaml");
const RELOAD: &str = include_str!("fixtures/envoyproxy-ratelimit/integration/reload.yaml");

/// upstream's `password123`.
const PASSWORD: &str = "password123";

/// The runtime directory of upstream's integration tests.
fn runtime() -> Runtime {
    Runtime::new(&[
        ("basic.yaml", BASIC),
        ("another.yaml", ANOTHER),
        ("share_threshold.yaml", SHARE),
    ])
}

/// The process on `vars`, on the manual clock, watching its runtime directory every 100 ms.
fn start(runtime: &Runtime, vars: &BTreeMap<String, String>) -> EnvMode {
    EnvMode::start(
        vars,
        &[
            "--manual-clock",
            &START_US.to_string(),
            "--watch-interval",
            "100ms",
        ],
        runtime.path().join("floodgate.log"),
    )
}

/// A running process and a gRPC client of it.
struct Rls {
    fg: EnvMode,
    c: RateLimitServiceClient<Channel>,
    http: reqwest::Client,
}

impl Rls {
    /// Connects once `/readyz` says the store (every Redis of it) answers: the first
    /// decisions would otherwise follow the failure mode while a sentinel is asked.
    async fn connect(fg: EnvMode) -> Self {
        let http = client();
        // Bounded: 100 polls of 100 ms.
        for attempt in 0.. {
            let r = http.get(format!("{}/readyz", fg.url("API"))).send().await;
            if r.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(attempt < 100, "the store is not ready\n{}", fg.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let c = RateLimitServiceClient::connect(fg.url("gRPC").to_string())
            .await
            .unwrap();
        Self { fg, c, http }
    }

    /// `common.NewRateLimitRequest(domain, descriptors, hits_addend)`.
    async fn call(
        &mut self,
        domain: &str,
        descriptors: &[&[(&str, &str)]],
        hits: u32,
    ) -> RateLimitResponse {
        let descriptors = descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).into(),
                        value: (*v).into(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect();
        let request = RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: hits,
        };
        self.c
            .should_rate_limit(request)
            .await
            .unwrap_or_else(|e| panic!("{domain}: {e}\n{}", self.fg.logs()))
            .into_inner()
    }

    /// The sum of the samples of `name` carrying every `label="value"` of `labels`.
    async fn series(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = self
            .http
            .get(format!("{}/metrics", self.fg.url("API")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// upstream's `<domain>.<key>.total_hits` and `.over_limit`: the decisions counted under
    /// the rule (named by its path, as upstream's stats key) and the denied ones.
    async fn hits(&self, rule: &str) -> (f64, f64) {
        let total = self
            .series("floodgate_decisions_total", &[("rule", rule)])
            .await;
        let over = self
            .series(
                "floodgate_decisions_total",
                &[("rule", rule), ("outcome", "denied")],
            )
            .await;
        (total, over)
    }

    async fn advance(&self, micros: u64) {
        let r = self
            .http
            .post(format!("{}/v1/debug/clock/advance", self.fg.url("API")))
            .json(&json!({ "micros": micros }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

/// `newDescriptorStatus(code, requests_per_unit, unit, limit_remaining, duration)` with the
/// answer's own duration, as upstream compares them.
fn status(
    code: Code,
    rpu: u32,
    unit: Unit,
    remaining: u32,
    got: &DescriptorStatus,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            requests_per_unit: rpu,
            unit: unit as i32,
            ..RateLimit::default()
        }),
        limit_remaining: remaining,
        duration_until_reset: got.duration_until_reset,
        ..DescriptorStatus::default()
    }
}

/// `assert.Equal(expected, response)` on the overall code and every status.
fn assert_response(got: &RateLimitResponse, code: Code, statuses: &[DescriptorStatus], step: &str) {
    assert_eq!(got.overall_code, code as i32, "{step}: {got:?}");
    assert_eq!(got.statuses, statuses, "{step}");
}

/// A value no earlier run has used (upstream's `rand.Int()`): the test's own counter keys.
fn fresh(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

// Over 120 lines: one scenario, upstream's `testBasicBaseConfig` step by step (its counters
// carry over from step to step).
/// upstream's `testBasicBaseConfig`.
async fn basic_base_config(rls: &mut Rls) {
    // An unknown domain: OK with no limit.
    let r = rls.call("foo", &[&[("hello", "world")]], 1).await;
    assert_response(
        &r,
        Code::Ok,
        &[DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        }],
        "foo",
    );

    let r = rls.call("basic", &[&[("key1", "foo")]], 1).await;
    let want = status(Code::Ok, 50, Unit::Second, 49, &r.statuses[0]);
    assert_response(&r, Code::Ok, &[want], "basic key1");
    assert_eq!(rls.hits("basic.key1").await, (1.0, 0.0));

    // Over the limit of a minute, which always works.
    let value = fresh("key2");
    for i in 0..25u32 {
        let r = rls.call("another", &[&[("key2", &value)]], 1).await;
        let (code, remaining) = if i >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (i + 1))
        };
        let want = status(code, 20, Unit::Minute, remaining, &r.statuses[0]);
        assert_response(&r, code, &[want], &format!("key2 #{i}"));
        let over = f64::from(i.saturating_sub(19));
        assert_eq!(
            rls.hits("another.key2").await,
            (f64::from(i + 1), over),
            "key2 #{i}"
        );
    }

    // Two keys of one domain.
    let value = fresh("key23");
    for i in 0..15u32 {
        let r = rls
            .call("another", &[&[("key2", &value)], &[("key3", &value)]], 1)
            .await;
        let (code, remaining2) = if i >= 10 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 10 - (i + 1))
        };
        // Deliberate (all or nothing): a request key3 refuses charges nothing under key2,
        // which upstream expects only with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true.
        let remaining1 = if i >= 10 { 10 } else { 20 - (i + 1) };
        let want = [
            status(Code::Ok, 20, Unit::Minute, remaining1, &r.statuses[0]),
            status(code, 10, Unit::Hour, remaining2, &r.statuses[1]),
        ];
        assert_response(&r, code, &want, &format!("key2+key3 #{i}"));
        // Every request is counted under both rules; key2 refused none of them.
        assert_eq!(
            rls.hits("another.key2").await,
            (f64::from(i + 26), 5.0),
            "#{i}"
        );
        let over3 = f64::from(i.saturating_sub(9));
        assert_eq!(
            rls.hits("another.key3").await,
            (f64::from(i + 1), over3),
            "#{i}"
        );
    }

    // DurationUntilReset counts down: the same key twice, 2 s apart.
    let first = rls.call("another", &[&[("key4", "durTest")]], 1).await;
    rls.advance(2_000_000).await;
    let second = rls.call("another", &[&[("key4", "durTest")]], 1).await;
    let secs = |r: &RateLimitResponse| r.statuses[0].duration_until_reset.unwrap().seconds;
    assert!(secs(&second) < secs(&first), "{first:?} then {second:?}");

    // hits_addend: a request of 5 takes 5 (20 per day, 1 taken above); 0 is read as 1.
    let r = rls.call("another", &[&[("key4", "durTest")]], 5).await;
    assert_eq!(r.statuses[0].limit_remaining, 13, "{r:?}");
    let r = rls.call("another", &[&[("key4", "durTest")]], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 12, "{r:?}");
}

/// The counters (not the shared reservation secret, `<prefix>secret:reservation`) under
/// `prefix` in `redis`, asked with `auth` when given.
fn counters(redis: &RedisServer, prefix: &str, auth: Option<&str>) -> usize {
    let mut args = Vec::new();
    if let Some(pw) = auth {
        args.extend(["--no-auth-warning", "-a", pw]);
    }
    let pattern = format!("{prefix}*");
    args.extend(["--scan", "--pattern", &pattern]);
    let keys = redis.cli(&args).unwrap();
    keys.lines()
        .filter(|k| !k.is_empty() && !k[prefix.len()..].contains(':'))
        .count()
}

/// `INFO stats`' `expired_keys` of `redis`.
fn expired(redis: &RedisServer, auth: Option<&str>) -> usize {
    let mut args = Vec::new();
    if let Some(pw) = auth {
        args.extend(["--no-auth-warning", "-a", pw]);
    }
    args.extend(["INFO", "stats"]);
    let info = redis.cli(&args).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("expired_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// `TestBasicConfig/WithPerSecondRedis` and `TestBasicAuthConfig/WithPerSecondRedisAuth`: the
/// scenario on two Redis servers; key1 (a second) counted on the per-second one only, key2,
/// key3 and key4 (minute, hour, day) on the main one only.
async fn with_per_second_redis(auth: Option<&str>) {
    let args: &[&str] = match auth {
        Some(pw) => &["--requirepass", pw],
        None => &[],
    };
    let (main, per_second) = (
        RedisServer::start_with_args(args).unwrap(),
        RedisServer::start_with_args(args).unwrap(),
    );
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", main.port()));
    vars.insert("REDIS_PERSECOND".into(), "true".into());
    vars.insert(
        "REDIS_PERSECOND_URL".into(),
        format!("127.0.0.1:{}", per_second.port()),
    );
    if let Some(pw) = auth {
        vars.insert("REDIS_AUTH".into(), pw.into());
        vars.insert("REDIS_PERSECOND_AUTH".into(), pw.into());
    }
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    basic_base_config(&mut rls).await;
    // key1's counter (1 s windows: it may have expired already, counted then in
    // expired_keys) is the per-second server's only key; the main one holds the four others.
    let fast = counters(&per_second, "rl_", auth) + expired(&per_second, auth);
    assert_eq!(fast, 1, "per-second server\n{}", rls.fg.logs());
    assert_eq!(counters(&main, "rl_", auth), 4, "main server");
    assert_eq!(expired(&main, auth), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_config_without_per_second_redis() {
    let redis = RedisServer::start().unwrap();
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port()));
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    basic_base_config(&mut rls).await;
    assert!(
        counters(&redis, "rl_", None) >= 4,
        "counters under CACHE_KEY_PREFIX"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_config_with_per_second_redis() {
    with_per_second_redis(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_auth_config_with_per_second_redis_auth() {
    with_per_second_redis(Some(PASSWORD)).await;
}

/// `WithoutPerSecondRedisWithCachePrefix` and
/// `WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig`: the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_config_with_cache_prefix_and_stop_cache_key_increment_when_overlimit() {
    let redis = RedisServer::start().unwrap();
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port()));
    vars.insert("CACHE_KEY_PREFIX".into(), "prefix:".into());
    vars.insert(
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT".into(),
        "true".into(),
    );
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    basic_base_config(&mut rls).await;
    let keys = redis.cli(&["--scan", "--pattern", "prefix:*"]).unwrap();
    assert!(keys.lines().count() >= 4, "{keys}");
    assert_eq!(counters(&redis, "rl_", None), 0);
}

/// `TestBasicAuthConfigWithRedisSentinel/WithoutPerSecondRedisAuth`: the master asks for
/// `REDIS_AUTH`, the sentinel for `REDIS_SENTINEL_AUTH` (upstream's sentinels have none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_auth_config_with_redis_sentinel() {
    let master = RedisServer::start_with_args(&["--requirepass", PASSWORD]).unwrap();
    let sentinel =
        RedisSentinel::start_with_auth(master.port(), Some(PASSWORD), Some("sentinel-pw")).unwrap();
    let runtime = runtime();
    let mut vars = runtime.vars();
    let sentinel_addr = sentinel.url().trim_start_matches("redis://").to_string();
    vars.insert("REDIS_TYPE".into(), "sentinel".into());
    vars.insert(
        "REDIS_URL".into(),
        format!("{},{sentinel_addr}", RedisSentinel::MASTER_NAME),
    );
    vars.insert("REDIS_AUTH".into(), PASSWORD.into());
    vars.insert("REDIS_SENTINEL_AUTH".into(), "sentinel-pw".into());
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    basic_base_config(&mut rls).await;
    // The counters are the master's: the store authenticated to it.
    assert!(
        counters(&master, "rl_", Some(PASSWORD)) >= 4,
        "{}",
        rls.fg.logs()
    );
    assert_eq!(rls.series("floodgate_store_errors_total", &[]).await, 0.0);
}

/// `TestBasicReloadConfig/ReloadWithoutWatchRoot`: a file added to the runtime directory is
/// loaded; its removal is a reload too. A reload of the runtime directory changes no
/// `[store]` setting, and says none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_reload_config() {
    let redis = RedisServer::start().unwrap();
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port()));
    vars.insert("RUNTIME_WATCH_ROOT".into(), "false".into());
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    let r = rls.call("reload", &[&[("block", "foo")]], 1).await;
    let ok = DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    };
    assert_response(&r, Code::Ok, &[ok], "before the reload");

    let reloads = ("floodgate_config_reloads_total", &[("result", "ok")][..]);
    let before = rls.series(reloads.0, reloads.1).await;
    std::fs::write(runtime.file("reload.yaml"), RELOAD).unwrap();
    wait_for_config_reload(&rls, before).await;
    let r = rls.call("reload", &[&[("key1", "foo")]], 1).await;
    let want = status(Code::Ok, 50, Unit::Second, 49, &r.statuses[0]);
    assert_response(&r, Code::Ok, &[want], "after the reload");
    let r = rls.call("reload", &[&[("block", "foo")]], 1).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32, "block: {r:?}");

    // Removal of config files must trigger a reload.
    let before = rls.series(reloads.0, reloads.1).await;
    std::fs::remove_file(runtime.file("reload.yaml")).unwrap();
    wait_for_config_reload(&rls, before).await;
    let r = rls.call("reload", &[&[("key1", "foo")]], 1).await;
    assert_eq!(r.statuses[0].current_limit, None, "{r:?}");
    let logs = rls.fg.logs();
    assert!(logs.contains("configuration reloaded"), "{logs}");
    assert!(!logs.contains("take effect at the next restart"), "{logs}");
}

/// upstream's `waitForConfigReload`: until `floodgate_config_reloads_total{result="ok"}` is
/// above `before`. Bounded: 300 polls of 100 ms (the watch interval is 100 ms).
async fn wait_for_config_reload(rls: &Rls, before: f64) {
    for attempt in 0.. {
        let now = rls
            .series("floodgate_config_reloads_total", &[("result", "ok")])
            .await;
        if now > before {
            return;
        }
        assert!(attempt < 300, "not reloaded\n{}", rls.fg.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `TestShareThreshold`: the values under `files/*` share one counter; those under
/// `files_no_share/*` have one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_share_threshold() {
    let redis = RedisServer::start().unwrap();
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port()));
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    let domain = "share-threshold-test";
    for i in 0..10 {
        let r = rls.call(domain, &[&[("files", "files/a.pdf")]], 1).await;
        assert_eq!(r.overall_code, Code::Ok as i32, "request {i}: {r:?}");
    }
    let r = rls.call(domain, &[&[("files", "files/b.csv")]], 1).await;
    let want = status(Code::OverLimit, 10, Unit::Hour, 0, &r.statuses[0]);
    assert_response(&r, Code::OverLimit, &[want], "files/b.csv");
    for i in 0..10 {
        let value = format!("files_no_share/{}", fresh("value"));
        let r = rls.call(domain, &[&[("files_no_share", &value)]], 1).await;
        let want = status(Code::Ok, 10, Unit::Hour, 9, &r.statuses[0]);
        assert_response(&r, Code::Ok, &[want], &format!("no share {i}"));
    }
}

/// `LIMIT_RESPONSE_HEADERS_ENABLED` (upstream's `service_test.go` behaviour, not its
/// integration file): the descriptor closest to its limit gives `RateLimit-Limit`,
/// `-Remaining` (here renamed by `LIMIT_REMAINING_HEADER`) and `-Reset`, beside Floodgate's own
/// headers; an over-limit descriptor is chosen over any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_response_headers_enabled_names_the_descriptor_closest_to_its_limit() {
    let redis = RedisServer::start().unwrap();
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port()));
    vars.insert("LIMIT_RESPONSE_HEADERS_ENABLED".into(), "true".into());
    vars.insert("LIMIT_REMAINING_HEADER".into(), "X-Left".into());
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    let header = |r: &RateLimitResponse, name: &str| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
    };
    let value = fresh("headers");
    let both: &[&[(&str, &str)]] = &[&[("key2", &value)], &[("key3", &value)]];
    // key2: 20 per minute, 19 left; key3: 10 per hour, 9 left (at the hour's first instant).
    let r = rls.call("another", both, 1).await;
    assert_eq!(
        header(&r, "ratelimit-limit").as_deref(),
        Some("10"),
        "{r:?}"
    );
    assert_eq!(header(&r, "x-left").as_deref(), Some("9"));
    assert_eq!(header(&r, "ratelimit-reset").as_deref(), Some("3600"));
    assert!(
        header(&r, "ratelimit-policy").is_some(),
        "Floodgate's own headers stay"
    );
    for _ in 0..9 {
        rls.call("another", &[&[("key3", &value)]], 1).await;
    }
    let r = rls.call("another", both, 1).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(header(&r, "ratelimit-limit").as_deref(), Some("10"));
    assert_eq!(header(&r, "x-left").as_deref(), Some("0"));
    // Off (the default): none of them.
    let plain = runtime.vars();
    drop(rls);
    let mut vars = plain;
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port()));
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    let r = rls.call("another", &[&[("key2", &fresh("off"))]], 1).await;
    assert_eq!(header(&r, "ratelimit-limit"), None, "{r:?}");
}

/// With `REDIS_PERSECOND`, a request whose descriptors are on both servers is still all or
/// nothing: refused by the minute limit (main Redis), it leaves the per-second counter
/// (second Redis) as it was: the unit taken there first is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_both_redis_servers_refused_by_one_charges_nothing_on_the_other() {
    let (main, per_second) = (RedisServer::start().unwrap(), RedisServer::start().unwrap());
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_URL".into(), format!("127.0.0.1:{}", main.port()));
    vars.insert("REDIS_PERSECOND".into(), "true".into());
    vars.insert(
        "REDIS_PERSECOND_URL".into(),
        format!("127.0.0.1:{}", per_second.port()),
    );
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    let (fast, slow) = (fresh("fast"), fresh("slow"));
    let both: &[&[(&str, &str)]] = &[&[("key1", &fast)], &[("one_per_minute", &slow)]];
    let r = rls.call("basic", both, 1).await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{r:?}");
    assert_eq!(r.statuses[0].limit_remaining, 49);
    // one_per_minute is spent: refused, and key1's unit is given back.
    let r = rls.call("basic", both, 1).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32, "{r:?}");
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, 49, "{r:?}");
    let r = rls.call("basic", &[&[("key1", &fast)]], 1).await;
    assert_eq!(r.statuses[0].limit_remaining, 48, "{r:?}");
}

/// `TestBasicAuthConfigWithRedisCluster/WithPerSecondRedis` without the passwords (the
/// harness' clusters have none): `REDIS_TYPE=cluster` and `REDIS_PERSECOND_TYPE=cluster`, each
/// a 3-master Redis Cluster given by its nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_config_with_redis_cluster_and_per_second_redis_cluster() {
    let (main, per_second) = (
        RedisCluster::start().unwrap(),
        RedisCluster::start().unwrap(),
    );
    let nodes = |c: &RedisCluster| {
        c.nodes()
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let runtime = runtime();
    let mut vars = runtime.vars();
    vars.insert("REDIS_TYPE".into(), "cluster".into());
    vars.insert("REDIS_URL".into(), nodes(&main));
    vars.insert("REDIS_PERSECOND".into(), "true".into());
    vars.insert("REDIS_PERSECOND_TYPE".into(), "cluster".into());
    vars.insert("REDIS_PERSECOND_URL".into(), nodes(&per_second));
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    basic_base_config(&mut rls).await;
    let held = |c: &RedisCluster| {
        c.nodes()
            .iter()
            .map(|n| counters(n, "rl_", None))
            .sum::<usize>()
    };
    let expired_in = |c: &RedisCluster| c.nodes().iter().map(|n| expired(n, None)).sum::<usize>();
    assert_eq!(
        held(&per_second) + expired_in(&per_second),
        1,
        "{}",
        rls.fg.logs()
    );
    assert_eq!(held(&main), 4);
}

/// `TestBasicTLSConfig/WithPerSecondRedisTLS`: `REDIS_TLS` and `REDIS_PERSECOND_TLS` with the
/// CA of `REDIS_TLS_CACERT` (upstream's stunnel is a TLS port of redis-server here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_basic_tls_config_with_per_second_redis_tls() {
    let certs = TestCerts::generate().unwrap();
    let (main, per_second) = (
        RedisServer::start_tls(&certs, false).unwrap(),
        RedisServer::start_tls(&certs, false).unwrap(),
    );
    let runtime = runtime();
    let mut vars = runtime.vars();
    let tls = |s: &RedisServer| format!("127.0.0.1:{}", s.tls_port().unwrap());
    vars.insert("REDIS_TLS".into(), "true".into());
    vars.insert("REDIS_URL".into(), tls(&main));
    vars.insert("REDIS_PERSECOND".into(), "true".into());
    vars.insert("REDIS_PERSECOND_TLS".into(), "true".into());
    vars.insert("REDIS_PERSECOND_URL".into(), tls(&per_second));
    vars.insert(
        "REDIS_TLS_CACERT".into(),
        certs.path("ca.crt").display().to_string(),
    );
    let mut rls = Rls::connect(start(&runtime, &vars)).await;
    basic_base_config(&mut rls).await;
    assert_eq!(counters(&main, "rl_", None), 4, "{}", rls.fg.logs());
    assert_eq!(
        counters(&per_second, "rl_", None) + expired(&per_second, None),
        1
    );
}
