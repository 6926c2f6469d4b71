use floodgate_core::AlgorithmKind;
use floodgate_store::OnFull;
use floodgate_tower::{FailureMode, KeySource};
use http::{HeaderName, Method};

use super::key::describe_key;
use super::schema::{ServerConfig, DEFAULT_MAX_CLAIMS, DEFAULT_RESERVATION_TTL};
use super::*;

fn err(text: &str) -> String {
    parse("rules.toml", text).unwrap_err().to_string()
}

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
fn a_bad_period_names_file_line_and_field() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n\n[[rules]]\nname = \"b\"\nlimit = \"10/fortnight\"\n");
    assert_eq!(
        e,
        "rules.toml:7: rules[1].limit: invalid quota \"10/fortnight\": unknown period unit \
         \"fortnight\" (use us, ms, s, min, h or day)"
    );
}

#[test]
fn unknown_fields_are_rejected_with_their_path_and_line() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nlimt = 3\n");
    assert!(
        e.starts_with("rules.toml:4: rules[0].limt: unknown field `limt`, expected one of `name`"),
        "{e}"
    );
    let e = err("[server]\nlisten = \"127.0.0.1:1\"\nport = 3\n");
    assert!(
        e.starts_with("rules.toml:3: server.port: unknown field `port`"),
        "{e}"
    );
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n[rules.match]\npath = \"/x\"\n");
    assert!(
        e.starts_with("rules.toml:5: rules[0].match.path: unknown field `path`"),
        "{e}"
    );
}

#[test]
fn wrong_types_and_missing_fields_name_the_field() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nshadow = \"yes\"\n");
    assert!(e.starts_with("rules.toml:4: rules[0].shadow: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\n");
    assert!(e.contains("rules[0]: missing field `limit`"), "{e}");
    assert!(e.starts_with("rules.toml:1: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\ncost = 1.5\n");
    assert!(e.starts_with("rules.toml:4: rules[0].cost: "), "{e}");
    let e = err("[server]\nui = \"off\"\n");
    assert!(e.starts_with("rules.toml:2: server.ui: "), "{e}");
}

#[test]
fn syntax_errors_give_the_line() {
    let e = err("[server]\nlisten = \n");
    assert!(e.starts_with("rules.toml:2: invalid TOML: "), "{e}");
}

#[test]
fn duplicate_names_and_cost_above_capacity_are_all_reported() {
    let e = err(r#"
[[rules]]
name = "a"
limit = "10/s"
cost = 11

[[rules]]
name = "a"
limit = "5/s burst 50"
[[rules.route_costs]]
path_prefix = "/search"
cost = 51
"#);
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 3, "{e}");
    assert!(
        lines[0].starts_with(
            "rules.toml:5: rules[0].cost: cost 11 exceeds the rule's capacity of 10 units"
        ),
        "{e}"
    );
    assert_eq!(
        lines[1],
        "rules.toml:8: rules[1].name: duplicate rule name \"a\" (also rules[0].name); names must \
         be unique"
    );
    assert!(
        lines[2].starts_with(
            "rules.toml:12: rules[1].route_costs[0].cost: cost 51 exceeds the rule's capacity of 50"
        ),
        "{e}"
    );
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
fn redis_store_settings_are_read_and_checked() {
    use floodgate_store::redis::RedisTarget;
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\ntimeout_ms = 25\nprefix = \"app1:\"\n",
    )
    .unwrap();
    let r = c.store.redis.unwrap();
    assert_eq!(
        r.target,
        RedisTarget::Standalone("redis://127.0.0.1:6379/0".into())
    );
    assert_eq!((r.timeout_ms, r.prefix.as_str()), (25, "app1:"));
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nnodes = [\"redis://10.0.0.1:7000\", \"redis://10.0.0.2:7000\"]\n",
    )
    .unwrap();
    let r = c.store.redis.unwrap();
    assert!(matches!(r.target, RedisTarget::Cluster(ref n) if n.len() == 2));
    assert_eq!((r.timeout_ms, r.prefix.as_str()), (50, "fg:"));
    assert_eq!(r.breaker_window_ms, 250);
    assert_eq!(r.local_fallback_instances, None);
    for (window, parsed) in [("0", 0), ("1000", 1000)] {
        let c = parse(
            "rules.toml",
            &format!(
                "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nbreaker_window_ms = {window}\n"
            ),
        )
        .unwrap();
        assert_eq!(c.store.redis.unwrap().breaker_window_ms, parsed);
    }
    for bad in ["-1", "60001"] {
        assert_eq!(
            err(&format!(
                "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nbreaker_window_ms = {bad}\n"
            )),
            format!(
                "rules.toml:4: store.breaker_window_ms: must be 0 to 60000 milliseconds, got {bad}"
            )
        );
    }
    assert_eq!(
        err("[store]\nbreaker_window_ms = 100\n"),
        "rules.toml:2: store.breaker_window_ms: only for kind = \"redis\""
    );
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nfallback = \"local\"\ninstances = 4\n",
    )
    .unwrap();
    assert_eq!(c.store.redis.unwrap().local_fallback_instances, Some(4));
    // No instances: the count is discovered in Redis.
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nfallback = \"local\"\n",
    )
    .unwrap();
    let r = c.store.redis.unwrap();
    assert!(r.local_fallback);
    assert_eq!(r.local_fallback_instances, None);
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\ninstances = 4\n")
            .starts_with("rules.toml:4: store.instances: only with fallback")
    );

    assert_eq!(
        err("[store]\nkind = \"redis\"\n"),
        "rules.toml:2: store.url: kind = \"redis\" needs url = \"redis://host:port\", nodes = [...] \
         or sentinels = [...]"
    );
    assert!(err("[store]\nkind = \"redis\"\nurl = \"http://x\"\n")
        .starts_with("rules.toml:3: store.url: \"http://x\" is not a redis://"));
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\ntimeout_ms = 0\n")
            .starts_with("rules.toml:4: store.timeout_ms: must be 1 to 60000")
    );
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\nprefix = \"{x}\"\n")
            .starts_with("rules.toml:4: store.prefix: ")
    );
    assert_eq!(
        err("[store]\nkind = \"memory\"\nurl = \"redis://a\"\n"),
        "rules.toml:3: store.url: only for kind = \"redis\""
    );
}

