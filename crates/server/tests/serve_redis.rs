//! `floodgate serve` on the Redis store: four processes sharing one Redis enforce one limit
//! exactly (the multi-instance trap of the source documents), where four processes with their
//! own memory stores admit four times the limit.

mod serve_support;

use std::sync::Arc;

use floodgate_store::redis::testing::RedisServer;
use serde_json::json;
use serve_support::{client, Floodgate};

/// One key limited to 100 per 10 s; a store failure answers 503 (never a silent admit), so an
/// error cannot pass for an admission.
const RULES: &str = r#"
[[rules]]
name = "shared"
algorithm = "token_bucket"
limit = "100/10s"
failure_mode = "closed"
"#;

/// Writes `dir/name`: a `[store]` for the Redis at `url` with `settings` (TOML lines), then
/// [`RULES`]. Returns its path.
fn redis_config(dir: &std::path::Path, name: &str, url: &str, settings: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("[store]\nkind = \"redis\"\nurl = \"{url}\"\n{settings}{RULES}"),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// 2,000 checks of one key from 200 concurrent clients spread over `instances`; returns how
/// many were admitted (200) and denied (429).
async fn hammer(instances: &[Floodgate]) -> (u64, u64) {
    let urls: Arc<Vec<String>> = Arc::new(instances.iter().map(|f| f.url("/v1/check")).collect());
    let c = client();
    let mut tasks = Vec::new();
    for i in 0..200usize {
        let (c, urls) = (c.clone(), urls.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut denied) = (0u64, 0u64);
            for j in 0..10usize {
                let url = &urls[(i + j) % urls.len()];
                let r = c
                    .post(url)
                    .json(&json!({"rule": "shared", "key": "hot"}))
                    .send()
                    .await
                    .unwrap();
                match r.status().as_u16() {
                    200 => ok += 1,
                    429 => denied += 1,
                    other => panic!("status {other}: {}", r.text().await.unwrap()),
                }
            }
            (ok, denied)
        }));
    }
    let (mut ok, mut denied) = (0, 0);
    for t in tasks {
        let (o, d) = t.await.unwrap();
        ok += o;
        denied += d;
    }
    (ok, denied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_sharing_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    // A generous timeout: four debug-build services, their 200 clients and Redis share two
    // cores here; the 50 ms default is for production machines.
    let shared_rules = redis_config(dir.path(), "shared.toml", &url, "timeout_ms = 2000\n");
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let (shared_rules, rules) = (shared_rules.as_str(), rules.to_str().unwrap());
    // Two take Redis from the file, two from --store (which overrides the file's url).
    let shared: Vec<Floodgate> = (0..4)
        .map(|i| {
            if i < 2 {
                Floodgate::start(&["--config", shared_rules])
            } else {
                Floodgate::start(&["--config", shared_rules, "--store", &url])
            }
        })
        .collect();
    assert_eq!(hammer(&shared).await, (100, 1_900));
    // The state is in Redis, one key, with a TTL (besides the one secret the processes
    // share to sign reservation tokens, which must outlive them).
    let keys = redis.cli(&["--scan", "--pattern", "fg:*"]).unwrap();
    let keys: Vec<&str> = keys
        .lines()
        .filter(|k| *k != "fg:secret:reservation")
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = redis.cli(&["PTTL", keys[0]]).unwrap().parse().unwrap();
    assert!(ttl > 0, "{ttl}");

    // The trap: the same four processes with their own memory stores.
    let separate: Vec<Floodgate> = (0..4)
        .map(|_| Floodgate::start(&["--config", rules]))
        .collect();
    assert_eq!(hammer(&separate).await, (400, 1_600));
}

#[tokio::test]
async fn with_redis_down_the_local_fallback_enforces_the_divided_limit() {
    local_fallback_with_redis_down("").await;
}

/// Issue 24: a leased rule's failed takes follow the local fallback as a plain check does (its
/// divided share), not the rule's failure mode (`closed` here: every check would be a 503).
#[tokio::test]
async fn with_redis_down_a_leased_rule_follows_the_local_fallback() {
    local_fallback_with_redis_down("lease = \"20ms\"\n").await;
}

