//! Regression test: `"reserve": false` on `/v1/peek` was a 400 although docs/reservations.md
//! says false "is the same as leaving it out". Now it is; `"reserve": true` is still refused
//! (a peek reserves nothing). The real binary.

mod serve_support;

use serde_json::json;
use serve_support::{client, post_json, Floodgate};

#[tokio::test]
async fn reserve_false_on_a_peek_is_leaving_it_out() {
    let fg = Floodgate::with_config("[[rules]]\nname = \"r\"\nlimit = \"3/min\"\n", &[]);
    let c = client();
    let url = fg.url("/v1/peek");
    let (status, _, without) = post_json(&c, &url, &json!({"rule": "r", "key": "alice"})).await;
    assert_eq!(status, 200, "{without}");
    let body = json!({"rule": "r", "key": "alice", "reserve": false});
    let (status, _, with_false) = post_json(&c, &url, &body).await;
    assert_eq!(status, 200, "{with_false}");
    assert_eq!(with_false, without);
    assert!(with_false.get("reservation").is_none(), "{with_false}");
    let body = json!({"rule": "r", "key": "alice", "reserve": true});
    let (status, _, refused) = post_json(&c, &url, &body).await;
    assert_eq!(
        (status, &refused["field"]),
        (400, &json!("reserve")),
        "{refused}"
    );
}
