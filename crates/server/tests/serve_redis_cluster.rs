//! `floodgate serve` on a Redis Cluster while it changes (issue 30), through the HTTP API:
//! hot keys whose slots are held mid-migration (`ASK` redirects) with 24 concurrent clients
//! (on redis-server and valkey-server), a `CLUSTER FAILOVER` under load, and a master killed
//! under load (bounded log lines and `CLUSTER SLOTS`, Floodgate's line naming the slot and
//! its node, `/readyz` naming the shard that fails).

mod serve_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use floodgate_store::redis::testing::{Flavor, RedisCluster};
use serde_json::json;
use serve_support::{client, metric, Floodgate};

/// Four rules, one per algorithm, each 150 per hour; a store failure answers 503, so an
/// error cannot pass for an admission.
fn rules(limit: u64) -> String {
    ["token_bucket", "gcra", "fixed_window", "sliding_log"]
        .iter()
        .enumerate()
        .map(|(r, a)| {
            format!(
                "[[rules]]\nname = \"r{r}\"\nalgorithm = \"{a}\"\nlimit = \"{limit}/h\"\n\
                 failure_mode = \"closed\"\n"
            )
        })
        .collect()
}

fn config(cluster: &RedisCluster, settings: &str, rules: &str) -> String {
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[store]\nkind = \"redis\"\nnodes = [{}]\n{settings}\n{rules}",
        nodes.join(", ")
    )
}

