//! RedisStore on a 3-master Redis Cluster started by the test: hostile `{...}` keys never cause
//! CROSSSLOT and never steer the slot; batches across slots are all-or-nothing through the
//! refund protocol, exactly, for every algorithm; reservations across slots are reserved for one
//! wait, exactly as the memory store reserves them. Every test runs on Redis and again on Valkey (`valkey_*`).
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::redis::testing::{
    current_thread_runtime, multi_thread_runtime, proptest_cases, replay_against_memory,
    replay_reservations_against_memory, Flavor, RedisCluster, ReserveStep,
};
use floodgate_store::redis::{keys, RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{CheckItem, Store};

const T0: u64 = 1_700_000_000_000_000;

fn store(cluster: &RedisCluster) -> RedisStore {
    let mut config = RedisStoreConfig::cluster(cluster.urls());
    config.time_source = TimeSource::Caller;
    config.timeout = Duration::from_secs(2);
    // The frozen caller clock never expires a key in caller time; keep them in real time too.
    config.ttl_extra = Duration::from_secs(3600);
    RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
}

const HOSTILE: &[&str] = &[
    "{victim}",
    "}{",
    "{}",
    "{",
    "}",
    "{{a}}",
    "a{b}c",
    "{user1000}.following",
    "}}{{",
    "{}{x}",
    "x{}",
    "\u{0}{\u{0}}",
    "{fg:}",
    "fg:{0000000000000000}",
];

fn hostile_braces_cause_no_crossslot_and_keep_our_slot_on(flavor: Flavor) {
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let store = store(&cluster);
        let policies: Vec<Policy> = AlgorithmKind::ALL
            .iter()
            .map(|&k| Policy::new(k, "1000/min".parse().unwrap()).unwrap())
            .collect();
        let mut values: Vec<String> = HOSTILE.iter().map(|s| s.to_string()).collect();
        for i in 0..200 {
            values.push(format!("{{user{i}}}"));
            values.push(format!("}}{i}{{"));
        }
        for (n, v) in values.iter().enumerate() {
            // One batch: six rules (six slots, mostly), the same hostile key twice.
            let rules: Vec<String> = (0..6).map(|r| format!("rule{{{r}}}")).collect();
            let batch: Vec<CheckItem<'_>> = (0..6)
                .map(|r| CheckItem {
                    rule: &rules[r],
                    policy: &policies[r],
                    key: v,
                    cost: 1,
                })
                .chain(std::iter::once(CheckItem {
                    rule: &rules[0],
                    policy: &policies[0],
                    key: v,
                    cost: 1,
                }))
                .collect();
            let d = store
                .check(&batch)
                .await
                .unwrap_or_else(|e| panic!("value #{n} {v:?}: {e}"));
            assert!(d.allowed, "value {v:?}");
            // The same (rule, key) twice in one batch: the second item saw the first.
            assert_eq!(d.decisions[6].remaining, d.decisions[0].remaining - 1);
        }
        // Every key on every node has a TTL.
        let mut total = 0;
        for node in cluster.nodes() {
            let mut con = redis::Client::open(node.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
                .arg("*")
                .query_async(&mut con)
                .await
                .unwrap();
            for k in &keys {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(k)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert!(pttl > 0, "{} has PTTL {pttl}", String::from_utf8_lossy(k));
            }
            total += keys.len();
        }
        assert_eq!(total, values.len() * 6, "one key per (rule, value)");
        // The slot Redis computes for a stored key is ours.
        let node = &cluster.nodes()[0];
        // (redis-cli takes no NUL in an argument; that value is covered by the batches above.)
        for v in HOSTILE.iter().filter(|v| !v.contains('\0')) {
            let name = store.key_name("rule{0}", &policies[0], v);
            let slot: u16 = node
                .cli(&["CLUSTER", "KEYSLOT", &name])
                .unwrap()
                .parse()
                .unwrap();
            // The whole name is hashed: no brace of the user's reaches the slot.
            assert!(!name.contains(['{', '}']), "{name}");
            assert_eq!(
                Some(keys::slot(name.as_bytes())),
                redis::cluster_routing::Slot::new(slot),
                "{v:?}"
            );
        }
    });
}

