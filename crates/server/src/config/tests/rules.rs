//! `[[rules]]`: quotas, keys, matchers, costs, delay, key caps, descriptors, reloads.

use super::*;

#[test]
fn embedded_default_is_one_per_ip_token_bucket_of_10_per_10s() {
    let c = embedded_default();
    assert_eq!(c.rules.len(), 1);
    let r = &c.rules[0];
    assert_eq!(r.name, "per-client-ip");
    assert_eq!(r.key, KeySource::ClientIp);
    assert_eq!(r.policy.kind(), AlgorithmKind::TokenBucket);
    assert_eq!(r.policy.quota().to_string(), "10/10s");
    assert_eq!(r.cost, floodgate_tower::CostSource::Fixed(1));
    assert_eq!(c.store, StoreConfig::default());
}

#[test]
fn full_example_parses_every_field() {
    let c = parse(
        "f.toml",
        r#"
[server]
listen = "127.0.0.1:9000"
admin_token = "0123456789abcdef"
trusted_proxies = ["10.0.0.0/8", "::1", "127.0.0.1"]
upstream = "http://127.0.0.1:3000"
forwarded_header = "Forwarded"
ipv6_prefix = 56
ui = false

[store]
kind = "memory"
max_keys = 50
on_full = "admit_untracked"

[[rules]]
name = "search"
algorithm = "gcra"
limit = 100
period = "1min"
burst = 200
key = ["header:x-api-key", "user:x-user | client_ip"]
cost = 2
cost_header = "x-cost"
shadow = true
failure_mode = "closed"
[rules.match]
path_prefix = "/api/"
methods = ["get", "POST"]
host = "API.example.com"
header = { name = "x-tier", value = "free" }
[[rules.route_costs]]
path_prefix = "/api/search"
method = "GET"
cost = 100

[[rules]]
name = "daily"
limit = "1000/day burst 10"
algorithm = "sliding-window"
"#,
    )
    .unwrap();
    assert_eq!(c.server.listen, Some("127.0.0.1:9000".parse().unwrap()));
    assert_eq!(c.server.trusted_proxies.len(), 3);
    assert_eq!(c.server.trusted_proxies[1].to_string(), "::1/128");
    assert_eq!(
        c.server.forwarded_header,
        floodgate_tower::ForwardedHeader::Forwarded
    );
    assert_eq!(c.server.ipv6_prefix, 56);
    assert!(!c.server.ui);
    assert!(embedded_default().server.ui);
    assert_eq!(c.store.max_keys, 50);
    assert_eq!(c.store.on_full, OnFull::AdmitUntracked);
    let r = &c.rules[0];
    assert_eq!(r.policy.kind(), AlgorithmKind::Gcra);
    assert_eq!(
        (
            r.policy.quota().limit(),
            r.policy.quota().period(),
            r.policy.quota().burst()
        ),
        (100, 60_000_000, 200)
    );
    assert_eq!(
        r.key,
        KeySource::All(vec![
            KeySource::Header {
                name: HeaderName::from_static("x-api-key")
            },
            KeySource::FirstOf(vec![
                KeySource::User {
                    header: HeaderName::from_static("x-user")
                },
                KeySource::ClientIp
            ])
        ])
    );
    assert_eq!(
        describe_key(&r.key),
        "[header:x-api-key, user:x-user | client_ip]"
    );
    let floodgate_tower::CostSource::Routes {
        routes, default, ..
    } = &r.cost
    else {
        panic!("route costs: {:?}", r.cost)
    };
    assert_eq!(*default, 2);
    assert_eq!(routes[0].cost, 100);
    assert_eq!(routes[0].matcher.methods, vec![Method::GET]);
    assert!(r.shadow);
    assert_eq!(r.failure_mode, FailureMode::Closed);
    assert_eq!(r.matcher.methods, vec![Method::GET, Method::POST]);
    assert_eq!(r.matcher.host.as_deref(), Some("api.example.com"));
    assert_eq!(c.rules[1].policy.kind(), AlgorithmKind::SlidingWindow);
    assert_eq!(c.rules[1].policy.quota().to_string(), "1000/d burst 10");
}

/// Issue 17, case 3: a rate finer than a microsecond whose burst cannot hold one microsecond's
/// refill is refused as a field error on the burst, with the reason and the smallest exact burst.
#[test]
fn a_sub_microsecond_rate_with_too_small_a_burst_names_the_burst() {
    let e = err("[[rules]]\nname = \"fast\"\nlimit = \"2000000/s\"\nburst = 1\n");
    assert!(
        e.starts_with("rules.toml:4: rules[0].burst: burst 1 is too small"),
        "{e}"
    );
    assert!(e.contains("the smallest exact burst is 2"), "{e}");
    // In the quota text: the error points at the limit line but names the burst field.
    let e =
        err("[[rules]]\nname = \"fast\"\nlimit = \"2000000/s burst 1\"\nalgorithm = \"gcra\"\n");
    assert!(e.starts_with("rules.toml:3: rules[0].burst:"), "{e}");
    // The windows ignore the burst: accepted.
    assert!(parse(
        "rules.toml",
        "[[rules]]\nname = \"fast\"\nlimit = \"2000000/s\"\nburst = 1\nalgorithm = \"fixed_window\"\n"
    )
    .is_ok());
}

