//! RedisStore on a 3-master Redis Cluster while it changes: a live `redis-cli --cluster
//! reshard` under load, and a slot held mid-migration (`ASK` redirects) with 24 concurrent
//! clients: no failed call and exact counts. Every test runs on Redis and again on Valkey
//! (`valkey_*`).
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::redis::testing::{multi_thread_runtime, Flavor, RedisCluster};
use floodgate_store::redis::{keys, RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{CheckItem, Store};
use futures_util::StreamExt;

const T0: u64 = 1_700_000_000_000_000;

fn store(cluster: &RedisCluster) -> RedisStore {
    let mut config = RedisStoreConfig::cluster(cluster.urls());
    config.time_source = TimeSource::Caller;
    config.timeout = Duration::from_secs(2);
    // The frozen caller clock never expires a key in caller time; keep them in real time too.
    config.ttl_extra = Duration::from_secs(3600);
    RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
}

// Over 120 lines: one scenario (start, load, reshard, drain, count) whose steps share the
// cluster, the clients and their tallies; split, each step would need them all passed in.
fn resharding_under_load_keeps_counts_and_never_fails_a_redirect_on(flavor: Flavor) {
    // 1,000 slots, holding about 1,800 keys, move from the first master to the second
    // (`redis-cli --cluster reshard`, MIGRATE in batches, so slots stay mid-migration while
    // their keys move) while 8 clients check 500 hot keys (limit 20 each, frozen caller
    // time): MOVED and ASK are followed (ASKING pipelined with the script, see `asking.rs`),
    // the keys' state moves with them, so no check fails and no key admits more than its
    // limit (issue 30: before, ASK failed under concurrency).
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    let ids: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.cli(&["CLUSTER", "MYID"]).unwrap())
        .collect();
    let first = format!("127.0.0.1:{}", cluster.nodes()[0].port());
    rt.block_on(async {
        let store = Arc::new(store(&cluster));
        let policy =
            Arc::new(Policy::new(AlgorithmKind::SlidingLog, "20/h".parse().unwrap()).unwrap());
        // 30,000 cold keys (about 1,800 of them in the slots that move), 24 at a time.
        let cold = futures_util::stream::iter(0..30_000u32)
            .map(|i| {
                let (store, policy) = (store.clone(), policy.clone());
                async move {
                    let key = format!("cold{i}");
                    store
                        .check(&[CheckItem {
                            rule: "cold",
                            policy: &policy,
                            key: &key,
                            cost: 1,
                        }])
                        .await
                        .map(|d| d.allowed)
                }
            })
            .buffer_unordered(24)
            .collect::<Vec<_>>()
            .await;
        assert!(cold.iter().all(|r| matches!(r, Ok(true))));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for c in 0..8u64 {
            let (store, policy, done) = (store.clone(), policy.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let (mut admitted, mut requests, mut errors) = (vec![0u64; 500], 0u64, Vec::new());
                let mut during = 0u64;
                let mut n = c;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || requests < 2_000 {
                    if !done.load(std::sync::atomic::Ordering::Relaxed) {
                        during += 1;
                    }
                    n = n
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let k = ((n >> 33) % 500) as usize;
                    let key = format!("user{{{k}}}");
                    requests += 1;
                    match store
                        .check(&[CheckItem {
                            rule: "reshard",
                            policy: &policy,
                            key: &key,
                            cost: 1,
                        }])
                        .await
                    {
                        Ok(d) => admitted[k] += u64::from(d.allowed),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (admitted, requests, errors, during)
            }));
        }
        let reshard = tokio::task::spawn_blocking({
            let (from, to) = (ids[0].clone(), ids[1].clone());
            move || {
                std::process::Command::new("redis-cli")
                    .args(["--cluster", "reshard", &first, "--cluster-from", &from])
                    .args([
                        "--cluster-to",
                        &to,
                        "--cluster-slots",
                        "1000",
                        "--cluster-yes",
                    ])
                    .output()
                    .unwrap()
            }
        });
        let out = reshard.await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .rev()
                .take(6)
                .collect::<Vec<_>>()
                .join("\n")
        );
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mut admitted, mut requests, mut errors) = (vec![0u64; 500], 0, Vec::new());
        let mut during = 0;
        for t in tasks {
            let (a, r, e, d) = t.await.unwrap();
            during += d;
            for (total, x) in admitted.iter_mut().zip(a) {
                *total += x;
            }
            requests += r;
            errors.extend(e);
        }
        assert!(
            errors.iter().all(|e| !e.contains("CROSSSLOT")),
            "{errors:?}"
        );
        // No check fails for a redirect (MOVED, ASK, TRYAGAIN): the only errors allowed are
        // timeouts of a loaded test host (the 2 s bound), and few of them.
        let redirects: Vec<&String> = errors.iter().filter(|e| !e.contains("timed out")).collect();
        assert!(
            redirects.is_empty(),
            "{} errors other than timeouts in {requests} requests: {:?}",
            redirects.len(),
            redirects.first()
        );
        assert!(
            errors.len() as u64 * 100 <= requests,
            "{} timeouts in {requests} requests",
            errors.len()
        );
        assert!(
            admitted.iter().all(|&a| a <= 20),
            "a key admitted more than its limit"
        );
        // Afterwards every key still holds exactly what it admitted.
        for k in [0usize, 1, 250, 499] {
            let key = format!("user{{{k}}}");
            let d = store.inspect("reshard", &policy, &key).await.unwrap();
            assert_eq!(d.remaining, 20 - admitted[k], "key {k}");
        }
        // The cold keys moved with their slots, each still holding its one unit.
        for i in (0..30_000u32).step_by(997) {
            let key = format!("cold{i}");
            let d = store.inspect("cold", &policy, &key).await.unwrap();
            assert_eq!(d.remaining, 19, "cold key {i}");
        }
        assert!(
            during > 1_000,
            "only {during} requests ran during the reshard"
        );
        eprintln!(
            "reshard: {requests} requests ({during} during the reshard), {} errors",
            errors.len()
        );
    });
}

