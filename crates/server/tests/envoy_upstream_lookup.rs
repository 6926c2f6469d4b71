//! envoyproxy/ratelimit's own configuration suite, continued (see `envoy_upstream_config`):
//! the realistic, detailed-metric, share-threshold, metadata and override look-ups.

mod envoy_upstream;
mod serve_support;

use envoy_upstream::*;

/// `realisticExampleConfig` of TestDetailedMetric.
const REALISTIC: &str = "\
domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: { requests_per_unit: 500, unit: minute }
  - key: key_1
    value: some-value-for-key-1
    rate_limit: { requests_per_unit: 500, unit: minute }
  - key: key_2
    detailed_metric: true
    rate_limit: { requests_per_unit: 5000, unit: minute }
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: { requests_per_unit: 5, unit: minute }
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: { requests_per_unit: 50000, unit: minute }
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: { requests_per_unit: 100, unit: minute }
";

/// The two-level configuration of TestDetailedMetric's first four cases.
fn nested(top: bool, child: bool) -> String {
    format!(
        "\
domain: nested
descriptors:
  - key: key-1
    detailed_metric: {top}
    rate_limit: {{ requests_per_unit: 100, unit: minute }}
    descriptors:
      - key: key-2
        detailed_metric: {child}
        rate_limit: {{ requests_per_unit: 5, unit: minute }}
"
    )
}

/// Asserts the one decision of `entries` in `domain` of `yaml` is counted under the stats key
/// `key`: as a descriptor series when `detailed` (the key holds request values), else under
/// the rule of that name.
async fn assert_stats_key(
    yaml: &str,
    domain: &str,
    entries: &[(&str, &str)],
    key: &str,
    detailed: bool,
) {
    let mut r = one_file(yaml).await;
    r.limit(domain, entries).await;
    let hits = if detailed {
        r.descriptor_hits(key).await
    } else {
        r.rule_hits(key).await
    };
    assert_eq!(
        hits,
        1.0,
        "{entries:?} counted as {key}:\n{}",
        r.metrics().await
    );
}

