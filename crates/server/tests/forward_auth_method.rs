//! Regression test: forward-auth never validated `X-Forwarded-Method`: `P OST` fell back to the
//! sub-request's own method (admitted, not charged), `post` was charged as `POST`, and
//! `POST, GET` was not charged. A forwarded method is one RFC 9110 token, matched
//! case-sensitively; anything else is a 400 problem naming the header. The real binary.

mod serve_support;

use serve_support::{client, split, Floodgate};

const CONFIG: &str = r#"
[[rules]]
name = "writes"
limit = "2/min"
key = "client_ip"
[rules.match]
methods = ["post"]
"#;

/// One forward-auth call: (status, `RateLimit-Policy` or "", body).
async fn call(
    c: &reqwest::Client,
    fg: &Floodgate,
    header: &str,
    method: &str,
) -> (u16, String, serde_json::Value) {
    let r = c
        .get(fg.url("/v1/forward-auth"))
        .header(header, method)
        .header("x-forwarded-uri", "/x")
        .send()
        .await
        .unwrap();
    let (status, headers, body) = split(r).await;
    let policy = headers
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, policy, body)
}

#[tokio::test]
async fn a_forwarded_method_that_is_no_token_is_a_400_naming_the_header() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    for header in ["x-forwarded-method", "x-original-method"] {
        for method in [
            "P OST",
            "POST, GET",
            "POST,GET",
            "PO\"ST",
            "(POST)",
            "POST/1",
        ] {
            let (status, _, body) = call(&c, &fg, header, method).await;
            assert_eq!(status, 400, "{header}: {method:?}: {body}");
            assert_eq!(body["field"], header, "{method:?}: {body}");
            assert_eq!(body["status"], 400);
        }
    }
    // Nothing was charged: the writes rule still has its two.
    for expect in [200, 200, 429] {
        assert_eq!(call(&c, &fg, "x-forwarded-method", "POST").await.0, expect);
    }
}

#[tokio::test]
async fn methods_are_case_sensitive_tokens() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    let c = client();
    // `post` and other tokens are methods of their own: no rule for them, not charged.
    for method in ["post", "Post", "PURGE", "M-SEARCH", "x!#$%&'*+-.^_`|~"] {
        for _ in 0..3 {
            let (status, policy, body) = call(&c, &fg, "x-forwarded-method", method).await;
            assert_eq!(status, 200, "{method:?}: {body}");
            assert_eq!(policy, "", "{method:?}");
        }
    }
    // The configured `post` is read as POST (methods are upper-cased at load), and POST counts.
    let (status, policy, _) = call(&c, &fg, "x-forwarded-method", "POST").await;
    assert_eq!((status, policy.contains("\"writes\"")), (200, true));
    assert_eq!(call(&c, &fg, "x-original-method", " POST ").await.0, 200);
    assert_eq!(call(&c, &fg, "x-forwarded-method", "POST").await.0, 429);
}
