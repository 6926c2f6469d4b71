//! The reservation secret shared through a Redis store, kept shared: the store may lose it
//! (`FLUSHALL`, a restart without persistence, an eviction), and then running instances would
//! keep theirs while a new instance made a different one, so that settles across them failed
//! as signed with another secret. Every [`REFRESH`] each instance writes its secret back with
//! `SET NX` (a no-op while the store holds one) and reads the store's; when that differs
//! (another instance made one first), it signs with the store's from then on and still opens
//! tokens of its previous secret for one token lifetime ([`crate::http::settle::Signer::share`]).
//! A settle of a token of an unknown secret reads the store at once, at most once per
//! [`RECHECK_EVERY`] (an unknown key id costs a stranger nothing more).

use floodgate_store::Store as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::state::AppState;

/// How often the shared secret is written back and read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// The least time between two reads made for a settle of an unknown secret.
pub(crate) const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// When a settle last made a read (rate limit of [`recheck`]).
static LAST_RECHECK: Mutex<Option<tokio::time::Instant>> = Mutex::new(None);

/// Whether a periodic refresh runs (with a Redis store and no configured secret).
static REFRESHING: AtomicBool = AtomicBool::new(false);

/// With a secret shared through the store: the task of [`refresh`].
pub(super) fn spawn_refresh(
    state: &Arc<AppState>,
    shutdown: &watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    (state.reservations.source() == crate::http::settle::SecretSource::Store)
        .then(|| tokio::spawn(refresh(Arc::clone(state), shutdown.clone())))
}

/// Writes back and reads the shared secret every [`REFRESH`] until `shutdown`.
async fn refresh(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    REFRESHING.store(true, Ordering::Release);
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        share_reservation_secret(&state, true).await;
    }
}

/// For a settle of a token of a secret this instance does not know: reads the store's secret
/// now (`true` when it was read), unless one was read for a settle within
/// [`RECHECK_EVERY`] or no secret is shared through the store.
pub(crate) async fn recheck(state: &AppState) -> bool {
    if !REFRESHING.load(Ordering::Acquire) {
        return false;
    }
    {
        let mut last = LAST_RECHECK.lock();
        let now = tokio::time::Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < RECHECK_EVERY) {
            return false;
        }
        *last = Some(now);
    }
    share_reservation_secret(state, true).await
}

/// Reads (or creates, atomically, when no process did yet) the reservation secret shared
/// through the Redis store, and signs with it: `true` once done. `quiet` leaves a failure
/// unlogged (the retries after the first).
pub(super) async fn share_reservation_secret(state: &AppState, quiet: bool) -> bool {
    if !state.store().is_shared() {
        return true;
    }
    // Ours when we have one: written back if the store lost it.
    let candidate = state
        .reservations
        .shared_secret()
        .unwrap_or_else(crate::http::settle::Signer::candidate);
    let failed = match state.store().shared_secret(&candidate).await {
        // A store not shared between processes: nothing to share.
        Ok(None) => return true,
        Ok(Some(secret)) => match crate::config::check_reservation_secret(&secret) {
            Ok(()) => {
                let had = state.reservations.key_id();
                match state.reservations.share(&secret, state.clock.now()) {
                    (_, None) if had.is_some() => {}
                    (key_id, None) => tracing::info!(
                        key_id,
                        "reservation tokens are signed with the secret shared through the \
                         store (<prefix>secret:reservation): every instance on it settles them"
                    ),
                    (key_id, Some(replaced)) => tracing::warn!(
                        key_id,
                        replaced,
                        "the store's reservation secret changed (it lost ours and another \
                         instance made one): signing with the store's; tokens of the replaced \
                         one still settle here until they expire"
                    ),
                }
                return true;
            }
            Err(why) => format!(
                "the store's <prefix>secret:reservation is not a valid secret ({why}); delete \
                 it to have a new one made, or set [server] reservation_secret"
            ),
        },
        Err(e) => format!("cannot read the reservation secret shared through the store: {e}"),
    };
    if !quiet {
        tracing::warn!(
            "{failed}; reservations and settles are answered 503 until it is read (retried \
             every second)"
        );
    }
    false
}
