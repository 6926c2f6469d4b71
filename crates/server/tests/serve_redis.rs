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
    // cores here; the 10 ms default is for production machines.
    let shared_rules = dir.path().join("shared.toml");
    std::fs::write(
        &shared_rules,
        format!("[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout_ms = 2000\n{RULES}"),
    )
    .unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let (shared_rules, rules) = (shared_rules.to_str().unwrap(), rules.to_str().unwrap());
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
    // The state is in Redis, one key, with a TTL.
    let keys = redis.cli(&["--scan", "--pattern", "fg:*"]).unwrap();
    assert_eq!(keys.lines().count(), 1, "{keys}");
    let ttl: i64 = redis.cli(&["PTTL", keys.trim()]).unwrap().parse().unwrap();
    assert!(ttl > 0, "{ttl}");

    // The trap: the same four processes with their own memory stores.
    let separate: Vec<Floodgate> = (0..4)
        .map(|_| Floodgate::start(&["--config", rules]))
        .collect();
    assert_eq!(hammer(&separate).await, (400, 1_600));
}

#[tokio::test]
async fn with_redis_down_the_local_fallback_enforces_the_divided_limit() {
    let mut redis = RedisServer::start().unwrap();
    let url = redis.url();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        format!(
            "[store]\nkind = \"redis\"\nurl = \"{url}\"\nfallback = \"local\"\ninstances = 4\n{RULES}"
        ),
    )
    .unwrap();
    // Starts although Redis is down (a warning, no crash).
    let fg = Floodgate::start(&["--config", rules.to_str().unwrap()]);
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