fn cross_slot_batches_are_all_or_nothing_with_exact_refunds_on(flavor: Flavor) {
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let store = store(&cluster);
        for kind in AlgorithmKind::ALL {
            let roomy = Policy::new(kind, "5/h".parse().unwrap()).unwrap();
            let tight = Policy::new(kind, "3/h".parse().unwrap()).unwrap();
            let (a, b) = (format!("a-{kind}"), format!("b-{kind}"));
            // Find a key whose two rules live in different slots.
            let key = (0..)
                .map(|i| format!("user={i}"))
                .find(|k| {
                    keys::slot(store.key_name(&a, &roomy, k).as_bytes())
                        != keys::slot(store.key_name(&b, &tight, k).as_bytes())
                })
                .unwrap();
            let batch = [
                CheckItem {
                    rule: &a,
                    policy: &roomy,
                    key: &key,
                    cost: 1,
                },
                CheckItem {
                    rule: &b,
                    policy: &tight,
                    key: &key,
                    cost: 1,
                },
            ];
            for i in 0..3 {
                let d = store.check(&batch).await.unwrap();
                assert!(d.allowed, "{kind} #{i}");
                assert_eq!(d.decisions[0].remaining, 4 - i);
            }
            // The tight rule denies: nothing is charged to either rule.
            for _ in 0..3 {
                let d = store.check(&batch).await.unwrap();
                assert!(!d.allowed, "{kind}");
                assert!(
                    d.decisions[0].allowed,
                    "{kind}: roomy would admit on its own"
                );
                assert_eq!(d.decisions[0].remaining, 2, "{kind}: reports the peek");
                assert!(!d.decisions[1].allowed);
                assert!(d.decisions[1].retry_after.is_some());
            }
            let roomy_now = store.inspect(&a, &roomy, &key).await.unwrap();
            assert_eq!(
                roomy_now.remaining, 2,
                "{kind}: the refund gave back every unit"
            );
            // Larger costs across slots refund exactly too.
            let heavy = [
                CheckItem {
                    rule: &a,
                    policy: &roomy,
                    key: &key,
                    cost: 2,
                },
                CheckItem {
                    rule: &b,
                    policy: &tight,
                    key: &key,
                    cost: 1,
                },
            ];
            assert!(!store.check(&heavy).await.unwrap().allowed);
            assert_eq!(
                store.inspect(&a, &roomy, &key).await.unwrap().remaining,
                2,
                "{kind}"
            );
            // Peeks across slots consume nothing.
            let d = store
                .peek(&[CheckItem {
                    cost: 2,
                    ..heavy[0]
                }])
                .await
                .unwrap();
            assert!(d.allowed);
            assert_eq!(store.inspect(&a, &roomy, &key).await.unwrap().remaining, 2);
        }
    });
}

/// Issue 30, item 2: while the cluster is down (a slot without a master, full coverage
/// required: every key command answers `CLUSTERDOWN`, but every node still answers `PING`),
/// the open breaker must stay open and fail calls fast. Its recovery watch used to `PING` any
/// node, which answered: the breaker closed at once, the next calls failed again and opened
/// it, 60 times in 20 s. Once the slot has a master again, the watch closes it.
#[test]
fn the_breaker_stays_open_while_the_cluster_is_down_although_nodes_answer_ping() {
    let cluster = RedisCluster::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let mut config = RedisStoreConfig::cluster(cluster.urls());
        config.time_source = TimeSource::Caller;
        config.timeout = Duration::from_millis(500);
        config.ttl_extra = Duration::from_secs(3600);
        config.breaker_window = Duration::ZERO;
        let clock = Arc::new(ManualClock::new(T0));
        let store = Arc::new(RedisStore::new(config, clock.clone()).unwrap());
        let policy = Policy::new(AlgorithmKind::Gcra, "100/h".parse().unwrap()).unwrap();
        let check = |key: &'static str| {
            let (store, policy) = (store.clone(), policy.clone());
            async move {
                store
                    .check(&[CheckItem {
                        rule: "down",
                        policy: &policy,
                        key,
                        cost: 1,
                    }])
                    .await
            }
        };
        assert!(check("a").await.unwrap().allowed);
        // Take slot 0 from its master on every node: the cluster is down.
        let owner = cluster.owner_of(0).unwrap();
        for node in cluster.nodes() {
            node.cli(&["CLUSTER", "DELSLOTS", "0"]).unwrap();
        }
        cluster.await_state(false).unwrap();
        assert_eq!(cluster.nodes()[owner].cli(&["PING"]).unwrap(), "PONG");
        // Five calls fail at Redis: the breaker opens.
        let failures = futures_util::future::join_all((0..5).map(|_| check("a"))).await;
        for f in &failures {
            let e = f.as_ref().unwrap_err().to_string();
            assert!(!e.contains("circuit breaker"), "{e}");
            // An error that is not a timeout names the key's slot (never the client's key).
            assert!(
                e.contains("timed out") || e.contains("(cluster slot "),
                "{e}"
            );
            // The cause is named as Redis said it (`ClusterDown: Hash slot not served`: the
            // client's retries wait tens of milliseconds now, not past the timeout).
            assert!(
                e.contains("timed out") || e.to_ascii_uppercase().contains("CLUSTERDOWN"),
                "{e}"
            );
        }
        // For 50 looks 10 ms apart (the recovery watch probes all the while), every call
        // fails fast: the breaker never closed.
        for n in 0..50 {
            let e = check("a").await.unwrap_err().to_string();
            assert!(e.contains("circuit breaker open"), "look {n}: {e}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The slot gets its master back: the watch closes the breaker (bounded: 10 s).
        cluster.nodes()[owner]
            .cli(&["CLUSTER", "ADDSLOTS", "0"])
            .unwrap();
        cluster.await_state(true).unwrap();
        let mut recovered = false;
        for _ in 0..1_000 {
            if let Ok(d) = check("a").await {
                assert!(d.allowed);
                recovered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            recovered,
            "the breaker did not close once the cluster was up"
        );
    });
}

