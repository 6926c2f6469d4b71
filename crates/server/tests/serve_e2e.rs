//! End-to-end tests of `floodgate serve`: the real binary on a free loopback port, driven by a
//! real HTTP client, in front of a real upstream server, on the test-only manual clock (time only
//! moves when a test says so; nothing sleeps). This file: the rules' decisions (several rules,
//! shadow rules, per-rule key caps, cost headers) and their failure modes. The proxy, the API,
//! reload and shutdown have files of their own (`serve_proxy`, `serve_api`, `serve_lifecycle`).

mod serve_support;

use serde_json::json;
use serve_support::{advance, check, client, metric, post_json, split, Floodgate, Upstream};

#[tokio::test]
async fn default_rule_admits_exactly_ten_then_429_and_retry_after_is_honoured() {
    let fg = Floodgate::start(&[]);
    let c = client();
    for i in 0..10u64 {
        let (status, headers, body) =
            post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
        assert_eq!(status, 200, "request {i}: {body}");
        assert_eq!(body["remaining"], 9 - i);
        assert_eq!(headers["ratelimit-policy"], "\"per-client-ip\";q=10;w=10");
    }
    let (status, headers, body) =
        post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
    assert_eq!(status, 429);
    // Token bucket 10/10s: one token per second, so the wait is exactly one second and the
    // bucket is full again after ten.
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["ratelimit"], "\"per-client-ip\";r=0;t=10");
    assert_eq!(body["allowed"], false);
    assert_eq!(body["rule"], "per-client-ip");
    assert_eq!(body["retry_after_us"], 1_000_000);
    assert_eq!(body["retry_after_s"], 1);
    assert_eq!(body["reset_after_us"], 10_000_000);
    assert_eq!(body["decisions"][0]["key"], "alice");
    // Another key is not affected.
    let (status, _, _) = post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "bob")).await;
    assert_eq!(status, 200);

    // One microsecond early is still too early; at the advertised wait it is admitted.
    advance(&c, &fg, 999_999).await;
    let (status, _, body) =
        post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
    assert_eq!((status, &body["retry_after_us"]), (429, &json!(1)));
    advance(&c, &fg, 1).await;
    let (status, _, body) =
        post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["remaining"], 0);

    // Forward-auth applies the same default rule per client IP (here the loopback peer).
    for i in 0..10 {
        let r = c.get(fg.url("/v1/forward-auth")).send().await.unwrap();
        assert_eq!(r.status(), 200, "forward-auth {i}");
        assert_eq!(
            r.headers()["ratelimit"],
            format!("\"per-client-ip\";r={};t={}", 9 - i, i + 1).as_str()
        );
    }
    let (status, headers, body) =
        split(c.get(fg.url("/v1/forward-auth")).send().await.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        body,
        json!({
            "type": "urn:floodgate:problem:rate-limited",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "limit is 10 requests per 10 seconds for this key",
            "rule": "per-client-ip",
            "retry_after": 1,
        })
    );
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_decisions_total{rule=\"per-client-ip\",outcome=\"denied\"}"
        )
        .await,
        Some(3.0)
    );
}

#[tokio::test]
async fn several_rules_admit_all_or_nothing() {
    let fg = Floodgate::with_config(
        r#"
[[rules]]
name = "per-second"
limit = "2/s"

[[rules]]
name = "per-minute"
limit = "3/min"
"#,
        &[],
    );
    let c = client();
    let both = json!({"descriptors": [
        {"rule": "per-second", "key": "alice"},
        {"rule": "per-minute", "key": "alice"},
    ]});
    let peek = |rule: &str| json!({"rule": rule, "key": "alice", "cost": 0});
    for _ in 0..2 {
        let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &both).await;
        assert_eq!(status, 200, "{body}");
    }
    // per-second is exhausted; the denial must not charge per-minute.
    let (status, headers, body) = post_json(&c, &fg.url("/v1/check"), &both).await;
    assert_eq!(status, 429);
    assert_eq!(body["rule"], "per-second");
    assert_eq!(body["retry_after_us"], 500_000);
    assert_eq!(body["decisions"][1]["allowed"], true);
    assert_eq!(
        headers["ratelimit"],
        "\"per-second\";r=0;t=1, \"per-minute\";r=1;t=40"
    );
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("per-minute")).await;
    assert_eq!(
        body["remaining"], 1,
        "per-minute was charged by a denied request"
    );

    // A second later per-second is full again; per-minute has its last unit.
    advance(&c, &fg, 1_000_000).await;
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &both).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decisions"][1]["remaining"], 0);
    // Now per-minute denies (19 s until its next unit), and per-second must keep its unit.
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &both).await;
    assert_eq!(status, 429);
    assert_eq!(body["rule"], "per-minute");
    assert_eq!(body["retry_after_us"], 19_000_000);
    let (status, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("per-second")).await;
    assert_eq!((status, &body["remaining"]), (200, &json!(1)));
}

