//! Regression tests: path rules were decided on a decoded `%2F` while the upstream got the raw
//! path, so `/api/..%2Fx` (served under `/api` by upstreams that keep `%2F`) escaped an `/api`
//! rule, `/x/..%2Fapi/y` was charged to `/api`, `/api%2F..%2Fx` was not limited, and a path
//! key counted `/api%2Fx` as `/api/x`. Now `%2F` and `%5C` are part of their segment. The real
//! binary in proxy mode (an axum upstream that reports the path it got) and forward-auth.

mod serve_support;

use serve_support::{advance, client, split, Floodgate, Upstream};

const CONFIG: &str = r#"
[[rules]]
name = "api"
limit = "2/min"
key = "client_ip"
[rules.match]
path_prefix = "/api"

[[rules]]
name = "x"
limit = "2/min"
key = "client_ip"
[rules.match]
path_prefix = "/x"

[[rules]]
name = "per-path"
limit = "1/min"
key = "path"
[rules.match]
path_prefix = "/files"
"#;

/// How a request reaches the rules.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `GET <proxy>/<path>`, forwarded to the upstream.
    Proxy,
    /// `GET /v1/forward-auth` with `X-Forwarded-Uri: <path>`.
    ForwardAuth,
}

/// One request: (status, `RateLimit-Policy` or "", the path the upstream got in proxy mode).
async fn send(
    c: &reqwest::Client,
    fg: &Floodgate,
    mode: Mode,
    path: &str,
) -> (u16, String, String) {
    let r = match mode {
        Mode::Proxy => c.get(fg.proxy_url(path)).send().await.unwrap(),
        Mode::ForwardAuth => c
            .get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-uri", path)
            .send()
            .await
            .unwrap(),
    };
    let (status, headers, body) = split(r).await;
    let policy = headers
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let seen = body["path"].as_str().unwrap_or_default().to_string();
    (status, policy, seen)
}

/// The statuses of three requests to `path` in a fresh minute, and the policy of the first.
async fn three(c: &reqwest::Client, fg: &Floodgate, mode: Mode, path: &str) -> (Vec<u16>, String) {
    advance(c, fg, 60_000_000).await;
    let mut statuses = Vec::new();
    let mut first = String::new();
    for i in 0..3 {
        let (status, policy, seen) = send(c, fg, mode, path).await;
        if let (Mode::Proxy, 200) = (mode, status) {
            // The upstream gets the path byte for byte.
            assert_eq!(seen, path, "{mode:?}");
        }
        if i == 0 {
            first = policy;
        }
        statuses.push(status);
    }
    (statuses, first)
}

async fn start() -> (Upstream, Floodgate) {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(CONFIG, &["--upstream", &upstream.url]);
    (upstream, fg)
}

#[tokio::test]
async fn api_dot_dot_encoded_slash_x_is_limited_by_the_api_rule() {
    let (_up, fg) = start().await;
    let c = client();
    for mode in [Mode::Proxy, Mode::ForwardAuth] {
        for path in [
            "/api/..%2Fx",
            "/api/..%2fx",
            "/api/..%5Cx",
            "/api/%2e%2e%2Fx",
        ] {
            let (statuses, policy) = three(&c, &fg, mode, path).await;
            assert_eq!(statuses, [200, 200, 429], "{mode:?} {path}");
            assert!(policy.contains("\"api\""), "{mode:?} {path}: {policy}");
            assert!(!policy.contains("\"x\""), "{mode:?} {path}: {policy}");
        }
    }
}

#[tokio::test]
async fn x_dot_dot_encoded_slash_api_is_charged_to_x_not_api() {
    let (_up, fg) = start().await;
    let c = client();
    for mode in [Mode::Proxy, Mode::ForwardAuth] {
        for path in ["/x/..%2Fapi/y", "/x%2F..%2Fapi/y", "/x/..%5Capi/y"] {
            let (statuses, policy) = three(&c, &fg, mode, path).await;
            assert_eq!(statuses, [200, 200, 429], "{mode:?} {path}");
            assert!(policy.contains("\"x\""), "{mode:?} {path}: {policy}");
            assert!(!policy.contains("\"api\""), "{mode:?} {path}: {policy}");
        }
    }
}

#[tokio::test]
async fn api_encoded_slash_dot_dot_x_is_limited_by_the_api_rule() {
    let (_up, fg) = start().await;
    let c = client();
    for mode in [Mode::Proxy, Mode::ForwardAuth] {
        for path in ["/api%2F..%2Fx", "/api%2Fx", "/%61pi%2fx", "/api%5C..%5Cx"] {
            let (statuses, policy) = three(&c, &fg, mode, path).await;
            assert_eq!(statuses, [200, 200, 429], "{mode:?} {path}");
            assert!(policy.contains("\"api\""), "{mode:?} {path}: {policy}");
        }
    }
}

#[tokio::test]
async fn a_path_key_counts_an_encoded_slash_as_part_of_its_segment() {
    let (_up, fg) = start().await;
    let c = client();
    for mode in [Mode::Proxy, Mode::ForwardAuth] {
        advance(&c, &fg, 60_000_000).await;
        // Each is its own path (1/min each): `/files%2Fa` is not `/files/a`.
        assert_eq!(send(&c, &fg, mode, "/files/a").await.0, 200, "{mode:?}");
        assert_eq!(send(&c, &fg, mode, "/files%2Fa").await.0, 200, "{mode:?}");
        assert_eq!(
            send(&c, &fg, mode, "/files/..%2Fa").await.0,
            200,
            "{mode:?}"
        );
        // Spellings of one path share its counter: hex case, unreserved escapes, dot segments.
        for same in ["/files%2fa", "/%66iles%2Fa", "/files/..%2fa", "/files/%61"] {
            assert_eq!(send(&c, &fg, mode, same).await.0, 429, "{mode:?} {same}");
        }
    }
}