#[test]
fn numeric_limit_needs_a_period_and_text_limit_refuses_one() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = 10\n");
    assert!(
        e.starts_with("rules.toml:3: rules[0].limit: a numeric limit needs `period`"),
        "{e}"
    );
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"10/s\"\nperiod = \"1s\"\n");
    assert!(e.starts_with("rules.toml:4: rules[0].period: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\nlimit = 10\nperiod = \"1 fortnight\"\n");
    assert!(
        e.starts_with("rules.toml:4: rules[0].period: unknown period unit"),
        "{e}"
    );
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"10/s burst 5\"\nburst = 6\n");
    assert!(e.starts_with("rules.toml:4: rules[0].burst: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\nlimit = 0\nperiod = \"1s\"\n");
    assert!(e.starts_with("rules.toml:3: rules[0].limit: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\nlimit = true\n");
    assert!(e.contains("got a boolean"), "{e}");
}

#[test]
fn numeric_and_text_limits_mean_the_same_quota() {
    let a = parse(
        "f",
        "[[rules]]\nname = \"a\"\nlimit = \"10/10s burst 20\"\n",
    )
    .unwrap();
    let b = parse(
        "f",
        "[[rules]]\nname = \"a\"\nlimit = 10\nperiod = \"10s\"\nburst = 20\n",
    )
    .unwrap();
    let c = parse(
        "f",
        "[[rules]]\nname = \"a\"\nlimit = \"10/10s\"\nburst = 20\n",
    )
    .unwrap();
    assert_eq!(a.rules[0].policy.quota(), b.rules[0].policy.quota());
    assert_eq!(a.rules[0].policy.quota(), c.rules[0].policy.quota());
}

#[test]
fn client_net_keys_take_both_prefixes() {
    let c = parse(
        "f",
        "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nkey = \"client_net:24/48\"\n",
    )
    .unwrap();
    assert_eq!(
        c.rules[0].key,
        KeySource::ClientNet {
            ipv4_prefix: 24,
            ipv6_prefix: 48
        }
    );
    assert_eq!(describe_key(&c.rules[0].key), "client_net:24/48");
    for bad in [
        "client_net:24",
        "client_net:33/48",
        "client_net:24/129",
        "client_net:x/y",
    ] {
        let e = err(&format!(
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nkey = \"{bad}\"\n"
        ));
        assert!(
            e.starts_with("rules.toml:4: rules[0].key: invalid prefixes"),
            "{e}"
        );
    }
}

#[test]
fn state_is_kept_across_a_reload_when_name_algorithm_and_quota_are_unchanged() {
    let a = parse("f", "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\n").unwrap();
    let b = parse(
        "f",
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\nshadow = true\n",
    )
    .unwrap();
    let c = parse("f", "[[rules]]\nname = \"a\"\nlimit = \"11/s\"\n").unwrap();
    let d = parse(
        "f",
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\nalgorithm = \"gcra\"\n",
    )
    .unwrap();
    let same = |x: &Config, y: &Config| x.rules[0].same_state(&y.rules[0]);
    assert!(same(&a, &b));
    assert!(!same(&a, &c));
    assert!(!same(&a, &d));
}

#[test]
fn a_rule_with_a_domain_answers_descriptors_only() {
    let c = parse(
        "f.toml",
        "[[rules]]\nname = \"per-ip\"\nalgorithm = \"fixed_window\"\nlimit = \"5/min\"\ndomain = \"edge\"\ndescriptors = [{ key = \"remote_address\" }]\nlimit_overrides = [\"10/h\"]\nreplaces = [\"other\"]\n",
    )
    .unwrap();
    assert_eq!(c.rules.len(), 2, "the rule and its override's rule");
    let d = c.rules[0].descriptor.as_ref().unwrap();
    assert_eq!(
        (d.domain.as_str(), d.replaces.as_slice()),
        ("edge", &["other".to_string()][..])
    );
    assert_eq!(c.rules[1].name, "per-ip@10/h");
    assert_eq!(c.rules[1].override_of, Some(0));
    let rules = crate::rules::rule_set(&c);
    assert!(rules
        .rules
        .iter()
        .all(|r| !r.scope.contains(floodgate_tower::Traffic::Http)));
    let errors = parse(
        "f.toml",
        "[[rules]]\nname = \"a\"\nlimit = \"5/min\"\ndomain = \"edge\"\nkey = \"client_ip\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        errors.contains("f.toml:4: rules[0].descriptors: a rule with a domain needs descriptors"),
        "{errors}"
    );
    assert!(
        errors.contains("f.toml:5: rules[0].key: not for a rule with a domain"),
        "{errors}"
    );
    let dup = parse(
        "f.toml",
        "[[rules]]\nname = \"a\"\nlimit = \"5/min\"\ndomain = \"e\"\ndescriptors = [{ key = \"k\" }]\n[[rules]]\nname = \"b\"\nlimit = \"5/min\"\ndomain = \"e\"\ndescriptors = [{ key = \"k\" }]\n",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        dup,
        "f.toml:7: rules[1].descriptors: another rule has the same domain and descriptors (e.k)"
    );
}

#[test]
fn delay_is_parsed_and_bounded_by_the_horizon_naming_file_line_and_field() {
    let c = parse(
        "f.toml",
        r#"
[server]
max_delayed = 5

[[rules]]
name = "api"
limit = "10/s"
burst = 20
delay = "2s"

[[rules]]
name = "login"
limit = "5/min"
algorithm = "fixed_window"
delay = "500ms"
"#,
    )
    .unwrap();
    assert_eq!(c.server.max_delayed, 5);
    assert_eq!(c.rules[0].delay, Some(2_000_000));
    assert_eq!(c.rules[1].delay, Some(500_000));
    assert_eq!(
        ServerConfig::default().max_delayed,
        floodgate_tower::DEFAULT_MAX_DELAYED
    );
    // 10/s with a burst of 10 schedules at most 1 s ahead: 2 s can never be reached.
    let e = err("[[rules]]\nname = \"api\"\nlimit = \"10/s\"\ndelay = \"2s\"\n");
    assert_eq!(
        e,
        "rules.toml:4: rules[0].delay: 2s can never be reached: this rule schedules a request \
         at most 1s ahead (the time its burst of 10 refills); lower the delay or raise the burst"
    );
    let e = err("[[rules]]\nname = \"w\"\nlimit = \"10/s\"\nalgorithm = \"sliding_window\"\ndelay = \"1500ms\"\n");
    assert!(
        e.starts_with("rules.toml:5: rules[0].delay: 1500ms can never be reached"),
        "{e}"
    );
    assert!(e.contains("at most 1s ahead (one period)"), "{e}");
    assert!(
        e.ends_with("lower the delay or lengthen the period (a window's burst does not move it)"),
        "{e}"
    );
    for (delay, message) in [
        ("0ms", "must be more than 0"),
        ("0", "must be more than 0"),
        (
            "soon",
            "must be a whole number and a unit, such as \"500ms\"",
        ),
        ("-1s", "must be a whole number and a unit"),
        ("5", "has no unit"),
        (
            "1.5s",
            "delay \"1.5s\" is not a whole number of its unit: use a smaller unit",
        ),
    ] {
        let e = err(&format!(
            "[[rules]]\nname = \"api\"\nlimit = \"10/s\"\n\ndelay = \"{delay}\"\n"
        ));
        assert!(e.starts_with("rules.toml:5: rules[0].delay: "), "{e}");
        assert!(e.contains(message), "{delay}: {e}");
    }
    let e = err("[[rules]]\nname = \"api\"\nlimit = \"10/s\"\nshadow = true\ndelay = \"1s\"\n");
    assert!(
        e.starts_with("rules.toml:5: rules[0].delay: a shadow rule"),
        "{e}"
    );
    // Envoy's rate limit service answers OK or OVER_LIMIT and never holds a request, and a rule
    // with a `domain` answers nothing else.
    let e = err("[[rules]]\nname = \"m\"\nlimit = \"5/s\"\nalgorithm = \"gcra\"\ndomain = \"messaging\"\ndescriptors = [{ key = \"to_number\" }]\ndelay = \"500ms\"\n");
    assert_eq!(
        e,
        "rules.toml:7: rules[0].delay: a rule with a `domain` answers only Envoy descriptors and \
         /v1/check, never forward-auth or proxied requests, so it holds none: remove `delay`"
    );
    let e = err("[server]\nmax_delayed = -1\n");
    assert_eq!(
        e,
        "rules.toml:2: server.max_delayed: must be between 0 and 1000000, got -1"
    );
}

/// Issue 10 item 7: a rule's own key cap, read from the rule and carried by its overrides.
#[test]
fn a_rule_reads_its_own_key_cap() {
    let c = parse(
        "rules.toml",
        r#"
[store]
max_keys = 1000

[[rules]]
name = "api"
limit = "10/s"
key = "header:x-api-key"
max_keys = 200

[[rules]]
name = "web"
limit = "10/s"
"#,
    )
    .unwrap();
    assert_eq!(c.rules[0].max_keys, Some(200));
    assert_eq!(c.rules[1].max_keys, None);
    assert!(crate::config::describe::describe_rule(&c.rules[0])
        .key
        .ends_with(", at most 200 keys held (max_keys)"));
}
