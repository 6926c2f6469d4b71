//! The JSON API of `floodgate serve` through the real binary: bad requests and wrong methods
//! get problem+json naming the field, the admin API and its token, the API token, and the
//! metrics exported from the start.

mod serve_support;

use serde_json::json;
use serve_support::{check, client, metric, post_json, split, Floodgate};

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
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": 2.5e0}"#.into(), 400, "cost", "whole number between 0 and 1000000, got 2.5"),
        (r#"{"rule": "per-client-ip", "key": "alice", "cost": -0.5}"#.into(), 400, "cost", "whole number between 0 and 1000000, got -0.5"),
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
        let (problem_type, title) = expected_problem(status, detail);
        if problem_type.ends_with("cost-exceeds-capacity") {
            assert_eq!(problem["rule"], "per-client-ip", "{shown}");
        }
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

/// JSON Schema's `integer` (the OpenAPI document's type for costs and waits) is any number
/// whose fraction is zero: `2.0` and `3e0` are the whole numbers 2 and 3, charged as such.
#[tokio::test]
async fn a_whole_number_written_with_a_fraction_or_exponent_is_that_number() {
    let fg = Floodgate::start(&[]);
    let c = client();
    let body = |text: &str| {
        let c = c.clone();
        let url = fg.url("/v1/check");
        let text = text.to_string();
        async move {
            let r = c
                .post(&url)
                .header("content-type", "application/json")
                .body(text)
                .send()
                .await
                .unwrap();
            split(r).await
        }
    };
    let (status, _, answer) = body(r#"{"rule": "per-client-ip", "key": "bob", "cost": 2.0}"#).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["remaining"], 8, "{answer}");
    let (status, _, answer) = body(r#"{"rule": "per-client-ip", "key": "bob", "cost": 3e0}"#).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["remaining"], 5, "{answer}");
    let (status, _, answer) =
        body(r#"{"rule": "per-client-ip", "key": "bob", "cost": 0.1e1, "max_wait_ms": 5.0}"#).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["remaining"], 4, "{answer}");
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

/// `Authorization` is a singleton field: sent twice (the right token and a wrong one, in either
/// order, or the right one twice) the request is refused, naming the header, and charges
/// nothing; the first one did not win, as it did before.
#[tokio::test]
async fn authorization_sent_twice_is_refused_naming_it() {
    let token = "decide-only-with-this";
    let fg = Floodgate::with_config(
        &format!(
            "[server]\napi_token = \"{token}\"\nadmin_token = \"admin-0123456789\"\n             [[rules]]\nname = \"r\"\nlimit = \"5/min\"\n"
        ),
        &[],
    );
    let c = client();
    let right = format!("Bearer {token}");
    for pair in [
        [right.as_str(), "Bearer wrong"],
        ["Bearer wrong", right.as_str()],
        [right.as_str(), right.as_str()],
    ] {
        for (method, path) in [
            (reqwest::Method::POST, "/v1/check"),
            (reqwest::Method::POST, "/v1/settle"),
            (reqwest::Method::GET, "/v1/ui/live"),
            (reqwest::Method::GET, "/v1/keys/r/alice"),
        ] {
            let r = c
                .request(method, fg.url(path))
                .header("authorization", pair[0])
                .header("authorization", pair[1])
                .json(&json!({"rule": "r", "key": "alice"}))
                .send()
                .await
                .unwrap();
            let (status, headers, problem) = split(r).await;
            assert_eq!(status, 400, "{path} {pair:?}: {problem}");
            assert_eq!(headers["content-type"], "application/problem+json");
            assert_eq!(problem["field"], "authorization", "{path}: {problem}");
            assert_eq!(
                problem["detail"], "authorization: sent more than once",
                "{path}: {problem}"
            );
        }
    }
    let r = c
        .post(fg.url("/v1/check"))
        .bearer_auth(token)
        .json(&json!({"rule": "r", "key": "alice"}))
        .send()
        .await
        .unwrap();
    let (status, _, decision) = split(r).await;
    assert_eq!(
        (status, &decision["remaining"]),
        (200, &json!(4)),
        "{decision}"
    );
}

/// The problem type and title of a bad request: one type for one fault (a cost above the
/// capacity is `cost-exceeds-capacity` on every front end).
fn expected_problem(status: u16, detail: &str) -> (&'static str, &'static str) {
    if status == 413 {
        (
            "urn:floodgate:problem:request-too-large",
            "request too large",
        )
    } else if detail.contains("capacity") || detail.contains("together") {
        (
            "urn:floodgate:problem:cost-exceeds-capacity",
            "Request cost exceeds capacity",
        )
    } else {
        ("urn:floodgate:problem:invalid-request", "invalid request")
    }
}
