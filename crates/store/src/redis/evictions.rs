//! Evictions detected: the readiness probe reads `INFO stats` (every master of a cluster) and
//! compares each node's `evicted_keys` with the value it saw last. A rise means Redis deleted
//! keys to free memory (a `maxmemory-policy` other than `noeviction`): every evicted Floodgate
//! key is a counter silently reset, a limited client given a full allowance again. It is
//! counted in `floodgate_store_redis_evicted_keys_total` and logged as a WARN at most once per
//! [`WARN_INTERVAL`] (with the number evicted since the last WARN).
//!
//! Redis counts every key it evicts, not only Floodgate's: on a Redis shared with other data
//! the figure is an upper bound. The first reading of a node is its baseline (evictions before
//! this process started are not counted), and a reading below the last one (the node restarted,
//! or `CONFIG RESETSTAT`) becomes the new baseline.

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::Timestamp;
use parking_lot::Mutex;
use redis::Value;

/// Shortest time between two eviction WARN lines.
pub const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// What the probe saw, per node.
#[derive(Debug, Default)]
pub(crate) struct Evictions {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Node (its address in a cluster, `""` standalone) -> `evicted_keys` last seen.
    seen: HashMap<String, u64>,
    /// Evictions seen since the last WARN.
    unwarned: u64,
    /// When the last WARN went out (store clock).
    warned_at: Option<Timestamp>,
}

impl Evictions {
    /// Records an `INFO stats` reply (`info`) read at `now`; returns the evictions new since
    /// the last reading (counted and, rate-limited, logged).
    pub(crate) fn observe(&self, info: &Value, now: Timestamp) -> u64 {
        let mut texts = Vec::new();
        node_texts(info, "", &mut texts);
        let mut state = self.state.lock();
        let mut new = 0;
        for (node, text) in texts {
            let Some(evicted) = evicted_keys(&text) else {
                continue;
            };
            match state.seen.insert(node, evicted) {
                Some(last) if evicted > last => new += evicted - last,
                _ => {}
            }
        }
        if new > 0 {
            metrics::counter!("floodgate_store_redis_evicted_keys_total").increment(new);
            state.unwarned += new;
            let interval = u64::try_from(WARN_INTERVAL.as_micros()).unwrap_or(u64::MAX);
            if state
                .warned_at
                .is_none_or(|at| now.saturating_sub(at) >= interval)
            {
                tracing::warn!(
                    evicted_keys = state.unwarned,
                    "redis evicted keys to free memory: rate-limit counters were reset (evicted \
                     keys start with a full allowance). Use maxmemory-policy noeviction and \
                     enough memory"
                );
                state.unwarned = 0;
                state.warned_at = Some(now);
            }
        }
        new
    }
}

/// `evicted_keys` of one node's `INFO` text.
fn evicted_keys(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The INFO texts in a reply: one string (standalone), or a map of node to string (a cluster's
/// answer from every master).
fn node_texts(v: &Value, node: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::BulkString(b) => out.push((node.into(), String::from_utf8_lossy(b).into_owned())),
        Value::SimpleString(s) => out.push((node.into(), s.clone())),
        Value::VerbatimString { text, .. } => out.push((node.into(), text.clone())),
        Value::Map(kvs) => {
            for (k, v) in kvs {
                let name = match k {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    _ => String::new(),
                };
                node_texts(v, &name, out);
            }
        }
        Value::Array(vs) => {
            for (i, v) in vs.iter().enumerate() {
                node_texts(v, &format!("{node}#{i}"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(n: u64) -> Value {
        Value::BulkString(format!("# Stats\r\nexpired_keys:3\r\nevicted_keys:{n}\r\n").into())
    }

    #[test]
    fn a_rise_counts_a_first_reading_and_a_fall_are_baselines() {
        let e = Evictions::default();
        assert_eq!(e.observe(&info(40), 1), 0, "baseline");
        assert_eq!(e.observe(&info(40), 2), 0);
        assert_eq!(e.observe(&info(45), 3), 5);
        assert_eq!(e.observe(&info(2), 4), 0, "restarted: new baseline");
        assert_eq!(e.observe(&info(3), 5), 1);
    }

    #[test]
    fn cluster_nodes_are_tracked_apart() {
        let e = Evictions::default();
        let cluster = |a: u64, b: u64| {
            Value::Map(vec![
                (Value::SimpleString("n1:7000".into()), info(a)),
                (Value::SimpleString("n2:7000".into()), info(b)),
            ])
        };
        assert_eq!(e.observe(&cluster(10, 0), 1), 0);
        assert_eq!(e.observe(&cluster(12, 5), 2), 7);
    }
}
