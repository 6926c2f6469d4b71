//! End-to-end tests of `floodgate serve`: the real binary on a free loopback port, driven by a
//! real HTTP client, in front of a real upstream server, on the test-only manual clock (time only
//! moves when a test says so; nothing sleeps).

mod serve_support;

use serde_json::{json, Value};
use serve_support::{
    advance, client, metric, post_json, split, write_atomically, Floodgate, Upstream,
};

fn check(rule: &str, key: &str) -> Value {
    json!({ "rule": rule, "key": key })
}

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

const PROXY_CONFIG: &str = r#"
[[rules]]
name = "per-ip"
limit = "3/min"
key = "client_ip"
[rules.match]
path_prefix = "/api"

[[rules]]
name = "search-budget"
limit = "200/min"
key = "client_ip"
[rules.match]
path_prefix = "/search"
[[rules.route_costs]]
path_prefix = "/search/deep"
cost = 100
"#;

#[tokio::test]
async fn proxy_streams_bodies_strips_hop_by_hop_headers_and_limits_by_peer() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(PROXY_CONFIG, &["--upstream", &upstream.url]);
    let c = client();

    // Outside /api no rule applies: a 1 MiB body goes there and back unchanged, many times.
    let body: Vec<u8> = (0..1_048_576u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for _ in 0..5 {
        let r = c
            .post(fg.proxy_url("/echo-body"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("ratelimit").is_none());
        assert_eq!(r.bytes().await.unwrap().as_ref(), body.as_slice());
    }

    // Under /api: 3 per minute per client IP. The peer (127.0.0.1) is not a trusted proxy, so
    // whatever X-Forwarded-For says, every request counts against 127.0.0.1.
    for (i, xff) in ["203.0.113.9", "198.51.100.1", "192.0.2.77"]
        .iter()
        .enumerate()
    {
        let r = c
            .get(fg.proxy_url("/api/info?x=1"))
            .header("x-forwarded-for", *xff)
            .header("connection", "x-secret")
            .header("x-secret", "must not reach the upstream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "request {i}");
        // 3/min: one unit every 20 s; after i + 1 units the bucket is full again in 20(i+1) s.
        assert_eq!(
            r.headers()["ratelimit"],
            format!("\"per-ip\";r={};t={}", 2 - i, 20 * (i + 1)).as_str()
        );
        let seen: Value = r.json().await.unwrap();
        assert_eq!(seen["path"], "/api/info?x=1");
        // The peer is not a trusted proxy: the client's X-Forwarded-For is replaced.
        assert_eq!(seen["x_forwarded_for"], "127.0.0.1");
        assert_eq!(seen["x_secret"], Value::Null, "hop-by-hop header leaked");
    }
    let (status, headers, body) = split(
        c.get(fg.proxy_url("/api/info"))
            .header("x-forwarded-for", "203.0.113.200")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "20");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(
        body["detail"],
        "limit is 3 requests per minute for this key"
    );
    assert_eq!(body["rule"], "per-ip");

    // Per-route cost: a deep search costs 100 of the 200 units (the route's cost is decided by
    // the rule itself; no header the client sends is read for it).
    for remaining in [100, 0] {
        let r = c
            .get(fg.proxy_url("/search/deep?q=x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["ratelimit"],
            format!(
                "\"search-budget\";r={remaining};t={}",
                (200 - remaining) * 3 / 10
            )
            .as_str()
        );
    }
    let r = c.get(fg.proxy_url("/search/deep")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    // A shallow search costs the default 1 unit: also denied now, the budget is spent.
    let r = c.get(fg.proxy_url("/search/shallow")).send().await.unwrap();
    assert_eq!(r.status(), 429);

    advance(&c, &fg, 20_000_000).await;
    let r = c.get(fg.proxy_url("/api/info")).send().await.unwrap();
    assert_eq!(r.status(), 200, "admitted again after Retry-After");
}

#[tokio::test]
async fn the_proxy_passes_forwarding_headers_only_from_trusted_peers() {
    let upstream = Upstream::start().await;
    let c = client();
    let untrusted = Floodgate::start(&["--upstream", &upstream.url]);
    let trusted = Floodgate::with_config(
        "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[[rules]]\nname = \"r\"\nlimit = \"5/min\"\n",
        &["--upstream", &upstream.url],
    );
    let seen = |fg: &Floodgate| {
        let url = fg.proxy_url("/who");
        let c = c.clone();
        async move {
            c.get(url)
                .header("host", "app.example")
                .header("x-forwarded-for", "198.51.100.7")
                .header("x-forwarded-proto", "https")
                .header("x-forwarded-host", "admin.internal")
                .header("x-real-ip", "198.51.100.7")
                .header("forwarded", "for=198.51.100.7;proto=https")
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    // A client talking to us directly cannot say who it is or how it came.
    let got = seen(&untrusted).await;
    assert_eq!(got["x_forwarded_for"], "127.0.0.1");
    assert_eq!(got["x_forwarded_proto"], "http");
    assert_eq!(got["x_forwarded_host"], "app.example");
    assert_eq!(
        (&got["x_real_ip"], &got["forwarded"]),
        (&Value::Null, &Value::Null)
    );
    // A trusted proxy's headers are passed on, and it is appended to X-Forwarded-For.
    let got = seen(&trusted).await;
    assert_eq!(got["x_forwarded_for"], "198.51.100.7, 127.0.0.1");
    assert_eq!(got["x_forwarded_proto"], "https");
    assert_eq!(got["x_forwarded_host"], "admin.internal");
    assert_eq!(got["x_real_ip"], "198.51.100.7");
    assert_eq!(got["forwarded"], "for=198.51.100.7;proto=https");
}

#[tokio::test]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    let fg = Floodgate::with_config(
        r#"
[server]
trusted_proxies = ["127.0.0.1/32"]

[[rules]]
name = "per-ip"
limit = "2/min"
key = "client_ip"
[rules.match]
path_prefix = "/api"
"#,
        &[],
    );
    let c = client();
    let auth = |xff: &'static str, uri: &'static str| {
        c.get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-for", xff)
            .header("x-forwarded-method", "GET")
            .header("x-forwarded-host", "app.example")
            .header("x-forwarded-uri", uri)
            .send()
    };
    assert_eq!(auth("203.0.113.1", "/api/a").await.unwrap().status(), 200);
    assert_eq!(auth("203.0.113.1", "/api/b").await.unwrap().status(), 200);
    assert_eq!(auth("203.0.113.1", "/api/c").await.unwrap().status(), 429);
    // Another client behind the same proxy has its own allowance.
    assert_eq!(auth("203.0.113.2", "/api/a").await.unwrap().status(), 200);
    // A client-written leftmost entry does not help: the proxy's entry (rightmost) counts.
    assert_eq!(
        auth("9.9.9.9, 203.0.113.1", "/api/a")
            .await
            .unwrap()
            .status(),
        429
    );
    // The original URI decides which rules apply: /public is not limited (no headers either).
    let r = auth("203.0.113.1", "/public").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("ratelimit").is_none());
    // nginx asks for a 403 on denial (auth_request turns a 429 into a 500).
    let r = c
        .get(fg.url("/v1/forward-auth?deny_status=403"))
        .header("x-forwarded-for", "203.0.113.1")
        .header("x-original-uri", "/api/z")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["retry-after"], "30");
    let problem: Value = r.json().await.unwrap();
    assert_eq!(
        problem["status"], 403,
        "the body's status matches the HTTP status"
    );
    assert_eq!(problem["title"], "Forbidden", "and so does its title");
    assert_eq!(problem["type"], "urn:floodgate:problem:rate-limited");
    // nginx auth_request style: X-Original-URI.
    let r = c
        .get(fg.url("/v1/forward-auth"))
        .header("x-forwarded-for", "203.0.113.3")
        .header("x-original-uri", "/api/z")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["ratelimit"], "\"per-ip\";r=1;t=30");

    // Without trusted proxies (the embedded default), X-Forwarded-For is ignored: eleven
    // "different" clients are all the loopback peer, limited to 10.
    let untrusted = Floodgate::start(&[]);
    let mut admitted = 0;
    for i in 0..11 {
        let r = c
            .get(untrusted.url("/v1/forward-auth"))
            .header("x-forwarded-for", format!("203.0.113.{}", i + 1))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10);
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

#[tokio::test]
async fn store_and_rejection_metrics_are_exported_from_the_start() {
    let fg = Floodgate::start(&[]);
    let c = client();
    for series in [
        "floodgate_store_full_total{action=\"reject\"}",
        "floodgate_store_full_total{action=\"admit_untracked\"}",
        "floodgate_store_expirations_total",
        "floodgate_store_evictions_total",
        "floodgate_store_errors_total{kind=\"timeout\"}",
        "floodgate_requests_rejected_total{reason=\"method_not_allowed\"}",
        "floodgate_config_reloads_total{result=\"error\"}",
    ] {
        assert_eq!(metric(&c, &fg, series).await, Some(0.0), "{series}");
    }
}

const RELOAD_V1: &str = r#"
[[rules]]
name = "kept"
limit = "5/min"

[[rules]]
name = "changed"
limit = "5/min"
"#;

const RELOAD_V2: &str = r#"
[[rules]]
name = "kept"
limit = "5/min"

[[rules]]
name = "changed"
limit = "6/min"

[[rules]]
name = "added"
limit = "1/min"
"#;

async fn readyz(c: &reqwest::Client, fg: &Floodgate) -> Value {
    c.get(fg.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn hot_reload_keeps_unchanged_rules_and_rejects_invalid_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rules.toml");
    write_atomically(&config, RELOAD_V1);
    // Reload on SIGHUP only, so each signal is exactly one reload.
    let fg = Floodgate::start(&[
        "--config",
        config.to_str().unwrap(),
        "--watch-interval",
        "0",
    ]);
    let c = client();
    for rule in ["kept", "changed"] {
        for _ in 0..3 {
            let (status, _, _) = post_json(&c, &fg.url("/v1/check"), &check(rule, "k")).await;
            assert_eq!(status, 200);
        }
    }

    write_atomically(&config, RELOAD_V2);
    fg.signal("HUP");
    // Bounded polling for the reload to land (the file watcher may see it first).
    let mut reloaded = false;
    for _ in 0..2_000 {
        let ready = readyz(&c, &fg).await;
        if ready["config"]["rules"].as_array().map(Vec::len) == Some(3) {
            reloaded = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(reloaded, "reload did not land:\n{}", fg.logs());
    assert_eq!(readyz(&c, &fg).await["config"]["generation"], 2);
    let peek = |rule: &str| json!({"rule": rule, "key": "k", "cost": 0});
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("kept")).await;
    assert_eq!(body["remaining"], 2, "an unchanged rule keeps its counters");
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("changed")).await;
    assert_eq!(
        body["remaining"], 6,
        "a rule whose quota changed starts fresh"
    );
    let (status, _, _) = post_json(&c, &fg.url("/v1/check"), &check("added", "k")).await;
    assert_eq!(status, 200);
    assert!(metric(&c, &fg, "floodgate_config_reloads_total{result=\"ok\"}").await >= Some(1.0));

    // An invalid file is rejected, counted and logged; the old rules keep serving.
    let generation = readyz(&c, &fg).await["config"]["generation"].clone();
    write_atomically(
        &config,
        &RELOAD_V2.replace("limit = \"1/min\"", "limit = \"10/fortnight\""),
    );
    fg.signal("HUP");
    let mut counted = false;
    for _ in 0..2_000 {
        if metric(&c, &fg, "floodgate_config_reloads_total{result=\"error\"}").await >= Some(1.0) {
            counted = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(counted, "invalid reload not counted:\n{}", fg.logs());
    assert_eq!(readyz(&c, &fg).await["config"]["generation"], generation);
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("kept")).await;
    assert_eq!(body["remaining"], 2);
    assert!(
        fg.logs()
            .contains("rules[2].limit: invalid quota \\\"10/fortnight\\\"")
            || fg
                .logs()
                .contains("rules[2].limit: invalid quota \"10/fortnight\""),
        "{}",
        fg.logs()
    );
}

#[tokio::test]
async fn a_changed_config_file_is_picked_up_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rules.toml");
    write_atomically(&config, RELOAD_V1);
    let fg = Floodgate::start(&["--config", config.to_str().unwrap()]);
    let c = client();
    write_atomically(&config, RELOAD_V2);
    // The watcher checks the file every second; bounded polling until it has.
    let mut rules = 0;
    for _ in 0..100_000 {
        rules = readyz(&c, &fg).await["config"]["rules"]
            .as_array()
            .map_or(0, Vec::len);
        if rules == 3 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(rules, 3, "{}", fg.logs());
}

#[tokio::test]
async fn bad_requests_get_problem_json_naming_the_field_and_touch_nothing() {
    let fg = Floodgate::start(&[]);
    let c = client();
    let url = fg.url("/v1/check");
    let cases: Vec<(String, u16, &str, &str)> = vec![
        ("{\"rule\": \"per-client-ip\", \"key\": \"alice\"".into(), 400, "body", "invalid JSON"),
        ("[1, 2]".into(), 400, "body", "invalid JSON"),
        (r#"{"rule": "per-client-ip", "key": "alice", "kost": 1}"#.into(), 400, "kost", "unknown field"),
        (r#"{"rule": 7, "key": "alice"}"#.into(), 400, "rule", "invalid type"),
        (r#"{"rule": "nope", "key": "alice"}"#.into(), 400, "rule", "unknown rule \"nope\""),
        (r#"{"key": "alice"}"#.into(), 400, "rule", "missing"),
        (r#"{"rule": "per-client-ip", "key": ""}"#.into(), 400, "key", "between 1 and 256 bytes"),
        (
            format!(r#"{{"rule": "per-client-ip", "key": "{}"}}"#, "a".repeat(257)),
            400,
            "key",
            "between 1 and 256 bytes",
        ),
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": -1}"#.into(), 400, "cost", "whole number between 0 and 1000000"),
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": 1.5}"#.into(), 400, "cost", "whole number between 0 and 1000000"),
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": 1.0}"#.into(), 400, "cost", "written without a fraction or exponent, got 1.0"),
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": 1e300}"#.into(), 400, "cost", "whole number between 0 and 1000000"),
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": 11}"#.into(), 400, "cost", "exceeds the capacity"),
        (r#"{"descriptors": []}"#.into(), 400, "descriptors", "between 1 and 16"),
        // Repeated members are refused, never "the last one wins" (the first would be charged).
        (r#"{"rule": "zzz", "rule": "per-client-ip", "key": "alice"}"#.into(), 400, "rule", "duplicate field `rule`"),
        (
            r#"{"descriptors": [{"rule": "per-client-ip", "key": "a", "key": "b"}]}"#.into(),
            400,
            "descriptors[0].key",
            "duplicate field `key`",
        ),
        // A missing member is named itself, not its object.
        (
            r#"{"descriptors": [{"rule": "per-client-ip", "key": "a"}, {"rule": "per-client-ip"}]}"#.into(),
            400,
            "descriptors[1].key",
            "missing field `key`",
        ),
        (
            r#"{"descriptors": [{"rule": "per-client-ip", "key": "alice"}, {"rule": "x", "key": "alice"}]}"#.into(),
            400,
            "descriptors[1].rule",
            "unknown rule",
        ),
        (
            r#"{"descriptors": [{"rule": "per-client-ip", "key": "alice", "cost": 10}, {"rule": "per-client-ip", "key": "alice", "cost": 1}]}"#.into(),
            400,
            "descriptors[1].cost",
            "rule \"per-client-ip\" and key \"alice\" cost 11 together",
        ),
        (format!(r#"{{"rule": "per-client-ip", "key": "alice", "pad": "{}"}}"#, "x".repeat(70_000)), 413, "body", "at most 65536 bytes"),
    ];
    for (body, status, field, detail) in cases {
        let r = c
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (got, headers, problem) = split(r).await;
        let shown = &body[..body.len().min(80)];
        assert_eq!(got, status, "{shown}: {problem}");
        assert_eq!(
            headers["content-type"], "application/problem+json",
            "{shown}"
        );
        assert_eq!(problem["field"], field, "{shown}: {problem}");
        assert_eq!(problem["status"], status, "{shown}");
        let (problem_type, title) = if status == 413 {
            (
                "urn:floodgate:problem:request-too-large",
                "request too large",
            )
        } else {
            ("urn:floodgate:problem:invalid-request", "invalid request")
        };
        assert_eq!(problem["title"], title, "{shown}");
        assert_eq!(problem["type"], problem_type, "{shown}");
        let text = problem["detail"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("{field}: ")) && text.contains(detail),
            "{shown}: {text}"
        );
    }
    // Nothing above touched alice's counter.
    let (_, _, body) = post_json(
        &c,
        &fg.url("/v1/peek"),
        &json!({"rule": "per-client-ip", "key": "alice", "cost": 0}),
    )
    .await;
    assert_eq!(body["remaining"], 10);
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_decisions_total{rule=\"per-client-ip\",outcome=\"allowed\"}"
        )
        .await,
        None
    );
    // The two unknown rules are counted as such, not as invalid requests.
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_requests_rejected_total{reason=\"unknown_rule\"}"
        )
        .await,
        Some(2.0)
    );
}

#[tokio::test]
async fn admin_api_needs_a_token_and_resets_keys() {
    let c = client();
    let off = Floodgate::start(&[]);
    let (status, headers, body) = split(
        c.get(off.url("/v1/keys/per-client-ip/alice"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("admin API is disabled"));

    let token = "test-token-0123456789";
    let fg = Floodgate::start(&["--admin-token", token]);
    for _ in 0..4 {
        post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
    }
    let key_url = fg.url("/v1/keys/per-client-ip/alice");
    assert_eq!(c.get(&key_url).send().await.unwrap().status(), 401);
    assert_eq!(
        c.get(&key_url)
            .bearer_auth("wrong-token-0123456789")
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    let (status, _, body) = split(c.get(&key_url).bearer_auth(token).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(
        (&body["remaining"], &body["store_key"], &body["tracked"]),
        (&json!(6), &json!("key=alice"), &json!(true))
    );
    let (status, _, body) =
        split(c.delete(&key_url).bearer_auth(token).send().await.unwrap()).await;
    assert_eq!((status, &body["existed"]), (200, &json!(true)));
    // After a reset (as for a key never seen) the full quota says it is not tracked.
    let (_, _, body) = split(c.get(&key_url).bearer_auth(token).send().await.unwrap()).await;
    assert_eq!(
        (&body["remaining"], &body["tracked"]),
        (&json!(10), &json!(false))
    );
    let (_, _, body) = split(
        c.get(fg.url("/v1/keys/per-client-ip/never-seen"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (&body["remaining"], &body["tracked"]),
        (&json!(10), &json!(false))
    );
    // Keys derived from requests are named in their encoded form.
    c.get(fg.url("/v1/forward-auth")).send().await.unwrap();
    let (_, _, body) = split(
        c.get(fg.url("/v1/keys/per-client-ip/ip=127.0.0.1?encoded=true"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["remaining"], 9);
    let (status, headers, body) = split(
        c.get(fg.url("/v1/keys/nope/alice"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(
        (&body["title"], &body["field"], &body["type"]),
        (
            &json!("unknown rule"),
            &json!("rule"),
            &json!("urn:floodgate:problem:unknown-rule")
        )
    );
    // The scheme is case-insensitive (RFC 9110 section 11.1).
    let r = c
        .get(&key_url)
        .header("authorization", format!("bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Client keys are limited to 256 bytes here as on /v1/check.
    let (status, _, body) = split(
        c.get(fg.url(&format!("/v1/keys/per-client-ip/{}", "k".repeat(257))))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &body["field"]), (400, &json!("key")), "{body}");
    let r = c
        .get(fg.url(&format!("/v1/keys/per-client-ip/{}", "k".repeat(256))))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn an_ipv6_client_key_is_named_with_an_escaped_slash() {
    let fg = Floodgate::with_config(
        "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\nadmin_token = \"test-token-0123456789\"\n\n\
         [[rules]]\nname = \"per-ip\"\nlimit = \"5/min\"\nkey = \"client_ip\"\n",
        &[],
    );
    let c = client();
    let r = c
        .get(fg.url("/v1/forward-auth"))
        .header("x-forwarded-for", "2001:db8::1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The IPv6 client is counted per /64: its key is ip=2001:db8::/64, whose '/' is %2F in a path.
    let (status, _, body) = split(
        c.get(fg.url("/v1/keys/per-ip/ip=2001:db8::%2F64?encoded=true"))
            .bearer_auth("test-token-0123456789")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["store_key"], &body["remaining"]),
        (&json!("ip=2001:db8::/64"), &json!(4))
    );
}

#[tokio::test]
async fn wrong_methods_and_bad_query_parameters_get_problem_json_naming_the_field() {
    let token = "test-token-0123456789";
    let fg = Floodgate::start(&["--admin-token", token]);
    let c = client();
    // 405: problem+json naming the method, with Allow kept.
    for (method, path, allow) in [
        (reqwest::Method::GET, "/v1/check", "POST"),
        (
            reqwest::Method::PUT,
            "/v1/keys/per-client-ip/alice",
            "GET,HEAD,DELETE",
        ),
        (reqwest::Method::DELETE, "/v1/forward-auth", "GET,HEAD,POST"),
    ] {
        let (status, headers, body) = split(
            c.request(method.clone(), fg.url(path))
                .bearer_auth(token)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 405, "{method} {path}: {body}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(headers["allow"], allow, "{method} {path}");
        assert_eq!(
            (&body["field"], &body["status"]),
            (&json!("method"), &json!(405))
        );
    }
    // Bad query values: 400 problem+json naming the parameter.
    for (path, field, detail) in [
        (
            "/v1/forward-auth?deny_status=abc",
            "deny_status",
            "must be a whole number",
        ),
        (
            "/v1/forward-auth?deny_status=500",
            "deny_status",
            "must be 429 or 403",
        ),
        (
            "/v1/forward-auth?deny_status=403&deny_status=429",
            "deny_status",
            "more than once",
        ),
        (
            "/v1/keys/per-client-ip/alice?encoded=maybe",
            "encoded",
            "true or false",
        ),
        ("/v1/keys/per-client-ip/%FF", "path", ""),
    ] {
        let (status, headers, body) =
            split(c.get(fg.url(path)).bearer_auth(token).send().await.unwrap()).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(
            headers["content-type"], "application/problem+json",
            "{path}"
        );
        assert_eq!(body["field"], field, "{path}: {body}");
        let text = body["detail"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("{field}: ")) && text.contains(detail),
            "{path}: {text}"
        );
    }
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_requests_rejected_total{reason=\"method_not_allowed\"}"
        )
        .await,
        Some(3.0)
    );
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_cleanly() {
    let upstream = Upstream::start().await;
    let mut fg = Floodgate::start(&["--upstream", &upstream.url]);
    let c = client();
    let in_flight = tokio::spawn({
        let (c, url) = (c.clone(), fg.proxy_url("/slow"));
        async move {
            let r = c.get(url).send().await?;
            Ok::<_, reqwest::Error>((r.status().as_u16(), r.text().await?))
        }
    });
    upstream.arrived.notified().await;
    fg.signal("TERM");
    // Without --shutdown-delay the listeners close at once: readiness goes away (connection
    // refused) while the request is still open.
    let mut not_ready = false;
    for _ in 0..2_000 {
        match c.get(fg.url("/readyz")).send().await {
            Ok(r) if r.status() == 200 => tokio::task::yield_now().await,
            _ => {
                not_ready = true;
                break;
            }
        }
    }
    assert!(not_ready, "still ready after SIGTERM");
    upstream.release.notify_one();
    let answer = in_flight.await.unwrap();
    let logs = fg.logs();
    let (status, text) = answer.unwrap_or_else(|e| panic!("{e}\n{logs}"));
    assert_eq!((status, text.as_str()), (200, "slow done"));
    let exit = tokio::task::spawn_blocking(move || fg.wait())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test]
async fn with_a_shutdown_delay_readyz_is_503_while_still_serving_until_a_second_signal() {
    let mut fg = Floodgate::start(&["--shutdown-delay", "10min"]);
    let c = client();
    let (status, _, body) = split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, &body["status"]), (200, &json!("ready")));
    fg.signal("TERM");
    // Bounded polling until the signal has been handled.
    let mut seen = None;
    for _ in 0..5_000 {
        let (status, _, body) = split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
        if status == 503 {
            seen = Some(body);
            break;
        }
        tokio::task::yield_now().await;
    }
    let body = seen.unwrap_or_else(|| panic!("/readyz never answered 503:\n{}", fg.logs()));
    assert_eq!(body["status"], "shutting_down");
    // Still serving decisions while load balancers take the instance out.
    let (status, _, _) =
        post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
    assert_eq!(status, 200);
    // A second signal ends the wait: the process exits cleanly long before ten minutes.
    fg.signal("TERM");
    let exit = tokio::task::spawn_blocking(move || fg.wait())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

/// Runs `floodgate check-config <file>` in `dir`.
fn run_check_config(dir: &std::path::Path, file: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(dir)
        .args(["check-config", file])
        .output()
        .unwrap()
}

/// `floodgate check-config rules.toml | head -1`: a reader that closed the pipe is no error
/// (it used to panic with "failed printing to stdout").
#[test]
fn check_config_into_a_closed_pipe_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.toml"), PROXY_CONFIG).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(dir.path())
        .args(["check-config", "rules.toml"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the child writes anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stderr).unwrap(), "");
}

#[test]
fn check_config_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("rules.toml");
    std::fs::write(
        &bad,
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\n\n[[rules]]\nname = \"a\"\nlimit = \"10/fortnight\"\n",
    )
    .unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "rules.toml:6: rules[1].name: duplicate rule name \"a\" (also rules[0].name); names must be unique\n\
         rules.toml:7: rules[1].limit: invalid quota \"10/fortnight\": unknown period unit \"fortnight\" (use us, ms, s, min, h or day)\n"
    );
    std::fs::write(&bad, PROXY_CONFIG).unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("per-ip: token_bucket 3/min"));

    // A syntax error names the line, and no field; a missing file names the file and why.
    std::fs::write(&bad, "[[rules]]\nname = \"a\"\nlimit = \n").unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("rules.toml:3: invalid TOML: "),
        "{stderr}"
    );
    let out = run_check_config(dir.path(), "missing.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("missing.toml: cannot read: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // A rule whose requests cost nothing would never limit.
    std::fs::write(
        &bad,
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\ncost = 0\n",
    )
    .unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("rules.toml:4: rules[0].cost: must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn the_proxy_and_the_api_on_one_address_is_refused_saying_so() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["serve", "--listen", &addr, "--admin-listen", &addr])
        .args(["--upstream", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("--listen and --admin-listen name the same address"),
        "{stderr}"
    );
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

/// `--admin-token short` and `FLOODGATE_ADMIN_TOKEN=x` used to start and accept `Bearer x`:
/// the file's minimum length is the rule everywhere.
#[test]
fn a_short_admin_token_is_refused_from_the_flag_and_the_environment() {
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        cmd.env_remove("FLOODGATE_ADMIN_TOKEN");
        if let Some(token) = env {
            cmd.env("FLOODGATE_ADMIN_TOKEN", token);
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .expect("floodgate runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, env) in [
        (&["--admin-token", "short"][..], None),
        (&[][..], Some("x")),
        (&["--admin-token", "sixteen chars ok"][..], None),
    ] {
        let (ok, stderr) = run(args, env);
        assert!(!ok, "{args:?} {env:?} started");
        assert!(
            stderr.contains("at least 16 printable ASCII characters without spaces"),
            "{stderr}"
        );
    }
}

/// Junk keys from `/v1/check` share the store's room with request-derived keys; an API token
/// keeps whoever merely reaches the listener from deciding (and creating keys) at all.
#[tokio::test]
async fn with_an_api_token_the_decision_api_needs_it_and_forward_auth_does_not() {
    let fg = Floodgate::with_config(
        "[server]\napi_token = \"decide-only-with-this\"\n[[rules]]\nname = \"r\"\nlimit = \"5/min\"\n",
        &[],
    );
    let c = client();
    let body = json!({"rule": "r", "key": "alice"});
    let send = |token: Option<&'static str>| {
        let mut r = c.post(fg.url("/v1/check")).json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let (status, headers, problem) = split(send(None).await.unwrap()).await;
    assert_eq!(status, 401, "{problem}");
    assert_eq!(headers["www-authenticate"], "Bearer");
    assert_eq!(problem["detail"], "send Authorization: Bearer <API token>");
    let (status, _, problem) = split(send(Some("not-the-token-at-all")).await.unwrap()).await;
    assert_eq!(status, 403, "{problem}");
    let (status, _, decision) = split(send(Some("decide-only-with-this")).await.unwrap()).await;
    assert_eq!((status, &decision["remaining"]), (200, &json!(4)));
    // Nothing was charged by the refused ones; forward-auth is for the proxy, not the token.
    let r = c.get(fg.url("/v1/forward-auth")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}
