//! Quota leases' upkeep (`docs/spec/leases.md`): ends the limiter's expired leases every
//! lease lifetime (their unused units go back to the store). A reload (`AppState`) and the
//! shutdown (`run`) return every lease.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::state::AppState;

/// Ends expired leases every shortest lease lifetime of the rules in force (1 s when no rule
/// is leased, at least 1 ms), until shutdown.
pub(super) async fn keep(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let every = state
            .config()
            .rules
            .iter()
            .filter_map(|r| r.lease.map(|l| l.lifetime))
            .min()
            .map_or(Duration::from_secs(1), |us| {
                Duration::from_micros(us).max(Duration::from_millis(1))
            });
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        if state.limiter.leased_keys() > 0 {
            state.limiter.end_expired_leases().await;
        }
    }
}
