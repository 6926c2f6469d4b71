//! A memory store's reservation settles only on the process that made it, also when every
//! instance shares `[server] reservation_secret` (issue 27, F3): the claim that stops a second
//! settle lives in that process's table, so a token settled on another process, or on the same
//! one after a restart, would give back units that process never reserved. Two real `floodgate
//! serve` processes on the manual clock, and one restarted.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{call, client, remaining, Floodgate};

const SECRET: &str = "a-test-secret-of-at-least-32-chars-0123456789";

const CONFIG: &str = r#"
[server]
reservation_secret = "a-test-secret-of-at-least-32-chars-0123456789"

[[rules]]
name = "tb"
algorithm = "token_bucket"
limit = "10/10s"

[[rules]]
name = "gc"
algorithm = "gcra"
limit = "10/10s"
"#;

async fn reserve_all(c: &reqwest::Client, fg: &Floodgate, rule: &str, key: &str) -> Value {
    let (status, body) = call(
        c,
        fg,
        "/v1/check",
        json!({"rule": rule, "key": key, "cost": 10, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["reservation"].clone()
}

/// Spends all of `rule`/`key` with single checks: how many were admitted (at most 11 asked).
async fn spend(c: &reqwest::Client, fg: &Floodgate, rule: &str, key: &str) -> u64 {
    let mut admitted = 0;
    for _ in 0..11 {
        let (status, _) = call(c, fg, "/v1/check", json!({"rule": rule, "key": key})).await;
        if status == 200 {
            admitted += 1;
        }
    }
    admitted
}

fn assert_elsewhere(status: u16, body: &Value) {
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["type"], "urn:floodgate:problem:reservation-elsewhere",
        "{body}"
    );
    assert_eq!(body["field"], "reservation", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("another instance or a previous run"),
        "{body}"
    );
}

#[tokio::test]
async fn a_memory_store_token_settles_nothing_on_another_instance_with_the_same_secret() {
    let a = Floodgate::with_config(CONFIG, &[]);
    let b = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let token = reserve_all(&c, &a, "tb", "k").await;
    assert_eq!(spend(&c, &b, "tb", "k").await, 10);
    // B never reserved these 10: a settle there gives nothing back.
    let (status, body) = call(
        &c,
        &b,
        "/v1/settle",
        json!({"reservation": token, "cost": 0}),
    )
    .await;
    assert_elsewhere(status, &body);
    assert_eq!(remaining(&c, &b, "tb", "k").await, 0);
    assert_eq!(spend(&c, &b, "tb", "k").await, 0);
    // On A, which made it, it settles once.
    let (status, body) = call(
        &c,
        &a,
        "/v1/settle",
        json!({"reservation": token, "cost": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &a, "tb", "k").await, 10);
}

#[tokio::test]
async fn a_memory_store_token_settles_nothing_after_a_restart() {
    let mut a = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let token = reserve_all(&c, &a, "gc", "replay").await;
    let settle = json!({"reservation": token, "cost": 0});
    let (status, body) = call(&c, &a, "/v1/settle", settle.clone()).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&c, &a, "/v1/settle", settle.clone()).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["type"], "urn:floodgate:problem:reservation-settled");
    a.signal("TERM");
    a.wait();
    // The same configuration (and secret) in a new process: the claim table is new.
    let a = Floodgate::with_config(CONFIG, &["--reservation-secret", SECRET]);
    assert_eq!(spend(&c, &a, "gc", "replay").await, 10);
    let (status, body) = call(&c, &a, "/v1/settle", settle).await;
    assert_elsewhere(status, &body);
    assert_eq!(spend(&c, &a, "gc", "replay").await, 0);
}