/// Issue 30, item 3: a third of the slots without a master while full coverage is off (what
/// a dead master without a replica leaves): every live node answers the readiness probe, the
/// calls for the other slots succeed between the failed ones so the breaker stays closed, and
/// readiness said ready while a third of the checks failed. It now says not ready, naming the
/// error rate, and ready again once the calls of the last 10 s succeed.
/// One dead master fails only its own slots' calls fast: each master has a breaker of its
/// own (issue 30: the store's one breaker, opened by a dead master's failures, failed the
/// calls to the live masters too, and its half-open probe was as likely a dead slot's call).
#[test]
fn a_dead_master_opens_only_its_own_breaker() {
    let mut cluster = RedisCluster::start().unwrap();
    cluster.partial_coverage().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let mut config = RedisStoreConfig::cluster(cluster.urls());
        config.time_source = TimeSource::Caller;
        config.timeout = Duration::from_millis(500);
        config.ttl_extra = Duration::from_secs(3600);
        // Five failures open a breaker, whatever the (manual) time.
        config.breaker_window = Duration::ZERO;
        let clock = Arc::new(ManualClock::new(T0));
        let store = RedisStore::new(config, clock.clone()).unwrap();
        let policy = Policy::new(AlgorithmKind::Gcra, "1000/h".parse().unwrap()).unwrap();
        // A key on each master.
        let mut on_master: Vec<Option<String>> = vec![None; 3];
        for i in 0.. {
            let key = format!("k{i}");
            let name = store.key_name("shard", &policy, &key);
            let slot: u16 = cluster.nodes()[0]
                .cli(&["CLUSTER", "KEYSLOT", &name])
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let owner = cluster.owner_of(slot).unwrap();
            on_master[owner].get_or_insert(key);
            if on_master.iter().all(Option::is_some) {
                break;
            }
        }
        let keys: Vec<String> = on_master.into_iter().map(Option::unwrap).collect();
        let check = |key: &String| {
            let (store, policy, key) = (&store, &policy, key.clone());
            async move {
                let item = CheckItem {
                    rule: "shard",
                    policy,
                    key: &key,
                    cost: 1,
                };
                store.check(&[item]).await
            }
        };
        for key in &keys {
            assert!(check(key).await.unwrap().allowed);
        }
        let dead = 2;
        let dead_master = format!("127.0.0.1:{}", cluster.nodes()[dead].port());
        cluster.kill(dead);
        // The dead master's key fails at Redis until its breaker opens; the live masters'
        // keys are decided all along.
        let mut failed_at_redis = 0;
        let fast = loop {
            let e = check(&keys[dead]).await.unwrap_err().to_string();
            for key in &keys[..dead] {
                assert!(check(key).await.unwrap().allowed, "after {failed_at_redis}");
            }
            if e.contains("circuit breaker open") {
                break e;
            }
            failed_at_redis += 1;
            assert!(failed_at_redis < 20, "{e}");
        };
        assert!(failed_at_redis >= 5, "{failed_at_redis}: {fast}");
        assert!(
            fast.contains(&format!("for cluster master {dead_master}")),
            "{fast}"
        );
        // Open, it fails the dead master's calls fast and no other's.
        for n in 0..50 {
            let e = check(&keys[dead]).await.unwrap_err().to_string();
            assert!(e.contains("circuit breaker open"), "look {n}: {e}");
            for key in &keys[..dead] {
                assert!(check(key).await.unwrap().allowed, "look {n}");
            }
        }
        let e = store.readiness().await.unwrap_err().to_string();
        assert!(e.contains(&dead_master), "readiness: {e}");
        // The master comes back (with no keys: persistence is off); the breaker's watch,
        // probing a key of its failed calls, closes it without a cool-down (manual time).
        cluster.restart(dead).unwrap();
        let mut recovered = false;
        for _ in 0..1_000 {
            if let Ok(d) = check(&keys[dead]).await {
                assert!(d.allowed);
                recovered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            recovered,
            "the dead master's breaker did not close on its return"
        );
    });
}

