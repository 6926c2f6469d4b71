//! The middleware end to end through `oneshot`: counts, headers, bodies, client IPs, keys,
//! multi-rule batches and reloads. No network, no sleeps: a frozen ManualClock.

mod common;

use common::{gcra, harness, request};
use floodgate_tower::{ClientIpConfig, CostSource, KeySource, Matcher, Rule, RuleSet};
use http::{HeaderName, StatusCode};

fn per_ip(quota: &str) -> Rule {
    Rule::new("per-ip", gcra(quota), KeySource::ClientIp)
}

fn trusting_10_8(rules: Vec<Rule>) -> RuleSet {
    RuleSet::new(rules).with_client_ip(ClientIpConfig {
        trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
        ..ClientIpConfig::default()
    })
}

#[tokio::test]
async fn admits_exactly_the_quota_and_answers_the_rest_itself() {
    let h = harness(RuleSet::new(vec![per_ip("10/10s")]));
    let from = || request("/", "203.0.113.7:1234", &[]);
    assert_eq!(h.admitted(25, from).await, 10);
    assert_eq!(
        h.backend.calls(),
        10,
        "denied requests never reach the service"
    );
    // One emission interval later exactly one more fits.
    h.clock.advance(1_000_000);
    assert_eq!(h.admitted(3, from).await, 1);
}

#[tokio::test]
async fn admitted_and_denied_responses_carry_the_headers_and_problem_body() {
    let h = harness(RuleSet::new(vec![per_ip("10/10s")]));
    let from = || request("/", "203.0.113.7:1234", &[]);
    let first = h.send(from()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "ok");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-ip\";q=10;w=10")
    );
    assert_eq!(first.header("ratelimit"), Some("\"per-ip\";r=9;t=1"));
    assert_eq!(first.header("retry-after"), None);

    h.admitted(9, from).await;
    h.clock.advance(300_000);
    let denied = h.send(from()).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    // 0.7 s to wait, rounded up to whole seconds.
    assert_eq!(denied.header("retry-after"), Some("1"));
    assert_eq!(
        denied.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(denied.header("ratelimit"), Some("\"per-ip\";r=0;t=10"));
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some("\"per-ip\";q=10;w=10")
    );
    assert_eq!(
        denied.json(),
        serde_json::json!({
            "type": "urn:floodgate:problem:rate-limited",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "limit is 10 requests per 10 seconds for this key",
            "rule": "per-ip",
            "retry_after": 1,
        })
    );
}

#[tokio::test]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    let h = harness(trusting_10_8(vec![per_ip("1/h")]));
    // Through a trusted proxy: two real clients, one counter each.
    for client in ["198.51.100.1", "198.51.100.2"] {
        let xff = format!("{client}, 10.0.0.5");
        let req = || request("/", "10.0.0.1:443", &[("x-forwarded-for", xff.as_str())]);
        assert_eq!(h.admitted(3, req).await, 1, "{client}");
    }
    // From an untrusted peer, inventing a new X-Forwarded-For each time does not help.
    let mut ok = 0;
    for i in 0..5 {
        let fake = format!("192.0.2.{i}");
        let r = h
            .send(request("/", "203.0.113.9:1", &[("x-forwarded-for", &fake)]))
            .await;
        ok += usize::from(r.status == StatusCode::OK);
    }
    assert_eq!(ok, 1);
}

#[tokio::test]
async fn a_malformed_forwarded_for_is_a_client_of_its_own_never_the_peer_never_a_5xx() {
    let h = harness(trusting_10_8(vec![per_ip("2/h")]));
    for bad in ["garbage", "1.2.3.4,,", "unknown, 10.0.0.2", "999.1.1.1"] {
        let r = h
            .send(request("/", "10.0.0.1:443", &[("x-forwarded-for", bad)]))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{bad}: {r:?}");
    }
    // None was counted against the proxy 10.0.0.1: its 2 units are all there.
    let peer = || request("/", "10.0.0.1:443", &[]);
    assert_eq!(h.admitted(3, peer).await, 2);
    // Each malformed entry is one client: its own 2 units, then denied.
    let junk = || request("/", "10.0.0.1:443", &[("x-forwarded-for", "garbage")]);
    assert_eq!(h.admitted(3, junk).await, 1);
}

