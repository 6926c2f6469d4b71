//! [`StoreError`]: why a store could not decide a batch.
//!
//! A denial is not an error: it is a [`Decision`](floodgate_core::Decision) with
//! `allowed == false`.

/// Why a store operation failed. Callers map these to their failure mode (open or closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An item's cost exceeds the most its policy can ever admit at once; no waiting would help.
    /// Raised before any state is touched.
    #[error(
        "rule {rule:?}: cost {cost} exceeds the policy's capacity of {capacity}: \
         it can never be admitted"
    )]
    InsufficientCapacity {
        /// The rule whose policy cannot hold the cost.
        rule: String,
        /// Units the item asked for.
        cost: u64,
        /// The most units one request can be admitted for (the burst or the limit).
        capacity: u64,
    },
    /// The store cannot be reached or answered with an error (remote stores).
    #[error("store unavailable: {reason}")]
    Unavailable {
        /// What went wrong, for logs.
        reason: String,
    },
    /// The store does not implement this operation (a [`Store`](crate::Store) that keeps the
    /// trait's default `reserve` or `settle`).
    #[error("the store does not support {operation}")]
    Unsupported {
        /// The operation, e.g. `"reserve"`.
        operation: &'static str,
    },
    /// The memory store's table of reservation claims ([`Store::claim`](crate::Store::claim))
    /// holds its most live claims: the claim was not made, so nothing was settled and the
    /// reservation can still be settled once a claim ends.
    #[error(
        "the store holds {max} live reservation claims, its max_claims; the next one ends in \
         {retry_after} us"
    )]
    ClaimsFull {
        /// The bound (`MemoryStoreConfig::max_claims`).
        max: usize,
        /// Microseconds until the earliest live claim ends and makes room.
        retry_after: u64,
    },
    /// The store did not answer within the configured time (remote stores).
    #[error("store timed out after {after_ms} ms")]
    Timeout {
        /// The time waited, in milliseconds.
        after_ms: u64,
    },
}
