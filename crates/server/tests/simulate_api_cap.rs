//! Regression test: `/v1/simulate`'s refusal of too many requests advised "or raise
//! max_requests" with no word of the API's cap (50,000; 12,000 with `all`), so a caller already
//! at the cap was told to do what the API refuses. The detail now names the cap.

mod serve_support;

use serde_json::json;
use serve_support::{client, post_json, Floodgate};

#[tokio::test]
async fn too_many_requests_names_the_apis_cap() {
    let fg = Floodgate::start(&[]);
    let c = client();
    // 1,000/s for 60 s: 60,000 requests, above the cap of 50,000.
    let body = json!({"scenario": "flood", "algorithm": "gcra", "limit": "10/1s",
                      "rate": "1000/1s", "duration": "60s"});
    let (status, _, answer) = post_json(&c, &fg.url("/v1/simulate"), &body).await;
    // Well formed (the document's schema holds) but more requests than the cap: a 422.
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["field"], "max_requests", "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.contains("at most 50000"), "{detail}");
    assert!(detail.contains("12000 with algorithm all"), "{detail}");
    assert!(!detail.contains("--"), "{detail}");
}