/// 40 checks of one key with Redis down, `fallback = "local"` over 4 instances and `rule`
/// (TOML lines) added to [`RULES`]' rule: 25 admitted (100 per 10 s over 4), 15 denied, each
/// counted as degraded.
async fn local_fallback_with_redis_down(rule: &str) {
    let mut redis = RedisServer::start().unwrap();
    let url = redis.url();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let mut rules = redis_config(
        dir.path(),
        "rules.toml",
        &url,
        "fallback = \"local\"\ninstances = 4\n",
    );
    if !rule.is_empty() {
        let text = std::fs::read_to_string(&rules).unwrap() + rule;
        rules = dir.path().join("leased.toml").to_str().unwrap().to_string();
        std::fs::write(&rules, text).unwrap();
    }
    // Starts although Redis is down (a warning, no crash).
    let fg = Floodgate::start(&["--config", &rules]);
    let c = client();
    let (mut ok, mut denied) = (0, 0);
    for _ in 0..40 {
        let r = c
            .post(fg.url("/v1/check"))
            .json(&json!({"rule": "shared", "key": "hot"}))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => ok += 1,
            429 => denied += 1,
            other => panic!("status {other}: {}", r.text().await.unwrap()),
        }
    }
    // 100 per 10 s over 4 instances: 25 here.
    assert_eq!((ok, denied), (25, 15));
    assert_eq!(
        serve_support::metric(&c, &fg, "floodgate_store_degraded_total{mode=\"local\"}").await,
        Some(40.0)
    );
}

/// `/readyz` with a Redis store: ready with the store `up` while Redis answers; 503
/// problem+json naming the store while it does not (every `closed` rule would answer 503);
/// with `fallback = "local"`, ready but `degraded`. The Redis error series exist from the start.
#[tokio::test]
async fn readyz_reports_the_redis_store() {
    let mut redis = RedisServer::start().unwrap();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let up = redis_config(dir.path(), "up.toml", &url, "timeout_ms = 2000\n");
    let c = client();
    {
        let fg = Floodgate::start(&["--config", &up]);
        let (status, _, body) =
            serve_support::split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "ready");
        assert_eq!(body["store"], json!({"kind": "redis", "state": "up"}));
        assert_eq!(body["config"]["rules"][0]["name"], "shared");
        // Every series of the Redis store is there from the start, at 0 (docs/redis.md).
        let series = ["timeout", "unavailable", "circuit_open"]
            .map(|reason| format!("floodgate_store_redis_errors_total{{reason=\"{reason}\"}}"))
            .into_iter()
            .chain(
                [
                    "evicted_keys",
                    "refunds",
                    "script_reloads",
                    "out_of_memory_answers",
                ]
                .map(|name| format!("floodgate_store_redis_{name}_total")),
            );
        for series in series {
            assert_eq!(
                serve_support::metric(&c, &fg, &series).await,
                Some(0.0),
                "{series}"
            );
        }
    }

    redis.kill();
    let fg = Floodgate::start(&["--config", &up]);
    let r = c.get(fg.url("/readyz")).send().await.unwrap();
    assert_eq!(
        r.headers()[reqwest::header::CONTENT_TYPE],
        "application/problem+json"
    );
    let (status, _, body) = serve_support::split(r).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["type"], "urn:floodgate:problem:store-unavailable");
    assert_eq!(body["status"], 503);
    assert_eq!(body["store"]["kind"], "redis");
    assert_eq!(body["store"]["state"], "down");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("store redis: "),
        "{body}"
    );
    assert_eq!(body["config"]["rules"][0]["name"], "shared");

    let fallback = redis_config(
        dir.path(),
        "fallback.toml",
        &url,
        "fallback = \"local\"\ninstances = 4\n",
    );
    let fg = Floodgate::start(&["--config", &fallback]);
    let (status, _, body) =
        serve_support::split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["store"]["state"], "degraded");
    assert_eq!(body["store"]["fallback"], "local");
    assert_eq!(body["store"]["instances"], 4, "the configured override");
}

