//! `/readyz`'s `store.shards` on a store spread over shards (a Redis Cluster): each shard's
//! recent calls, as the store's [`ReadyState`] reports them.

use floodgate_store::{ReadyState, ShardState};
use serde_json::{json, Value};

/// `[{"node", "slots", "calls", "failed", "state", "reason"}]`, one per shard the store reports (on a
/// Redis Cluster: per master of the client's slot map and per master that had calls in the
/// last 10 s, `"node": "none"` for slots no master serves); `None` for a store of one piece.
pub(crate) fn shards(state: &ReadyState) -> Option<Value> {
    let shards = state.shards.as_ref()?;
    Some(Value::Array(shards.iter().map(shard).collect()))
}

fn shard(s: &ShardState) -> Value {
    json!({
        "node": s.node,
        "slots": s.slots,
        "calls": s.calls,
        "failed": s.failed,
        "state": if s.ready { "up" } else { "down" },
        "reason": s.reason,
    })
}
