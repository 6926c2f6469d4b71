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

mod serve_support;

use std::process::Command;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serve_support::{client, Floodgate};
use tonic::transport::Channel;

type Client = RateLimitServiceClient<Channel>;

/// A descriptor's `(key, value)` entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

const BASIC: &str = include_str!("fixtures/envoyproxy-ratelimit/config/basic_config.yaml");
const WILDCARD: &str = include_str!("fixtures/envoyproxy-ratelimit/config/wildcard.yaml");
const SHADOW: &str = include_str!("fixtures/envoyproxy-ratelimit/config/shadowmode_config.yaml");
const SHARE: &str = include_str!("fixtures/envoyproxy-ratelimit/config/share_threshold.yaml");
const METADATA: &str = include_str!("fixtures/envoyproxy-ratelimit/config/metadata.yaml");
const MERGE1: &str = include_str!("fixtures/envoyproxy-ratelimit/config/merge_domain_key1.yaml");
const MERGE2: &str = include_str!("fixtures/envoyproxy-ratelimit/config/merge_domain_key2.yaml");

/// The fixture directory holding upstream's files.
fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoyproxy-ratelimit/config")
}

/// A running floodgate on `files` (the directory of them as its configuration) and a client.
struct Rls {
    fg: Floodgate,
    c: Client,
    http: reqwest::Client,
}

async fn start(files: &[(&str, &str)], args: &[&str]) -> Rls {
    let mut all = vec!["--grpc-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let fg = Floodgate::with_files(files, ".", &all);
    let c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    Rls {
        fg,
        c,
        http: client(),
    }
}

async fn one_file(text: &str) -> Rls {
    start(&[("config.yaml", text)], &[]).await
}

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn with_limit(
    mut d: RateLimitDescriptor,
    requests: u32,
    unit: RateLimitUnit,
) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit: requests,
        unit: unit as i32,
    });
    d
}

impl Rls {
    async fn call(&mut self, domain: &str, d: RateLimitDescriptor) -> RateLimitResponse {
        self.c
            .should_rate_limit(RateLimitRequest {
                domain: domain.into(),
                descriptors: vec![d],
                hits_addend: 0,
            })
            .await
            .unwrap_or_else(|e| panic!("{domain}: {e}"))
            .into_inner()
    }

    /// `GetLimit`: the status of one descriptor.
    async fn get(&mut self, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
        self.call(domain, desc(entries)).await.statuses.remove(0)
    }

    /// `GetLimit` that must find a limit: `(requests_per_unit, unit, name)`.
    async fn limit(&mut self, domain: &str, entries: &[(&str, &str)]) -> (u32, Unit, String) {
        let s = self.get(domain, entries).await;
        let l = s
            .current_limit
            .unwrap_or_else(|| panic!("{entries:?}: no limit found"));
        (l.requests_per_unit, Unit::try_from(l.unit).unwrap(), l.name)
    }

    /// `assert.Nil(GetLimit(...))`: `OK`, no limit, nothing counted.
    async fn none(&mut self, domain: &str, entries: &[(&str, &str)]) {
        let s = self.get(domain, entries).await;
        assert_eq!(s.current_limit, None, "{entries:?} should select no limit");
        assert_eq!(Code::try_from(s.code).unwrap(), Code::Ok, "{entries:?}");
    }

    async fn metrics(&self) -> String {
        self.http
            .get(self.fg.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The sum of the samples of `name` carrying every `label="value"` of `labels`.
    async fn series(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Decisions counted under the rule named `key` (upstream's `<key>.total_hits`).
    async fn rule_hits(&self, key: &str) -> f64 {
        self.series("floodgate_decisions_total", &[("rule", key)])
            .await
    }

    /// Decisions counted under the descriptor stats key `key` (`detailed_metric`,
    /// `value_to_metric`).
    async fn descriptor_hits(&self, key: &str) -> f64 {
        self.series(
            "floodgate_descriptor_decisions_total",
            &[("descriptor", key)],
        )
        .await
    }
}

/// `floodgate check-config <paths>` run in the fixture directory: its stderr, after checking
/// that it failed.
fn check_config_fails(paths: &[&str], args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(fixtures())
        .arg("check-config")
        .args(args)
        .args(paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "{paths:?} should be refused: {stderr}"
    );
    stderr
}

/// A loading error: `file:line: field: message` with `message` in it.
fn assert_load_error(stderr: &str, file: &str, line: usize, field: &str, message: &str) {
    let prefix = if field.is_empty() {
        format!("{file}:{line}: ")
    } else {
        format!("{file}:{line}: {field}: ")
    };
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(&prefix) && l.contains(message)),
        "expected {prefix}...{message}... in:\n{stderr}"
    );
}

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
