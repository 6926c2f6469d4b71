//! The cluster's slot map as the client last read it (`CLUSTER SLOTS`), and a bound on how
//! often the client reads it.
//!
//! # Why
//! The cluster client of the `redis` crate (1.8) refreshes its slot map (`CLUSTER SLOTS`)
//! after every failed request and has no setting that limits how often: with a master dead,
//! two processes sent 1,506 `CLUSTER SLOTS` to one node in 10 s (issue 30), each holding the
//! client's slot-map lock, which blocks the calls to the live masters too. And an error for a
//! dead master names no node, so an operator could not tell which shard failed.
//!
//! # How
//! Every `CLUSTER SLOTS` the client sends goes through the per-node connection
//! (`AskingConnection`, `asking.rs`), which asks `refresh` here. A node is asked at most once per
//! [`SLOT_REFRESH_INTERVAL`]; a refresh inside that interval is answered with the node's
//! last reply at once (counted in `floodgate_store_redis_slot_refreshes_total{outcome =
//! "reused"}`). So the map the client rebuilds is at most that old: a reshard's `MOVED`
//! is still followed at once (the client redirects the request to the node `MOVED` names),
//! and a promoted replica is found within one interval of the first failure after it.
//! The replies are kept per node address for the whole process (a process has few clusters
//! and a cluster few nodes; at most [`MAX_NODES`] are kept), and the same map names the node
//! of a failed call's slot (`node_of`).
//!
//! Time here is the process's [`SystemClock`]: this bounds
//! traffic to Redis and decides nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_core::{Clock, SystemClock, Timestamp};
use redis::Value;

/// A node is sent `CLUSTER SLOTS` at most once per this long (by one process): at most 40
/// in 10 s, where the client alone sent one every 7 ms while a master was dead.
pub const SLOT_REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Most node addresses whose last `CLUSTER SLOTS` reply is kept; past it the oldest entry
/// is dropped (a bound on memory whatever the cluster does).
pub const MAX_NODES: usize = 256;

/// One slot range and the address (`ip:port`) of its master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot of the range.
    pub start: u16,
    /// Last slot of the range (inclusive).
    pub end: u16,
    /// The master's address, `ip:port`.
    pub node: String,
}

/// A node's last reply: when it was asked (µs), the reply, and the ranges read from it.
struct Entry {
    asked_at: Timestamp,
    reply: Option<Value>,
    ranges: Vec<SlotRange>,
}

static NODES: parking_lot::Mutex<Option<HashMap<String, Entry>>> = parking_lot::Mutex::new(None);
/// Bumped whenever a reply changes the slot map of any node (so callers can cache).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// `true` for `CLUSTER SLOTS`.
pub(super) fn is_cluster_slots(cmd: &redis::Cmd) -> bool {
    let mut args = cmd.args_iter();
    matches!(
        (args.next(), args.next(), args.next()),
        (Some(redis::Arg::Simple(a)), Some(redis::Arg::Simple(b)), None)
            if a.eq_ignore_ascii_case(b"CLUSTER") && b.eq_ignore_ascii_case(b"SLOTS")
    )
}

/// What to do with a `CLUSTER SLOTS` for `node` now: `Some(reply)` to answer it with the
/// node's last reply (asked less than [`SLOT_REFRESH_INTERVAL`] ago), `None` to send it (then
/// [`remember`] the answer).
pub(super) fn refresh(node: &str) -> Option<Value> {
    let now = SystemClock.now();
    let interval = u64::try_from(SLOT_REFRESH_INTERVAL.as_micros()).unwrap_or(u64::MAX);
    let mut nodes = NODES.lock();
    let nodes = nodes.get_or_insert_with(HashMap::new);
    if let Some(entry) = nodes.get_mut(node) {
        if now.saturating_sub(entry.asked_at) < interval {
            if let Some(reply) = &entry.reply {
                metrics::counter!("floodgate_store_redis_slot_refreshes_total", "outcome" => "reused")
                    .increment(1);
                return Some(reply.clone());
            }
        }
        // Marked as asked now: a concurrent refresh meanwhile reuses the last reply.
        entry.asked_at = now;
    } else {
        if nodes.len() >= MAX_NODES {
            if let Some(oldest) = nodes
                .iter()
                .min_by_key(|(_, e)| e.asked_at)
                .map(|(k, _)| k.clone())
            {
                nodes.remove(&oldest);
            }
        }
        nodes.insert(
            node.to_string(),
            Entry {
                asked_at: now,
                reply: None,
                ranges: Vec::new(),
            },
        );
    }
    metrics::counter!("floodgate_store_redis_slot_refreshes_total", "outcome" => "sent")
        .increment(1);
    None
}

/// Keeps `reply`, `node`'s answer to `CLUSTER SLOTS` (an error reply is not kept).
pub(super) fn remember(node: &str, reply: &Value) {
    if matches!(reply, Value::ServerError(_)) {
        return;
    }
    let host = node.rsplit_once(':').map_or(node, |(h, _)| h);
    let ranges = parse(reply, host);
    let mut nodes = NODES.lock();
    if let Some(entry) = nodes.get_or_insert_with(HashMap::new).get_mut(node) {
        if entry.ranges != ranges {
            GENERATION.fetch_add(1, Ordering::Release);
        }
        entry.reply = Some(reply.clone());
        entry.ranges = ranges;
    }
}