#[test]
fn other_semantic_errors_name_their_fields() {
    let cases = [
        (
            "[server]\nlisten = \"localhost\"\n",
            "rules.toml:2: server.listen: ",
        ),
        (
            "[server]\nadmin_token = \"short\"\n",
            "rules.toml:2: server.admin_token: ",
        ),
        (
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"nope\"]\n",
            "rules.toml:2: server.trusted_proxies[1]: ",
        ),
        (
            "[server]\nupstream = \"https://x\"\n",
            "rules.toml:2: server.upstream: ",
        ),
        (
            "[server]\nupstream = \"http://x/api\"\n",
            "rules.toml:2: server.upstream: ",
        ),
        ("[store]\nmax_keys = 0\n", "rules.toml:2: store.max_keys: "),
        (
            "[store]\nmax_keys = 50\n[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nmax_keys = 51\n",
            "rules.toml:6: rules[0].max_keys: must be a whole number between 1 and [store] \
             max_keys (50), got 51",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nmax_keys = 0\n",
            "rules.toml:4: rules[0].max_keys: must be a whole number between 1 and [store] \
             max_keys (100000), got 0",
        ),
        (
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n[[rules]]\nname = \"a\"\n\
             limit = \"1/s\"\nmax_keys = 10\n",
            "rules.toml:7: rules[0].max_keys: only for the memory store",
        ),
        (
            "[server]\nipv6_prefix = 129\n",
            "rules.toml:2: server.ipv6_prefix: ",
        ),
        (
            "[server]\nforwarded_header = \"x-real-ip\"\n",
            "rules.toml:2: server.forwarded_header: unknown header",
        ),
        (
            "[store]\non_full = \"panic\"\n",
            "rules.toml:2: store.on_full: ",
        ),
        (
            "[[rules]]\nname = \"has space\"\nlimit = \"1/s\"\n",
            "rules.toml:2: rules[0].name: ",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nalgorithm = \"magic\"\n",
            "rules.toml:4: rules[0].algorithm: unknown algorithm",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nkey = \"cookie\"\n",
            "rules.toml:4: rules[0].key: unknown key source",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\ncost = -1\n",
            "rules.toml:4: rules[0].cost: must be a whole number between 0 and 1000000",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nfailure_mode = \"maybe\"\n",
            "rules.toml:4: rules[0].failure_mode: ",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"100000/s\"\nalgorithm = \"sliding_log\"\n",
            "rules.toml:3: rules[0].limit: the sliding log keeps one entry per admitted unit",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n[rules.match]\nmethods = [\"G T\"]\n",
            "rules.toml:5: rules[0].match.methods[0]: invalid HTTP method",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n[rules.match]\npath_prefix = \"api\"\n",
            "rules.toml:5: rules[0].match.path_prefix: must start with '/'",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with(want), "{text:?}\n got: {e}\nwant: {want}");
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

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const VALID: &str = r#"[server]
listen = "127.0.0.1:9000"
trusted_proxies = ["10.0.0.0/8"]
[store]
max_keys = 50
[[rules]]
name = "a"
limit = "10/10s burst 20"
key = ["header:x-api-key", "user:x-user | client_ip"]
cost_header = "x-cost"
[rules.match]
path_prefix = "/api"
methods = ["GET"]
[[rules.route_costs]]
path_prefix = "/api/search"
cost = 5
"#;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Arbitrary text never panics the parser, and every error names the file and a line
        /// inside the document.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            if let Err(errors) = parse("f.toml", &text) {
                for e in errors.0 {
                    prop_assert_eq!(&e.file, "f.toml");
                    prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1) + 1, "{}", e);
                }
            }
        }

        /// A valid document with one byte replaced, removed or duplicated: no panic; an error
        /// always names a line within the document.
        #[test]
        fn mutated_valid_config_never_panics(at in 0..VALID.len(), byte in any::<u8>(), op in 0..3u8) {
            let mut bytes = VALID.as_bytes().to_vec();
            match op {
                0 => bytes[at] = byte,
                1 => { bytes.remove(at); }
                _ => bytes.insert(at, bytes[at]),
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Err(errors) = parse("f.toml", &text) {
                prop_assert!(!errors.0.is_empty());
                for e in errors.0 {
                    prop_assert!(e.line >= 1 && e.line <= text.lines().count() + 1, "{}", e);
                    // Only a syntax error names no field.
                    prop_assert!(
                        !e.field.is_empty() || e.message.starts_with("invalid TOML: "),
                        "{}",
                        e
                    );
                }
            }
        }
    }
}

