//! `applies_to` (issue 23, item 1): a daily budget for `/v1/check` (docs/client.md's
//! `per-day`, `applies_to = ["api"]`) never limits the requests behind the real nginx, and a
//! rule for HTTP requests only is not one `/v1/check` may name. Before, the budget rule also
//! applied to every proxied request, counted by client IP.

mod proxies_support;
mod serve_support;

use std::path::PathBuf;

use proxies_support::{binary, nginx_launch, send, snippet, start_app, start_proxy, Reply};
use serde_json::json;
use serve_support::{call, client, Floodgate};

const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]

[[rules]]
name = "per-day"
limit = "2/d"
algorithm = "fixed_window"
applies_to = ["api"]

[[rules]]
name = "per-ip"
limit = "3/min"
applies_to = ["http"]
[rules.match]
path_prefix = "/x"
"#;

#[tokio::test]
async fn an_api_budget_never_limits_proxied_requests_and_an_http_rule_is_not_named_by_the_api() {
    let nginx = binary(
        "nginx",
        &[PathBuf::from("/usr/sbin/nginx")],
        "Debian package nginx",
    );
    let app = start_app().await;
    let fg = Floodgate::with_config(CONFIG, &[]);
    let floodgate = fg.api.trim_start_matches("http://").to_string();
    let serves = |r: &Reply| r.status == 200 && r.json()["app"] == "hello";
    let proxy = start_proxy(
        |addr| nginx_launch(&nginx, &snippet("nginx.conf", addr, &floodgate, app)),
        &serves,
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let reply = send(proxy.addr, "/x", &[]).await.unwrap();
        if reply.status == 200 {
            // Only the HTTP rule is announced: the budget is not this request's business.
            assert_eq!(
                reply.header("ratelimit-policy"),
                Some("\"per-ip\";q=3;w=60"),
                "{reply:?}"
            );
        }
        statuses.push(reply.status);
    }
    // per-ip's 3 a minute, never per-day's 2.
    assert_eq!(statuses, [200, 200, 200, 429, 429]);

    let c = client();
    for (expected, code) in [(true, 200), (true, 200), (false, 429)] {
        let (status, body) = call(
            &c,
            &fg,
            "/v1/check",
            json!({"rule": "per-day", "key": "search-api"}),
        )
        .await;
        assert_eq!(status, code, "{body}");
        assert_eq!(body["allowed"], expected, "{body}");
    }
    let (status, body) = call(&c, &fg, "/v1/check", json!({"rule": "per-ip", "key": "k"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["type"], "urn:floodgate:problem:invalid-request");
    assert_eq!(body["field"], "rule");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("rule \"per-ip\" applies only to http (its applies_to)"),
        "{detail}"
    );
    let (status, body) = call(&c, &fg, "/v1/check", json!({"rule": "nope", "key": "k"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .ends_with("unknown rule \"nope\"; rules for /v1/check: per-day"),
        "{body}"
    );
}
