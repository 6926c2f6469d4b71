//! `floodgate audit redis` against real servers: a standalone Redis seeded with sorted-set
//! logs, keys without TTL, strings and hashes; Floodgate's own keys written by the real
//! `RedisStore`; and a 3-master cluster. Every figure is checked against `MEMORY USAGE`
//! asked directly.

use std::sync::Arc;

use floodgate_audit::redis::{audit, FloodgateRules, RedisOptions, RedisReport, RuleSpec};
use floodgate_audit::Level;
use floodgate_core::{AlgorithmKind, Policy, SystemClock};
use floodgate_store::redis::testing::{current_thread_runtime, RedisCluster, RedisServer};
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::{CheckItem, Store};

fn level(report: &RedisReport, check: &str) -> Level {
    report
        .verdicts
        .iter()
        .find(|v| v.check == check)
        .unwrap_or_else(|| panic!("no verdict {check}: {:?}", report.verdicts))
        .level
}

fn group(report: &RedisReport, kind: &str, encoding: &str) -> (u64, u64, u64) {
    let g = report
        .groups
        .iter()
        .find(|g| g.kind == kind && g.encoding == encoding)
        .unwrap_or_else(|| panic!("no group {kind}/{encoding}: {:?}", report.groups));
    (g.keys, g.bytes, g.no_ttl)
}

/// `MEMORY USAGE` of every key matching `pattern`, asked one by one with redis-cli.
fn memory_usage_sum(server: &RedisServer, pattern: &str) -> (u64, u64) {
    let names = server.cli(&["--scan", "--pattern", pattern]).unwrap();
    let mut sum = 0;
    let mut n = 0;
    for name in names.lines().filter(|l| !l.is_empty()) {
        let b: u64 = server
            .cli(&["MEMORY", "USAGE", name])
            .unwrap()
            .parse()
            .unwrap();
        sum += b;
        n += 1;
    }
    (n, sum)
}

