//! Store failures on the decision path: counted in `floodgate_store_errors_total{kind}` and
//! logged at most once a second (shared by the decision, the settle and the leases).

use floodgate_store::StoreError;

/// Counts a store failure in `floodgate_store_errors_total{kind}` (`unavailable`, `timeout`,
/// `other`): every failed store call that decides or shadows a request, whichever way its
/// rule's failure mode answers it.
pub(crate) fn count_store_error(error: &StoreError) {
    let kind = match error {
        StoreError::Unavailable { .. } => "unavailable",
        StoreError::Timeout { .. } => "timeout",
        _ => "other",
    };
    metrics::counter!("floodgate_store_errors_total", "kind" => kind).increment(1);
}

/// Logs a store failure at `warn` at most once per second per process (the rest at `debug`),
/// so that a dead Redis under load does not turn every request into a log line. Every failure
/// is still counted in `floodgate_store_errors_total`.
pub(crate) fn log_store_failure(error: &floodgate_store::StoreError, fail_closed: bool) {
    use floodgate_core::{Clock, SystemClock};
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_WARN_US: AtomicU64 = AtomicU64::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let now = SystemClock.now();
    let last = LAST_WARN_US.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= 1_000_000
        && LAST_WARN_US
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
        tracing::warn!(%error, fail_closed, suppressed, "rate-limit store failed");
    } else {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%error, fail_closed, "rate-limit store failed");
    }
}
