//! `/readyz`'s `store.shards` on a Redis Cluster: each master's recent calls, as
//! `RedisStore::shard_readiness` counts them (`floodgate_store::redis::shards`).

use floodgate_store::AnyStore;
use serde_json::{json, Value};

/// `[{"node", "slots", "calls", "failed", "state"}]`, one per master of the client's slot map
/// and per master that had calls in the last 10 s (`"node": "none"` for slots no master
/// serves); `None` when the store is no Redis Cluster.
pub(crate) fn shards(store: &AnyStore) -> Option<Value> {
    let redis = store.redis().filter(|r| r.is_cluster())?;
    let shards: Vec<Value> = redis
        .shard_readiness()
        .iter()
        .map(|s| {
            json!({
                "node": s.node,
                "slots": s.slot_text(),
                "calls": s.calls,
                "failed": s.failed,
                "state": if s.ready { "up" } else { "down" },
            })
        })
        .collect();
    Some(Value::Array(shards))
}
