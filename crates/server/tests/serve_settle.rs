//! Reservation tokens (`/v1/check` with `"reserve": true`) and `POST /v1/settle`, through the
//! real binary on the manual clock (`serve --manual-clock`): refunds and charges exact in every
//! algorithm, and every attack refused (a forged or edited token, a replay, an expired one),
//! also across two processes sharing one real redis-server.

mod serve_support;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use floodgate_store::redis::testing::RedisServer;
use serde_json::{json, Value};
use serve_support::{advance, call, client, metric, remaining, write_atomically, Floodgate};

const SECRET: &str = "a-test-secret-of-at-least-32-chars-0123456789";

/// One rule of 10 per 10 s per algorithm, and the secret.
fn config(secret: &str) -> String {
    let mut text = format!("[server]\nreservation_secret = \"{secret}\"\n");
    for algorithm in [
        "fixed_window",
        "sliding_log",
        "sliding_window",
        "token_bucket",
        "leaky_bucket",
        "gcra",
    ] {
        text.push_str(&format!(
            "\n[[rules]]\nname = \"{algorithm}\"\nalgorithm = \"{algorithm}\"\nlimit = \"10/10s\"\n"
        ));
    }
    text
}

/// Reserves `cost` on `rule`/`key`; returns the answer (asserting 200 and a token).
async fn reserve(c: &reqwest::Client, fg: &Floodgate, rule: &str, key: &str, cost: u64) -> Value {
    let (status, body) = call(
        c,
        fg,
        "/v1/check",
        json!({"rule": rule, "key": key, "cost": cost, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["reservation"].is_string(), "{body}");
    body
}

async fn settle(c: &reqwest::Client, fg: &Floodgate, body: Value) -> (u16, Value) {
    call(c, fg, "/v1/settle", body).await
}

#[tokio::test]
async fn settles_give_back_and_charge_exactly_in_every_algorithm() {
    let fg = Floodgate::with_config(&config(SECRET), &[]);
    let c = client();
    for rule in [
        "fixed_window",
        "sliding_log",
        "sliding_window",
        "token_bucket",
        "leaky_bucket",
        "gcra",
    ] {
        let answer = reserve(&c, &fg, rule, "job-7", 5).await;
        assert_eq!(answer["remaining"], 5, "{rule}: {answer}");
        assert_eq!(answer["wait_us"], 0, "{rule}");
        assert_eq!(answer["reservation_expires_in_us"], 300_000_000, "{rule}");
        // Used 2 of 5: 3 come back.
        let (status, body) = settle(
            &c,
            &fg,
            json!({"reservation": answer["reservation"], "cost": 2}),
        )
        .await;
        assert_eq!(status, 200, "{rule}: {body}");
        assert_eq!(body["settled"], true);
        let d = &body["decisions"][0];
        assert_eq!(
            (&d["rule"], &d["key"], &d["reserved"], &d["actual"]),
            (&json!(rule), &json!("job-7"), &json!(5), &json!(2)),
            "{body}"
        );
        assert_eq!(d["remaining"], 8, "{rule}: {body}");
        assert_eq!(d["limit"], 10);
        assert_eq!(d["current"], true);
        assert_eq!(remaining(&c, &fg, rule, "job-7").await, 8, "{rule}");
        // Reserved 2, used 6: 4 more are charged.
        let answer = reserve(&c, &fg, rule, "job-7", 2).await;
        let (status, body) = settle(
            &c,
            &fg,
            json!({"reservation": answer["reservation"], "costs": [6]}),
        )
        .await;
        assert_eq!(status, 200, "{rule}: {body}");
        assert_eq!(body["decisions"][0]["remaining"], 2, "{rule}: {body}");
        assert_eq!(remaining(&c, &fg, rule, "job-7").await, 2, "{rule}");
    }
    let refunded = r#"floodgate_settles_total{rule="gcra",outcome="refunded"}"#;
    let charged = r#"floodgate_settled_units_total{rule="gcra",direction="charged"}"#;
    assert_eq!(metric(&c, &fg, refunded).await, Some(1.0));
    assert_eq!(metric(&c, &fg, charged).await, Some(4.0));
}

#[tokio::test]
async fn descriptors_are_settled_item_by_item_in_order() {
    let fg = Floodgate::with_config(&config(SECRET), &[]);
    let c = client();
    let (status, answer) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"reserve": true, "max_wait_ms": 0, "descriptors": [
            {"rule": "gcra", "key": "a", "cost": 4},
            {"rule": "fixed_window", "key": "b", "cost": 6}]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let token = answer["reservation"].clone();
    // One cost for two items names `cost`; the wrong number of costs names `costs`: a 409
    // `reservation-items` (well formed, but not what this reservation holds), nothing settled.
    for (wrong, field) in [
        (json!({"cost": 1}), "cost"),
        (json!({"costs": [1]}), "costs"),
    ] {
        let mut request = wrong;
        request["reservation"] = token.clone();
        let (status, body) = settle(&c, &fg, request).await;
        assert_eq!((status, &body["field"]), (409, &json!(field)), "{body}");
        assert_eq!(
            body["type"], "urn:floodgate:problem:reservation-items",
            "{body}"
        );
    }
    let (status, body) = settle(&c, &fg, json!({"reservation": token, "costs": [0, 10]})).await;
    assert_eq!(status, 200, "{body}");
    let keys: Vec<&Value> = body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["key"])
        .collect();
    assert_eq!(keys, [&json!("a"), &json!("b")]);
    assert_eq!(remaining(&c, &fg, "gcra", "a").await, 10);
    assert_eq!(remaining(&c, &fg, "fixed_window", "b").await, 0);
}

/// The payload of `token` (`v2.<key id>.<payload>.<mac>`), edited by `edit`, put back with
/// the old MAC.
fn edited(token: &str, edit: impl Fn(&str) -> String) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 4, "{token}");
    let json = String::from_utf8(URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
    let changed = edit(&json);
    assert_ne!(changed, json, "the edit changed nothing");
    format!(
        "{}.{}.{}.{}",
        parts[0],
        parts[1],
        URL_SAFE_NO_PAD.encode(changed),
        parts[3]
    )
}