#[test]
fn readiness_fails_while_a_third_of_the_slots_have_no_master() {
    let cluster = RedisCluster::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let mut config = RedisStoreConfig::cluster(cluster.urls());
        config.time_source = TimeSource::Caller;
        config.timeout = Duration::from_secs(2);
        config.ttl_extra = Duration::from_secs(3600);
        let clock = Arc::new(ManualClock::new(T0));
        let store = RedisStore::new(config, clock.clone()).unwrap();
        let policy = Policy::new(AlgorithmKind::FixedWindow, "1000/h".parse().unwrap()).unwrap();
        let keys: Vec<String> = (0..60).map(|i| format!("user{i}")).collect();
        // All at once: a check of a slot without a master waits out the client's retries.
        let (store, policy, keys) = (&store, &policy, &keys);
        let check_all = || async move {
            let results = futures_util::future::join_all(keys.iter().map(|key| async move {
                let item = CheckItem {
                    rule: "partial",
                    policy,
                    key,
                    cost: 1,
                };
                store.check(&[item]).await
            }))
            .await;
            results.iter().filter(|r| r.is_err()).count()
        };
        assert_eq!(check_all().await, 0);
        store.readiness().await.unwrap();
        let owner = cluster.owner_of(0).unwrap();
        for node in cluster.nodes() {
            node.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"])
                .unwrap();
            node.cli(&["CLUSTER", "DELSLOTSRANGE", "0", "5460"])
                .unwrap();
        }
        clock.advance(1_000_000);
        let failed = check_all().await;
        assert!((10..=35).contains(&failed), "{failed} of 60 failed");
        let e = store.readiness().await.unwrap_err().to_string();
        assert!(
            e.contains(&format!("{failed} of the 120 calls")),
            "readiness: {e}"
        );
        // The reason names the shard's last failure, not just a count: the client retries
        // CLUSTERDOWN answers a few times within tens of milliseconds, so that is CLUSTERDOWN
        // (`ClusterDown: Hash slot not served`), or a timeout on a slow machine.
        let last = e.split("the last: ").nth(1).unwrap_or_default();
        assert!(
            last.to_ascii_uppercase().contains("CLUSTERDOWN") || last.contains("timed out"),
            "readiness: {e}"
        );
        // The slots get their master back; 10 s later the failures are out of the window.
        cluster.nodes()[owner]
            .cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "5460"])
            .unwrap();
        cluster.await_state(true).unwrap();
        // The shard's breaker opened (its calls failed for a second of the store's clock):
        // its recovery watch, or a probe, closes it within a round trip or so.
        let mut rounds = 0;
        while check_all().await > 0 {
            rounds += 1;
            assert!(rounds < 500, "the shard's breaker never closed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        clock.advance(10_000_000);
        assert_eq!(check_all().await, 0);
        store.readiness().await.unwrap();
    });
}

fn startup_check_asks_every_master_on(flavor: Flavor) {
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let rt = current_thread_runtime().unwrap();
    let check = rt.block_on(async { store(&cluster).startup_check().await.unwrap() });
    assert_eq!(check.maxmemory_policies, ["noeviction"; 3]);
    assert!(!check.may_evict);
}

