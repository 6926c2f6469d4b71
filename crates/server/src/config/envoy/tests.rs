use floodgate_core::AlgorithmKind;
use floodgate_tower::FailureMode;

use super::*;
use crate::config::descriptors::Lookup;

fn load(text: &str) -> Result<Config, ConfigErrors> {
    parse(
        "rl.yaml",
        &[("rl.yaml".to_string(), text.to_string())],
        &Default::default(),
    )
}

fn errors(text: &str) -> Vec<String> {
    load(text)
        .unwrap_err()
        .0
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The rule a descriptor selects, by name.
fn selects(config: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    match config.descriptors.lookup(domain, entries.iter().copied()) {
        Lookup::Found(Leaf::Rule(i)) => Some(config.rules[*i].name.clone()),
        Lookup::Found(Leaf::Unlimited { .. }) => Some("(unlimited)".into()),
        Lookup::Found(Leaf::Blocked { .. }) => Some("(blocked)".into()),
        _ => None,
    }
}

#[test]
fn a_rate_limit_becomes_a_fixed_window_rule() {
    let c = load(
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: Second\n      requests_per_unit: 500\n",
    )
    .unwrap();
    assert_eq!(c.rules.len(), 1);
    let r = &c.rules[0];
    assert_eq!(r.name, "d.k_v");
    assert_eq!(r.policy.kind(), AlgorithmKind::FixedWindow);
    assert_eq!(r.policy.quota().to_string(), "500/s");
    assert!(r.descriptor.is_some());
    assert_eq!(selects(&c, "d", &[("k", "v")]).as_deref(), Some("d.k_v"));
}

#[test]
fn extension_keys_choose_the_algorithm_burst_and_failure_mode() {
    let c = load(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 60\n      algorithm: gcra\n      burst: 20\n      failure_mode: closed\n",
    )
    .unwrap();
    let r = &c.rules[0];
    assert_eq!(r.policy.kind(), AlgorithmKind::Gcra);
    assert_eq!(r.policy.quota().burst(), 20);
    assert_eq!(r.failure_mode, FailureMode::Closed);
}

#[test]
fn errors_name_the_file_line_and_field() {
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"),
        vec!["rl.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\"; expected second, minute, hour, day, week, month or year"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: k\n    quota_mode: 5\n"),
        vec!["rl.yaml:4: descriptors[0].quota_mode: expected true or false, got an integer"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      colour: red\n"),
        vec!["rl.yaml:7: descriptors[0].rate_limit.colour: unknown field (expected one of: unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, failure_mode, overrides)"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      delay: 1s\n"),
        vec!["rl.yaml:7: descriptors[0].rate_limit.delay: delay is not supported: the rate limit \
              service answers OK or OVER_LIMIT and cannot hold a request (to hold requests behind \
              Envoy, give a TOML rule a `delay` and use ext_authz with forward-auth; docs/envoy.md)"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - value: v\n"),
        vec!["rl.yaml:3: descriptors[0].key: descriptor has empty key"]
    );
    assert_eq!(
        errors("descriptors: []\n"),
        vec!["rl.yaml:1: domain: a non-empty domain is required"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: k\n  - key: k\n"),
        vec!["rl.yaml:4: descriptors[1].key: duplicate descriptor composite key \"d.k\" (also descriptors[0])"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n"),
        vec!["rl.yaml:6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"]
    );
    let e = errors("domain: [\n");
    assert!(e[0].starts_with("rl.yaml:"), "{e:?}");
    assert!(e[0].contains("invalid YAML"), "{e:?}");
    // Every error at once, in line order.
    assert_eq!(
        errors("domain: d\nbogus: 1\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon, requests_per_unit: 1}\n").len(),
        2
    );
}

#[test]
fn several_files_are_several_domains_and_a_domain_only_once() {
    let files = |b: &str| {
        vec![
            ("a.yaml".to_string(), "domain: one\n".to_string()),
            ("b.yaml".to_string(), b.to_string()),
        ]
    };
    let c = parse("dir", &files("domain: two\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"), &Default::default()).unwrap();
    let mut domains: Vec<&str> = c.descriptors.domains().collect();
    domains.sort_unstable();
    assert_eq!(domains, ["one", "two"]);
    let e = parse("dir", &files("domain: one\n"), &Default::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "b.yaml:1: domain: duplicate domain \"one\" (also in a.yaml): one domain per file"
    );
}

#[test]
fn a_shared_name_leaves_rules_named_by_their_path() {
    let c = load(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: same, unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {name: same, unit: second, requests_per_unit: 1}\n  - key: c\n    rate_limit: {name: own, unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    let names: Vec<&str> = c.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["d.a", "d.b", "own"]);
}

/// envoyproxy/ratelimit's README examples, written as its users write them: each loads and
/// selects what its documentation says.
mod readme_examples {
    use super::*;

    fn fixture(name: &str) -> Config {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy_examples");
        let path = format!("{dir}/{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        parse(&path, &[(path.clone(), text)], &Default::default()).unwrap()
    }

    #[test]
    fn example_2_nested_and_aggregate() {
        let c = fixture("example2_messaging.yaml");
        assert_eq!(
            selects(
                &c,
                "messaging",
                &[("message_type", "marketing"), ("to_number", "2061111111")]
            )
            .as_deref(),
            Some("messaging.message_type_marketing.to_number")
        );
        assert_eq!(
            selects(&c, "messaging", &[("to_number", "2061111111")]).as_deref(),
            Some("messaging.to_number")
        );
        assert_eq!(
            selects(&c, "messaging", &[("message_type", "marketing")]),
            None
        );
    }

    #[test]
    fn example_3_most_specific_match_first() {
        let c = fixture("example3_edge_proxy_per_ip.yaml");
        assert_eq!(
            selects(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]).as_deref(),
            Some("edge_proxy_per_ip.remote_address")
        );
        assert_eq!(
            selects(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]).as_deref(),
            Some("(blocked)")
        );
    }

    #[test]
    fn example_4_levels_must_match() {
        let c = fixture("example4_levels.yaml");
        assert_eq!(
            selects(&c, "example4", &[("key", "value"), ("subkey", "subvalue")]).as_deref(),
            Some("example4.key_value.subkey")
        );
        assert_eq!(selects(&c, "example4", &[("key", "value")]), None);
    }

    #[test]
    fn example_5_unlimited() {
        let c = fixture("example5_unlimited.yaml");
        assert_eq!(
            selects(&c, "internal", &[("ldap", "x")]).as_deref(),
            Some("(unlimited)")
        );
        assert_eq!(
            selects(&c, "internal", &[("azure", "x")]).as_deref(),
            Some("internal.azure")
        );
    }

    #[test]
    fn example_8_detailed_metric_loads_with_bounded_names() {
        let c = fixture("example8_detailed_metric.yaml");
        let names: Vec<&str> = c.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["example8.key1", "example8.key1_value1"]);
    }

    #[test]
    fn example_9_wildcards() {
        let c = fixture("example9_wildcards.yaml");
        assert_eq!(
            selects(&c, "example9", &[("path", "/api/123/action")]).as_deref(),
            Some("example9.path_/api/*/action")
        );
        assert_eq!(selects(&c, "example9", &[("path", "/api/123/other")]), None);
        assert_eq!(
            selects(&c, "example9", &[("key1", "valueXYZ")]).as_deref(),
            Some("example9.key1_value*")
        );
    }
}

/// envoyproxy/ratelimit's README examples 10 and 11 (`value_to_metric`, `share_threshold`)
/// load, with the flags on the rule's path.
#[test]
fn value_to_metric_and_share_threshold_are_read_per_level() {
    let c = load("domain: example10\ndescriptors:\n  - key: route\n    value_to_metric: true\n    descriptors:\n      - key: subject_id\n        rate_limit: {unit: minute, requests_per_unit: 60}\n").unwrap();
    let d = c.rules[0].descriptor.as_ref().unwrap();
    assert_eq!(d.extras.value_to_metric, [true, false]);
    assert!(d.extras.labels_values());
    let c = load("domain: example11\ndescriptors:\n  - key: files\n    value: files/*\n    share_threshold: true\n    metadata: {team: {name: a}}\n    rate_limit: {unit: hour, requests_per_unit: 10}\n").unwrap();
    let d = c.rules[0].descriptor.as_ref().unwrap();
    assert_eq!(d.extras.share, [true]);
    assert!(!d.extras.labels_values());
    assert_eq!(
        d.extras.metadata,
        Some(serde_json::json!({"team": {"name": "a"}}))
    );
}

#[test]
fn a_wrong_type_is_named_with_its_article() {
    let e = errors("domain: d\ndescriptors: 5\n");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].ends_with("got an integer"), "{e:?}");
}
