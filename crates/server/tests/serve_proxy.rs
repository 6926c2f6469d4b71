//! `floodgate serve --upstream`: the streaming reverse proxy through the real binary, in front
//! of a real upstream server: bodies, hop-by-hop headers, forwarding headers only from trusted
//! peers, and the proxy and the API never on one address.

mod serve_support;

use serde_json::Value;
use serve_support::{advance, client, split, Floodgate, Upstream, PROXY_CONFIG};

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

/// Found by an attacker's review: the answers budget charged a proxied answer its whole
/// `Content-Length`, so one download of more than the budget (64 MiB) was always cut after a
/// few KB (`reason="answers_held"`), though the proxy holds one chunk at a time.
#[tokio::test]
async fn a_download_larger_than_the_answers_budget_passes_whole() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(PROXY_CONFIG, &["--upstream", &upstream.url]);
    let n: u64 = 80_000_000;
    let mut r = client()
        .get(fg.proxy_url(&format!("/bytes/{n}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.content_length(), Some(n));
    let mut got = 0u64;
    while let Some(chunk) = r.chunk().await.unwrap() {
        got += chunk.len() as u64;
    }
    assert_eq!(got, n);
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
