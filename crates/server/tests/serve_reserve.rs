//! `POST /v1/check` with `max_wait_ms`: a check that may wait, through the real binary on the
//! manual clock (`serve --manual-clock`).

mod serve_support;

use serde_json::{json, Value};
use serve_support::{advance, client, metric, post_json, split, Floodgate};

/// A GCRA rule of 10/s (one unit every 100 ms, a burst of 10) and a day's budget of 1,000.
const CONFIG: &str = r#"
[[rules]]
name = "per-second"
limit = "10/s"
algorithm = "gcra"

[[rules]]
name = "per-day"
limit = "1000/d"
algorithm = "gcra"
"#;

async fn check(c: &reqwest::Client, fg: &Floodgate, body: Value) -> (u16, Value) {
    let (status, _, body) = post_json(c, &fg.url("/v1/check"), &body).await;
    (status, body)
}

#[tokio::test]
async fn max_wait_admits_what_fits_within_the_wait_and_answers_it_exactly() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let ask = |ms: u64| json!({"rule": "per-second", "key": "job", "max_wait_ms": ms});
    // The burst at once: wait_us 0.
    for _ in 0..10 {
        let (status, body) = check(&c, &fg, ask(250)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["allowed"], true);
        assert_eq!(body["wait_us"], 0, "{body}");
    }
    // Then one slot every 100 ms, within the 250 ms bound.
    for n in 1..=2u64 {
        let (status, body) = check(&c, &fg, ask(250)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["wait_us"], n * 100_000, "{body}");
        assert_eq!(body["remaining"], 0);
    }
    // The next slot is 300 ms away: a 429 as a check gives, without wait_us.
    let (status, body) = check(&c, &fg, ask(250)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["allowed"], false);
    assert_eq!(body["retry_after_us"], 300_000);
    assert!(body.get("wait_us").is_none(), "{body}");
    // It consumed nothing: the 300 ms slot is still there for one that waits that long.
    let (status, body) = check(&c, &fg, ask(300)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["wait_us"], 300_000);
    // A plain check has no wait_us and meets the reserved units: 400 ms to go.
    let (status, body) = check(&c, &fg, json!({"rule": "per-second", "key": "job"})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["retry_after_us"], 400_000);
    assert!(body.get("wait_us").is_none(), "{body}");
    // Time passes to the last scheduled slot: the next waits one emission interval.
    advance(&c, &fg, 300_000).await;
    let (status, body) = check(&c, &fg, ask(250)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["wait_us"], 100_000);
    // Counted as checks are: 14 allowed, 2 denied.
    let allowed = r#"floodgate_decisions_total{rule="per-second",outcome="allowed"}"#;
    let denied = r#"floodgate_decisions_total{rule="per-second",outcome="denied"}"#;
    assert_eq!(metric(&c, &fg, allowed).await, Some(14.0));
    assert_eq!(metric(&c, &fg, denied).await, Some(2.0));
}

#[tokio::test]
async fn descriptors_wait_for_the_longest_slot_and_a_denial_charges_no_rule() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    for _ in 0..10 {
        check(&c, &fg, json!({"rule": "per-second", "key": "job"})).await;
    }
    let both = |ms: u64| {
        json!({"max_wait_ms": ms, "descriptors": [
            {"rule": "per-day", "key": "job", "cost": 5},
            {"rule": "per-second", "key": "job"},
        ]})
    };
    let (status, body) = check(&c, &fg, both(100)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["wait_us"], 100_000);
    let peek = json!({"rule": "per-day", "key": "job", "cost": 0});
    let (_, _, before) = post_json(&c, &fg.url("/v1/peek"), &peek).await;
    // 5 units and the 100 ms they are reserved ahead for (GCRA counts the wait too).
    assert!(before["remaining"].as_u64().unwrap() < 1000, "{before}");
    let (status, body) = check(&c, &fg, both(100)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["rule"], "per-second");
    let (_, _, after) = post_json(&c, &fg.url("/v1/peek"), &peek).await;
    assert_eq!(
        after["remaining"], before["remaining"],
        "the denied batch charged nothing"
    );
}

#[tokio::test]
async fn max_wait_ms_out_of_range_or_on_a_peek_is_a_400_naming_it() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    // The bound itself is accepted.
    let (status, body) = check(
        &c,
        &fg,
        json!({"rule": "per-second", "key": "k", "max_wait_ms": 86_400_000u64}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let cases = [
        (
            "/v1/check",
            r#"{"rule": "per-second", "key": "k", "max_wait_ms": 86400001}"#,
            "between 0 and 86400000, got 86400001",
        ),
        (
            "/v1/check",
            r#"{"rule": "per-second", "key": "k", "max_wait_ms": -1}"#,
            "whole number of milliseconds",
        ),
        (
            "/v1/check",
            r#"{"rule": "per-second", "key": "k", "max_wait_ms": 1.5}"#,
            "whole number of milliseconds between 0 and 86400000, got 1.5",
        ),
        (
            "/v1/check",
            r#"{"rule": "per-second", "key": "k", "max_wait_ms": "5"}"#,
            "invalid type",
        ),
        (
            "/v1/peek",
            r#"{"rule": "per-second", "key": "k", "max_wait_ms": 5}"#,
            "only /v1/check waits",
        ),
    ];
    for (path, body, detail) in cases {
        let r = c
            .post(fg.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, headers, problem) = split(r).await;
        assert_eq!(status, 400, "{body}: {problem}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(problem["field"], "max_wait_ms", "{body}: {problem}");
        let text = problem["detail"].as_str().unwrap();
        assert!(text.contains(detail), "{body}: {text}");
    }
    // None of them consumed anything: only the one accepted check did.
    let (_, _, peek) = post_json(
        &c,
        &fg.url("/v1/peek"),
        &json!({"rule": "per-second", "key": "k", "cost": 0}),
    )
    .await;
    assert_eq!(peek["remaining"], 9);
}
