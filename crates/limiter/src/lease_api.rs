//! The [`RateLimiter`]'s lease methods (`docs/spec/leases.md`): its clock, ending expired
//! leases, returning all of them. Above both the limiter and the `lease` module.

use std::sync::Arc;

use floodgate_core::Clock;
use floodgate_store::Store;

use crate::lease::{settle_ended, Leases, DEFAULT_MAX_LEASED_KEYS};
use crate::limiter::RateLimiter;

/// Leases of a [`RateLimiter`] (see `docs/spec/leases.md`).
impl<S: Store> RateLimiter<S> {
    /// Leases of this limiter (and its clones made from now on) live on `clock` instead of the
    /// system clock: give it the store's [`ManualClock`](floodgate_core::ManualClock) in
    /// tests. Starts with no lease.
    pub fn with_lease_clock(self, clock: Arc<dyn Clock>) -> Self {
        self.with_leases(Arc::new(Leases::new(clock, DEFAULT_MAX_LEASED_KEYS)))
    }

    /// Ends every lease whose time is up and settles what it did not spend (the service calls
    /// it every lease lifetime); drops slots of keys idle for four lifetimes. Returns the
    /// number of leases ended. A store failure is counted and logged: those units stay spent.
    pub async fn end_expired_leases(&self) -> usize {
        let ended = self.leases().end(self.leases().now(), false);
        settle_ended(&**self.store(), &ended).await;
        ended.len()
    }

    /// Ends every lease now and settles what each did not spend, and forgets every key: on
    /// shutdown, and after a reload (a rule's new quota or lease starts cold). Returns the
    /// number of leases ended.
    pub async fn return_leases(&self) -> usize {
        let ended = self.leases().end(self.leases().now(), true);
        settle_ended(&**self.store(), &ended).await;
        ended.len()
    }

    /// How many keys hold a lease slot now (at most [`DEFAULT_MAX_LEASED_KEYS`]).
    pub fn leased_keys(&self) -> usize {
        self.leases().len()
    }
}
