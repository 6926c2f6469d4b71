//! envoyproxy/ratelimit's own configuration suite (`test/config/config_test.go` at commit
//! f2fb15770f7fd1c88ca6c3a1b58ee513917ace96, Apache-2.0; see
//! `tests/fixtures/envoyproxy-ratelimit/README.md`) ported onto the real `floodgate serve
//! --grpc-listen`: each Go test is one Rust test of the same name. `GetLimit(domain,
//! descriptor)` becomes a `ShouldRateLimit` call with that one descriptor (the limit found is
//! the status' `current_limit`; none found is `OK` without one), a loading panic becomes
//! `floodgate check-config` failing with an error naming the file, the line and the field, and
//! a stats counter `<key>.within_limit` becomes the Prometheus series of the decision:
//! `floodgate_decisions_total{rule="<key>"}` (the rule is named by the stats key when the YAML
//! gives no name), or `floodgate_descriptor_decisions_total{descriptor="<key>"}` for the keys
//! `detailed_metric` and `value_to_metric` build from request values.
//!
//! This file: the loading tests and the first look-ups; `envoy_upstream_lookup` the rest.

mod envoy_upstream;
mod serve_support;

use envoy_upstream::*;

#[tokio::test]
async fn test_basic_config() {
    let mut r = one_file(BASIC).await;
    // An empty descriptor: no limit, for an unknown domain (counted) and a known one.
    r.none("foo_domain", &[]).await;
    assert_eq!(
        r.series("floodgate_grpc_unknown_domain_total", &[]).await,
        1.0
    );
    r.none("test-domain", &[]).await;
    assert_eq!(
        r.series("floodgate_grpc_unknown_domain_total", &[]).await,
        1.0
    );
    r.none("test-domain", &[("key1", "something")]).await;
    r.none("test-domain", &[("key1", "value1")]).await;
    r.none("test-domain", &[("key2", "value2"), ("subkey", "subvalue")])
        .await;
    r.none(
        "test-domain",
        &[("key5", "value5"), ("subkey5", "subvalue")],
    )
    .await;

    let cases: &[(Entries, u32, Unit, &str, &str)] = &[
        (
            &[("key1", "value1"), ("subkey1", "something")],
            5,
            Unit::Second,
            "",
            "test-domain.key1_value1.subkey1",
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            10,
            Unit::Second,
            "",
            "test-domain.key1_value1.subkey1_subvalue1",
        ),
        (
            &[("key2", "something")],
            20,
            Unit::Minute,
            "",
            "test-domain.key2",
        ),
        (
            &[("key2", "value2")],
            30,
            Unit::Minute,
            "",
            "test-domain.key2_value2",
        ),
        // "No name provided in config": current_limit.name is empty.
        (&[("key3", "foo")], 1, Unit::Hour, "", "test-domain.key3"),
        // A name given names the rule (its metrics series too).
        (
            &[("key4", "foo")],
            1,
            Unit::Day,
            "key4_rate_limit",
            "key4_rate_limit",
        ),
    ];
    for (entries, requests, unit, name, series) in cases {
        assert_eq!(
            r.limit("test-domain", entries).await,
            (*requests, *unit, name.to_string()),
            "{entries:?}"
        );
        assert_eq!(r.rule_hits(series).await, 1.0, "{series}");
    }
    r.none("test-domain", &[("key2", "value3")]).await;

    let s = r.get("test-domain", &[("key6", "foo")]).await;
    assert_eq!((s.code, s.limit_remaining), (Code::Ok as i32, u32::MAX));

    // detailed_metric: each value its own series.
    for value in ["unspecified_value", "another_value"] {
        assert_eq!(
            r.limit("test-domain", &[("key7", value)]).await,
            (70, Unit::Minute, String::new())
        );
        let key = format!("test-domain.key7_{value}");
        assert_eq!(r.descriptor_hits(&key).await, 1.0, "{key}");
    }
}

#[tokio::test]
async fn test_domain_merge() {
    let mut r = start(
        &[
            ("merge_domain_key1.yaml", MERGE1),
            ("merge_domain_key2.yaml", MERGE2),
        ],
        &["--envoy-merge-domains"],
    )
    .await;
    r.none("foo_domain", &[]).await;
    r.none("test-domain", &[]).await;
    assert_eq!(r.limit("test-domain", &[("key1", "value1")]).await.0, 10);
    assert_eq!(r.limit("test-domain", &[("key2", "value2")]).await.0, 20);
}