/// Every ```toml block of the README and of docs/configuration.md is a complete, valid
/// configuration, so the documented examples cannot drift from what `check-config` accepts.
#[test]
fn every_toml_block_of_the_readme_and_the_configuration_guide_is_a_valid_configuration() {
    let pages = [
        ("README.md", include_str!("../../../../README.md")),
        (
            "docs/configuration.md",
            include_str!("../../../../docs/configuration.md"),
        ),
    ];
    for (name, page) in pages {
        let mut blocks = 0;
        let mut lines = page.lines().enumerate();
        while let Some((start, line)) = lines.next() {
            if line.trim_end() != "```toml" {
                continue;
            }
            let body: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| l.trim_end() != "```")
                .collect();
            // Blank lines in place of the text before the block, so errors give page lines.
            let text = "\n".repeat(start + 1) + &body.join("\n") + "\n";
            if let Err(e) = parse(name, &text) {
                panic!("{e}");
            }
            blocks += 1;
        }
        assert!(
            blocks >= 1 || name == "README.md",
            "no ```toml block found in {name}"
        );
    }
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
    assert!(rules.rules.iter().all(|r| r.explicit_only));
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
fn server_grpc_listen_is_an_address() {
    let c = parse("f.toml", "[server]\ngrpc_listen = \"127.0.0.1:8081\"\n").unwrap();
    assert_eq!(
        c.server.grpc_listen,
        Some("127.0.0.1:8081".parse().unwrap())
    );
    let e = parse("f.toml", "[server]\ngrpc_listen = \"8081\"\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "f.toml:2: server.grpc_listen: invalid address \"8081\": expected IP:PORT, e.g. \"127.0.0.1:8081\""
    );
}