/// The generation of the slot maps: changes whenever one changed.
pub(super) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The slot map of the cluster that `seeds` (`host:port` of the configured nodes) belong
/// to: the latest reply of a node that is a seed or that a seed's reply names; sorted by
/// slot. Empty before the first refresh.
pub(super) fn slot_map(seeds: &[String]) -> Vec<SlotRange> {
    let nodes = NODES.lock();
    let Some(nodes) = nodes.as_ref() else {
        return Vec::new();
    };
    let ours = |addr: &str, e: &Entry| {
        seeds.iter().any(|s| s == addr) || e.ranges.iter().any(|r| seeds.contains(&r.node))
    };
    let mut ranges = nodes
        .iter()
        .filter(|(addr, e)| e.reply.is_some() && ours(addr, e))
        .max_by_key(|(_, e)| e.asked_at)
        .map(|(_, e)| e.ranges.clone())
        .unwrap_or_default();
    ranges.sort_by_key(|r| r.start);
    ranges
}

/// The master of `slot` in `map` (sorted by slot), if any node serves it.
pub(super) fn node_of(map: &[SlotRange], slot: u16) -> Option<&str> {
    let i = map.partition_point(|r| r.end < slot);
    map.get(i)
        .filter(|r| r.start <= slot)
        .map(|r| r.node.as_str())
}

/// `host:port` of a node URL (`redis://host:port`, `rediss://user:pw@host:port/0`).
pub(super) fn url_address(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let addr = rest.split(['/', '?']).next()?;
    (!addr.is_empty()).then(|| addr.to_string())
}

/// The ranges of a `CLUSTER SLOTS` reply: `[[start, end, [ip, port, id, ...], replicas...],
/// ...]`; an empty ip (the node does not know its own address) is `host`, the node asked.
fn parse(reply: &Value, host: &str) -> Vec<SlotRange> {
    let Value::Array(rows) = reply else {
        return Vec::new();
    };
    let int = |v: &Value| match v {
        Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    rows.iter()
        .filter_map(|row| {
            let Value::Array(row) = row else { return None };
            let (start, end) = (int(row.first()?)?, int(row.get(1)?)?);
            let Value::Array(master) = row.get(2)? else {
                return None;
            };
            let ip = text(master.first()?)?;
            let port = int(master.get(1)?)?;
            let ip = if ip.is_empty() || ip == "?" {
                host.to_string()
            } else {
                ip
            };
            Some(SlotRange {
                start,
                end,
                node: format!("{ip}:{port}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn reply() -> Value {
        let row = |s: i64, e: i64, ip: &str, port: i64| {
            Value::Array(vec![
                Value::Int(s),
                Value::Int(e),
                Value::Array(vec![bulk(ip), Value::Int(port), bulk("id")]),
            ])
        };
        Value::Array(vec![
            row(5461, 10922, "127.0.0.1", 7002),
            row(0, 5460, "", 7001),
        ])
    }

    #[test]
    fn a_reply_maps_slots_to_masters() {
        let mut map = parse(&reply(), "10.0.0.9");
        map.sort_by_key(|r| r.start);
        assert_eq!(
            map[0].node, "10.0.0.9:7001",
            "an empty ip is the node asked"
        );
        assert_eq!(node_of(&map, 0), Some("10.0.0.9:7001"));
        assert_eq!(node_of(&map, 5460), Some("10.0.0.9:7001"));
        assert_eq!(node_of(&map, 5461), Some("127.0.0.1:7002"));
        assert_eq!(node_of(&map, 10923), None, "no master serves the slot");
    }

    #[test]
    fn a_node_is_asked_once_per_interval_then_its_reply_is_reused() {
        let node = "192.0.2.1:1";
        assert_eq!(refresh(node), None, "first: send");
        // Not answered yet: a concurrent refresh sends too (nothing to reuse).
        assert_eq!(refresh(node), None);
        remember(node, &reply());
        assert_eq!(refresh(node), Some(reply()), "within the interval: reused");
        let seeds = vec!["192.0.2.1:1".to_string()];
        assert_eq!(slot_map(&seeds).len(), 2);
        assert_eq!(slot_map(&["192.0.2.2:1".to_string()]), Vec::new());
    }

    #[test]
    fn only_cluster_slots_is_gated() {
        assert!(is_cluster_slots(redis::cmd("CLUSTER").arg("SLOTS")));
        assert!(is_cluster_slots(redis::cmd("cluster").arg("slots")));
        assert!(!is_cluster_slots(redis::cmd("CLUSTER").arg("NODES")));
        assert!(!is_cluster_slots(&redis::cmd("PING")));
    }

    #[test]
    fn url_addresses() {
        assert_eq!(
            url_address("redis://127.0.0.1:7001").as_deref(),
            Some("127.0.0.1:7001")
        );
        assert_eq!(
            url_address("rediss://u:p@h.example:6380/0").as_deref(),
            Some("h.example:6380")
        );
    }
}