/// The seed: 5 sorted-set logs of 100 entries (TTL 60 s), 20 integer counters without TTL,
/// 10 hashes (TTL 10 s), two keys of one user without a hash tag and two with one, and 50
/// keys of another application that the pattern must leave out.
fn seed(server: &RedisServer) {
    for u in 0..5 {
        let key = format!("rate:log:user{u}");
        let mut args = vec!["ZADD".to_string(), key.clone()];
        for i in 0..100 {
            args.push(i.to_string());
            args.push(format!("1800000000{i:06}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        server.cli(&args).unwrap();
        server.cli(&["EXPIRE", &key, "60"]).unwrap();
    }
    for u in 0..20 {
        server
            .cli(&["SET", &format!("rate:count:user{u}"), "42"])
            .unwrap();
    }
    for u in 0..10 {
        let key = format!("rate:bucket:user{u}");
        server
            .cli(&["HSET", &key, "tokens", "7", "ts", "1800000000000000"])
            .unwrap();
        server.cli(&["EXPIRE", &key, "10"]).unwrap();
    }
    for key in [
        "rate:alice:tokens",
        "rate:alice:ts",
        "rate:{bob}:tokens",
        "rate:{bob}:ts",
    ] {
        server.cli(&["SET", key, "1", "EX", "30"]).unwrap();
    }
    for i in 0..50 {
        server.cli(&["SET", &format!("session:{i}"), "x"]).unwrap();
    }
}

#[test]
fn standalone_seeded_server_is_counted_exactly_and_its_dangers_named() {
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "allkeys-lru"]).unwrap();
    seed(&server);
    let rt = current_thread_runtime().unwrap();
    let mut opts = RedisOptions::new(server.url());
    opts.pattern = "rate*".into();
    let report = rt.block_on(audit(&opts)).unwrap();

    assert!(!report.cluster);
    assert!(report.complete, "{report:?}");
    assert_eq!(report.inspected, 39);
    assert_eq!(report.projected_keys, 39);
    assert_eq!(report.nodes[0].dbsize, 89);
    assert_eq!(report.nodes[0].matched, 39);
    let (n, direct) = memory_usage_sum(&server, "rate*");
    assert_eq!(n, 39);
    assert_eq!(
        report.bytes, direct,
        "the audit's total is MEMORY USAGE summed directly"
    );
    assert_eq!(report.projected_bytes, direct);
    let groups_sum: u64 = report.groups.iter().map(|g| g.bytes).sum();
    assert_eq!(groups_sum, direct);

    // By type and encoding.
    let (zn, zb, zno) = group(&report, "zset", "listpack");
    assert_eq!((zn, zno), (5, 0));
    let (_, zdirect) = memory_usage_sum(&server, "rate:log:*");
    assert_eq!(zb, zdirect);
    assert_eq!(group(&report, "string", "int").0, 24);
    assert_eq!(group(&report, "string", "int").2, 20);
    assert_eq!(group(&report, "hash", "listpack").0, 10);
    assert_eq!(report.no_ttl, 20);
    // TTLs: 10 hashes in 1-10 s, 4 strings (30 s) and 5 logs (60 s, just under) in 10-60 s.
    assert_eq!(report.ttl[1], 10, "{:?}", report.ttl);
    assert_eq!(report.ttl[2], 9, "{:?}", report.ttl);

    assert_eq!(level(&report, "no_ttl"), Level::Danger);
    assert_eq!(level(&report, "sorted_set_logs"), Level::Danger);
    assert_eq!(level(&report, "eviction"), Level::Danger);
    // Standalone: one user's keys (rate:log:user1, rate:count:user1, ...) would be split on a
    // cluster; a note, not a danger, here.
    assert_eq!(level(&report, "cluster_slots"), Level::Note);
    let slots = report
        .verdicts
        .iter()
        .find(|v| v.check == "cluster_slots")
        .unwrap();
    assert!(
        slots.numbers["split"].as_u64().unwrap() >= 1,
        "{}",
        slots.summary
    );
    assert!(report.has_danger());
    let no_ttl = report
        .verdicts
        .iter()
        .find(|v| v.check == "no_ttl")
        .unwrap();
    assert!(
        no_ttl.summary.starts_with("20 of all 39 keys"),
        "{}",
        no_ttl.summary
    );

    // The table and JSON carry the same figures.
    let table = floodgate_audit::redis::table(&report);
    assert!(table.contains("zset     listpack"), "{table}");
    assert!(table.contains("DANGER"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["bytes"], direct);

    // A sample of 10: counts still exact (the scan went round), bytes projected.
    opts.sample = 10;
    let sampled = rt.block_on(audit(&opts)).unwrap();
    assert_eq!(sampled.inspected, 10);
    assert!(!sampled.complete);
    assert_eq!(sampled.projected_keys, 39);

    // The default pattern (Floodgate's prefix) finds nothing here, and says so.
    let none = rt
        .block_on(audit(&RedisOptions::new(server.url())))
        .unwrap();
    assert_eq!(none.inspected, 0);
    assert_eq!(level(&none, "no_ttl"), Level::Inconclusive);
}

#[test]
fn floodgate_keys_are_attributed_exactly_by_layout_or_named_ambiguous() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    let policy = |k: AlgorithmKind, q: &str| Policy::new(k, q.parse().unwrap()).unwrap();
    // Quotas long enough that no key expires during the test (a key's TTL is the time until
    // it decides like a missing one: one GCRA unit of 1/10min lives 10 min). The fixed window's
    // keys live until the end of their 30-day window, longer than the 10 min GCRA's keys can,
    // so the two one-integer layouts are told apart by TTL.
    let rules = [
        ("per-user", policy(AlgorithmKind::TokenBucket, "10/hour")),
        ("global", policy(AlgorithmKind::Gcra, "1/10min")),
        ("search", policy(AlgorithmKind::FixedWindow, "5/30day")),
        ("log", policy(AlgorithmKind::SlidingLog, "10/hour")),
        ("twin-a", policy(AlgorithmKind::SlidingWindow, "3/hour")),
        ("twin-b", policy(AlgorithmKind::SlidingWindow, "3/hour")),
    ];
    let specs: Vec<RuleSpec> = rules
        .iter()
        .map(|(name, p)| RuleSpec {
            name: name.to_string(),
            policy: p.clone(),
            known_keys: if *name == "global" {
                vec!["const=all".into()]
            } else {
                Vec::new()
            },
        })
        .collect();
    let _runtime = rt.enter();
    let store = RedisStore::new(
        RedisStoreConfig::standalone(server.url()),
        Arc::new(SystemClock),
    )
    .unwrap();
    rt.block_on(async {
        let check = |i: usize, key: String| {
            let s = &specs[i];
            let store = &store;
            async move {
                let item = CheckItem {
                    rule: &s.name,
                    policy: &s.policy,
                    key: &key,
                    cost: 1,
                };
                store.check(&[item]).await.unwrap();
            }
        };
        for u in 0..6 {
            check(0, format!("key=user{u}")).await;
        }
        check(0, "key=alice".into()).await;
        check(1, "const=all".into()).await;
        for u in 0..4 {
            check(2, format!("ip=10.0.0.{u}")).await;
        }
        for u in 0..3 {
            check(3, format!("key=l{u}")).await;
        }
        check(4, "key=t1".into()).await;
        check(5, "key=t2".into()).await;
    });
    let mut opts = RedisOptions::new(server.url());
    opts.floodgate = Some(FloodgateRules {
        prefix: "fg:".into(),
        rules: specs.clone(),
        known_keys: vec!["key=alice".into()],
    });
    let report = rt.block_on(audit(&opts)).unwrap();
    assert_eq!(report.inspected, 17);
    let (_, direct) = memory_usage_sum(&server, "fg:*");
    assert_eq!(report.bytes, direct);
    let a = report.attribution.as_ref().unwrap();
    assert_eq!(a.floodgate_keys, 17);
    let by = |rule: &str| a.rules.iter().find(|r| r.rule == rule).unwrap().clone();
    assert_eq!(
        (by("per-user").exact_keys, by("per-user").layout_keys),
        (1, 6)
    );
    assert_eq!(by("per-user").found_keys, vec!["key=alice".to_string()]);
    assert_eq!((by("global").exact_keys, by("global").layout_keys), (1, 0));
    assert_eq!((by("search").exact_keys, by("search").layout_keys), (0, 4));
    assert_eq!((by("log").exact_keys, by("log").layout_keys), (0, 3));
    // Two rules with the same algorithm and quota: their keys cannot be told apart.
    assert_eq!((by("twin-a").layout_keys, by("twin-b").layout_keys), (0, 0));
    assert_eq!(a.unattributed.len(), 1, "{:?}", a.unattributed);
    assert_eq!(
        a.unattributed[0].candidates,
        vec!["twin-a".to_string(), "twin-b".to_string()]
    );
    assert_eq!(a.unattributed[0].keys, 2);
    let attributed: u64 = a.rules.iter().map(|r| r.bytes).sum::<u64>()
        + a.unattributed.iter().map(|u| u.bytes).sum::<u64>();
    assert_eq!(attributed, direct);
    // A GCRA key one whole cell ahead is one integer, 56 bytes; a token bucket's two numbers
    // cost 88 (docs/redis.md, "Values").
    assert_eq!(by("global").bytes, 56);
    assert_eq!(by("per-user").bytes, 7 * 88);
    assert_eq!(a.unattributed[0].layout, "three numbers");
    // Floodgate's keys all have TTLs, are strings, and noeviction is the default.
    assert!(!report.has_danger(), "{:?}", report.verdicts);
    assert_eq!(level(&report, "attribution"), Level::Note);
    let table = floodgate_audit::redis::table(&report);
    assert!(
        table.contains("fit several rules: twin-a, twin-b"),
        "{table}"
    );
}

#[test]
fn cluster_masters_are_each_scanned_and_split_users_flagged() {
    let cluster = RedisCluster::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    // Seed through redis-cli -c (it follows MOVED to the right master).
    let node = &cluster.nodes()[0];
    let mut names = Vec::new();
    for u in 0..30 {
        let key = format!("rate:count:user{u}");
        node.cli(&["-c", "SET", &key, "5", "EX", "100"]).unwrap();
        names.push(key);
    }
    for u in 0..3 {
        let key = format!("rate:log:user{u}");
        node.cli(&["-c", "ZADD", &key, "1", "a", "2", "b", "3", "c"])
            .unwrap();
        names.push(key);
    }
    // Two users' token/timestamp pairs without a hash tag (no TTL either).
    for key in [
        "rate:alice:tokens",
        "rate:alice:ts",
        "rate:carol:tokens",
        "rate:carol:ts",
    ] {
        node.cli(&["-c", "SET", key, "1"]).unwrap();
        names.push(key.to_string());
    }
    assert_ne!(
        floodgate_store::redis::keys::slot(b"rate:alice:tokens"),
        floodgate_store::redis::keys::slot(b"rate:alice:ts"),
        "the fixture needs two names in different slots"
    );
    let mut direct = 0u64;
    for key in &names {
        let b: u64 = node
            .cli(&["-c", "MEMORY", "USAGE", key])
            .unwrap()
            .parse()
            .unwrap();
        direct += b;
    }
    let mut opts = RedisOptions::new(node.url());
    opts.pattern = "rate:*".into();
    let report = rt.block_on(audit(&opts)).unwrap();
    assert!(report.cluster);
    assert_eq!(report.nodes.len(), 3);
    assert!(
        report.nodes.iter().all(|n| n.matched > 0),
        "{:?}",
        report.nodes
    );
    assert_eq!(report.inspected, 37);
    assert_eq!(report.nodes.iter().map(|n| n.matched).sum::<u64>(), 37);
    assert_eq!(report.bytes, direct);
    assert_eq!(report.no_ttl, 7);
    assert_eq!(level(&report, "cluster_slots"), Level::Danger);
    assert_eq!(level(&report, "sorted_set_logs"), Level::Danger);
    assert_eq!(level(&report, "no_ttl"), Level::Danger);
    assert_eq!(level(&report, "eviction"), Level::Ok);
}
