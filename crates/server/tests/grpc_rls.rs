//! `floodgate serve --grpc-listen`: Envoy's rate limit service (RLS v3) called with a tonic
//! client against the real binary: codes, statuses, headers, `hits_addend`, limit overrides,
//! shadow mode, unlimited, wildcards, `replaces`, all-or-nothing, failure modes with a dead
//! Redis, envoyproxy/ratelimit's README examples. Reload, health and reflection: `grpc_service`.

mod grpc_support;
mod serve_support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use grpc_support::{
    call, code, codes, desc, header, ok_headers_yaml, one, remaining, request, start, with_hits,
    yaml, FIVE_PER_MINUTE,
};
use serde_json::json;
use serve_support::{advance, client, metric, post_json};

#[tokio::test]
async fn codes_statuses_and_headers_of_a_five_per_minute_descriptor() {
    let (_fg, mut c) = ok_headers_yaml(FIVE_PER_MINUTE).await;
    for i in 0..5u32 {
        let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
        assert_eq!(code(&r), Code::Ok, "call {i}");
        let s = &r.statuses[0];
        assert_eq!(remaining(s), 4 - i);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("", 5, 2),
            "no name given: empty, as envoyproxy/ratelimit; unit MINUTE"
        );
        let reset = s.duration_until_reset.unwrap();
        assert!(reset.seconds > 0 && reset.seconds <= 60, "{reset:?}");
        assert_eq!(
            header(&r, "ratelimit-policy"),
            Some("\"rl.generic_key_five\";q=5;w=60")
        );
        assert!(header(&r, "ratelimit")
            .unwrap()
            .starts_with(&format!("\"rl.generic_key_five\";r={};t=", 4 - i)));
        assert_eq!(header(&r, "retry-after"), None);
    }
    let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(codes(&r), vec![Code::OverLimit]);
    assert_eq!(remaining(&r.statuses[0]), 0);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // A named rate_limit is named by its name.
    let r = one(&mut c, "rl", &[("generic_key", "big")]).await;
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "big");
    // No match and an unknown domain: OK without a limit.
    let r = one(&mut c, "rl", &[("generic_key", "other")]).await;
    assert_eq!(code(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none());
    assert!(r.response_headers_to_add.is_empty());
    let r = one(&mut c, "nope", &[("generic_key", "five")]).await;
    assert_eq!(code(&r), Code::Ok);
}

/// The same rule (TOML, with a domain) decided through gRPC and `/v1/check` writes the same
/// `RateLimit-Policy`, `RateLimit` and `Retry-After` at every step (OK answers with
/// `--envoy-ok-response-headers`).
#[tokio::test]
async fn headers_are_exactly_the_http_front_ends() {
    let toml = r#"
[[rules]]
name = "per-key"
algorithm = "gcra"
limit = "3/10s"
domain = "rl"
descriptors = [{ key = "k" }]
"#;
    let (fg, mut c) = start(
        &[("f.toml", toml)],
        "f.toml",
        &["--envoy-ok-response-headers"],
    )
    .await;
    let http = client();
    for i in 0..5 {
        let r = one(&mut c, "rl", &[("k", "a")]).await;
        let (status, h, _) = post_json(
            &http,
            &fg.url("/v1/check"),
            &json!({"rule": "per-key", "key": "a"}),
        )
        .await;
        assert_eq!(status == 200, code(&r) == Code::Ok, "step {i}");
        for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
            assert_eq!(
                header(&r, name),
                h.get(name).map(|v| v.to_str().unwrap()),
                "step {i}: {name}"
            );
        }
    }
}

