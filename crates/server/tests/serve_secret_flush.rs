//! The reservation secret shared through a real redis-server stays shared when Redis loses it
//! (the attacker's review: after a `FLUSHALL`, running instances kept their secret and a new
//! instance made another, so settles across them failed as signed with another secret).
//! Running instances write theirs back; an instance whose secret the store replaced signs with
//! the store's and still settles its earlier tokens.

mod serve_support;

use std::time::Duration;

use floodgate_store::redis::testing::RedisServer;
use serde_json::{json, Value};
use serve_support::{call, client, Floodgate};

const RULE: &str = "[[rules]]\nname = \"jobs\"\nalgorithm = \"fixed_window\"\nlimit = \"100/1d\"\n";

fn config(redis: &RedisServer) -> String {
    format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 2000\n\n{RULE}",
        redis.url()
    )
}

async fn reserve(c: &reqwest::Client, fg: &Floodgate, key: &str) -> Value {
    let (status, body) = call(
        c,
        fg,
        "/v1/check",
        json!({"rule": "jobs", "key": key, "cost": 10, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["reservation"].clone()
}

async fn settle(c: &reqwest::Client, fg: &Floodgate, token: &Value) -> (u16, Value) {
    call(
        c,
        fg,
        "/v1/settle",
        json!({"reservation": token, "cost": 4}),
    )
    .await
}

fn secret(redis: &RedisServer) -> String {
    redis
        .cli(&["GET", "fg:secret:reservation"])
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_flushall_the_running_instance_writes_its_secret_back_for_the_next_one() {
    let redis = RedisServer::start().unwrap();
    let a = Floodgate::with_config(&config(&redis), &[]);
    let c = client();
    let shared = secret(&redis);
    assert_eq!(shared.len(), 43);
    let token = reserve(&c, &a, "flushed").await;
    redis.cli(&["FLUSHALL"]).unwrap();
    assert_eq!(secret(&redis), "");
    // Bounded: A writes its secret back within a second or two.
    let mut back = false;
    for _ in 0..100 {
        if secret(&redis) == shared {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the secret was not written back:\n{}", a.logs());
    // An instance started after the flush signs with it: A's token settles there.
    let b = Floodgate::with_config(&config(&redis), &[]);
    let (status, body) = settle(&c, &b, &token).await;
    assert_eq!(status, 200, "{body}");
    let token = reserve(&c, &b, "b").await;
    let (status, body) = settle(&c, &a, &token).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_secret_the_store_replaced_signs_with_the_stores_and_settles_its_old_tokens(
) {
    let redis = RedisServer::start().unwrap();
    let a = Floodgate::with_config(&config(&redis), &[]);
    let c = client();
    let old = reserve(&c, &a, "old").await;
    // Lost (every key deleted), and replaced before A wrote it back, in one step (as a new
    // instance would have).
    redis
        .cli(&[
            "EVAL",
            "for _, k in ipairs(redis.call('KEYS', '*')) do redis.call('DEL', k) end \
             return redis.call('SET', KEYS[1], ARGV[1])",
            "1",
            "fg:secret:reservation",
            "NewSecretMadeByAnotherInstance0123456789abcd",
        ])
        .unwrap();
    let b = Floodgate::with_config(&config(&redis), &[]);
    // B's token settles on A: A reads the store's secret when it meets an unknown one.
    let token = reserve(&c, &b, "new").await;
    let (status, body) = settle(&c, &a, &token).await;
    assert_eq!(status, 200, "{body}");
    // A's token made before the change still settles on A.
    let (status, body) = settle(&c, &a, &old).await;
    assert_eq!(status, 200, "{body}");
    // And A signs with the store's secret now: its new tokens settle on B.
    let token = reserve(&c, &a, "after").await;
    let (status, body) = settle(&c, &b, &token).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        secret(&redis),
        "NewSecretMadeByAnotherInstance0123456789abcd"
    );
    assert!(
        a.logs().contains("the store's reservation secret changed"),
        "{}",
        a.logs()
    );
}