#[tokio::test]
async fn per_user_and_per_ip_rules_on_forward_auth_are_all_or_nothing() {
    let fg = Floodgate::with_config(
        r#"
[[rules]]
name = "per-ip"
limit = "3/min"
key = "client_ip"

[[rules]]
name = "per-user"
limit = "2/min"
key = "user:x-user-id"
"#,
        &[],
    );
    let c = client();
    let as_user = |user: &'static str| {
        c.get(fg.url("/v1/forward-auth"))
            .header("x-user-id", user)
            .send()
    };
    assert_eq!(as_user("alice").await.unwrap().status(), 200);
    let r = as_user("alice").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["ratelimit"],
        "\"per-ip\";r=1;t=40, \"per-user\";r=0;t=60"
    );
    // per-user denies alice's third request; per-ip must not be charged for it ...
    let (status, _, body) = split(as_user("alice").await.unwrap()).await;
    assert_eq!((status, &body["rule"]), (429, &json!("per-user")));
    // ... so bob, from the same address, still gets the address's last unit, and carol none.
    assert_eq!(as_user("bob").await.unwrap().status(), 200);
    let (status, _, body) = split(as_user("carol").await.unwrap()).await;
    assert_eq!((status, &body["rule"]), (429, &json!("per-ip")));
}

#[tokio::test]
async fn shadow_rules_count_but_never_deny_and_a_full_store_says_so() {
    let fg = Floodgate::with_config(
        r#"
[[rules]]
name = "enforced"
limit = "5/min"

[[rules]]
name = "trial"
limit = "1/min"
shadow = true
"#,
        &[],
    );
    let c = client();
    let both = |key: &str| {
        json!({"descriptors": [
            {"rule": "enforced", "key": key},
            {"rule": "trial", "key": key},
        ]})
    };
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &both("k")).await;
    assert_eq!(status, 200, "{body}");
    // The shadow rule would deny the second request; it is reported, never enforced, and never
    // shown in the headers.
    let (status, headers, body) = post_json(&c, &fg.url("/v1/check"), &both("k")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decisions"][1]["shadow"], true);
    assert_eq!(body["decisions"][1]["allowed"], false);
    assert_eq!(headers["ratelimit"], "\"enforced\";r=3;t=24");
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_decisions_total{rule=\"trial\",outcome=\"shadow_denied\"}"
        )
        .await,
        Some(1.0)
    );

    // A store full of live keys refuses a new key (on_full = "reject") and the answer says why.
    let full = Floodgate::with_config(
        "[store]\nmax_keys = 1\non_full = \"reject\"\n\n[[rules]]\nname = \"enforced\"\nlimit = \"5/min\"\n",
        &[],
    );
    let (status, _, _) = post_json(&c, &full.url("/v1/check"), &check("enforced", "first")).await;
    assert_eq!(status, 200);
    let (status, _, body) =
        post_json(&c, &full.url("/v1/check"), &check("enforced", "newcomer")).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["store_full"], "reject");
    assert!(
        body["detail"].as_str().unwrap().contains("max_keys"),
        "{body}"
    );
    // Counted apart from the keys' own denials.
    let outcome =
        |o: &str| format!("floodgate_decisions_total{{rule=\"enforced\",outcome=\"{o}\"}}");
    assert_eq!(metric(&c, &full, &outcome("store_full")).await, Some(1.0));
    assert_eq!(metric(&c, &full, &outcome("denied")).await, None);
    assert_eq!(
        metric(
            &c,
            &full,
            "floodgate_store_full_total{action=\"reject\",rule=\"enforced\",cap=\"store\"}"
        )
        .await,
        Some(1.0)
    );
    // Forward-auth (this client's IP is a new key too) is refused and counted the same way,
    // and its RateLimit `t` does not invite a retry before Retry-After.
    let (status, headers, body) =
        split(c.get(full.url("/v1/forward-auth")).send().await.unwrap()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["ratelimit"], "\"enforced\";r=0;t=1");
    assert_eq!(metric(&c, &full, &outcome("store_full")).await, Some(2.0));
    assert_eq!(metric(&c, &full, &outcome("denied")).await, None);
}

