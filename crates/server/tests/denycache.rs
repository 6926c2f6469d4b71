//! `[store] deny_cache = true` through two real `floodgate serve` processes sharing one real
//! redis-server (issue 23, item 3): A caches a denial (answered without Redis, counted in
//! `floodgate_store_deny_cache_hits_total`); B resets the key through the admin API, or
//! settles a reservation giving its units back; once A has received B's invalidation
//! (`floodgate_store_deny_cache_invalidations_total`), A's next check is admitted with the
//! numbers a process without the cache gives. Both on the manual clock (no time passes).

mod serve_support;

use std::time::Duration;

use floodgate_store::redis::testing::RedisServer;
use serde_json::{json, Value};
use serve_support::{call, client, metric, Floodgate};

const TOKEN: &str = "test-token-0123456789";

fn config(url: &str) -> String {
    format!(
        "[server]\nadmin_token = \"{TOKEN}\"\n\n[store]\nkind = \"redis\"\nurl = \"{url}\"\n\
         timeout_ms = 2000\ndeny_cache = true\n\n\
         [[rules]]\nname = \"hourly\"\nalgorithm = \"gcra\"\nlimit = \"4/h\"\n\
         failure_mode = \"closed\"\n"
    )
}

/// Polls `series` on `fg` (every 5 ms, at most 5 s: the subscription is a real connection to
/// a real server) until it is at least `at_least`.
async fn until_metric(c: &reqwest::Client, fg: &Floodgate, series: &str, at_least: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let v = metric(c, fg, series).await.unwrap_or(0.0);
        if v >= at_least {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} = {v}, not {at_least} within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn check(c: &reqwest::Client, fg: &Floodgate, cost: u64) -> (u16, Value) {
    call(
        c,
        fg,
        "/v1/check",
        json!({"rule": "hourly", "key": "k", "cost": cost}),
    )
    .await
}

/// Checks on A until denied, then once more: that one is answered by A's deny cache.
async fn cache_a_denial(c: &reqwest::Client, a: &Floodgate) {
    while check(c, a, 1).await.0 == 200 {}
    let hits = metric(c, a, "floodgate_store_deny_cache_hits_total")
        .await
        .unwrap();
    let (status, body) = check(c, a, 1).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        metric(c, a, "floodgate_store_deny_cache_hits_total").await,
        Some(hits + 1.0),
        "the second denial came from A's cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_or_settle_through_another_process_ends_a_cached_denial() {
    let redis = RedisServer::start().unwrap();
    let a = Floodgate::with_config(&config(&redis.url()), &[]);
    let b = Floodgate::with_config(&config(&redis.url()), &[]);
    let c = client();
    for fg in [&a, &b] {
        until_metric(&c, fg, "floodgate_store_deny_cache_live", 1.0).await;
    }
    // A reset through B's admin API.
    cache_a_denial(&c, &a).await;
    let received = metric(&c, &a, "floodgate_store_deny_cache_invalidations_total")
        .await
        .unwrap();
    let r = c
        .delete(b.url("/v1/keys/hourly/k"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    until_metric(
        &c,
        &a,
        "floodgate_store_deny_cache_invalidations_total",
        received + 1.0,
    )
    .await;
    let (status, body) = check(&c, &a, 1).await;
    assert_eq!((status, &body["remaining"]), (200, &json!(3)), "{body}");
    // A reservation of 2 through B, the rest spent on A, then B settles using nothing.
    let (status, body) = call(
        &c,
        &b,
        "/v1/check",
        json!({"rule": "hourly", "key": "k", "cost": 2, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let token = body["reservation"].clone();
    cache_a_denial(&c, &a).await;
    let received = metric(&c, &a, "floodgate_store_deny_cache_invalidations_total")
        .await
        .unwrap();
    let (status, body) = call(
        &c,
        &b,
        "/v1/settle",
        json!({"reservation": token, "cost": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    until_metric(
        &c,
        &a,
        "floodgate_store_deny_cache_invalidations_total",
        received + 1.0,
    )
    .await;
    // The 2 units are back: exactly two more admissions on A, then a denial.
    let (status, body) = check(&c, &a, 1).await;
    assert_eq!((status, &body["remaining"]), (200, &json!(1)), "{body}");
    assert_eq!(check(&c, &a, 1).await.0, 200);
    assert_eq!(check(&c, &a, 1).await.0, 429);
}
