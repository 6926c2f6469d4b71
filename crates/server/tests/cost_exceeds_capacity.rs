//! One problem type for one fault (issue 23, item 10): a cost above the rule's capacity is
//! `urn:floodgate:problem:cost-exceeds-capacity` naming the rule on `/v1/check`, forward-auth
//! and the proxy alike (`/v1/check` was `invalid-request` naming only `cost`).

mod serve_support;

use serde_json::json;
use serve_support::{client, post_json, split, Floodgate, Upstream};

const CONFIG: &str = r#"
[[rules]]
name = "api"
limit = "5/min"
key = "global"
cost_header = "x-cost"
"#;

#[tokio::test]
async fn a_cost_above_capacity_is_one_problem_on_every_front_end() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(CONFIG, &["--upstream", &upstream.url]);
    let c = client();
    let (status, _, check) = post_json(
        &c,
        &fg.url("/v1/check"),
        &json!({"rule": "api", "key": "k", "cost": 6}),
    )
    .await;
    let forward_auth = c
        .get(fg.url("/v1/forward-auth"))
        .header("x-forwarded-uri", "/x")
        .header("x-cost", "6")
        .send()
        .await
        .unwrap();
    let (fa_status, _, fa) = split(forward_auth).await;
    let proxied = c
        .get(fg.proxy_url("/x"))
        .header("x-cost", "6")
        .send()
        .await
        .unwrap();
    let (proxy_status, _, proxy) = split(proxied).await;
    for (name, status, body) in [
        ("check", status, &check),
        ("forward-auth", fa_status, &fa),
        ("proxy", proxy_status, &proxy),
    ] {
        assert_eq!(status, 400, "{name}: {body}");
        assert_eq!(
            body["type"], "urn:floodgate:problem:cost-exceeds-capacity",
            "{name}: {body}"
        );
        assert_eq!(body["title"], "Request cost exceeds capacity", "{name}");
        assert_eq!(body["rule"], "api", "{name}: {body}");
    }
    assert_eq!(check["field"], "cost", "{check}");
}