/// The rate-limit state keys on every node: `fg:` and 11 base64url characters.
fn state_keys(cluster: &RedisCluster) -> BTreeSet<String> {
    cluster
        .nodes()
        .iter()
        .filter_map(|n| n.cli(&["KEYS", "fg:*"]).ok())
        .flat_map(|out| {
            out.lines()
                .filter(|k| k.len() == 14 && !k[3..].contains(':'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

async fn check(c: &reqwest::Client, fg: &Floodgate, rule: &str, key: &str) -> (u16, String) {
    let r = c
        .post(fg.url("/v1/check"))
        .json(&json!({"rule": rule, "key": key}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Checks `key` once under each of the four rules and returns the state key each made.
async fn first_checks(
    c: &reqwest::Client,
    fg: &Floodgate,
    cluster: &RedisCluster,
    key: &str,
) -> Vec<String> {
    let mut names = Vec::new();
    for r in 0..4 {
        let before = state_keys(cluster);
        let (status, body) = check(c, fg, &format!("r{r}"), key).await;
        assert_eq!(status, 200, "{body}");
        let made: Vec<String> = state_keys(cluster).difference(&before).cloned().collect();
        assert_eq!(made.len(), 1, "rule r{r} made {made:?}");
        names.push(made[0].clone());
    }
    names
}

fn slot_of(cluster: &RedisCluster, name: &str) -> u16 {
    cluster.nodes()[0]
        .cli(&["CLUSTER", "KEYSLOT", name])
        .unwrap()
        .parse()
        .unwrap()
}

/// `clients` tasks, each sending `per_client` checks of `key` spread over the four rules:
/// admitted per rule, and every answer that was neither 200 nor 429.
async fn load(
    c: &reqwest::Client,
    fg: &Arc<Floodgate>,
    key: &str,
    clients: usize,
    per_client: usize,
) -> ([u64; 4], Vec<String>) {
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (c, fg, key) = (c.clone(), fg.clone(), key.to_string());
            tokio::spawn(async move {
                let (mut admitted, mut errors) = ([0u64; 4], Vec::new());
                for n in 0..per_client {
                    let r = (i + n) % 4;
                    match check(&c, &fg, &format!("r{r}"), &key).await {
                        (200, _) => admitted[r] += 1,
                        (429, _) => {}
                        (status, body) => errors.push(format!("{status} {body}")),
                    }
                }
                (admitted, errors)
            })
        })
        .collect();
    let (mut admitted, mut errors) = ([0u64; 4], Vec::new());
    for t in tasks {
        let (a, e) = t.await.unwrap();
        for (total, x) in admitted.iter_mut().zip(a) {
            *total += x;
        }
        errors.extend(e);
    }
    (admitted, errors)
}

/// Issue 30, item 1, through the service: each rule's hot key sits in a slot held
/// mid-migration (`CLUSTER SETSLOT ... IMPORTING/MIGRATING`, the keys moved with `MIGRATE`,
/// so every request gets `ASK` from the source), and 24 clients send 1,200 checks: not one
/// error, and each rule admits exactly its limit (1 + 300 checks of a 150 limit, frozen
/// manual clock).
async fn ask_mid_migration_through_serve_on(flavor: Flavor) {
    const LIMIT: u64 = 150;
    let cluster = RedisCluster::start_flavor(flavor).unwrap();
    let fg = Arc::new(Floodgate::with_config(
        &config(&cluster, "timeout_ms = 2000", &rules(LIMIT)),
        &[],
    ));
    let c = client();
    let names = first_checks(&c, &fg, &cluster, "hot").await;
    let mut slots: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for name in &names {
        slots
            .entry(slot_of(&cluster, name))
            .or_default()
            .push(name.clone());
    }
    let mut moves = Vec::new();
    for (slot, keys) in &slots {
        let from = cluster.owner_of(*slot).unwrap();
        let to = (from + 1) % 3;
        cluster.start_migration(*slot, from, to, keys).unwrap();
        moves.push((*slot, from, to));
    }
    let (mut admitted, errors) = load(&c, &fg, "hot", 24, 50).await;
    assert!(
        errors.is_empty(),
        "{} of 1200 checks failed mid-migration, e.g. {:?}",
        errors.len(),
        errors.first()
    );
    for a in &mut admitted {
        *a += 1;
    }
    assert_eq!(admitted, [LIMIT; 4], "admitted per rule");
    // Still mid-migration at the end: the sources answer ASK for every key.
    for &(slot, from, _) in &moves {
        for name in &slots[&slot] {
            let on_source = cluster.nodes()[from].cli(&["EXISTS", name]).unwrap();
            assert!(on_source.starts_with("ASK "), "{name}: {on_source}");
        }
    }
    for (slot, from, to) in moves {
        cluster.finish_migration(slot, from, to).unwrap();
    }
    for r in 0..4 {
        let rule = format!("r{r}");
        assert_eq!(
            serve_support::remaining(&c, &fg, &rule, "hot").await,
            0,
            "{rule} after the migration"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_redirects_mid_migration_through_serve_never_fail_on_redis() {
    ask_mid_migration_through_serve_on(Flavor::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_redirects_mid_migration_through_serve_never_fail_on_valkey() {
    ask_mid_migration_through_serve_on(Flavor::Valkey).await;
}

fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

/// Polls `ready` every 50 ms for up to `within` (outside processes: real time).
async fn until(within: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = tokio::time::Instant::now();
    while start.elapsed() < within {
        if ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A manual `CLUSTER FAILOVER` on the replica of the master holding a hot key, while 8
/// clients check it under four rules: the replica takes over with the master's data, so no
/// rule admits more than its limit and no counter is lost (each rule's `remaining` after
/// the run is at most its limit minus what it admitted; a lost counter would read higher).
/// Failed checks (503) are allowed while the roles switch; they are counted, not admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_under_load_loses_no_counter_and_admits_no_more_than_the_limit() {
    const LIMIT: u64 = 400;
    let cluster = RedisCluster::start_with_replicas().unwrap();
    let fg = Arc::new(Floodgate::with_config(
        &config(&cluster, "timeout_ms = 2000", &rules(LIMIT)),
        &[],
    ));
    let c = client();
    let names = first_checks(&c, &fg, &cluster, "hot").await;
    // The master of the first rule's key, and its replica.
    let master = cluster.owner_of(slot_of(&cluster, &names[0])).unwrap();
    let master_id = cluster.nodes()[master].cli(&["CLUSTER", "MYID"]).unwrap();
    let replica = cluster
        .nodes()
        .iter()
        .position(|n| {
            n.cli(&["INFO", "replication"]).is_ok_and(|i| {
                info_field(&i, "master_port").as_deref()
                    == Some(&cluster.nodes()[master].port().to_string())
            })
        })
        .expect("the master has a replica");
    assert!(cluster.nodes()[replica]
        .cli(&["CLUSTER", "NODES"])
        .unwrap()
        .contains(&master_id));
    let during = {
        let (c, fg) = (c.clone(), fg.clone());
        tokio::spawn(async move { load(&c, &fg, "hot", 8, 150).await })
    };
    // Some load on the master first, then the failover.
    let scripts = |i: usize| {
        cluster.nodes()[i]
            .cli(&["INFO", "commandstats"])
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("cmdstat_eval"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum::<u64>()
    };
    let at_start = scripts(master);
    assert!(
        until(Duration::from_secs(20), || scripts(master) > at_start + 100).await,
        "no load on the master"
    );
    assert_eq!(
        cluster.nodes()[replica]
            .cli(&["CLUSTER", "FAILOVER"])
            .unwrap(),
        "OK"
    );
    let promoted = until(Duration::from_secs(20), || {
        cluster.nodes()[replica]
            .cli(&["INFO", "replication"])
            .is_ok_and(|i| info_field(&i, "role").as_deref() == Some("master"))
    })
    .await;
    assert!(promoted, "the replica never took over");
    let (mut admitted, errors) = during.await.unwrap();
    // And more checks once the new master serves: 1,200 + 1 per rule in all.
    let (after, late_errors) = load(&c, &fg, "hot", 8, 150).await;
    assert!(
        late_errors.is_empty(),
        "after the failover: {late_errors:?}"
    );
    for (r, a) in admitted.iter_mut().enumerate() {
        *a += 1 + after[r];
    }
    println!(
        "cluster failover under load: admitted {admitted:?}; {} checks failed while the roles \
         switched",
        errors.len()
    );
    for (r, &a) in admitted.iter().enumerate() {
        let rule = format!("r{r}");
        assert!(a <= LIMIT, "{rule} admitted {a} of {LIMIT}");
        let remaining = serve_support::remaining(&c, &fg, &rule, "hot").await;
        assert!(
            remaining <= LIMIT - a,
            "{rule}: {remaining} remaining after {a} admitted: a counter was lost"
        );
    }
    // The state lives on the promoted replica now.
    assert_eq!(
        cluster.nodes()[replica]
            .cli(&["EXISTS", &names[0]])
            .unwrap(),
        "1"
    );
}

/// `cmdstat_cluster|slots` calls on node `port` (0 before the first).
fn cluster_slots_calls(cluster: &RedisCluster, i: usize) -> u64 {
    let info = cluster.nodes()[i]
        .cli(&["INFO", "commandstats"])
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_cluster|slots:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Issue 30, items 3 and 4: a master killed under load on a cluster without full coverage.
/// For 10 s the redis client library logs at most 5 lines per module (a summary counts the
/// rest), the survivors get at most one `CLUSTER SLOTS` per 250 ms from the process,
/// Floodgate's own line names the slot and the dead node, and `/readyz` is 503 naming that
/// node's shard while the others are up. (Before: 23,900 lines and 1,506 `CLUSTER SLOTS` in
/// 10 s from two processes, and `/readyz` up.)
// Over 120 lines: one scenario (cluster, load, kill, 10 s window, logs, stats, readyz)
// whose steps share the cluster, the process and the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_bounds_client_logs_and_slot_refreshes_and_readyz_names_its_shard() {
    let mut cluster = RedisCluster::start().unwrap();
    for n in cluster.nodes() {
        n.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"])
            .unwrap();
    }
    let fg = Arc::new(Floodgate::with_config(
        &config(&cluster, "timeout_ms = 500", &rules(10_000)),
        &[],
    ));
    let c = client();
    // Keys on every master, so each shard has calls.
    let (admitted, errors) = load(&c, &fg, "warm", 4, 40).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(admitted.iter().sum::<u64>(), 160);
    // Both slot-refresh series are there from the start (`reused` appeared at its first).
    for outcome in ["sent", "reused"] {
        let series =
            format!(r#"floodgate_store_redis_slot_refreshes_total{{outcome="{outcome}"}}"#);
        assert!(metric(&c, &fg, &series).await.is_some(), "{series}");
    }
    let dead = 0;
    let dead_addr = format!("127.0.0.1:{}", cluster.nodes()[dead].port());
    cluster.kill(dead);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (c, fg, stop) = (c.clone(), fg.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed, mut n) = (0u64, 0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    match check(&c, &fg, "r0", &format!("user{i}-{n}")).await.0 {
                        200 => ok += 1,
                        _ => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    // Past the first second's reconnections: the window measured is the outage itself.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lines_before = fg.logs().lines().count();
    let slots_before: Vec<u64> = (1..3).map(|i| cluster_slots_calls(&cluster, i)).collect();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let logs = fg.logs();
    let window: Vec<&str> = logs.lines().skip(lines_before).collect();
    let slots_after: Vec<u64> = (1..3).map(|i| cluster_slots_calls(&cluster, i)).collect();
    let (status, _, readyz) =
        serve_support::split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (o, f) = t.await.unwrap();
        ok += o;
        failed += f;
    }
    println!(
        "a dead master for 10 s: {ok} checks decided, {failed} failed; {} log lines; \
         CLUSTER SLOTS on the survivors: {:?}",
        window.len(),
        slots_after
            .iter()
            .zip(&slots_before)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>()
    );
    // The lines docs/redis.md quotes.
    for what in ["log lines suppressed", "redis cluster call failed"] {
        if let Some(line) = logs.lines().find(|l| l.contains(what)) {
            println!("{line}");
        }
    }
    println!("/readyz store: {}", readyz["store"]);
    assert!(ok > 0 && failed > 0, "{ok} decided, {failed} failed");
    // At most 5 lines per module of the library per window, a summary per window, and
    // Floodgate's own store-failure line once a second.
    let library = window
        .iter()
        .filter(|l| l.contains(" redis::") && !l.contains("floodgate::log_throttle"))
        .count();
    assert!(
        library <= 40,
        "{library} client library lines in 10 s:\n{}",
        window.join("\n")
    );
    assert!(
        window.len() <= 80,
        "{} lines in 10 s:\n{}",
        window.len(),
        window.join("\n")
    );
    assert!(
        logs.contains("log lines suppressed"),
        "no summary of the suppressed lines:\n{logs}"
    );
    // The store's line (a timeout's error has no text) or the limiter's (an error that has).
    let own: Vec<&&str> = window
        .iter()
        .filter(|l| {
            l.contains("rate-limit store failed") || l.contains("redis cluster call failed")
        })
        .collect();
    assert!(
        own.iter()
            .any(|l| l.contains("cluster slot") && l.contains(&format!(" on {dead_addr}"))),
        "Floodgate's own lines name no slot on {dead_addr}: {own:?}"
    );
    for (i, (after, before)) in slots_after.iter().zip(&slots_before).enumerate() {
        assert!(
            after - before <= 44,
            "{} CLUSTER SLOTS on survivor {} in 10 s",
            after - before,
            i + 1
        );
    }
    assert_eq!(status, 503, "{readyz}");
    let shards = readyz["store"]["shards"].as_array().expect("shards");
    let down: Vec<&serde_json::Value> = shards.iter().filter(|s| s["state"] == "down").collect();
    assert_eq!(down.len(), 1, "{readyz}");
    assert_eq!(down[0]["node"], dead_addr.as_str(), "{readyz}");
    assert!(down[0]["failed"].as_u64().unwrap() > 0);
    // The shard says why it is down; the ones up say nothing.
    let why = down[0]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("calls") && why.contains("failed"), "{readyz}");
    assert!(shards
        .iter()
        .filter(|s| s["state"] == "up")
        .all(|s| s["reason"].is_null()));
    let survivors = shards
        .iter()
        .filter(|s| s["state"] == "up" && s["calls"].as_u64().unwrap_or(0) > 0)
        .count();
    assert_eq!(survivors, 2, "{readyz}");
    let reason = readyz["store"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("node {dead_addr} (slots ")),
        "{readyz}"
    );
}

/// A cluster node given as the one Redis of `--store` (or `[store] url`): every key of another
/// node's slots failed with `MOVED` into the rules' failure mode (30 of 30 checks admitted
/// uncounted on a fail-open rule), `/readyz` up. Now the start is refused, naming `nodes`.
#[test]
fn a_cluster_node_given_as_one_redis_is_refused_at_start() {
    let cluster = RedisCluster::start_flavor(Flavor::Redis).unwrap();
    let url = cluster.urls().remove(0);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["serve", "--store", &url, "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is a node of a Redis Cluster"), "{err}");
    assert!(err.contains("[store] nodes"), "{err}");
}
