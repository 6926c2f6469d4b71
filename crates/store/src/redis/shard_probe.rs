//! The shard probe: every master of a cluster's slot map that had no decision call during the
//! last [`SHARD_PROBE_INTERVAL`] is asked, in the background, whether it answers for its slots.
//!
//! # Why
//! Readiness per shard ([`shards`](super::shards)) is measured from traffic, and a master
//! that gets no calls has none: a freshly started or idle process reported ready against a
//! cluster with a dead master (issue 30). The readiness probe (`INFO stats` on every master)
//! did not see it either: it asks the masters the client is connected to.
//!
//! # How
//! A task per cluster store wakes every [`SHARD_PROBE_INTERVAL`] and sends each idle
//! master, at once, `EXISTS <prefix>probe:<n>`: a read of a key that is never written, whose
//! name is chosen so that its slot is one of that master's. Routed by its key, it goes to the
//! node that serves the slot (a `PING` is answered by any live node: the breaker's lesson,
//! issue 30 item 2), fails as a decision there would (a dead master, `CLUSTERDOWN`), and
//! follows `MOVED` like one. Each probe waits at most `connect_timeout + timeout`. Its
//! outcome goes to [`Shards::record_probe`]: a failure makes the shard not ready until a call
//! or a probe on it succeeds. Before the client has read a slot map (no connection yet), the
//! task sends one `PING`, which connects and reads the map; its failure is counted under
//! [`NO_MASTER`]. So an idle or freshly started process reports a dead master within one
//! interval plus one probe's wait, and a master back within one interval. The probes go
//! around the breaker and count in no error metric, as the readiness probe.
//!
//! Bounded: at most one probe per master per interval from each process, each at most a
//! wait long; the task ends once the store is dropped.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use redis::Value;

use super::connection::{duration_ms, to_store_error, Conn};
use super::reply::slot_number;
use super::shards::{Shards, NO_MASTER};
use super::topology;

/// How often the store probes the masters that had no call (and so how long an idle process
/// may report a dead master ready, plus one probe's wait).
pub const SHARD_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Most names tried for a probe key in a master's slots (a master with a single slot needs
/// about 16,384 on average; one third of the slots, about 3).
const MAX_KEY_TRIES: u32 = 1 << 20;

/// Starts the probe task of a cluster store: until `shards` is dropped, every
/// [`SHARD_PROBE_INTERVAL`] probes its idle masters on `conn`, each probe bounded by `wait`.
pub(super) fn spawn(shards: Weak<Shards>, conn: Conn, prefix: String, wait: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SHARD_PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut keys: HashMap<String, String> = HashMap::new();
        loop {
            tick.tick().await;
            let Some(shards) = shards.upgrade() else {
                return;
            };
            probe_once(&shards, &conn, &prefix, wait, &mut keys).await;
        }
    });
}

/// One round: the idle masters' probes, at once (or the `PING` that reads a first slot map).
async fn probe_once(
    shards: &Shards,
    conn: &Conn,
    prefix: &str,
    wait: Duration,
    keys: &mut HashMap<String, String>,
) {
    let Some(idle) = shards.idle_masters() else {
        let outcome = ask(conn, &redis::cmd("PING"), wait).await;
        shards.record_probe(NO_MASTER, outcome);
        return;
    };
    if keys.len() > topology::MAX_NODES {
        keys.clear();
    }
    let mut probes = Vec::with_capacity(idle.len());
    for (node, ranges) in idle {
        let in_ranges = |name: &str| {
            let slot = slot_number(name.as_bytes());
            ranges.iter().any(|&(s, e)| (s..=e).contains(&slot))
        };
        let key = match keys.get(&node) {
            Some(key) if in_ranges(key) => key.clone(),
            _ => {
                let Some(key) = (0..MAX_KEY_TRIES)
                    .map(|n| format!("{prefix}probe:{n}"))
                    .find(|k| in_ranges(k))
                else {
                    continue;
                };
                keys.insert(node.clone(), key.clone());
                key
            }
        };
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&key);
        probes.push(async move {
            let slot = slot_number(key.as_bytes());
            let outcome = ask(conn, &cmd, wait)
                .await
                .map_err(|e| format!("EXISTS on cluster slot {slot}: {e}"));
            (node, outcome)
        });
    }
    for (node, outcome) in futures_util::future::join_all(probes).await {
        shards.record_probe(&node, outcome);
    }
}

/// `cmd`, bounded by `wait`: `Ok` when answered, else why not.
async fn ask(conn: &Conn, cmd: &redis::Cmd, wait: Duration) -> Result<(), String> {
    match tokio::time::timeout(wait, conn.query::<Value>(cmd)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(to_store_error(e, wait).to_string()),
        Err(_) => Err(format!("timed out after {} ms", duration_ms(wait))),
    }
}
