//! The settings of a [`MemoryStore`](super::MemoryStore) and the snapshot of its counters.

use floodgate_core::Micros;

use crate::OnFull;

/// Settings of a [`MemoryStore`](super::MemoryStore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// Hard cap on keys held by the whole store. Default 1,000,000.
    pub max_keys: usize,
    /// Number of lock shards of each rule's table, rounded up to a power of two and down to at
    /// most `max_keys`. Default 64: on a few cores two threads rarely wait for the same shard.
    pub shards: usize,
    /// What happens to a new key when the store is full of live keys. Default
    /// [`OnFull::Reject`].
    pub on_full: OnFull,
    /// `retry_after` (microseconds) reported to a request rejected because the store is full.
    /// Default 1 second.
    pub full_retry_after: Micros,
    /// Most live reservation claims held at once ([`Store::claim`](crate::Store::claim)), apart
    /// from `max_keys`:
    /// claims outlive the keys they settle. Default 1,000,000 (about 100 bytes each).
    pub max_claims: usize,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            shards: 64,
            on_full: OnFull::Reject,
            full_retry_after: 1_000_000,
            max_claims: 1_000_000,
        }
    }
}

/// A snapshot of a [`MemoryStore`](super::MemoryStore)'s size and counters (counters are totals
/// since creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Keys held now (all rules), expired ones not yet dropped included.
    pub keys: usize,
    /// The configured cap.
    pub max_keys: usize,
    /// Number of shards per rule table.
    pub shards: usize,
    /// Expired entries dropped to make room in a full store.
    pub evictions: u64,
    /// Expired entries dropped by a sweep or when touched.
    pub expirations: u64,
    /// New keys rejected because the store was full ([`OnFull::Reject`]).
    pub full_rejections: u64,
    /// New keys admitted without state because the store was full
    /// ([`OnFull::AdmitUntracked`]).
    pub full_untracked: u64,
}