#[tokio::test]
async fn test_detailed_metric() {
    let one = [("key-1", "value-1")];
    let two = [("key-1", "value-1"), ("key-2", "value-2")];
    let cases: Vec<(String, Entries, &str, bool)> = vec![
        (nested(true, false), &one, "nested.key-1_value-1", true),
        (nested(false, false), &one, "nested.key-1", false),
        (
            nested(true, true),
            &two,
            "nested.key-1_value-1.key-2_value-2",
            true,
        ),
        (nested(false, false), &two, "nested.key-1.key-2", false),
        (
            REALISTIC.into(),
            &[("key_1", "value-for-key-1")],
            "nested.key_1_value-for-key-1",
            true,
        ),
        (
            REALISTIC.into(),
            &[("key_2", "key-2-value")],
            "nested.key_2_key-2-value",
            true,
        ),
        (
            REALISTIC.into(),
            &[("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
            "nested.key_2_key-2-value.key_3_requested-key3-value",
            true,
        ),
    ];
    for (yaml, entries, key, detailed) in cases {
        assert_stats_key(&yaml, "nested", entries, key, detailed).await;
    }
}

/// route (value_to_metric) / http_method (value_to_metric) / subject_id: 60 per minute.
const ROUTE_METHOD_SUBJECT: &str = "\
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: { requests_per_unit: 60, unit: minute }
";

#[tokio::test]
async fn test_value_to_metric_uses_runtime_values_in_stats() {
    assert_stats_key(
        ROUTE_METHOD_SUBJECT,
        "domain",
        &[
            ("route", "draw"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
        "domain.route_draw.http_method_GET.subject_id",
        true,
    )
    .await;
}

#[tokio::test]
async fn test_value_to_metric_default_key_includes_value_at_that_level() {
    let yaml = "\
domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: { requests_per_unit: 1, unit: second }
";
    assert_stats_key(yaml, "d", &[("k1", "A"), ("k2", "foo")], "d.k1_A.k2", true).await;
}

#[tokio::test]
async fn test_value_to_metric_mid_level_only() {
    let yaml = "\
domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: { requests_per_unit: 1, unit: second }
";
    assert_stats_key(
        yaml,
        "d",
        &[("k1", "X"), ("k2", "Y"), ("k3", "Z")],
        "d.k1.k2_Y.k3",
        true,
    )
    .await;
}

#[tokio::test]
async fn test_value_to_metric_no_flag_unchanged() {
    let yaml = "\
domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        rate_limit: { requests_per_unit: 1, unit: second }
";
    let mut r = one_file(yaml).await;
    r.limit("d", &[("k1", "X"), ("k2", "Y")]).await;
    assert_eq!(r.rule_hits("d.k1.k2").await, 1.0);
    assert_eq!(
        r.series("floodgate_descriptor_decisions_total", &[]).await,
        0.0,
        "no value labels without the flags"
    );
}

#[tokio::test]
async fn test_value_to_metric_does_not_override_detailed_metric() {
    let yaml = ROUTE_METHOD_SUBJECT.replace(
        "          - key: subject_id\n",
        "          - key: subject_id\n            detailed_metric: true\n",
    );
    assert_stats_key(
        &yaml,
        "domain",
        &[
            ("route", "draw"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
        "domain.route_draw.http_method_GET.subject_id_123",
        true,
    )
    .await;
}

#[tokio::test]
async fn test_value_to_metric_with_configured_values() {
    let yaml = "\
domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: { requests_per_unit: 60, unit: minute }
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: { requests_per_unit: 30, unit: minute }
";
    let mut r = one_file(yaml).await;
    for (method, subject, limit) in [("GET", "user123", 60), ("POST", "user456", 30)] {
        let e = [
            ("route", "api"),
            ("http_method", method),
            ("subject_id", subject),
        ];
        assert_eq!(r.limit("test-domain", &e).await.0, limit);
        let key = format!("test-domain.route_api.http_method_{method}.subject_id");
        assert_eq!(r.descriptor_hits(&key).await, 1.0, "{key}");
    }
}

#[tokio::test]
async fn test_value_to_metric_with_wildcard() {
    let yaml = "\
domain: domain
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: { requests_per_unit: 100, unit: minute }
";
    let mut r = one_file(yaml).await;
    for (user, action, resource) in [
        ("alice", "readfile", "documents"),
        ("bob", "readdata", "database"),
    ] {
        let e = [("user", user), ("action", action), ("resource", resource)];
        assert_eq!(r.limit("domain", &e).await.0, 100);
        let key = format!("domain.user_{user}.action_{action}.resource");
        assert_eq!(r.descriptor_hits(&key).await, 1.0, "{key}");
    }
}

#[tokio::test]
async fn test_value_to_metric_with_empty_value() {
    let mut r = one_file(ROUTE_METHOD_SUBJECT).await;
    let cases = [
        ("", "GET", "domain.route.http_method_GET.subject_id"),
        ("draw", "", "domain.route_draw.http_method.subject_id"),
        ("", "", "domain.route.http_method.subject_id"),
    ];
    for (route, method, key) in cases {
        let e = [
            ("route", route),
            ("http_method", method),
            ("subject_id", "123"),
        ];
        r.limit("domain", &e).await;
        assert_eq!(r.descriptor_hits(key).await, 1.0, "{key}");
    }
}

#[tokio::test]
async fn test_value_to_metric_full_key_matches_stats_key() {
    // FullKey (upstream's debug logs) is the stats key: one key per decision, the descriptor
    // series' label. With value_to_metric, without flags, and with detailed_metric.
    let e = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "user123"),
    ];
    assert_stats_key(
        &ROUTE_METHOD_SUBJECT.replace("domain: domain", "domain: test-domain"),
        "test-domain",
        &e,
        "test-domain.route_api.http_method_GET.subject_id",
        true,
    )
    .await;
    let plain = "\
domain: test-domain-2
descriptors:
  - key: route
    descriptors:
      - key: http_method
        descriptors:
          - key: subject_id
            rate_limit: { requests_per_unit: 60, unit: minute }
";
    assert_stats_key(
        plain,
        "test-domain-2",
        &e,
        "test-domain-2.route.http_method.subject_id",
        false,
    )
    .await;
    let detailed = plain.replace("test-domain-2", "test-domain-3").replace(
        "          - key: subject_id\n",
        "          - key: subject_id\n            detailed_metric: true\n",
    );
    assert_stats_key(
        &detailed,
        "test-domain-3",
        &e,
        "test-domain-3.route_api.http_method_GET.subject_id_user123",
        true,
    )
    .await;
}

// Over 120 lines: one Go test ported case by case (each wildcard, value and counter in
// upstream's order), so that it reads beside the original.
#[tokio::test]
async fn test_share_threshold() {
    let mut r = one_file(SHARE).await;
    let d = "test-domain";
    // Case 1: every value matching files/* shares one counter of 100.
    for (i, v) in ["files/a.pdf", "files/b.csv", "files/c.txt"]
        .iter()
        .enumerate()
    {
        let s = r.get(d, &[("files", v)]).await;
        assert_eq!(s.current_limit.unwrap().requests_per_unit, 100);
        assert_eq!(s.limit_remaining, 99 - i as u32, "{v}: one shared counter");
    }
    assert_eq!(r.rule_hits("test-domain.files_files/*").await, 3.0);
    // Case 2: share_threshold takes priority over value_to_metric and detailed_metric.
    let s = r.get(d, &[("route", "api/v1"), ("method", "GET")]).await;
    assert_eq!(s.current_limit.unwrap().requests_per_unit, 60);
    let s = r.get(d, &[("route", "api/v2"), ("method", "GET")]).await;
    assert_eq!(s.limit_remaining, 58, "api/v1 and api/v2 share a counter");
    assert_eq!(
        r.descriptor_hits("test-domain.route_api/*.method").await,
        2.0
    );
    r.get(d, &[("service", "svc/user"), ("endpoint", "get")])
        .await;
    assert_eq!(
        r.descriptor_hits("test-domain.service_svc/*.endpoint_get")
            .await,
        1.0
    );
    // Case 3: nested wildcards.
    let s = r
        .get(d, &[("nested", "parent"), ("files", "nested/file1.txt")])
        .await;
    assert_eq!(s.current_limit.unwrap().requests_per_unit, 200);
    assert_eq!(
        r.rule_hits("test-domain.nested_parent.files_nested/*")
            .await,
        1.0
    );
    for (i, (a, b)) in [("top/file1.txt", "nested/file1.txt"), ("top/x", "nested/y")]
        .iter()
        .enumerate()
    {
        let s = r.get(d, &[("files", a), ("files", b)]).await;
        assert_eq!(s.current_limit.unwrap().requests_per_unit, 300);
        assert_eq!(s.limit_remaining, 299 - i as u32, "both levels shared");
    }
    assert_eq!(
        r.rule_hits("test-domain.files_top/*.files_nested/*").await,
        2.0
    );
    // Parent shared, child (share_threshold: false) a counter per value.
    let s = r
        .get(
            d,
            &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
        )
        .await;
    assert_eq!(
        (
            s.current_limit.unwrap().requests_per_unit,
            s.limit_remaining
        ),
        (120, 119)
    );
    let s = r
        .get(
            d,
            &[("path", "path/bar"), ("file", "file/doc1"), ("type", "pdf")],
        )
        .await;
    assert_eq!(s.limit_remaining, 118, "path/* shared");
    let s = r
        .get(
            d,
            &[("path", "path/bar"), ("file", "file/doc2"), ("type", "pdf")],
        )
        .await;
    assert_eq!(s.limit_remaining, 119, "file/* not shared");
    assert_eq!(
        r.rule_hits("test-domain.path_path/*.file_file/*.type")
            .await,
        3.0
    );
    let s = r
        .get(
            d,
            &[
                ("user", "user/alice"),
                ("resource", "res/file1"),
                ("action", "read"),
            ],
        )
        .await;
    assert_eq!(
        (
            s.current_limit.unwrap().requests_per_unit,
            s.limit_remaining
        ),
        (150, 149)
    );
    let s = r
        .get(
            d,
            &[
                ("user", "user/bob"),
                ("resource", "res/file2"),
                ("action", "read"),
            ],
        )
        .await;
    assert_eq!(s.limit_remaining, 148);
    let s = r
        .get(
            d,
            &[
                ("user", "user/bob"),
                ("resource", "res/file2"),
                ("action", "write"),
            ],
        )
        .await;
    assert_eq!(
        s.limit_remaining, 149,
        "action has no wildcard: its own counter"
    );
    assert_eq!(
        r.rule_hits("test-domain.user_user/*.resource_res/*.action")
            .await,
        3.0
    );
    // Case 4: an explicit value wins over the wildcard and keeps its own counter.
    let s = r.get(d, &[("file", "test1")]).await;
    assert_eq!(
        (
            s.current_limit.unwrap().requests_per_unit,
            s.limit_remaining
        ),
        (50, 49)
    );
    for (i, v) in ["test2", "test23", "test123"].iter().enumerate() {
        let s = r.get(d, &[("file", v)]).await;
        assert_eq!(s.current_limit.unwrap().requests_per_unit, 100);
        assert_eq!(s.limit_remaining, 99 - i as u32, "{v}");
    }
    assert_eq!(r.rule_hits("test-domain.file_test*").await, 3.0);
    assert_eq!(r.rule_hits("test-domain.file_test1").await, 1.0);
    // Case 5: a middle wildcard.
    for (i, v) in ["/api/v1", "/api-beta-v1", "/apiXYZv1"].iter().enumerate() {
        let s = r.get(d, &[("midpath", v)]).await;
        assert_eq!(s.limit_remaining, 99 - i as u32, "{v}");
    }
    assert_eq!(r.rule_hits("test-domain.midpath_/api*v1").await, 3.0);
    r.none(d, &[("midpath", "/api/v2")]).await;
    // Case 6: several wildcards.
    for (i, v) in ["svcAepBrpc", "svcXXXepYYYrpc", "svceprpc"]
        .iter()
        .enumerate()
    {
        let s = r.get(d, &[("multiroute", v)]).await;
        assert_eq!(
            (
                s.current_limit.unwrap().requests_per_unit,
                s.limit_remaining
            ),
            (50, 49 - i as u32),
            "{v}"
        );
    }
    assert_eq!(r.rule_hits("test-domain.multiroute_svc*ep*rpc").await, 3.0);
    r.none(d, &[("multiroute", "svcABCrpc")]).await;
    // Case 7: share_threshold over value_to_metric with a middle wildcard.
    r.get(d, &[("midroute", "/api/v2")]).await;
    r.get(d, &[("midroute", "/api-beta-v2")]).await;
    assert_eq!(r.descriptor_hits("test-domain.midroute_/api*v2").await, 2.0);
    // Case 8: nested middle wildcards.
    let s = r
        .get(d, &[("tenant", "t1prod"), ("resource", "resAv2")])
        .await;
    let first = s.limit_remaining;
    let s = r
        .get(d, &[("tenant", "t99prod"), ("resource", "resBBBv2")])
        .await;
    assert_eq!(s.limit_remaining, first - 1, "one shared counter");
    assert_eq!(
        r.rule_hits("test-domain.tenant_t*prod.resource_res*v2")
            .await,
        2.0
    );
}

#[tokio::test]
async fn test_wildcard_stats_behavior() {
    let flags = |f: &str| {
        format!(
            "domain: test-domain\ndescriptors:\n  - key: wild\n    value: foo*\n{f}    rate_limit: {{ requests_per_unit: 20, unit: minute }}\n"
        )
    };
    let e = [("wild", "foo1")];
    assert_stats_key(
        &flags(""),
        "test-domain",
        &e,
        "test-domain.wild_foo*",
        false,
    )
    .await;
    assert_stats_key(
        &flags("    value_to_metric: true\n"),
        "test-domain",
        &e,
        "test-domain.wild_foo1",
        true,
    )
    .await;
    assert_stats_key(
        &flags("    share_threshold: true\n"),
        "test-domain",
        &e,
        "test-domain.wild_foo*",
        false,
    )
    .await;
    assert_stats_key(
        &flags("    share_threshold: true\n    value_to_metric: true\n"),
        "test-domain",
        &e,
        "test-domain.wild_foo*",
        true,
    )
    .await;
    let other = "\
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: { requests_per_unit: 20, unit: minute }
";
    assert_stats_key(
        other,
        "test-domain",
        &[("wild", "foo1"), ("other", "bar"), ("limit", "X")],
        "test-domain.wild_foo*.other_bar.limit",
        true,
    )
    .await;
}

#[tokio::test]
async fn test_metadata() {
    let mut r = start(
        &[("metadata.yaml", METADATA)],
        &["--envoy-response-dynamic-metadata"],
    )
    .await;
    r.none("test-domain", &[]).await;
    assert_eq!(
        r.series("floodgate_grpc_unknown_domain_total", &[]).await,
        0.0
    );
    let resp = r
        .call(
            "test-domain",
            desc(&[("key1", "value1"), ("subkey1", "something")]),
        )
        .await;
    let l = resp.statuses[0].current_limit.clone().unwrap();
    assert_eq!((l.requests_per_unit, l.unit), (5, Unit::Second as i32));
    assert_eq!(r.rule_hits("test-domain.key1_value1.subkey1").await, 1.0);
    let meta = resp.dynamic_metadata.expect("dynamic metadata");
    let fields = &meta.fields["metadata"];
    let json = format!("{fields:?}");
    assert!(
        json.contains("\"name\"") && json.contains("service_1"),
        "{json}"
    );
    let resp = r.call("test-domain", desc(&[("key2", "something")])).await;
    assert_eq!(
        resp.statuses[0]
            .current_limit
            .clone()
            .unwrap()
            .requests_per_unit,
        20
    );
    let json = format!(
        "{:?}",
        resp.dynamic_metadata.expect("dynamic metadata").fields["metadata"]
    );
    assert!(
        json.contains("service_with_quota") && json.contains("service_2"),
        "{json}"
    );
}