#[tokio::test]
async fn hits_addend_at_request_and_descriptor_level() {
    let (_fg, mut c) = yaml(
        FIVE_PER_MINUTE
            .replace(
                "requests_per_unit: 10",
                "requests_per_unit: 10\n      algorithm: token_bucket",
            )
            .as_str(),
    )
    .await;
    let big = || desc(&[("generic_key", "big")]);
    // Request level 0 is unset, i.e. 1.
    let r = call(&mut c, request("rl", vec![big()], 0)).await;
    assert_eq!(remaining(&r.statuses[0]), 9);
    // Request level N.
    let r = call(&mut c, request("rl", vec![big()], 3)).await;
    assert_eq!(remaining(&r.statuses[0]), 6);
    // Descriptor level overrides the request's.
    let r = call(&mut c, request("rl", vec![with_hits(big(), 2)], 4)).await;
    assert_eq!(remaining(&r.statuses[0]), 4);
    // Descriptor level 0: report only, nothing charged.
    let r = call(&mut c, request("rl", vec![with_hits(big(), 0)], 4)).await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 4));
    // More than is left: over the limit, nothing charged.
    let r = call(&mut c, request("rl", vec![with_hits(big(), 5)], 0)).await;
    assert_eq!(code(&r), Code::OverLimit);
    let r = call(&mut c, request("rl", vec![with_hits(big(), 4)], 0)).await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 0));
    // Report only on an exhausted key still answers.
    let r = call(&mut c, request("rl", vec![with_hits(big(), 0)], 0)).await;
    assert_eq!(remaining(&r.statuses[0]), 0);
    // Above the capacity: an error, never OK.
    for (r, field) in [
        (
            request("rl", vec![with_hits(big(), 11)], 0),
            "descriptors[0].hits_addend: ",
        ),
        (request("rl", vec![big()], 11), "hits_addend: "),
    ] {
        let e = c.should_rate_limit(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with(field), "{}", e.message());
        assert!(e.message().contains("capacity"), "{}", e.message());
    }
    // Two descriptors of one rule and key that together exceed it: an error too.
    let e = c
        .should_rate_limit(request(
            "rl",
            vec![with_hits(big(), 6), with_hits(big(), 6)],
            0,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{}", e.message());
}

#[tokio::test]
async fn a_limit_override_is_decided_by_its_own_rule_only_where_allowed() {
    let (_fg, mut c) = ok_headers_yaml(
        "\
domain: rl
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
      overrides:
        - requests_per_unit: 3
          unit: hour
  - key: plain
    rate_limit:
      unit: minute
      requests_per_unit: 2
",
    )
    .await;
    let over = |mut d: RateLimitDescriptor, n: u32, unit: i32| {
        d.limit = Some(RateLimitOverride {
            requests_per_unit: n,
            unit,
        });
        d
    };
    const HOUR: i32 = 3;
    for expected in [2, 1, 0] {
        let r = call(
            &mut c,
            request("rl", vec![over(desc(&[("user", "u")]), 3, HOUR)], 0),
        )
        .await;
        assert_eq!(code(&r), Code::Ok);
        let s = &r.statuses[0];
        assert_eq!(remaining(s), expected);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (3, HOUR));
        assert_eq!(
            limit.name, "",
            "an override has no name, as envoyproxy/ratelimit's"
        );
        assert_eq!(
            header(&r, "ratelimit-policy"),
            Some("\"rl.user@3/h\";q=3;w=3600")
        );
    }
    let r = call(
        &mut c,
        request("rl", vec![over(desc(&[("user", "u")]), 3, HOUR)], 0),
    )
    .await;
    assert_eq!(code(&r), Code::OverLimit);
    // The configured quota's counters are its own.
    let r = one(&mut c, "rl", &[("user", "u")]).await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 1));
    // Any other override is honoured by default (as envoyproxy/ratelimit), with counters of
    // its own; one on a descriptor that selects nothing selects nothing.
    let r = call(
        &mut c,
        request("rl", vec![over(desc(&[("user", "u")]), 4, HOUR)], 0),
    )
    .await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 3));
    let r = call(
        &mut c,
        request("rl", vec![over(desc(&[("plain", "p")]), 3, HOUR)], 0),
    )
    .await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 2));
    let r = call(
        &mut c,
        request("rl", vec![over(desc(&[("nothing", "x")]), 3, HOUR)], 0),
    )
    .await;
    assert_eq!(
        (code(&r), r.statuses[0].current_limit.clone()),
        (Code::Ok, None)
    );
    // With --envoy-no-request-limit-overrides, an override the configuration does not allow
    // is an error naming the field.
    let (_fg, mut c) = start(
        &[("ratelimit.yaml", "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2, overrides: [{requests_per_unit: 3, unit: hour}]}\n  - key: plain\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")],
        "ratelimit.yaml",
        &["--envoy-no-request-limit-overrides"],
    )
    .await;
    let r = call(
        &mut c,
        request("rl", vec![over(desc(&[("user", "u")]), 3, HOUR)], 0),
    )
    .await;
    assert_eq!(
        (code(&r), remaining(&r.statuses[0])),
        (Code::Ok, 2),
        "a listed one"
    );
    for d in [
        over(desc(&[("user", "u")]), 4, HOUR),
        over(desc(&[("plain", "p")]), 3, HOUR),
        over(desc(&[("nothing", "x")]), 3, HOUR),
    ] {
        let e = c
            .should_rate_limit(request("rl", vec![d], 0))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.message().starts_with("descriptors[0].limit"),
            "{}",
            e.message()
        );
    }
}