/// Random multi-rule batches (mostly across slots, so through the refund protocol) decide
/// exactly like the memory store, step after step, with time moving forward: a denied
/// cross-slot batch leaves every key as if it had never been tried.
fn cross_slot_batches_match_the_memory_store_on(flavor: Flavor) {
    use floodgate_core::Quota;
    use proptest::prelude::*;

    const QUOTAS: &[&str] = &[
        "1/s",
        "3/s",
        "7/s",
        "10/10s",
        "3/20s burst 5",
        "5/s burst 2",
    ];
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let rt = current_thread_runtime().unwrap();
    let store = {
        let _guard = rt.enter();
        store(&cluster)
    };
    let case = std::sync::atomic::AtomicU64::new(0);
    let strategy = (
        prop::collection::vec(0usize..6, 3),
        prop::collection::vec(0..QUOTAS.len(), 3),
        prop::collection::vec(
            (
                0u64..400_000,
                prop::collection::vec((0usize..3, 0usize..2, 0u64..4), 1..5),
                prop::bool::weighted(0.2),
            ),
            1..25,
        ),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: proptest_cases(40),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&strategy, |(kinds, q, steps)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let policies: Vec<Policy> = (0..3)
                .map(|i| {
                    let quota: Quota = QUOTAS[q[i]].parse().unwrap();
                    Policy::new(AlgorithmKind::ALL[kinds[i]], quota).unwrap()
                })
                .collect();
            let rules: Vec<String> = (0..3).map(|i| format!("case{n}-rule{i}")).collect();
            replay_against_memory(&rt, &store, &rules, &policies, T0, &steps)
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// Random multi-rule reservation batches (mostly across slots: each slot finds its wait, then
/// every slot reserves for the longest) and their settles decide exactly like the memory store.
#[test]
fn cross_slot_reservations_match_the_memory_store() {
    use floodgate_core::Quota;
    use proptest::prelude::*;

    const QUOTAS: &[&str] = &[
        "1/s",
        "3/s",
        "7/s",
        "10/10s",
        "3/20s burst 5",
        "5/s burst 2",
    ];
    let cluster = RedisCluster::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    let store = {
        let _guard = rt.enter();
        store(&cluster)
    };
    let case = std::sync::atomic::AtomicU64::new(0);
    let strategy = (
        prop::collection::vec(0usize..6, 3),
        prop::collection::vec(0..QUOTAS.len(), 3),
        prop::collection::vec(
            (
                0u64..400_000,
                prop::collection::vec((0usize..3, 0usize..2, 0u64..4), 1..5),
                prop_oneof![Just(0u64), 0u64..3_000_000],
                prop::option::weighted(0.3, any::<u64>()),
            ),
            1..25,
        ),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: proptest_cases(40),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&strategy, |(kinds, q, steps)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let policies: Vec<Policy> = (0..3)
                .map(|i| {
                    let quota: Quota = QUOTAS[q[i]].parse().unwrap();
                    Policy::new(AlgorithmKind::ALL[kinds[i]], quota).unwrap()
                })
                .collect();
            let rules: Vec<String> = (0..3).map(|i| format!("reserve{n}-rule{i}")).collect();
            let steps: Vec<ReserveStep> = steps;
            replay_reservations_against_memory(&rt, &store, &rules, &policies, T0, &steps)
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// One test on a Redis cluster and one on a Valkey cluster.
macro_rules! on_both {
    ($redis:ident, $valkey:ident, $body:path) => {
        #[test]
        fn $redis() {
            $body(Flavor::Redis);
        }

        #[test]
        fn $valkey() {
            $body(Flavor::Valkey);
        }
    };
}

on_both!(
    hostile_braces_cause_no_crossslot_and_keep_our_slot,
    valkey_hostile_braces_cause_no_crossslot_and_keep_our_slot,
    hostile_braces_cause_no_crossslot_and_keep_our_slot_on
);
on_both!(
    cross_slot_batches_are_all_or_nothing_with_exact_refunds,
    valkey_cross_slot_batches_are_all_or_nothing_with_exact_refunds,
    cross_slot_batches_are_all_or_nothing_with_exact_refunds_on
);
on_both!(
    cross_slot_batches_match_the_memory_store,
    valkey_cross_slot_batches_match_the_memory_store,
    cross_slot_batches_match_the_memory_store_on
);
on_both!(
    startup_check_asks_every_master,
    valkey_startup_check_asks_every_master,
    startup_check_asks_every_master_on
);
