//! The lease metrics (`floodgate_lease_*`, labelled by rule only, never by key):
//! - `floodgate_lease_takes_total{rule}`: leases taken from the store;
//! - `floodgate_lease_units_total{rule, state}`: units `leased` (taken), `used` (spent by
//!   requests, counted when the lease ends) and `returned` (the unused rest a settle asked
//!   back; the state gives back at most what it still holds, see `docs/spec/leases.md`).

use std::sync::Arc;

/// A lease of `units` was taken.
pub(super) fn taken(rule: &Arc<str>, units: u64) {
    ::metrics::counter!("floodgate_lease_takes_total", "rule" => Arc::clone(rule)).increment(1);
    units_of(rule, "leased", units);
}

/// A lease ended having spent `used` units, `returned` left to give back.
pub(super) fn ended(rule: &Arc<str>, used: u64, returned: u64) {
    units_of(rule, "used", used);
    units_of(rule, "returned", returned);
}

fn units_of(rule: &Arc<str>, state: &'static str, units: u64) {
    ::metrics::counter!(
        "floodgate_lease_units_total",
        "rule" => Arc::clone(rule),
        "state" => state
    )
    .increment(units);
}
