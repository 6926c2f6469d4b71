//! Reservation claims in the memory store, through the real binary on the manual clock: a
//! reservation of nothing gets no token (so it cannot fill the claim table), the table has a
//! bound of its own (`[store] max_claims`, apart from `max_keys`), and a full table refuses a
//! settle with a 503 before anything is consumed: the refund is made by the same token later.

mod serve_support;

use serde_json::json;
use serve_support::{advance, call, client, post_json, remaining, Floodgate};

const RULE: &str = "[[rules]]\nname = \"jobs\"\nalgorithm = \"fixed_window\"\nlimit = \"100/1d\"\n";

/// The case: at `max_keys = 20`, 22 free reserve+settle pairs used to fill the claim
/// table, and a genuine settle then was a 503 whose refund was lost.
#[tokio::test]
async fn twenty_two_free_reservations_at_max_keys_20_leave_a_genuine_settle_its_refund() {
    let fg = Floodgate::with_config(&format!("[store]\nmax_keys = 20\n\n{RULE}"), &[]);
    let c = client();
    for i in 0..22 {
        let (status, body) = call(
            &c,
            &fg,
            "/v1/check",
            json!({"rule": "jobs", "key": "free", "cost": 0, "reserve": true}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        if let Some(token) = body.get("reservation") {
            // As the issue did: settle whatever token was given.
            let (status, body) = call(
                &c,
                &fg,
                "/v1/settle",
                json!({"reservation": token, "cost": 0}),
            )
            .await;
            assert_eq!(status, 200, "free pair {i}: {body}");
        }
    }
    let (status, body) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"rule": "jobs", "key": "real", "cost": 10, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &fg, "jobs", "real").await, 90);
    let (status, body) = call(
        &c,
        &fg,
        "/v1/settle",
        json!({"reservation": body["reservation"], "cost": 3}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decisions"][0]["remaining"], 97, "{body}");
    assert_eq!(remaining(&c, &fg, "jobs", "real").await, 97);
}

#[tokio::test]
async fn a_reservation_of_nothing_gets_no_token() {
    let fg = Floodgate::with_config(RULE, &[]);
    let c = client();
    let (status, body) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"rule": "jobs", "key": "k", "cost": 0, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["allowed"], true);
    assert!(body.get("reservation").is_none(), "{body}");
    assert!(body.get("reservation_expires_in_us").is_none(), "{body}");
    // Cost 0 on one item and 2 on another: a token holding both (settled with two costs).
    let (status, body) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"descriptors": [{"rule": "jobs", "key": "a", "cost": 0},
                               {"rule": "jobs", "key": "b", "cost": 2}],
               "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(
        &c,
        &fg,
        "/v1/settle",
        json!({"reservation": body["reservation"], "costs": [0, 1]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &fg, "jobs", "b").await, 99);
}

#[tokio::test]
async fn a_full_claim_table_refuses_a_settle_before_consuming_and_the_same_token_settles_later() {
    let fg = Floodgate::with_config(&format!("[store]\nmax_claims = 3\n\n{RULE}"), &[]);
    let c = client();
    // Three settled reservations: three live claims, each until its token's end (5 minutes)
    // plus a minute.
    for key in ["a", "b", "c"] {
        let (_, body) = call(
            &c,
            &fg,
            "/v1/check",
            json!({"rule": "jobs", "key": key, "cost": 5, "reserve": true}),
        )
        .await;
        let (status, body) = call(
            &c,
            &fg,
            "/v1/settle",
            json!({"reservation": body["reservation"], "cost": 5}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    advance(&c, &fg, 100_000_000).await;
    let (_, reserved) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"rule": "jobs", "key": "d", "cost": 10, "reserve": true}),
    )
    .await;
    let settle = json!({"reservation": reserved["reservation"], "cost": 4});
    let (status, headers, body) = post_json(&c, &fg.url("/v1/settle"), &settle).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        headers["content-type"], "application/problem+json",
        "{headers:?}"
    );
    // The earliest claim ends at 5 min + 1 min after the first settle: 260 s from now.
    assert_eq!(headers["retry-after"], "260");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("3 live reservation claims ([store] max_claims): nothing was settled"),
        "{detail}"
    );
    assert_eq!(body["field"], "reservation");
    // Nothing was consumed or refunded.
    assert_eq!(remaining(&c, &fg, "jobs", "d").await, 90);
    // Again at once: the same answer, nothing settled.
    let (status, _, _) = post_json(&c, &fg.url("/v1/settle"), &settle).await;
    assert_eq!(status, 503);
    // Once the first claim ends the same token settles, refund and all.
    advance(&c, &fg, 260_000_000).await;
    let (status, body) = call(&c, &fg, "/v1/settle", settle.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &fg, "jobs", "d").await, 96);
    // And only once.
    let (status, body) = call(&c, &fg, "/v1/settle", settle).await;
    assert_eq!(status, 409, "{body}");
}

/// The settle body has the API's bound (64 KiB): a larger one is a 413 naming the body, before
/// any token is read.
#[tokio::test]
async fn a_settle_body_over_64_kib_is_a_413_naming_the_body() {
    let fg = Floodgate::with_config(RULE, &[]);
    let c = client();
    let huge = format!("v2.abcdefgh.{}.x", "A".repeat(70_000));
    let (status, headers, body) = post_json(
        &c,
        &fg.url("/v1/settle"),
        &json!({"reservation": huge, "cost": 1}),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body["field"], "body");
    // Within the bound, a long junk token is a 400 naming the reservation.
    let long = format!("v2.abcdefgh.{}.x", "A".repeat(60_000));
    let (status, body) = call(
        &c,
        &fg,
        "/v1/settle",
        json!({"reservation": long, "cost": 1}),
    )
    .await;
    assert_eq!(
        (status, &body["field"]),
        (400, &json!("reservation")),
        "{body}"
    );
}