#[tokio::test]
// Over 120 lines: one attack after another on the same reservation and servers, in order (a
// replay needs the settle before it, expiry the clock moved by the steps before).
async fn forged_edited_replayed_and_expired_tokens_are_refused() {
    let fg = Floodgate::with_config(&config(SECRET), &[]);
    let other = Floodgate::with_config(&config("another-secret-of-at-least-32-characters"), &[]);
    let c = client();
    let answer = reserve(&c, &fg, "token_bucket", "victim", 5).await;
    let token = answer["reservation"].as_str().unwrap().to_string();
    assert_eq!(remaining(&c, &fg, "token_bucket", "victim").await, 5);

    // Signed by another service (another secret): held elsewhere, named as such.
    let foreign = reserve(&c, &other, "token_bucket", "victim", 10).await;
    let (status, body) = settle(
        &c,
        &fg,
        json!({"reservation": foreign["reservation"], "cost": 0}),
    )
    .await;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("reservation")),
        "{body}"
    );
    assert_eq!(body["type"], "urn:floodgate:problem:reservation-elsewhere");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("signed with another secret (key id "),
        "{body}"
    );
    // Edited: a larger reserved cost (a refund of units never reserved), another key, a
    // later expiry. Each keeps the old MAC.
    for bad in [
        edited(&token, |j| j.replace("\"cost\":5", "\"cost\":10")),
        edited(&token, |j| {
            j.replace("\"key\":\"victim\"", "\"key\":\"other\"")
        }),
        edited(&token, |j| j.replace("\"exp\":", "\"exp\":9")),
    ] {
        // Well-formed but not signed by this service: no such reservation (404).
        let (status, body) = settle(&c, &fg, json!({"reservation": bad, "cost": 0})).await;
        assert_eq!(
            (status, &body["field"]),
            (404, &json!("reservation")),
            "{body}"
        );
        assert_eq!(body["type"], "urn:floodgate:problem:reservation-unknown");
        assert!(
            body["detail"].as_str().unwrap().starts_with(
                "reservation: no reservation of this service has this token: forged or edited"
            ),
            "{body}"
        );
    }
    // Malformed.
    for bad in ["", "nope", "v1.x.y", "v2.a.b", &token[..token.len() - 3]] {
        let (status, body) = settle(&c, &fg, json!({"reservation": bad, "cost": 0})).await;
        assert_eq!(
            (status, &body["field"]),
            (400, &json!("reservation")),
            "{bad:?}: {body}"
        );
    }
    // Bad costs name their field and spend nothing.
    for (body, field) in [
        (json!({"reservation": token, "cost": -1}), "cost"),
        (json!({"reservation": token, "cost": 1.5}), "cost"),
        (json!({"reservation": token, "cost": "1"}), "cost"),
        (json!({"reservation": token, "cost": 1_000_001}), "cost"),
        (json!({"reservation": token, "costs": [-1]}), "costs[0]"),
        (
            json!({"reservation": token, "cost": 1, "costs": [1]}),
            "costs",
        ),
        (json!({"reservation": token}), "cost"),
        (json!({"cost": 1}), "reservation"),
        (
            json!({"reservation": token, "cost": 1, "extra": 1}),
            "extra",
        ),
    ] {
        let (status, answer) = settle(&c, &fg, body.clone()).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (400, Some(field)),
            "{body}: {answer}"
        );
    }
    let (status, answer) = settle(&c, &fg, json!({"reservation": token, "costs": [1, 2]})).await;
    assert_eq!(
        (status, &answer["field"]),
        (409, &json!("costs")),
        "{answer}"
    );
    // Nothing was given back so far.
    assert_eq!(remaining(&c, &fg, "token_bucket", "victim").await, 5);
    // The real token settles once.
    let (status, body) = settle(&c, &fg, json!({"reservation": token, "cost": 0})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&c, &fg, "token_bucket", "victim").await, 10);
    // Replayed: 409, and nothing is given back twice.
    reserve(&c, &fg, "token_bucket", "victim", 5).await;
    let (status, body) = settle(&c, &fg, json!({"reservation": token, "cost": 0})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["type"], "urn:floodgate:problem:reservation-settled");
    assert_eq!(body["field"], "reservation");
    assert_eq!(remaining(&c, &fg, "token_bucket", "victim").await, 5);

    // Expired: 410 once reservation_ttl (5 minutes) has passed; its units stay spent.
    let late = reserve(&c, &fg, "gcra", "late", 5).await;
    advance(&c, &fg, 299_999_999).await;
    let early = reserve(&c, &fg, "fixed_window", "late", 3).await;
    advance(&c, &fg, 1).await;
    let (status, body) = settle(
        &c,
        &fg,
        json!({"reservation": late["reservation"], "cost": 0}),
    )
    .await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["type"], "urn:floodgate:problem:reservation-expired");
    assert_eq!(body["field"], "reservation");
    // One microsecond short of its expiry a token still settles.
    advance(&c, &fg, 299_999_998).await;
    let (status, body) = settle(
        &c,
        &fg,
        json!({"reservation": early["reservation"], "cost": 1}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let rejected =
        |reason: &str| format!("floodgate_requests_rejected_total{{reason=\"{reason}\"}}");
    // Five malformed, three edited (unknown), one of another secret (elsewhere).
    assert_eq!(
        metric(&c, &fg, &rejected("reservation_invalid")).await,
        Some(5.0)
    );
    assert_eq!(
        metric(&c, &fg, &rejected("reservation_unknown")).await,
        Some(3.0)
    );
    assert_eq!(
        metric(&c, &fg, &rejected("reservation_elsewhere")).await,
        Some(1.0)
    );
    assert_eq!(
        metric(&c, &fg, &rejected("reservation_expired")).await,
        Some(1.0)
    );
    let replayed = r#"floodgate_settles_total{rule="token_bucket",outcome="replayed"}"#;
    assert_eq!(metric(&c, &fg, replayed).await, Some(1.0));
}

#[tokio::test]
async fn reserve_is_for_checks_only_and_settle_needs_the_api_token() {
    let token_config = format!("{}\n", config(SECRET)).replace(
        "[server]\n",
        "[server]\napi_token = \"the-api-token-0123456789\"\n",
    );
    let fg = Floodgate::with_config(&token_config, &[]);
    let c = client();
    let bearer = |r: reqwest::RequestBuilder| r.bearer_auth("the-api-token-0123456789");
    // A peek reserves nothing: `"reserve": true` is refused naming it (`false`, the same as
    // leaving it out, is accepted: `peek_reserve_false`).
    let r = bearer(c.post(fg.url("/v1/peek")))
        .json(&json!({"rule": "gcra", "key": "k", "reserve": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "reserve");
    let r = bearer(c.post(fg.url("/v1/check")))
        .json(&json!({"rule": "gcra", "key": "k", "reserve": true}))
        .send()
        .await
        .unwrap();
    let answer: Value = r.json().await.unwrap();
    // No bearer token: 401, and the reservation is still there to settle.
    let (status, _) = settle(
        &c,
        &fg,
        json!({"reservation": answer["reservation"], "cost": 0}),
    )
    .await;
    assert_eq!(status, 401);
    let r = bearer(c.post(fg.url("/v1/settle")))
        .json(&json!({"reservation": answer["reservation"], "cost": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A plain check (no "reserve") answers no token; nor does a denial.
    let r = bearer(c.post(fg.url("/v1/check")))
        .json(&json!({"rule": "gcra", "key": "k", "max_wait_ms": 0}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert!(body.get("reservation").is_none(), "{body}");
    let r = bearer(c.post(fg.url("/v1/check")))
        .json(&json!({"rule": "gcra", "key": "full", "cost": 10, "reserve": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = bearer(c.post(fg.url("/v1/check")))
        .json(&json!({"rule": "gcra", "key": "full", "reserve": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert!(body.get("reservation").is_none(), "{body}");
}

#[tokio::test]
async fn a_rule_changed_by_a_reload_is_settled_on_the_state_it_was_reserved_from() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    let v1 = format!("[server]\nreservation_secret = \"{SECRET}\"\n[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = \"10/10s\"\n");
    write_atomically(&path, &v1);
    let fg = Floodgate::start(&["--config", path.to_str().unwrap(), "--watch-interval", "0"]);
    let c = client();
    let answer = reserve(&c, &fg, "r", "k", 6).await;
    write_atomically(&path, &v1.replace("10/10s", "20/10s"));
    fg.signal("HUP");
    let ok = r#"floodgate_config_reloads_total{result="ok"}"#;
    let mut reloaded = false;
    for _ in 0..2_000 {
        if metric(&c, &fg, ok).await == Some(1.0) {
            reloaded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(reloaded, "{}", fg.logs());
    // Under the new quota the key is fresh.
    assert_eq!(remaining(&c, &fg, "r", "k").await, 20);
    let (status, body) = settle(
        &c,
        &fg,
        json!({"reservation": answer["reservation"], "cost": 1}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let d = &body["decisions"][0];
    assert_eq!(d["current"], false, "{body}");
    // The old state got its 5 units back (10/10s: 4 + 5 = 9); the new one is untouched.
    assert_eq!(
        (&d["remaining"], &d["limit"]),
        (&json!(9), &json!(10)),
        "{body}"
    );
    assert_eq!(remaining(&c, &fg, "r", "k").await, 20);
}

#[tokio::test]
async fn without_a_secret_tokens_settle_on_their_own_process_only() {
    let rules = "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = \"10/10s\"\n";
    let a = Floodgate::with_config(rules, &[]);
    let b = Floodgate::with_config(rules, &[]);
    let c = client();
    let answer = reserve(&c, &a, "r", "k", 3).await;
    assert!(a.logs().contains("reservation_secret"), "{}", a.logs());
    let (status, body) = settle(
        &c,
        &b,
        json!({"reservation": answer["reservation"], "cost": 0}),
    )
    .await;
    assert_eq!(
        (status, &body["field"]),
        (409, &json!("reservation")),
        "{body}"
    );
    assert_eq!(body["type"], "urn:floodgate:problem:reservation-elsewhere");
    let (status, body) = settle(
        &c,
        &a,
        json!({"reservation": answer["reservation"], "cost": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_settles_once_across_two_processes_on_one_redis() {
    let redis = RedisServer::start().unwrap();
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 2000\n{}",
        redis.url(),
        config(SECRET)
    );
    let a = Floodgate::with_config(&text, &[]);
    let b = Floodgate::with_config(&text, &[]);
    let c = client();
    let answer = reserve(&c, &a, "sliding_log", "shared", 7).await;
    assert_eq!(remaining(&c, &b, "sliding_log", "shared").await, 3);
    // Settled on B: the refund is seen by both.
    let (status, body) = settle(
        &c,
        &b,
        json!({"reservation": answer["reservation"], "cost": 2}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decisions"][0]["remaining"], 8, "{body}");
    assert_eq!(remaining(&c, &a, "sliding_log", "shared").await, 8);
    // Again on A, then on B: refused, nothing given back twice.
    for fg in [&a, &b] {
        let (status, body) = settle(
            &c,
            fg,
            json!({"reservation": answer["reservation"], "cost": 0}),
        )
        .await;
        assert_eq!(status, 409, "{body}");
    }
    assert_eq!(remaining(&c, &a, "sliding_log", "shared").await, 8);
    // The claim is one key in Redis with a TTL (the token's life and a margin).
    let claims = redis.cli(&["--scan", "--pattern", "fg:claim:*"]).unwrap();
    assert_eq!(claims.lines().count(), 1, "{claims}");
    let pttl: i64 = redis
        .cli(&["PTTL", claims.trim()])
        .unwrap()
        .parse()
        .unwrap();
    assert!(pttl > 300_000 && pttl <= 360_000, "PTTL {pttl}");
}

/// With `"reserve": true` the wait is at most `reservation_ttl`: a token is never granted for a
/// slot after it can no longer be settled (a 10/d window asked to wait up to a day, with a TTL
/// of 2 s, is refused, not granted for the next day). And `null` is no value: a 400 naming the
/// member, not "absent".
#[tokio::test]
async fn a_reservation_waits_no_longer_than_its_token_lives_and_null_is_refused() {
    let text = format!(
        "[server]\nreservation_secret = \"{SECRET}\"\nreservation_ttl = \"2s\"\n\n\
         [[rules]]\nname = \"per-day\"\nalgorithm = \"fixed_window\"\nlimit = \"10/d\"\n"
    );
    let fg = Floodgate::with_config(&text, &[]);
    let c = client();
    reserve(&c, &fg, "per-day", "job", 10).await;
    let (status, body) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"rule": "per-day", "key": "job", "max_wait_ms": 86_400_000, "reserve": true}),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!(body.get("reservation").is_none(), "{body}");
    // Without "reserve" the same wait is granted (nothing has to be settled later).
    let (status, body) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"rule": "per-day", "key": "job", "max_wait_ms": 86_400_000}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["wait_us"].as_u64().unwrap() > 2_000_000, "{body}");
    for member in ["max_wait_ms", "reserve", "cost"] {
        let mut request = json!({"rule": "per-day", "key": "other"});
        request[member] = Value::Null;
        let (status, body) = call(&c, &fg, "/v1/check", request).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (400, Some(member)),
            "{body}"
        );
    }
    // The same for /v1/settle's cost and costs, also beside the other one given.
    let token = reserve(&c, &fg, "per-day", "third", 1).await["reservation"].clone();
    for (request, member) in [
        (json!({"reservation": token, "cost": null}), "cost"),
        (json!({"reservation": token, "costs": null}), "costs"),
        (
            json!({"reservation": token, "cost": null, "costs": [0]}),
            "cost",
        ),
        (
            json!({"reservation": token, "cost": 0, "costs": null}),
            "costs",
        ),
    ] {
        let (status, body) = settle(&c, &fg, request).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (400, Some(member)),
            "{body}"
        );
    }
    // Nothing was settled by those: the token settles once now.
    let (status, body) = settle(&c, &fg, json!({"reservation": token, "cost": 0})).await;
    assert_eq!(status, 200, "{body}");
}

/// A shadow rule never refuses and never holds: a check that may wait is admitted at once
/// (`wait_us: 0`) even when the shadow rule is spent, and a reservation of it has no token
/// (nothing was reserved to settle).
#[tokio::test]
async fn a_shadow_rule_admits_at_once_with_nothing_to_settle() {
    let text = format!(
        "[server]\nreservation_secret = \"{SECRET}\"\n\n\
         [[rules]]\nname = \"trial\"\nlimit = \"1/h\"\nshadow = true\n"
    );
    let fg = Floodgate::with_config(&text, &[]);
    let c = client();
    for _ in 0..2 {
        let (status, body) = call(
            &c,
            &fg,
            "/v1/check",
            json!({"rule": "trial", "key": "k", "max_wait_ms": 100}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["wait_us"], 0, "{body}");
    }
    let (status, body) = call(
        &c,
        &fg,
        "/v1/check",
        json!({"rule": "trial", "key": "k", "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["wait_us"], 0, "{body}");
    assert!(body.get("reservation").is_none(), "{body}");
}
