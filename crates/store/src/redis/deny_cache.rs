//! The deny cache ([`RedisStoreConfig::deny_cache`](super::RedisStoreConfig)): when Redis
//! denies a one-item check of cost 1 with `retry_after = T`, nobody can be admitted on that key
//! before `T` (every admission needs at least one unit, and a denied key has none), so its
//! state cannot change before then, except by an admin reset, a refund (a settle), a granted
//! reservation (it consumes at its scheduled time, which may come after `T`, so `T` moves
//! later) or a rule change (a new policy is a new key name, so a new entry). A reset, settle
//! or reservation made through this store invalidates its keys here, before its write and
//! again after it, and a denial from a check that was already on its way to Redis at an
//! invalidation is not cached (the invalidation count it read has moved), so a denial Redis
//! decided before such a write never outlives it here. The cache is off on a cluster. Until `T`, a cost-1 check of that key is answered here without a round trip: denied,
//! `remaining` as Redis said (0), `retry_after` and `reset_after` shortened by the time elapsed
//! (both are fixed points in time while the state does not change).
//!
//! Time: with a caller-supplied `now` the entry is on that clock and exact. With Redis' clock,
//! the entry is kept on the store's clock from the moment the call was *sent*, before Redis
//! decided: it expires up to one round trip early (never late), and the `Retry-After` it gives
//! is up to one round trip short.
//!
//! Where it is not exact: a reset or a settle refund made through *another* process is not
//! seen here, so this process keeps denying the key until `T`; a reservation granted through
//! another process is not seen either, so the `Retry-After` given here can be short (the
//! decision is still a denial, and the check made at `T` goes to Redis and is exact). That is why it is off by
//! default. Bounded: at most [`CAPACITY`] keys (when full, expired entries are dropped, at most
//! once a second; a new denial that finds no room is not cached).

use std::collections::HashMap;

use floodgate_core::{Decision, Timestamp};
use parking_lot::Mutex;

/// Most keys held.
pub const CAPACITY: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct DenyCache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    swept_at: Timestamp,
    /// The latest `now` of any call this store made ([`DenyCache::observe`]). A call at an
    /// earlier `now` (a caller clock that stepped back, or lags another's) neither uses nor
    /// fills the cache: a stale `now` is decided as "no time passed" since the key's last
    /// update, so its denial's times are not fixed points counted from that `now`.
    high_water: Timestamp,
    /// Bumped by every [`DenyCache::invalidate`]. A check reads it before asking Redis
    /// (a [`DenyCache::lookup`] miss answers it) and its denial is cached only if it has not moved since: a
    /// denial Redis decided before a refund, reset or reservation, whose answer arrives after
    /// that write's invalidation, is never cached.
    generation: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Timestamp,
    until: Timestamp,
    decision: Decision,
}

impl DenyCache {
    /// Records that a store call decides at `now` (every call: checks, peeks, reservations,
    /// settles), so that a later call at an earlier `now` bypasses the cache.
    pub(crate) fn observe(&self, now: Timestamp) {
        let mut state = self.state.lock();
        state.high_water = state.high_water.max(now);
    }

    /// The denial of `name` at `now`, if one is cached and still holds; else (a miss) the
    /// invalidation count to give [`DenyCache::insert`] with Redis' answer (read under the same
    /// lock, so a check costs one lock here).
    pub(crate) fn lookup(&self, name: &str, now: Timestamp) -> Result<Decision, u64> {
        let mut state = self.state.lock();
        let miss = Err(state.generation);
        if now < state.high_water {
            return miss;
        }
        state.high_water = now;
        let Some(e) = state.entries.get(name) else {
            return miss;
        };
        if now < e.at || now >= e.until {
            return miss;
        }
        let dt = now - e.at;
        Ok(Decision {
            retry_after: e.decision.retry_after.map(|r| r - dt),
            reset_after: e.decision.reset_after.saturating_sub(dt),
            ..e.decision
        })
    }

    /// The invalidation count now (what a miss of [`DenyCache::lookup`] answers).
    #[cfg(test)]
    fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Caches Redis' denial `decision` of `name`, decided at (or after) `at` by a check that
    /// read `generation` from its [`DenyCache::lookup`] miss before it was sent; nothing when a key was
    /// invalidated since (the denial may predate that change).
    pub(crate) fn insert(&self, name: &str, at: Timestamp, decision: Decision, generation: u64) {
        let Some(retry) = decision.retry_after.filter(|&r| r > 0) else {
            return;
        };
        if decision.allowed {
            return;
        }
        let mut state = self.state.lock();
        if at < state.high_water || generation != state.generation {
            // Decided at a stale `now` (see `high_water`), or before an invalidation.
            return;
        }
        if state.entries.len() >= CAPACITY && !state.entries.contains_key(name) {
            if at.saturating_sub(state.swept_at) < 1_000_000 {
                return;
            }
            state.swept_at = at;
            state.entries.retain(|_, e| e.until > at);
            if state.entries.len() >= CAPACITY {
                return;
            }
        }
        state.entries.insert(
            name.to_string(),
            Entry {
                at,
                until: at.saturating_add(retry),
                decision,
            },
        );
    }

    /// Forgets `name` (its state changed other than by a check's consumption: a reset, a
    /// settle, a granted reservation) and keeps every check already on its way to Redis from
    /// caching its answer. Called before such a write and again once it is done (or failed).
    pub(crate) fn invalidate(&self, name: &str) {
        let mut state = self.state.lock();
        state.entries.remove(name);
        state.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry: u64, reset: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            reset_after: reset,
            retry_after: Some(retry),
        }
    }

    #[test]
    fn answers_until_retry_after_with_the_time_elapsed_taken_off() {
        let c = DenyCache::default();
        c.insert("k", 1_000, denied(500, 5_000), c.generation());
        assert_eq!(c.lookup("k", 999).ok(), None, "before it was decided");
        assert_eq!(c.lookup("k", 1_000).ok(), Some(denied(500, 5_000)));
        assert_eq!(c.lookup("k", 1_200).ok(), Some(denied(300, 4_800)));
        assert_eq!(c.lookup("k", 1_499).ok(), Some(denied(1, 4_501)));
        assert_eq!(c.lookup("k", 1_500).ok(), None, "admissible again");
        c.invalidate("k");
        assert_eq!(c.lookup("k", 1_200).ok(), None);
    }

    #[test]
    fn a_denial_sent_before_an_invalidation_is_not_cached() {
        let c = DenyCache::default();
        // A check reads the generation and goes to Redis; meanwhile a settle of the same key
        // (or of any key) invalidates: the check's answer may predate the refund.
        let sent = c.lookup("k", 1_000).unwrap_err();
        c.invalidate("k");
        c.insert("k", 1_000, denied(500, 5_000), sent);
        assert_eq!(c.lookup("k", 1_000).ok(), None);
        // A check sent after it is cached as usual.
        c.insert("k", 1_000, denied(500, 5_000), c.generation());
        assert_eq!(c.lookup("k", 1_000).ok(), Some(denied(500, 5_000)));
    }

    #[test]
    fn bounded() {
        let c = DenyCache::default();
        for i in 0..CAPACITY + 10 {
            c.insert(&format!("k{i}"), 1, denied(10, 10), c.generation());
        }
        assert_eq!(c.state.lock().entries.len(), CAPACITY);
        // A second later every entry has expired: swept, room again.
        c.insert("late", 2_000_000, denied(10, 10), c.generation());
        assert_eq!(c.state.lock().entries.len(), 1);
    }
}
