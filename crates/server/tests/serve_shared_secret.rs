//! The secret that signs reservation tokens, through the real binary: processes on one real
//! redis-server without `[server] reservation_secret` share one through the store, so a
//! reservation made on one settles on the other; a token signed with another secret is a 409
//! that says so, naming both key ids; the memory store's per-process secret is logged at info
//! level, not as a warning.

mod serve_support;

use floodgate_store::redis::testing::RedisServer;
use serde_json::{json, Value};
use serve_support::{call, client, post_json, remaining, Floodgate};

const RULE: &str = "[[rules]]\nname = \"jobs\"\nalgorithm = \"fixed_window\"\nlimit = \"100/1d\"\n";

async fn reserve(c: &reqwest::Client, fg: &Floodgate, key: &str, cost: u64) -> Value {
    let (status, body) = call(
        c,
        fg,
        "/v1/check",
        json!({"rule": "jobs", "key": key, "cost": cost, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["reservation"].clone()
}

/// The key id a process logged for the shared secret.
fn logged_key_id(fg: &Floodgate) -> String {
    let logs = fg.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("signed with the secret shared through the store"))
        .unwrap_or_else(|| panic!("no shared secret logged:\n{logs}"));
    let at = line.find("key_id=").expect("key_id field") + "key_id=".len();
    line[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_matches('"')
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_reservation_secret_a_reservation_made_on_one_process_settles_on_another() {
    let redis = RedisServer::start().unwrap();
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 2000\n\n{RULE}",
        redis.url()
    );
    let a = Floodgate::with_config(&text, &[]);
    let b = Floodgate::with_config(&text, &[]);
    let c = client();
    assert_eq!(logged_key_id(&a), logged_key_id(&b));
    // No warning about the secret (the one warning is the test-only manual clock's).
    let warnings: Vec<String> = a
        .logs()
        .lines()
        .filter(|l| l.contains("WARN") && !l.contains("manual clock"))
        .map(str::to_string)
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    // Made on A, settled on B; made on B, settled on A.
    let token = reserve(&c, &a, "ab", 10).await;
    let (status, body) = call(
        &c,
        &b,
        "/v1/settle",
        json!({"reservation": token, "cost": 4}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &a, "jobs", "ab").await, 96);
    let token = reserve(&c, &b, "ba", 10).await;
    let (status, body) = call(
        &c,
        &a,
        "/v1/settle",
        json!({"reservation": token, "cost": 1}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &b, "jobs", "ba").await, 99);
    // Once only, wherever.
    let (status, _) = call(
        &c,
        &b,
        "/v1/settle",
        json!({"reservation": token, "cost": 0}),
    )
    .await;
    assert_eq!(status, 409);
    // The secret is one key of the store, kept across restarts of the processes.
    let kept = redis.cli(&["GET", "fg:secret:reservation"]).unwrap();
    assert_eq!(kept.len(), 43, "{kept}");
    drop(a);
    let a = Floodgate::with_config(&text, &[]);
    let token = reserve(&c, &b, "restart", 10).await;
    let (status, body) = call(
        &c,
        &a,
        "/v1/settle",
        json!({"reservation": token, "cost": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(redis.cli(&["GET", "fg:secret:reservation"]).unwrap(), kept);
}

#[tokio::test]
async fn a_token_signed_with_another_processes_secret_is_a_400_naming_both_key_ids() {
    // Two memory stores: each process its own random secret.
    let a = Floodgate::with_config(RULE, &[]);
    let b = Floodgate::with_config(RULE, &[]);
    let c = client();
    let token = reserve(&c, &a, "k", 10).await;
    let theirs = token
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap()
        .to_string();
    let (status, body) = call(
        &c,
        &b,
        "/v1/settle",
        json!({"reservation": token, "cost": 0}),
    )
    .await;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("reservation")),
        "{body}"
    );
    assert_eq!(body["type"], "urn:floodgate:problem:reservation-elsewhere");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "reservation: signed with another secret (key id {theirs}; this instance signs with "
        )),
        "{detail}"
    );
    // Said at info level: nothing to warn a user who does not share a store about.
    for fg in [&a, &b] {
        let logs = fg.logs();
        let line = logs
            .lines()
            .find(|l| l.contains("signed with a random secret of this process"))
            .unwrap_or_else(|| panic!("{logs}"));
        assert!(line.contains("INFO"), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_the_store_answers_a_reservation_is_a_503_and_nothing_is_reserved() {
    let mut redis = RedisServer::start().unwrap();
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 200\n\n{RULE}",
        redis.url()
    );
    redis.kill();
    let fg = Floodgate::with_config(&text, &[]);
    let c = client();
    let (status, headers, body) = post_json(
        &c,
        &fg.url("/v1/check"),
        &json!({"rule": "jobs", "key": "k", "cost": 1, "reserve": true}),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(body["field"], "reservation");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("[server] reservation_secret"),
        "{body}"
    );
    assert!(
        fg.logs().contains("cannot read the reservation secret"),
        "{}",
        fg.logs()
    );
    // Once Redis answers, the secret is shared and reservations work.
    redis.restart().unwrap();
    let mut reserved = None;
    for _ in 0..100 {
        let (status, body) = call(
            &c,
            &fg,
            "/v1/check",
            json!({"rule": "jobs", "key": "k", "cost": 1, "reserve": true}),
        )
        .await;
        if status == 200 {
            reserved = Some(body);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let body = reserved.unwrap_or_else(|| panic!("never shared:\n{}", fg.logs()));
    assert!(body["reservation"].is_string(), "{body}");
    assert_eq!(remaining(&c, &fg, "jobs", "k").await, 99);
}
