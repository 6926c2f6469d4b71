//! Quota leases: an instance takes `n` units of a hot key from the shared store in one
//! reservation, spends them locally for at most the rule's [`Lease::lifetime`], and settles
//! the unused rest when the lease ends. The design, and the bound on how far what clients see
//! can be from the exact algorithm (per algorithm, derived), are in `docs/spec/leases.md`.
//!
//! - `settings`: [`Lease`], a rule's lease settings and its bound ([`Lease::bound`]).
//! - `table`: the per-instance leases, one per rule and key (synchronous, short critical
//!   sections; no lock across a store call).
//! - `check`: the decision path of a plan with leased items.

mod check;
mod counters;
pub(crate) mod settings;
mod table;

pub(crate) use check::{applies, check, settle_ended};
pub use settings::{Lease, LeaseError, DEFAULT_LEASE_SHARE};
pub(crate) use table::Leases;
pub use table::DEFAULT_MAX_LEASED_KEYS;
