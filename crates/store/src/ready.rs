//! [`ReadyState`]: how a store answers a readiness probe (`/readyz`), so that a service asks the
//! store, never which store it has.

/// What [`Store::ready_state`](crate::Store::ready_state) found: the store's [`Readiness`] and,
/// for a store of several shards (a Redis Cluster's masters), each shard's recent calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyState {
    /// Whether the store answers.
    pub readiness: Readiness,
    /// One entry per shard, for a store that is spread over shards (a Redis Cluster: one per
    /// master of the client's slot map, and per master that had calls in the last 10 s);
    /// `None` for a store of one piece (the memory store, one Redis server).
    pub shards: Option<Vec<ShardState>>,
}

impl ReadyState {
    /// `readiness`, without shards.
    pub fn of(readiness: Readiness) -> Self {
        Self {
            readiness,
            shards: None,
        }
    }
}

/// Whether the store answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Nothing to check: the store is in this process (the memory store).
    NotChecked,
    /// The remote store answers.
    Up,
    /// The remote store does not answer, and a local fallback decides meanwhile (why).
    Degraded(String),
    /// The remote store does not answer (why).
    Down(String),
}

/// One shard's recent calls, as a readiness probe reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardState {
    /// The shard's node (`ip:port` of a master), or `none` for slots no master serves.
    pub node: String,
    /// Its slot ranges as text (`0-5460, 10923-16383`; `-` without ranges).
    pub slots: String,
    /// Calls in the last 10 seconds.
    pub calls: u64,
    /// Of which failed.
    pub failed: u64,
    /// `false` when its failures make the shard not ready.
    pub ready: bool,
    /// Why it is not ready (`its last 4 calls failed (not ready from 3 in a row)`); `None`
    /// while ready.
    pub reason: Option<String>,
}