/// Issue 30, item 1: while a hot slot is held mid-migration (`IMPORTING` on the target,
/// `MIGRATING` on the source, its keys already moved with `MIGRATE`), every request for it
/// gets `ASK` from the source and must run on the target after `ASKING`. With 24 concurrent
/// clients on one multiplexed connection, an `ASKING` sent as its own request was consumed by
/// another client's command: the script got `MOVED`, then `ASK` again, until the retries ran
/// out (60 to 84 % errors). Now: zero errors, and every key admits exactly its limit, for four
/// algorithms, whose keys all sit in the migrating slot.
// Over 120 lines: one scenario (keys into one slot, migration held, 24 clients, counts, the
// migration finished) whose steps share the cluster, the keys and the tallies.
fn ask_redirects_mid_migration_with_24_clients_never_fail_and_count_exactly_on(flavor: Flavor) {
    const LIMIT: u64 = 150;
    const CLIENTS: usize = 24;
    const PER_CLIENT: usize = 50;
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    let kinds = [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
    ];
    let policies: Vec<Policy> = kinds
        .iter()
        .map(|&k| Policy::new(k, format!("{LIMIT}/h").parse().unwrap()).unwrap())
        .collect();
    rt.block_on(async {
        let store = Arc::new(store(&cluster));
        // One key per algorithm, all in the slot of the first.
        let slot = keys::slot(store.key_name("ask0", &policies[0], "hot").as_bytes());
        let hot: Vec<String> = (0..kinds.len())
            .map(|r| {
                (0..)
                    .map(|i| format!("hot{i}"))
                    .find(|k| {
                        keys::slot(
                            store
                                .key_name(&format!("ask{r}"), &policies[r], k)
                                .as_bytes(),
                        ) == slot
                    })
                    .unwrap()
            })
            .collect();
        let names: Vec<String> = (0..kinds.len())
            .map(|r| store.key_name(&format!("ask{r}"), &policies[r], &hot[r]))
            .collect();
        let slot_number: u16 = cluster.nodes()[0]
            .cli(&["CLUSTER", "KEYSLOT", &names[0]])
            .unwrap()
            .parse()
            .unwrap();
        // Each key exists (one unit consumed) before it moves to the target.
        for r in 0..kinds.len() {
            let rule = format!("ask{r}");
            let d = store
                .check(&[CheckItem {
                    rule: &rule,
                    policy: &policies[r],
                    key: &hot[r],
                    cost: 1,
                }])
                .await
                .unwrap();
            assert!(d.allowed);
        }
        let from = cluster.owner_of(slot_number).unwrap();
        let to = (from + 1) % 3;
        cluster
            .start_migration(slot_number, from, to, &names)
            .unwrap();
        let policies = Arc::new(policies);
        let hot = Arc::new(hot);
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (store, policies, hot) = (store.clone(), policies.clone(), hot.clone());
                tokio::spawn(async move {
                    let mut admitted = [0u64; 4];
                    let mut errors = Vec::new();
                    for n in 0..PER_CLIENT {
                        let r = (c + n) % 4;
                        let rule = format!("ask{r}");
                        match store
                            .check(&[CheckItem {
                                rule: &rule,
                                policy: &policies[r],
                                key: &hot[r],
                                cost: 1,
                            }])
                            .await
                        {
                            Ok(d) => admitted[r] += u64::from(d.allowed),
                            Err(e) => errors.push(e.to_string()),
                        }
                    }
                    (admitted, errors)
                })
            })
            .collect();
        let mut admitted = [1u64; 4];
        let mut errors = Vec::new();
        for t in tasks {
            let (a, e) = t.await.unwrap();
            for (total, x) in admitted.iter_mut().zip(a) {
                *total += x;
            }
            errors.extend(e);
        }
        let requests = CLIENTS * PER_CLIENT;
        assert!(
            errors.is_empty(),
            "{} of {requests} checks failed mid-migration, e.g. {:?}",
            errors.len(),
            errors.first()
        );
        // 1 + 300 checks per key, limit 150: exactly the limit admitted.
        assert_eq!(admitted, [LIMIT; 4], "admitted per algorithm {kinds:?}");
        // The state lives on the target: the source holds none of the keys (it answers ASK).
        for name in &names {
            let on_source = cluster.nodes()[from].cli(&["EXISTS", name]).unwrap();
            assert!(
                on_source.starts_with("ASK "),
                "{name} on the source: {on_source}"
            );
        }
        cluster.finish_migration(slot_number, from, to).unwrap();
        for r in 0..kinds.len() {
            let d = store
                .inspect(&format!("ask{r}"), &policies[r], &hot[r])
                .await
                .unwrap();
            assert_eq!(d.remaining, 0, "{:?} after the migration", kinds[r]);
        }
    });
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
    resharding_under_load_keeps_counts_and_never_fails_a_redirect,
    valkey_resharding_under_load_keeps_counts_and_never_fails_a_redirect,
    resharding_under_load_keeps_counts_and_never_fails_a_redirect_on
);
on_both!(
    ask_redirects_mid_migration_with_24_clients_never_fail_and_count_exactly,
    valkey_ask_redirects_mid_migration_with_24_clients_never_fail_and_count_exactly,
    ask_redirects_mid_migration_with_24_clients_never_fail_and_count_exactly_on
);
