//! A full claim table's 503 never advises a retry after the reservation's end: claims outlive
//! their tokens by a margin, so a table full of claims made with this token's may free room
//! only after it expired (the attacker's review: 60 tokens against `max_claims = 50` were told
//! to come back after their tokens had expired).

mod serve_support;

use serde_json::json;
use serve_support::{advance, call, client, post_json, Floodgate};

const CONFIG: &str = "[store]\nmax_claims = 3\n\n[[rules]]\nname = \"jobs\"\n\
                      algorithm = \"fixed_window\"\nlimit = \"100/1d\"\n";

#[tokio::test]
async fn a_full_claim_table_advises_at_most_the_reservations_remaining_life() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    // Four reservations at once (5-minute tokens); three settled fill the table with claims
    // ending at 5 min + 1 min.
    let mut tokens = Vec::new();
    for key in ["a", "b", "c", "d"] {
        let (status, body) = call(
            &c,
            &fg,
            "/v1/check",
            json!({"rule": "jobs", "key": key, "cost": 5, "reserve": true}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        tokens.push(body["reservation"].clone());
    }
    for token in &tokens[..3] {
        let (status, body) = call(
            &c,
            &fg,
            "/v1/settle",
            json!({"reservation": token, "cost": 5}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    advance(&c, &fg, 50_000_000).await;
    let settle = json!({"reservation": tokens[3], "cost": 1});
    let (status, headers, body) = post_json(&c, &fg.url("/v1/settle"), &settle).await;
    assert_eq!(status, 503, "{body}");
    // The earliest claim ends in 310 s, the token in 250 s: the advice is the token's life.
    assert_eq!(headers["retry-after"], "250", "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("the earliest in 310 s, the reservation in 250 s"),
        "{detail}"
    );
    // Retried as advised, the token has not expired yet (it is refused again, not gone).
    advance(&c, &fg, 249_000_000).await;
    let (status, _, body) = post_json(&c, &fg.url("/v1/settle"), &settle).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["field"], "reservation");
}