#[tokio::test]
async fn ipv6_clients_are_counted_per_64_and_mapped_ipv4_as_ipv4() {
    let h = harness(RuleSet::new(vec![per_ip("1/h")]));
    assert_eq!(h.status("/", "[2001:db8:1:2::1]:1").await, StatusCode::OK);
    // Same /64, different interface id: same counter.
    assert_eq!(
        h.status("/", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The neighbouring /64 is another client.
    assert_eq!(h.status("/", "[2001:db8:1:3::1]:1").await, StatusCode::OK);
    // ::ffff:192.0.2.1 is 192.0.2.1.
    assert_eq!(h.status("/", "192.0.2.1:1").await, StatusCode::OK);
    assert_eq!(
        h.status("/", "[::ffff:192.0.2.1]:1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn all_matching_rules_are_one_all_or_nothing_batch() {
    let global = Rule::new("global", gcra("3/h"), KeySource::Constant("all".into()));
    let h = harness(RuleSet::new(vec![per_ip("1/h"), global]));
    let ok = h.send(request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(
        ok.header("ratelimit-policy"),
        Some("\"per-ip\";q=1;w=3600, \"global\";q=3;w=3600")
    );
    assert_eq!(
        ok.header("ratelimit"),
        Some("\"per-ip\";r=0;t=3600, \"global\";r=2;t=1200")
    );
    // Denied by per-ip: the global counter must not be charged.
    for _ in 0..5 {
        let denied = h.send(request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(denied.json()["rule"], "per-ip");
    }
    // So two more clients still fit in the global 3, and the fourth does not.
    assert_eq!(h.status("/", "192.0.2.2:1").await, StatusCode::OK);
    assert_eq!(h.status("/", "192.0.2.3:1").await, StatusCode::OK);
    let denied = h.send(request("/", "192.0.2.4:1", &[])).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["rule"], "global");
    // 192.0.2.4's per-ip allowance was not charged either.
    h.limiter.replace_rules(RuleSet::new(vec![per_ip("1/h")]));
    assert_eq!(h.status("/", "192.0.2.4:1").await, StatusCode::OK);
}

#[tokio::test]
async fn a_rule_whose_key_is_absent_is_skipped_unless_it_falls_back() {
    let user = HeaderName::from_static("x-user-id");
    let per_user = Rule::new(
        "per-user",
        gcra("1/h"),
        KeySource::User {
            header: user.clone(),
        },
    );
    let h = harness(RuleSet::new(vec![per_user]));
    let anonymous = || request("/", "192.0.2.1:1", &[]);
    assert_eq!(h.admitted(5, anonymous).await, 5);
    assert_eq!(h.send(anonymous()).await.header("ratelimit"), None);
    let alice = || request("/", "192.0.2.1:1", &[("x-user-id", "alice")]);
    assert_eq!(h.admitted(3, alice).await, 1);

    // User first, then client IP as the last resort.
    let fallback = Rule::new(
        "per-caller",
        gcra("1/h"),
        KeySource::FirstOf(vec![KeySource::User { header: user }, KeySource::ClientIp]),
    );
    let h = harness(RuleSet::new(vec![fallback]));
    assert_eq!(h.admitted(2, alice).await, 1);
    // Same IP without the user header: counted by IP, a separate counter.
    assert_eq!(h.admitted(2, anonymous).await, 1);
}

#[tokio::test]
async fn composite_keys_count_user_and_route_together() {
    let rule = Rule::new(
        "per-user-route",
        gcra("1/h"),
        KeySource::All(vec![
            KeySource::User {
                header: HeaderName::from_static("x-user-id"),
            },
            KeySource::Route,
        ]),
    );
    let h = harness(RuleSet::new(vec![rule]));
    let at = |path: &'static str| move || request(path, "192.0.2.1:1", &[("x-user-id", "bob")]);
    assert_eq!(h.admitted(2, at("/a")).await, 1);
    assert_eq!(h.admitted(2, at("/b")).await, 1);
    // Without a user the whole composite key is absent: not limited.
    assert_eq!(h.admitted(3, || request("/a", "192.0.2.1:1", &[])).await, 3);
}

#[tokio::test]
async fn matchers_limit_only_their_requests() {
    let api = per_ip("1/h").with_matcher(Matcher {
        path_prefix: Some("/api".into()),
        ..Matcher::any()
    });
    let h = harness(RuleSet::new(vec![api]));
    assert_eq!(
        h.admitted(3, || request("/health", "192.0.2.1:1", &[]))
            .await,
        3
    );
    assert_eq!(
        h.admitted(3, || request("/api/items", "192.0.2.1:1", &[]))
            .await,
        1
    );
}

#[tokio::test]
async fn costs_come_from_a_header_with_a_default_and_a_maximum() {
    let rule = per_ip("10/h").with_cost(CostSource::Header {
        name: HeaderName::from_static("x-cost"),
        default: 1,
        max: 4,
    });
    let h = harness(RuleSet::new(vec![rule]));
    let with = |cost: &'static str| request("/", "192.0.2.1:1", &[("x-cost", cost)]);
    let r = h.send(with("3")).await;
    assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=7;t=1080"));
    // 100 is above the maximum of 4: refused with 400 naming the rule, nothing charged.
    let r = h.send(with("100")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("cost-exceeds-capacity"), "{}", r.body);
    let r = h.send(with("4")).await;
    assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=3;t=2520"));
    // Not a positive whole number: 400 naming the header, nothing charged.
    for bad in ["lots", "0", "-1", "+1"] {
        let r = h.send(with(bad)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.body.contains("\"field\":\"x-cost\""), "{bad}: {}", r.body);
    }
    // Absent: the default of 1.
    let r = h.send(request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=2;t=2880"));
    assert_eq!(
        h.send(with("3")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_cost_above_capacity_is_a_400_not_a_forever_429() {
    let rule = per_ip("2/h").with_cost(CostSource::Fixed(3));
    let h = harness(RuleSet::new(vec![rule]));
    let r = h.send(request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["type"],
        "urn:floodgate:problem:cost-exceeds-capacity"
    );
    assert_eq!(r.header("retry-after"), None);
}

#[tokio::test]
async fn reloading_rules_keeps_the_counters() {
    let h = harness(RuleSet::new(vec![per_ip("1/h")]));
    let from = || request("/", "192.0.2.1:1", &[]);
    assert_eq!(h.admitted(1, from).await, 1);
    // A reload with an extra rule: per-ip keeps its state.
    let other = Rule::new("global", gcra("100/h"), KeySource::Constant("x".into()));
    h.limiter
        .replace_rules(RuleSet::new(vec![per_ip("1/h"), other]));
    assert_eq!(h.admitted(2, from).await, 0);
    // The shared ArcSwap is what a server's reloader swaps.
    h.limiter
        .shared_rules()
        .store(std::sync::Arc::new(RuleSet::default()));
    assert_eq!(h.admitted(2, from).await, 2);
}

#[tokio::test]
async fn works_as_an_axum_layer_with_connect_info() {
    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use tower::ServiceExt;

    let h = harness(RuleSet::new(vec![per_ip("1/h")]));
    let app = axum::Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(floodgate_tower::RateLimitLayer::new(h.limiter.clone()));
    let req = || {
        let mut r = http::Request::new(axum::body::Body::empty());
        r.extensions_mut()
            .insert(ConnectInfo::<std::net::SocketAddr>(
                "192.0.2.1:1".parse().unwrap(),
            ));
        r
    };
    let ok = app.clone().oneshot(req()).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()["ratelimit"], "\"per-ip\";r=0;t=3600");
    let denied = app.oneshot(req()).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "3600");
}

#[tokio::test]
async fn a_full_store_says_so_instead_of_blaming_the_client() {
    use floodgate_store::{MemoryStore, MemoryStoreConfig};
    let clock = floodgate_core::ManualClock::new(common::T0);
    let config = MemoryStoreConfig {
        max_keys: 1,
        shards: 1,
        ..MemoryStoreConfig::default()
    };
    let store = std::sync::Arc::new(MemoryStore::new(config, std::sync::Arc::new(clock.clone())));
    let h = common::with_store(clock, store, RuleSet::new(vec![per_ip("10/h")]));
    assert_eq!(h.status("/", "192.0.2.1:1").await, StatusCode::OK);
    let full = h.send(request("/", "192.0.2.2:1", &[])).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(full.header("retry-after"), Some("1"));
    assert_eq!(
        full.json()["detail"],
        "the rate limiter is tracking as many clients as it can; try again later"
    );
    // The client already tracked keeps being served.
    assert_eq!(h.status("/", "192.0.2.1:1").await, StatusCode::OK);
}

#[tokio::test]
async fn a_wider_ipv6_limit_catches_address_rotation_inside_a_48() {
    let per_48 = Rule::new(
        "per-48",
        gcra("2/h"),
        KeySource::ClientNet {
            ipv4_prefix: 24,
            ipv6_prefix: 48,
        },
    );
    let h = harness(RuleSet::new(vec![per_ip("1/h"), per_48]));
    // Three different /64s inside one /48: each passes per-ip (/64), the /48 admits two.
    let statuses = [
        h.status("/", "[2001:db8:1:1::1]:1").await,
        h.status("/", "[2001:db8:1:2::1]:1").await,
        h.status("/", "[2001:db8:1:3::1]:1").await,
    ];
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(h.status("/", "[2001:db8:2:1::1]:1").await, StatusCode::OK);
}

/// `X-User-Id: carol` and `X-User-Id: dave` in one request used to be counted under carol
/// while the upstream saw both: the request is now refused naming the header, nothing charged.
#[tokio::test]
async fn an_identity_header_sent_twice_is_refused_not_guessed() {
    let rule = Rule::new(
        "per-user",
        common::gcra("2/min"),
        KeySource::FirstOf(vec![
            KeySource::User {
                header: HeaderName::from_static("x-user-id"),
            },
            KeySource::ClientIp,
        ]),
    );
    let h = harness(RuleSet::new(vec![rule]));
    let twice = request(
        "/",
        "192.0.2.1:1",
        &[("x-user-id", "carol"), ("x-user-id", "dave")],
    );
    let r = h.send(twice).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let body = r.json();
    assert_eq!(body["type"], "urn:floodgate:problem:ambiguous-key");
    assert_eq!(body["field"], "x-user-id");
    assert_eq!(body["rule"], "per-user");
    assert_eq!(h.backend.calls(), 0);
    // Once: counted for carol, whose allowance the refused request did not touch.
    let once = || request("/", "192.0.2.1:1", &[("x-user-id", "carol")]);
    assert_eq!(
        h.send(once()).await.header("ratelimit"),
        Some("\"per-user\";r=1;t=30")
    );
}