/// Issue 10 item 7: junk keys sent to `/v1/check` on one rule fill that rule's own
/// `max_keys`, not the store, so new clients of another rule are still admitted.
#[tokio::test]
async fn junk_keys_on_one_rule_do_not_lock_out_another_rules_new_clients() {
    let fg = Floodgate::with_config(
        "[store]\nmax_keys = 10\n\n[[rules]]\nname = \"api\"\nlimit = \"5/min\"\nmax_keys = 3\n\n\
         [[rules]]\nname = \"web\"\nlimit = \"5/min\"\n",
        &[],
    );
    let c = client();
    let mut statuses = Vec::new();
    for i in 0..20 {
        let (status, _, body) = post_json(
            &c,
            &fg.url("/v1/check"),
            &check("api", &format!("junk-{i}")),
        )
        .await;
        if status == 429 {
            assert_eq!(body["store_full"], "reject", "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        3,
        "{statuses:?}"
    );
    for i in 0..7 {
        let (status, _, body) = post_json(
            &c,
            &fg.url("/v1/check"),
            &check("web", &format!("user-{i}")),
        )
        .await;
        assert_eq!(status, 200, "{i}: {body}");
    }
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_store_full_total{action=\"reject\",rule=\"api\",cap=\"rule\"}"
        )
        .await,
        Some(17.0)
    );
    // The store's own cap (10 = 3 + 7) still holds for the rules together.
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &check("web", "user-7")).await;
    assert_eq!((status, &body["store_full"]), (429, &json!("reject")));
}

const COST_HEADER_CONFIG: &str = r#"
[[rules]]
name = "budget"
limit = "5/min"
key = "client_ip"
cost_header = "x-cost"
[rules.match]
path_prefix = "/api"

[[rules]]
name = "search"
limit = "50/min"
key = "client_ip"
cost_header = "x-cost"
[rules.match]
path_prefix = "/search"
[[rules.route_costs]]
path_prefix = "/search/deep"
cost = 20
"#;

#[tokio::test]
async fn a_cost_header_above_the_capacity_or_not_a_positive_number_is_refused() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(COST_HEADER_CONFIG, &["--upstream", &upstream.url]);
    let c = client();
    let auth = |path: &str, cost: &str| {
        c.get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-uri", path)
            .header("x-cost", cost)
            .send()
    };

    // Above the capacity (5), also when too large for any integer type: a request asking for
    // more than the policy can ever grant is a 400 naming the rule on forward-auth and the
    // proxy, counted, and nothing is charged (it used to be clamped to 5 and admitted).
    for big in ["6", "99999999999999999999"] {
        let (status, headers, body) = split(auth("/api/x", big).await.unwrap()).await;
        assert_eq!(status, 400, "{big}: {body}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(body["type"], "urn:floodgate:problem:cost-exceeds-capacity");
        assert_eq!(body["rule"], "budget");
        let (status, _, body) = split(
            c.get(fg.proxy_url("/api/x"))
                .header("x-cost", big)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "proxy {big}: {body}");
        assert_eq!(body["type"], "urn:floodgate:problem:cost-exceeds-capacity");
    }
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_decisions_total{rule=\"budget\",outcome=\"cost_exceeds_capacity\"}"
        )
        .await,
        Some(4.0)
    );
    let r = auth("/api/x", "5").await.unwrap();
    assert_eq!(r.status(), 200, "the whole capacity at once is admitted");
    assert_eq!(r.headers()["ratelimit"], "\"budget\";r=0;t=60");
    advance(&c, &fg, 60_000_000).await;

    // Not a positive whole number: 400 naming the header, on forward-auth and the proxy, and
    // nothing is charged.
    for bad in ["0", "-1", "abc", "+2", "1.5"] {
        let (status, headers, body) = split(auth("/api/x", bad).await.unwrap()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(body["type"], "urn:floodgate:problem:invalid-cost");
        assert_eq!(body["field"], "x-cost");
        assert_eq!(body["rule"], "budget");
        let (status, _, body) = split(
            c.get(fg.proxy_url("/api/x"))
                .header("x-cost", bad)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "proxy {bad}: {body}");
        assert_eq!(body["field"], "x-cost");
    }
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_decisions_total{rule=\"budget\",outcome=\"invalid_cost\"}"
        )
        .await,
        Some(10.0)
    );
    let r = auth("/api/x", "2").await.unwrap();
    assert_eq!(r.headers()["ratelimit"], "\"budget\";r=3;t=24");

    // A rule with route costs: a matching route wins; elsewhere the header is read and checked.
    let r = auth("/search/deep", "abc").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit"], "\"search\";r=30;t=24");
    let (status, _, body) = split(auth("/search/other", "abc").await.unwrap()).await;
    assert_eq!((status, &body["field"]), (400, &json!("x-cost")));
    let r = auth("/search/other", "7").await.unwrap();
    assert_eq!(r.headers()["ratelimit"], "\"search\";r=23;t=33");
}