#[tokio::test]
async fn test_config_limit_override() {
    let mut r = one_file(BASIC).await;
    let s = r
        .call("foo_domain", with_limit(desc(&[]), 10, RateLimitUnit::Day))
        .await;
    assert_eq!(s.statuses[0].current_limit, None, "no matching domain");
    let something = [("key1", "value1"), ("subkey1", "something")];
    let over = |requests, unit| with_limit(desc(&something), requests, unit);
    let s = r.call("test-domain", over(10, RateLimitUnit::Day)).await;
    let l = s.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (l.name.as_str(), l.requests_per_unit, l.unit),
        ("", 10, Unit::Day as i32)
    );
    assert_eq!(s.statuses[0].limit_remaining, 9);
    // Another override: its own counters (upstream shares them; an override is never mixed
    // with another's state here).
    let s = r.call("test-domain", over(42, RateLimitUnit::Hour)).await;
    let l = s.statuses[0].current_limit.clone().unwrap();
    assert_eq!((l.requests_per_unit, l.unit), (42, Unit::Hour as i32));
    assert_eq!(s.statuses[0].limit_remaining, 41);
    let s = r.call("test-domain", over(10, RateLimitUnit::Day)).await;
    assert_eq!(
        s.statuses[0].limit_remaining, 8,
        "the first override's counter"
    );
    // A different value: a different counter.
    let s = r
        .call(
            "test-domain",
            with_limit(
                desc(&[("key1", "value1"), ("subkey1", "something_else")]),
                42,
                RateLimitUnit::Hour,
            ),
        )
        .await;
    assert_eq!(s.statuses[0].limit_remaining, 41);
    // The configured limit keeps its own counter.
    let s = r.get("test-domain", &something).await;
    assert_eq!(
        (
            s.current_limit.unwrap().requests_per_unit,
            s.limit_remaining
        ),
        (5, 4)
    );
}

#[test]
fn test_empty_domain() {
    let e = check_config_fails(&["empty_domain.yaml"], &[]);
    assert_load_error(
        &e,
        "empty_domain.yaml",
        1,
        "domain",
        "a non-empty domain is required",
    );
}

#[test]
fn test_duplicate_domain() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("basic_config.yaml"), BASIC).unwrap();
    std::fs::copy(
        fixtures().join("duplicate_domain.yaml"),
        dir.path().join("duplicate_domain.yaml"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        e.contains("duplicate_domain.yaml:1: domain: duplicate domain \"test-domain\""),
        "{e}"
    );
}

#[test]
fn test_empty_key() {
    let e = check_config_fails(&["empty_key.yaml"], &[]);
    assert_load_error(
        &e,
        "empty_key.yaml",
        3,
        "descriptors[0].key",
        "descriptor has empty key",
    );
}

#[test]
fn test_duplicate_key() {
    let e = check_config_fails(&["duplicate_key.yaml"], &[]);
    assert_load_error(
        &e,
        "duplicate_key.yaml",
        6,
        "descriptors[1].key",
        "duplicate descriptor composite key \"test-domain.key1_value1\"",
    );
}

#[test]
fn test_duplicate_key_domain_merge() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("merge_domain_key1.yaml"), MERGE1).unwrap();
    std::fs::write(dir.path().join("merge_domain_key1_again.yaml"), MERGE1).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args([
            "check-config",
            "--envoy-merge-domains",
            dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains("merge_domain_key1_again.yaml:")
            && e.contains("duplicate descriptor composite key \"test-domain.key1_value1\""),
        "{e}"
    );
}

#[test]
fn test_bad_limit_unit() {
    let e = check_config_fails(&["bad_limit_unit.yaml"], &[]);
    assert_load_error(
        &e,
        "bad_limit_unit.yaml",
        6,
        "descriptors[0].rate_limit.unit",
        "invalid rate limit unit \"foo\"",
    );
}

#[test]
fn test_replaces_self() {
    let e = check_config_fails(&["replaces_self.yaml"], &[]);
    assert_load_error(
        &e,
        "replaces_self.yaml",
        8,
        "descriptors[0].descriptors[0].rate_limit.replaces",
        "replaces should not contain name of same descriptor",
    );
}

#[test]
fn test_replaces_empty() {
    let e = check_config_fails(&["replaces_empty.yaml"], &[]);
    assert_load_error(
        &e,
        "replaces_empty.yaml",
        10,
        "descriptors[0].descriptors[0].rate_limit.replaces[0].name",
        "should not have an empty replaces entry",
    );
}

#[test]
fn test_bad_yaml() {
    let e = check_config_fails(&["bad_yaml.yaml"], &[]);
    assert!(
        e.contains("bad_yaml.yaml:") && e.contains("invalid YAML"),
        "{e}"
    );
}

