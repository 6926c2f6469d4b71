//! [`Readiness`]: how a store answers a readiness probe (`/readyz`), so that a service asks the
//! store, never which store it has.

/// What [`Store::ready_state`](crate::Store::ready_state) found.
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