#[tokio::test]
async fn a_store_failure_counts_each_rule_by_its_own_failure_mode() {
    // Port 1 on loopback refuses connections: every store call fails at once.
    let fg = Floodgate::with_config(
        r#"
[store]
kind = "redis"
url = "redis://127.0.0.1:1"

[[rules]]
name = "lenient"
limit = "5/min"

[[rules]]
name = "strict"
limit = "5/min"
failure_mode = "closed"
[rules.match]
path_prefix = "/pay"

[[rules]]
name = "watch"
limit = "5/min"
shadow = true
[rules.match]
path_prefix = "/nowhere"
"#,
        &[],
    );
    let c = client();
    let auth = |path: &str| {
        c.get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-uri", path)
            .send()
    };
    assert_eq!(auth("/home").await.unwrap().status(), 200, "open alone");
    assert_eq!(auth("/pay").await.unwrap().status(), 503, "one closed rule");
    let both = json!({"descriptors": [
        {"rule": "lenient", "key": "k"},
        {"rule": "strict", "key": "k"},
    ]});
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &both).await;
    assert_eq!(status, 503, "{body}");
    let outcome = |rule: &str, o: &str| {
        format!("floodgate_decisions_total{{rule=\"{rule}\",outcome=\"{o}\"}}")
    };
    // The request's fate is the batch's; the label is each rule's own mode.
    assert_eq!(
        metric(&c, &fg, &outcome("lenient", "error_open")).await,
        Some(3.0)
    );
    assert_eq!(
        metric(&c, &fg, &outcome("lenient", "error_closed")).await,
        None
    );
    assert_eq!(
        metric(&c, &fg, &outcome("strict", "error_closed")).await,
        Some(2.0)
    );
    // A shadow rule never enforces: its failed store call admits and is counted like the
    // middleware counts it (error_open and a store error), not only logged.
    // (A refused connection surfaces as a timeout or as unavailable, depending on timing.)
    let store_errors = || async {
        let mut total = 0.0;
        for kind in ["unavailable", "timeout", "other"] {
            let series = format!("floodgate_store_errors_total{{kind=\"{kind}\"}}");
            total += metric(&c, &fg, &series).await.unwrap_or(0.0);
        }
        total
    };
    let before = store_errors().await;
    let shadow = json!({"rule": "watch", "key": "k"});
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &shadow).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        metric(&c, &fg, &outcome("watch", "error_open")).await,
        Some(1.0)
    );
    assert_eq!(store_errors().await, before + 1.0);
}

#[tokio::test]
async fn the_local_fallback_shows_the_quota_it_enforces() {
    // Redis refuses connections (port 1): every decision is the local fallback's, each limit
    // divided by the two instances.
    let fg = Floodgate::with_config(
        r#"
[store]
kind = "redis"
url = "redis://127.0.0.1:1"
fallback = "local"
instances = 2

[[rules]]
name = "per-user"
limit = "10/min"
"#,
        &[],
    );
    let c = client();
    let (status, headers, body) =
        post_json(&c, &fg.url("/v1/check"), &check("per-user", "u")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["limit"], 5);
    assert_eq!(headers["ratelimit-policy"], "\"per-user\";q=5;w=60");
    let r = c.get(fg.url("/v1/forward-auth")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], "\"per-user\";q=5;w=60");
    assert_eq!(r.headers()["ratelimit"], "\"per-user\";r=4;t=12");
}