#[tokio::test]
async fn shadow_mode_never_denies_and_is_counted() {
    let (fg, mut c) = yaml(
        "\
domain: rl
descriptors:
  - key: user
    shadow_mode: true
    rate_limit:
      name: shadowed
      unit: second
      requests_per_unit: 2
",
    )
    .await;
    for _ in 0..4 {
        let r = one(&mut c, "rl", &[("user", "u")]).await;
        assert_eq!(code(&r), Code::Ok);
        assert_eq!(codes(&r), vec![Code::Ok]);
        assert!(
            r.response_headers_to_add.is_empty(),
            "a shadow rule sends no headers"
        );
    }
    let http = client();
    let series =
        |o: &str| format!("floodgate_decisions_total{{rule=\"shadowed\",outcome=\"{o}\"}}");
    assert_eq!(
        metric(&http, &fg, &series("shadow_allowed")).await,
        Some(2.0)
    );
    assert_eq!(
        metric(&http, &fg, &series("shadow_denied")).await,
        Some(2.0)
    );
}

#[tokio::test]
async fn all_descriptors_are_decided_all_or_nothing() {
    let (_fg, mut c) = yaml(FIVE_PER_MINUTE).await;
    for _ in 0..5 {
        one(&mut c, "rl", &[("generic_key", "five")]).await;
    }
    let both = || {
        request(
            "rl",
            vec![
                desc(&[("generic_key", "big")]),
                desc(&[("generic_key", "five")]),
            ],
            0,
        )
    };
    let r = call(&mut c, both()).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(codes(&r), vec![Code::Ok, Code::OverLimit]);
    assert_eq!(remaining(&r.statuses[0]), 10, "nothing charged");
    // Nothing was charged under the admitting descriptor: its next lone call is its first.
    let r = one(&mut c, "rl", &[("generic_key", "big")]).await;
    assert_eq!(remaining(&r.statuses[0]), 9);
    // Headers list both rules; Retry-After is the denying one's.
    let r = call(&mut c, both()).await;
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"big\";q=10;w=60, \"rl.generic_key_five\";q=5;w=60")
    );
    assert!(header(&r, "retry-after").is_some());
}

