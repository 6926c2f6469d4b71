//! Regression tests of issue 10, item 1: forward-auth widened to `/` when `X-Forwarded-Uri` /
//! `X-Original-URI` did not parse as a `Uri`, skipping every `path_prefix` rule and route cost.
//! Now the URI is read as the proxy's bytes, canonicalised as proxy mode does, and what cannot
//! be read is a counted 400 naming the header. The real binary, on the manual clock.

mod serve_support;

use reqwest::header::HeaderValue;
use serve_support::{client, metric, split, Floodgate};

const CONFIG: &str = r#"
[[rules]]
name = "api"
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

[[rules]]
name = "per-path"
limit = "2/min"
key = "path"
[rules.match]
path_prefix = "/files"
"#;

/// One forward-auth call with `header: value` (raw bytes) and what it answered: (status,
/// `RateLimit` header or "", body).
async fn call(
    c: &reqwest::Client,
    fg: &Floodgate,
    header: &str,
    value: &[u8],
) -> (u16, String, serde_json::Value) {
    let r = c
        .get(fg.url("/v1/forward-auth"))
        .header(header, HeaderValue::from_bytes(value).unwrap())
        .send()
        .await
        .unwrap();
    let (status, headers, body) = split(r).await;
    let ratelimit = headers
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ratelimit, body)
}

/// The statuses of `n` calls with the same header.
async fn statuses(
    c: &reqwest::Client,
    fg: &Floodgate,
    header: &str,
    value: &[u8],
    n: usize,
) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(call(c, fg, header, value).await.0);
    }
    out
}

#[tokio::test]
async fn api_login_with_angle_brackets_in_the_query_is_limited_like_api_login() {
    // The issue's reproduction: path_prefix = "/api", 3/min, ten calls.
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let mut seen = Vec::new();
    for i in 0..10 {
        let (status, ratelimit, body) = call(&c, &fg, "x-forwarded-uri", b"/api/login?q=<x>").await;
        if i < 3 {
            let expected = format!("\"api\";r={};", 2 - i);
            assert!(
                ratelimit.starts_with(&expected),
                "call {i}: {ratelimit:?} {body}"
            );
        } else {
            assert_eq!(body["rule"], "api", "call {i}: {body}");
        }
        seen.push(status);
    }
    assert_eq!(seen, [200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);
}

#[tokio::test]
async fn every_hostile_spelling_of_an_api_path_counts_against_api() {
    // Each case on a fresh server: three admitted with RateLimit headers, the fourth refused.
    let cases: [(&str, &[u8]); 10] = [
        ("x-forwarded-uri", b"/api/login?q=\"x\""),
        ("x-forwarded-uri", b"/api/<x>"),
        ("x-forwarded-uri", b"/api/a`b"),
        ("x-forwarded-uri", b"/api/a b"),
        ("x-forwarded-uri", b"/api/caf\xc3\xa9"),
        ("x-forwarded-uri", b"/api/caf\xe9"),
        ("x-forwarded-uri", b"/<x>/../api/login"),
        ("x-forwarded-uri", b"http://app.example/api/login?q=<x>"),
        ("x-original-uri", b"/api/login?q=<x>"),
        ("x-original-uri", b"/%61pi/{x}"),
    ];
    for (header, value) in cases {
        let fg = Floodgate::with_config(CONFIG, &[]);
        let c = client();
        for i in 0..3 {
            let (status, ratelimit, body) = call(&c, &fg, header, value).await;
            assert_eq!(status, 200, "{header}: {value:?} call {i}: {body}");
            assert!(
                ratelimit.starts_with(&format!("\"api\";r={}", 2 - i)),
                "{value:?}: {ratelimit:?}"
            );
        }
        let (status, _, body) = call(&c, &fg, header, value).await;
        assert_eq!(
            (status, &body["rule"]),
            (429, &"api".into()),
            "{header}: {value:?}"
        );
    }
}

#[tokio::test]
async fn a_route_cost_applies_whatever_the_query_holds() {
    // /search/deep costs 100 of 200: two calls, then the budget is spent.
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let deep = b"/search/deep?q=<script>\"";
    assert_eq!(
        statuses(&c, &fg, "x-forwarded-uri", deep, 3).await,
        [200, 200, 429]
    );
}

#[tokio::test]
async fn a_path_key_counts_every_spelling_of_one_path_once() {
    // key = "path": the raw `<`, its escape and a dot-segment detour are one counter.
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let mut seen = Vec::new();
    for value in [&b"/files/<a>"[..], b"/files/%3Ca%3E", b"/files/x/../<a>"] {
        seen.push(call(&c, &fg, "x-forwarded-uri", value).await.0);
    }
    assert_eq!(seen, [200, 200, 429]);
}

#[tokio::test]
async fn an_unreadable_uri_is_a_counted_400_naming_the_header_and_charges_nothing() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    let series = "floodgate_requests_rejected_total{reason=\"invalid\"}";
    let before = metric(&c, &fg, series).await.unwrap_or(0.0);
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "x-forwarded-uri",
            b"api/login",
            "x-forwarded-uri: must be a path starting with /",
        ),
        (
            "x-forwarded-uri",
            b"*",
            "x-forwarded-uri: must be a path starting with /",
        ),
        (
            "x-original-uri",
            b"example.com:443",
            "x-original-uri: must be a path starting with /",
        ),
        (
            "x-forwarded-uri",
            b"/x#/../api/login",
            "x-forwarded-uri: contains #",
        ),
        (
            "x-forwarded-uri",
            b"/api/login#top",
            "x-forwarded-uri: contains #",
        ),
    ];
    for (header, value, detail) in cases {
        let (status, _, body) = call(&c, &fg, header, value).await;
        assert_eq!(status, 400, "{value:?}: {body}");
        assert_eq!(body["field"], header, "{body}");
        assert_eq!(body["type"], "urn:floodgate:problem:invalid-request");
        assert!(
            body["detail"].as_str().unwrap().starts_with(detail),
            "{body}"
        );
    }
    // Sent twice: which one the upstream gets is not known.
    let r = c
        .get(fg.url("/v1/forward-auth"))
        .header("x-forwarded-uri", "/public")
        .header("x-forwarded-uri", "/api/login")
        .send()
        .await
        .unwrap();
    let (status, headers, body) = split(r).await;
    assert_eq!(status, 400);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body["detail"], "x-forwarded-uri: sent more than once");
    let after = metric(&c, &fg, series).await.unwrap();
    assert_eq!(after - before, 6.0);
    // Nothing was charged: /api still has its three.
    assert_eq!(
        statuses(&c, &fg, "x-forwarded-uri", b"/api/x", 4).await,
        [200, 200, 200, 429]
    );
}