/// `rediss://` is accepted; `tls_ca_file`, `tls_cert_file` and `tls_key_file` are read when the
/// file loads (relative to its folder) and checked, each problem naming file, line and field.
#[test]
fn redis_tls_files_are_read_and_checked() {
    let tls =
        |url: &str, files: &str| format!("[store]\nkind = \"redis\"\nurl = \"{url}\"\n{files}");
    let c = parse("rules.toml", &tls("rediss://a:6380", "")).unwrap();
    let redis = c.store.redis.unwrap();
    assert!(redis.tls.is_empty(), "system roots, no client certificate");
    assert_eq!(
        err(&tls("rediss://a:6380", "tls_ca_file = \"no-such.pem\"\n")),
        "rules.toml:4: store.tls_ca_file: cannot read \"no-such.pem\": No such file or \
         directory (os error 2)"
    );
    assert_eq!(
        err("[store]\nkind = \"memory\"\ntls_ca_file = \"ca.pem\"\n"),
        "rules.toml:3: store.tls_ca_file: only for kind = \"redis\""
    );

    let certs = floodgate_store::redis::testing::TestCerts::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in ["ca.crt", "client.crt", "client.key"] {
        std::fs::copy(certs.path(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("junk.pem"), "not PEM").unwrap();
    let load = |text: String| {
        let path = dir.path().join("floodgate.toml");
        std::fs::write(&path, text).unwrap();
        let shown = path.display().to_string();
        load(&path).map_err(|e| e.to_string().replace(&shown, "F"))
    };
    // Relative to the configuration file's folder.
    let all = "tls_ca_file = \"ca.crt\"\ntls_cert_file = \"client.crt\"\n\
               tls_key_file = \"client.key\"\n";
    let c = load(tls("rediss://a:6380", all)).unwrap();
    let got = c.store.redis.unwrap().tls;
    assert_eq!(got.ca_pem, Some(certs.read("ca.crt").unwrap()));
    assert_eq!(got.client_key_pem, Some(certs.read("client.key").unwrap()));
    assert_eq!(
        load(tls("redis://a:6379", all)).unwrap_err(),
        "F:4: store.tls_ca_file: TLS files need rediss:// URLs (url or every one of nodes)"
    );
    assert_eq!(
        load(tls("rediss://a:6380", "tls_cert_file = \"client.crt\"\n")).unwrap_err(),
        "F:4: store.tls_key_file: tls_cert_file needs tls_key_file (the client certificate's \
         private key)"
    );
    assert!(load(tls("rediss://a:6380", "tls_ca_file = \"junk.pem\"\n"))
        .unwrap_err()
        .starts_with("F:4: store.tls_ca_file: holds no PEM certificate"));
    let swapped = "tls_cert_file = \"client.key\"\ntls_key_file = \"client.key\"\n";
    assert!(load(tls("rediss://a:6380", swapped))
        .unwrap_err()
        .starts_with("F:4: store.tls_cert_file: holds no PEM certificate"));
}

/// `sentinels = [...]` with `master_name`: a Redis Sentinel target; errors name the field.
#[test]
fn redis_sentinel_target() {
    use floodgate_store::redis::RedisTarget;
    let c = parse(
        "rules.toml",
        "[store]\nkind = \"redis\"\nsentinels = [\"redis://s1:26379\", \"redis://s2:26379\"]\n\
         master_name = \"mymaster\"\n",
    )
    .unwrap();
    assert_eq!(
        c.store.redis.unwrap().target,
        RedisTarget::Sentinel {
            sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
            master_name: "mymaster".into(),
        }
    );
    assert_eq!(
        err("[store]\nkind = \"redis\"\nsentinels = [\"redis://s1:26379\"]\n"),
        "rules.toml:3: store.master_name: sentinels need master_name = \"...\" (the name the \
         sentinels monitor)"
    );
    assert_eq!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://a\"\nmaster_name = \"m\"\n"),
        "rules.toml:4: store.master_name: only with sentinels = [...]"
    );
    assert!(err(
        "[store]\nkind = \"redis\"\nurl = \"redis://a\"\nsentinels = [\"redis://s\"]\n\
         master_name = \"m\"\n"
    )
    .starts_with("rules.toml:3: store.url: give one of url (one server), nodes (a cluster) or"));
    assert!(
        err("[store]\nkind = \"redis\"\nsentinels = [\"http://s\"]\nmaster_name = \"m\"\n")
            .starts_with("rules.toml:3: store.sentinels: \"http://s\" is not a redis:// URL")
    );
    assert_eq!(
        err("[store]\nsentinels = [\"redis://s\"]\n"),
        "rules.toml:2: store.sentinels: only for kind = \"redis\""
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

#[test]
fn reservation_secret_and_ttl_are_read_and_bad_values_name_file_line_and_field() {
    let c = parse(
        "f.toml",
        "[server]\nreservation_secret = \"0123456789abcdef0123456789abcdef\"\nreservation_ttl = \"90s\"\n",
    )
    .unwrap();
    assert_eq!(
        c.server.reservation_secret.as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
    assert_eq!(c.server.reservation_ttl, 90_000_000);
    // The defaults: no secret (a random one per process), 5 minutes.
    let c = parse("f.toml", "").unwrap();
    assert_eq!(c.server.reservation_secret, None);
    assert_eq!(c.server.reservation_ttl, DEFAULT_RESERVATION_TTL);
    let e =
        err("[server]\n\nreservation_secret = \"too short\"\nreservation_ttl = \"5fortnights\"\n");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(
        lines[0].starts_with(
            "rules.toml:3: server.reservation_secret: must be at least 32 printable ASCII"
        ),
        "{e}"
    );
    assert!(
        lines[1].starts_with("rules.toml:4: server.reservation_ttl: invalid duration"),
        "{e}"
    );
    let e = err("[server]\nreservation_ttl = \"5\"\n");
    assert_eq!(
        e,
        "rules.toml:2: server.reservation_ttl: invalid duration: duration \"5\" has no unit \
         (use us, ms, s, min, h or day)"
    );
    for ttl in ["500ms", "8day"] {
        let e = err(&format!("[server]\nreservation_ttl = \"{ttl}\"\n"));
        assert_eq!(
            e,
            format!(
                "rules.toml:2: server.reservation_ttl: must be between 1s and 7day, got \"{ttl}\""
            )
        );
    }
    let e = err("[server]\nreservation_ttl = 300\n");
    assert!(e.starts_with("rules.toml:2:"), "{e}");
    assert!(e.contains("reservation_ttl"), "{e}");
}

/// A wrong type is named in the file's words, not serde's (`i64`).
#[test]
fn a_wrong_type_says_what_the_field_takes() {
    assert_eq!(
        err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nburst = \"3\"\n"),
        "rules.toml:4: rules[0].burst: invalid type: string \"3\", expected a whole number"
    );
    assert_eq!(
        err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nshadow = \"yes\"\n"),
        "rules.toml:4: rules[0].shadow: invalid type: string \"yes\", expected true or false"
    );
}

#[test]
fn type_errors_name_the_files_words_not_the_parsers_types() {
    let e = err("server = 5\n");
    assert_eq!(
        e,
        "rules.toml:1: server: invalid type: integer `5`, expected a table"
    );
    let e = err("[rules]\nname = \"a\"\nlimit = \"1/s\"\n");
    assert!(
        e.starts_with("rules.toml:1: rules: invalid type: table, expected a list"),
        "{e}"
    );
    assert!(e.contains("`[[rules]]`"), "{e}");
}

#[test]
fn max_claims_is_read_and_bad_values_name_file_line_and_field() {
    let c = parse("f.toml", "[store]\nmax_claims = 20\n").unwrap();
    assert_eq!(c.store.max_claims, 20);
    assert_eq!(
        parse("f.toml", "").unwrap().store.max_claims,
        DEFAULT_MAX_CLAIMS
    );
    assert_eq!(
        err("[store]\n\nmax_claims = 0\n"),
        "rules.toml:3: store.max_claims: must be a whole number between 1 and 100000000, got 0"
    );
    assert!(
        err("[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1\"\nmax_claims = 5\n")
            .starts_with("rules.toml:4: store.max_claims: only for kind = \"memory\""),
    );
}