#[test]
fn test_misspelled_key() {
    let e = check_config_fails(&["misspelled_key.yaml"], &[]);
    assert_load_error(
        &e,
        "misspelled_key.yaml",
        5,
        "descriptors[0].ratelimit",
        "unknown field",
    );
    let e = check_config_fails(&["misspelled_key2.yaml"], &[]);
    assert_load_error(
        &e,
        "misspelled_key2.yaml",
        7,
        "descriptors[0].rate_limit.requestsperunit",
        "unknown field",
    );
}

#[test]
fn test_non_string_key() {
    let e = check_config_fails(&["non_string_key.yaml"], &[]);
    assert_load_error(&e, "non_string_key.yaml", 1, "", "keys must be strings");
}

#[test]
fn test_non_map_list() {
    let e = check_config_fails(&["non_map_list.yaml"], &[]);
    assert_load_error(
        &e,
        "non_map_list.yaml",
        3,
        "descriptors[0]",
        "expected a mapping",
    );
}

#[test]
fn test_unlimited_with_rate_limit_unit() {
    let e = check_config_fails(&["unlimited_with_unit.yaml"], &[]);
    assert_load_error(
        &e,
        "unlimited_with_unit.yaml",
        6,
        "descriptors[0].rate_limit.unit",
        "should not specify rate limit unit when unlimited",
    );
}

#[tokio::test]
async fn test_shadow_mode_config() {
    let mut r = one_file(SHADOW).await;
    let cases: &[(Entries, u32, Unit, &str, bool)] = &[
        (
            &[("key1", "value1"), ("subkey1", "something")],
            5,
            Unit::Second,
            "test-domain.key1_value1.subkey1",
            false,
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            10,
            Unit::Second,
            "test-domain.key1_value1.subkey1_subvalue1",
            true,
        ),
        (
            &[("key2", "something")],
            20,
            Unit::Minute,
            "test-domain.key2",
            true,
        ),
        (
            &[("key2", "value2")],
            30,
            Unit::Minute,
            "test-domain.key2_value2",
            false,
        ),
    ];
    for (entries, requests, unit, rule, shadow) in cases {
        let (n, u, _) = r.limit("test-domain", entries).await;
        assert_eq!((n, u), (*requests, *unit), "{entries:?}");
        let shadowed = r
            .series(
                "floodgate_decisions_total",
                &[("rule", rule), ("outcome", "shadow_allowed")],
            )
            .await;
        let plain = r
            .series(
                "floodgate_decisions_total",
                &[("rule", rule), ("outcome", "allowed")],
            )
            .await;
        assert_eq!(
            (shadowed, plain),
            if *shadow { (1.0, 0.0) } else { (0.0, 1.0) },
            "{rule}"
        );
    }
}

#[tokio::test]
async fn test_wildcard_config() {
    let mut r = one_file(WILDCARD).await;
    let d = "test-domain";
    // Without a value: one rule for every value, each value its own counter.
    for v in ["foo1", "foo2"] {
        assert_eq!(r.limit(d, &[("noVal", v)]).await.0, 20);
    }
    assert_eq!(r.rule_hits("test-domain.noVal").await, 2.0);
    let s = r.get(d, &[("noVal", "foo1")]).await;
    assert_eq!(s.limit_remaining, 18, "noVal_foo1's own counter: 2 used");
    for v in ["foo1", "foo2"] {
        assert_eq!(r.limit(d, &[("wild", v)]).await.0, 20);
    }
    assert_eq!(r.rule_hits("test-domain.wild_foo*").await, 2.0);
    r.limit(d, &[("nestedWild", "val1"), ("wild", "goo2")])
        .await;
    assert_eq!(
        r.rule_hits("test-domain.nestedWild_val1.wild_goo*").await,
        1.0
    );
    r.none(d, &[("wild", "bar")]).await;
    r.none(d, &[("noWild", "foo1")]).await;
    for v in ["barab", "bar123b", "barb"] {
        assert_eq!(r.limit(d, &[("midWild", v)]).await.0, 20, "{v}");
    }
    assert_eq!(r.rule_hits("test-domain.midWild_bar*b").await, 3.0);
    r.none(d, &[("midWild", "bara")]).await;
    r.none(d, &[("midWild", "xbarb")]).await;
    for v in ["foo123bar456baz", "foobarbaz"] {
        assert_eq!(r.limit(d, &[("multiWild", v)]).await.0, 10, "{v}");
    }
    assert_eq!(r.rule_hits("test-domain.multiWild_foo*bar*baz").await, 2.0);
    r.none(d, &[("multiWild", "foo123baz")]).await;
    r.none(d, &[("multiWild", "bar456baz")]).await;
}