/// Found by a new user: Envoy's ext_authz asks `/v1/forward-auth/` for the app's root (a 404,
/// which Envoy takes as a denial); a repeated X-Forwarded-Host or X-Forwarded-Method let the
/// first value dodge a host or method match; a repeated cost header charged its first value.
#[tokio::test]
async fn the_root_suffix_is_answered_and_repeated_forwarding_or_cost_headers_are_refused() {
    let fg = Floodgate::with_config(
        r#"
[[rules]]
name = "h"
limit = "1/min"
key = "global"
cost_header = "x-cost"
[rules.match]
host = "api.example.com"
methods = ["POST"]
"#,
        &[],
    );
    let c = client();
    for path in ["/v1/forward-auth/", "/v1/forward-auth/?page=1"] {
        let r = c.get(fg.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let twice = |name: &'static str, a: &'static str, b: &'static str| {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "x-forwarded-host",
            HeaderValue::from_static("api.example.com"),
        );
        headers.insert("x-forwarded-method", HeaderValue::from_static("POST"));
        headers.remove(name);
        headers.append(name, HeaderValue::from_static(a));
        headers.append(name, HeaderValue::from_static(b));
        c.get(fg.url("/v1/forward-auth")).headers(headers).send()
    };
    for (name, a, b) in [
        ("x-forwarded-host", "other.example", "api.example.com"),
        ("x-forwarded-method", "GET", "POST"),
    ] {
        let (status, _, body) = split(twice(name, a, b).await.unwrap()).await;
        assert_eq!(
            (status, &body["field"]),
            (400, &serde_json::json!(name)),
            "{body}"
        );
    }
    let (status, _, body) = split(twice("x-cost", "1", "1").await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["type"], "urn:floodgate:problem:invalid-cost");
    // Nothing was charged by the refused ones: the one unit is still there.
    let (status, _, _) = split(
        c.get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-host", "api.example.com")
            .header("x-forwarded-method", "POST")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn x_forwarded_host_spellings_count_against_the_host_rule_and_non_hosts_are_400() {
    // The reverse proxy's host normalisation, on forward-auth's X-Forwarded-Host: a trailing
    // dot, upper case and a zero-padded port are the same host; what cannot be a host is a 400
    // naming the header, never a request that matches no host rule.
    let config = r#"
[[rules]]
name = "api-host"
limit = "2/min"
key = "client_ip"
[rules.match]
host = "api.example.com"
"#;
    let fg = Floodgate::with_config(config, &[]);
    let c = client();
    for bad in [&b"a, b"[..], b"api.example.com:abc", b"api..example.com"] {
        let (status, _, body) = call(&c, &fg, "x-forwarded-host", bad).await;
        assert_eq!(status, 400, "{bad:?}: {body}");
        assert_eq!(body["field"], "x-forwarded-host", "{body}");
    }
    let mut seen = Vec::new();
    for spelling in [
        &b"api.example.com."[..],
        b"API.Example.com:0080",
        b"api.example.com",
    ] {
        seen.push(call(&c, &fg, "x-forwarded-host", spelling).await.0);
    }
    assert_eq!(seen, [200, 200, 429]);
}