/// Issue 14: with `fallback = "local"` and no `instances`, every process announces itself in
/// Redis and divides by the live count it last saw: two processes see 2 (in `/readyz` and the
/// `floodgate_store_redis_live_instances` gauge), and once Redis is gone each enforces 100 / 2.
#[tokio::test]
async fn the_local_fallback_divides_by_the_instances_discovered_in_redis() {
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rules = redis_config(
        dir.path(),
        "rules.toml",
        &redis.url(),
        "timeout_ms = 500\nfallback = \"local\"\n",
    );
    let fleet: Vec<Floodgate> = (0..2)
        .map(|_| Floodgate::start(&["--config", &rules]))
        .collect();
    let c = client();
    // The processes announce themselves every second (real time: Redis' clock): wait, bounded,
    // until the first has seen both.
    let mut seen = json!(null);
    for _ in 0..50 {
        let (_, _, body) =
            serve_support::split(c.get(fleet[0].url("/readyz")).send().await.unwrap()).await;
        seen = body["store"]["instances"].clone();
        if seen == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(seen, 2);
    assert_eq!(
        serve_support::metric(&c, &fleet[0], "floodgate_store_redis_live_instances").await,
        Some(2.0)
    );

    redis.kill();
    let (mut ok, mut denied) = (0, 0);
    for _ in 0..60 {
        let r = c
            .post(fleet[0].url("/v1/check"))
            .json(&json!({"rule": "shared", "key": "hot"}))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => ok += 1,
            429 => denied += 1,
            other => panic!("status {other}: {}", r.text().await.unwrap()),
        }
    }
    // 100 per 10 s over the 2 instances last seen: 50 here.
    assert_eq!((ok, denied), (50, 10));
    let (_, _, body) =
        serve_support::split(c.get(fleet[0].url("/readyz")).send().await.unwrap()).await;
    assert_eq!(body["store"]["state"], "degraded");
    assert_eq!(body["store"]["instances"], 2, "the count last seen");
}

/// Issue 30, item 3: on a Redis Cluster with a third of the slots without a master and full
/// coverage off (what a dead master without a replica leaves), every live node answers the
/// readiness probe and the breaker stays closed, and `/readyz` said up while a third of the
/// checks were 503. It is now 503 problem+json, the reason naming the failed calls.
#[tokio::test]
async fn readyz_is_not_ready_while_a_third_of_the_cluster_slots_have_no_master() {
    use floodgate_store::redis::testing::RedisCluster;
    let cluster = RedisCluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let path = dir.path().join("cluster.toml");
    std::fs::write(
        &path,
        format!(
            "[store]\nkind = \"redis\"\nnodes = [{}]\ntimeout_ms = 2000\n{RULES}",
            nodes.join(", ")
        ),
    )
    .unwrap();
    let fg = Floodgate::start(&["--config", path.to_str().unwrap()]);
    let c = client();
    let (status, _, body) =
        serve_support::split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    for node in cluster.nodes() {
        node.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"])
            .unwrap();
        node.cli(&["CLUSTER", "DELSLOTSRANGE", "0", "5460"])
            .unwrap();
    }
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let (c, url) = (c.clone(), fg.url("/v1/check"));
            tokio::spawn(async move {
                let r = c
                    .post(url)
                    .json(&json!({"rule": "shared", "key": format!("user{i}")}))
                    .send()
                    .await
                    .unwrap();
                r.status().as_u16()
            })
        })
        .collect();
    let mut unavailable = 0;
    for t in tasks {
        match t.await.unwrap() {
            200 => {}
            503 => unavailable += 1,
            other => panic!("status {other}"),
        }
    }
    assert!(
        (10..=35).contains(&unavailable),
        "{unavailable} of 60 were 503"
    );
    let r = c.get(fg.url("/readyz")).send().await.unwrap();
    assert_eq!(
        r.headers()[reqwest::header::CONTENT_TYPE],
        "application/problem+json"
    );
    let (status, _, body) = serve_support::split(r).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["store"]["state"], "down", "{body}");
    let reason = body["store"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("calls of the last 10 s failed"), "{body}");
}