#[tokio::test]
async fn unlimited_wildcards_and_replaces() {
    let (_fg, mut c) = ok_headers_yaml(
        "\
domain: rl
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: path
    value: /api/*
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    )
    .await;
    let r = one(&mut c, "rl", &[("ldap", "x")]).await;
    assert_eq!(code(&r), Code::Ok);
    assert_eq!(remaining(&r.statuses[0]), u32::MAX);
    assert!(r.statuses[0].current_limit.is_none());
    // Every value matching the wildcard has its own counter; the rule is named by its pattern.
    for path in ["/api/a", "/api/b"] {
        let r = one(&mut c, "rl", &[("path", path)]).await;
        assert_eq!(code(&r), Code::Ok, "{path}");
        assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "");
        assert_eq!(
            header(&r, "ratelimit-policy"),
            Some("\"rl.path_/api/*\";q=1;w=60"),
            "the rule is named by its pattern"
        );
        assert_eq!(
            code(&one(&mut c, "rl", &[("path", path)]).await),
            Code::OverLimit
        );
    }
    assert!(one(&mut c, "rl", &[("path", "/other")]).await.statuses[0]
        .current_limit
        .is_none());
    // replaces: with both, only the replacing limit applies and the replaced one is untouched.
    let one_key = |k: &str, v: &str| desc(&[(k, v), ("user", "bkthomps")]);
    let r = call(
        &mut c,
        request(
            "rl",
            vec![one_key("key_1", "value_1"), one_key("key_2", "value_2")],
            0,
        ),
    )
    .await;
    assert_eq!(code(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none(), "replaced");
    assert_eq!(remaining(&r.statuses[1]), 9);
    let r = call(&mut c, request("rl", vec![one_key("key_1", "value_1")], 0)).await;
    assert_eq!(
        remaining(&r.statuses[0]),
        4,
        "the replaced limit was not charged"
    );
}

#[tokio::test]
async fn store_failure_follows_each_rules_failure_mode() {
    // A port nothing listens on: every store call fails.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", dead.local_addr().unwrap());
    drop(dead);
    let (fg, mut c) = start(
        &[(
            "ratelimit.yaml",
            "\
domain: rl
descriptors:
  - key: open
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: closed
    rate_limit:
      unit: minute
      requests_per_unit: 5
      failure_mode: closed
",
        )],
        "ratelimit.yaml",
        &["--store", &url],
    )
    .await;
    let r = one(&mut c, "rl", &[("open", "x")]).await;
    assert_eq!(code(&r), Code::Ok);
    let e = c
        .should_rate_limit(request("rl", vec![desc(&[("closed", "x")])], 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    // Both counted as on every other path.
    let http = client();
    let series = |rule: &str, o: &str| {
        format!("floodgate_decisions_total{{rule=\"rl.{rule}\",outcome=\"{o}\"}}")
    };
    assert_eq!(
        metric(&http, &fg, &series("open", "error_open")).await,
        Some(1.0)
    );
    assert_eq!(
        metric(&http, &fg, &series("closed", "error_closed")).await,
        Some(1.0)
    );
    assert!(
        metric(
            &http,
            &fg,
            "floodgate_grpc_requests_total{method=\"ShouldRateLimit\",code=\"unavailable\"}"
        )
        .await
            >= Some(1.0)
    );
}

#[tokio::test]
async fn invalid_requests_are_errors_naming_the_field() {
    let (_fg, mut c) = yaml(FIVE_PER_MINUTE).await;
    for (r, field) in [
        (request("", vec![desc(&[("k", "v")])], 0), "domain"),
        (request("rl", vec![], 0), "descriptors"),
        (
            request("rl", vec![desc(&[("k", "v"); 33])], 0),
            "descriptors[0].entries",
        ),
        (
            request(
                "rl",
                vec![RateLimitDescriptor {
                    is_negative_hits: true,
                    ..desc(&[("k", "v")])
                }],
                0,
            ),
            "descriptors[0].is_negative_hits",
        ),
    ] {
        let e = c.should_rate_limit(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with(field), "{field}: {}", e.message());
    }
    // An empty descriptor selects nothing: OK without a limit (as envoyproxy/ratelimit).
    let r = one(&mut c, "rl", &[]).await;
    assert_eq!(
        (code(&r), r.statuses[0].current_limit.clone()),
        (Code::Ok, None)
    );
}

/// A fixed window (the YAML's default) resets at the wall-clock window edge, as
/// envoyproxy/ratelimit's does: `duration_until_reset` counts down to it.
#[tokio::test]
async fn the_fixed_window_resets_at_the_unit_edge() {
    let (fg, mut c) = yaml(FIVE_PER_MINUTE).await;
    let http = client();
    for _ in 0..5 {
        one(&mut c, "rl", &[("generic_key", "five")]).await;
    }
    let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
    assert_eq!(code(&r), Code::OverLimit);
    // The manual clock starts on a minute boundary (see serve_support::START_US).
    let reset = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!((reset.seconds, reset.nanos), (60, 0));
    advance(&http, &fg, 59_000_000).await;
    assert_eq!(
        code(&one(&mut c, "rl", &[("generic_key", "five")]).await),
        Code::OverLimit
    );
    advance(&http, &fg, 1_000_000).await;
    let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 4));
}

/// envoyproxy/ratelimit's README examples (tests/envoy_examples, one domain per file) loaded
/// as a directory, unchanged, decide as its documentation says.
#[tokio::test]
// Over 120 lines: the README's examples in its order on one server with all of them loaded,
// each a few lines; one test so the directory is loaded (and proven to load) once.
async fn readme_examples_decide_as_documented() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy_examples");
    let files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_str().unwrap().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let (_fg, mut c) = start(&borrowed, ".", &[]).await;
    // 1: 500 per second for ("database", "users").
    let users = || desc(&[("database", "users")]);
    let r = call(
        &mut c,
        request("mongo_cps", vec![with_hits(users(), 500)], 0),
    )
    .await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 0));
    assert_eq!(
        code(&call(&mut c, request("mongo_cps", vec![users()], 0)).await),
        Code::OverLimit
    );
    let r = one(&mut c, "mongo_cps", &[("database", "default")]).await;
    assert_eq!(remaining(&r.statuses[0]), 499, "its own limit");
    // 2: 5 marketing messages a day per number, inside 100 per number; a logical OR.
    let marketing = |n: &str| {
        request(
            "messaging",
            vec![
                desc(&[("message_type", "marketing"), ("to_number", n)]),
                desc(&[("to_number", n)]),
            ],
            0,
        )
    };
    for _ in 0..5 {
        assert_eq!(code(&call(&mut c, marketing("2061111111")).await), Code::Ok);
    }
    let r = call(&mut c, marketing("2061111111")).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(codes(&r), vec![Code::OverLimit, Code::Ok]);
    assert_eq!(code(&call(&mut c, marketing("2062222222")).await), Code::Ok);
    // 3: 10 per second per address; 50.0.0.5 is blocked.
    let r = one(
        &mut c,
        "edge_proxy_per_ip",
        &[("remote_address", "50.0.0.5")],
    )
    .await;
    assert_eq!(code(&r), Code::OverLimit);
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(limit.requests_per_unit, 0);
    let r = one(
        &mut c,
        "edge_proxy_per_ip",
        &[("remote_address", "50.0.0.1")],
    )
    .await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, 9));
    // 4: one level of request against two levels of configuration: no limit.
    let r = one(&mut c, "example4", &[("key", "value")]).await;
    assert!(r.statuses[0].current_limit.is_none());
    let r = one(
        &mut c,
        "example4",
        &[("key", "value"), ("subkey", "subvalue")],
    )
    .await;
    assert_eq!(remaining(&r.statuses[0]), 299);
    // 5: unlimited is OK with the largest remaining count.
    let r = one(&mut c, "internal", &[("ldap", "x")]).await;
    assert_eq!((code(&r), remaining(&r.statuses[0])), (Code::Ok, u32::MAX));
    // 6: user-a is never limited (shadow), user-b is at 20 per second.
    for _ in 0..25 {
        let a = one(
            &mut c,
            "example6",
            &[("service", "auth-service"), ("user", "user-a")],
        )
        .await;
        assert_eq!(code(&a), Code::Ok);
    }
    let b = || desc(&[("service", "auth-service"), ("user", "user-b")]);
    let r = call(&mut c, request("example6", vec![with_hits(b(), 20)], 0)).await;
    assert_eq!(code(&r), Code::Ok);
    assert_eq!(
        code(&call(&mut c, request("example6", vec![b()], 0)).await),
        Code::OverLimit
    );
    // 7: with both descriptors only the replacing 10 per second applies.
    let both = || {
        request(
            "example7",
            vec![
                desc(&[("key_1", "value_1"), ("user", "bkthomps")]),
                desc(&[("key_2", "value_2"), ("user", "bkthomps")]),
            ],
            0,
        )
    };
    for _ in 0..10 {
        assert_eq!(code(&call(&mut c, both()).await), Code::Ok);
    }
    assert_eq!(code(&call(&mut c, both()).await), Code::OverLimit);
    let r = one(
        &mut c,
        "example7",
        &[("key_1", "value_1"), ("user", "bkthomps")],
    )
    .await;
    assert_eq!(
        remaining(&r.statuses[0]),
        4,
        "the 5 per second limit was untouched"
    );
    // 8: values not listed share the key's limit and have their own counters.
    let r = one(&mut c, "example8", &[("key1", "unspecified_value")]).await;
    assert_eq!(remaining(&r.statuses[0]), 9);
    let r = one(&mut c, "example8", &[("key1", "value1")]).await;
    assert_eq!(remaining(&r.statuses[0]), 19);
    // 9: wildcards.
    let r = one(
        &mut c,
        "example9",
        &[("route", "/api/v1/resource/123/action")],
    )
    .await;
    assert_eq!(remaining(&r.statuses[0]), 19);
    let r = one(&mut c, "example9", &[("path", "/api/123/other")]).await;
    assert!(r.statuses[0].current_limit.is_none());
}
