//! The deny cache ([`RedisStoreConfig::deny_cache`](super::RedisStoreConfig)): when Redis
//! denies a one-item check of cost 1 with `retry_after = T`, nobody can be admitted on that key
//! before `T` (every admission needs at least one unit, and a denied key has none), so its
//! state cannot change before then by a check: only by an admin reset, a settle (a refund, a
//! lease's unused rest, a cancelled reservation; or a charge above the reservation), a
//! reservation granted for a later time (it moves `T` later) or a rule change (a new policy is
//! a new key name, so a new entry). Until `T`, a cost-1 check of that key is answered here
//! without a round trip: denied, `remaining` as Redis said (0), `retry_after` and
//! `reset_after` shortened by the time elapsed (both are fixed points in time while the state
//! does not change).
//!
//! # Exact across processes
//! Every script that changes a key in one of those ways (`reset.lua`, `settle.lua`,
//! `reserve.lua`) `PUBLISH`es the key's name on [`channel`] (`<prefix>deny-cache`) in the same
//! atomic step as its write, whichever process (and whether or not that process has the cache
//! on). Every store with the cache holds a subscription to that channel (the `invalidations` module) and
//! drops the named key when the message arrives; a reset, settle or reservation made through
//! this store also drops its keys here, before its write and again after it. A denial from a
//! check that was already on its way to Redis at an invalidation is not cached (the
//! invalidation count it read has moved), so a denial Redis decided before a write never
//! outlives the write's message.
//!
//! The cache answers only while its subscription is known to be live: it is off (every check
//! goes to Redis, nothing is cached) until the `SUBSCRIBE` is confirmed, and goes off, dropping
//! every entry, as soon as the subscription fails: the connection closes (Redis restarted, a
//! client-output-buffer limit, the network), or a `PING` on it goes unanswered for
//! `invalidations::PING_INTERVAL` + the store's timeout, or (Sentinel) the sentinels name another master.
//! It is on again, empty, once a new subscription is confirmed: a message missed while it was
//! down cannot matter, since nothing cached before survives. Redis Cluster: off (a
//! cross-slot refund gives units back from several shards; not built).
//!
//! What remains: a decision made here while another process's write is in flight (the write
//! done in Redis, its message not yet read here, one network hop, the same hop as the writer's
//! own reply) is the denial; without the cache the same check might have reached Redis just
//! after the write. That is a check concurrent with the write, which either order answers
//! correctly. Not seen at all: a `FLUSHALL`, `FLUSHDB` or `DEL` sent to Redis by hand, and a key
//! evicted under a `maxmemory-policy` that evicts (the startup check warns of that policy):
//! a cached denial then holds until its `retry_after`, as Redis' own state said.
//!
//! Time: with a caller-supplied `now` the entry is on that clock and exact. With Redis' clock,
//! the entry is kept on the store's clock from the moment the call was *sent*, before Redis
//! decided: it expires up to one round trip early (never late), and the `Retry-After` it gives
//! is up to one round trip short.
//!
//! Bounded: at most [`RedisStoreConfig::deny_cache_keys`](super::RedisStoreConfig::deny_cache_keys)
//! keys, [`CAPACITY`] by default and at most (when full, expired entries are dropped, at most
//! once a second; a new denial that finds no room is not cached), each at most
//! [`ENTRY_BYTES`].

use std::collections::HashMap;

use floodgate_core::{Decision, Timestamp};
use parking_lot::Mutex;

pub use super::config::{DENY_CACHE_ENTRY_BYTES as ENTRY_BYTES, DENY_CACHE_KEYS as CAPACITY};

/// The channel the scripts publish invalidations on: `<prefix>deny-cache` (each message is one
/// key's name). `reset.lua`, `settle.lua` and `reserve.lua` derive the same name from the key
/// (the key's name without its [`HASH_CHARS`](super::keys::HASH_CHARS) characters).
pub fn channel(prefix: &str) -> String {
    format!("{prefix}deny-cache")
}

#[derive(Debug)]
pub(crate) struct DenyCache {
    /// Most keys held (1 ..= [`CAPACITY`]).
    capacity: usize,
    state: Mutex<State>,
    /// Invalidations received on the subscription (every process's resets, settles and
    /// reservations, this one's included).
    received: std::sync::atomic::AtomicU64,
    /// Subscriptions confirmed so far (each one turned the cache on, empty).
    subscriptions: std::sync::atomic::AtomicU64,
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
    /// Whether the subscription to the invalidations is live: off, nothing is answered or
    /// cached (see the module docs).
    live: bool,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Timestamp,
    until: Timestamp,
    decision: Decision,
}

impl Default for DenyCache {
    fn default() -> Self {
        Self::new(CAPACITY)
    }
}

impl DenyCache {
    /// An empty cache (off until [`set_live`](Self::set_live)) of at most `capacity` keys
    /// (clamped to 1 ..= [`CAPACITY`]).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.clamp(1, CAPACITY),
            state: Mutex::default(),
            received: Default::default(),
            subscriptions: Default::default(),
        }
    }

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
        if !state.live || now < state.high_water {
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
        if !state.live || at < state.high_water || generation != state.generation {
            // Decided at a stale `now` (see `high_water`), or before an invalidation.
            return;
        }
        if state.entries.len() >= self.capacity && !state.entries.contains_key(name) {
            if at.saturating_sub(state.swept_at) < 1_000_000 {
                return;
            }
            state.swept_at = at;
            state.entries.retain(|_, e| e.until > at);
            if state.entries.len() >= self.capacity {
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

    /// The subscription is confirmed (`true`) or failed (`false`): either way every entry is
    /// dropped and no check already on its way to Redis caches its answer; the cache answers
    /// only while live.
    pub(crate) fn set_live(&self, live: bool) {
        let mut state = self.state.lock();
        state.entries.clear();
        state.generation += 1;
        state.live = live;
        if live {
            self.subscriptions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The subscriptions confirmed so far.
    pub(crate) fn subscriptions(&self) -> u64 {
        self.subscriptions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An invalidation of `name` received on the subscription.
    pub(crate) fn invalidate_received(&self, name: &str) {
        self.invalidate(name);
        self.received
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::counter!("floodgate_store_deny_cache_invalidations_total").increment(1);
    }

    /// The invalidations received so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the cache answers now (its subscription is live).
    pub(crate) fn is_live(&self) -> bool {
        self.state.lock().live
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

    fn live() -> DenyCache {
        let c = DenyCache::default();
        c.set_live(true);
        c
    }

    #[test]
    fn off_until_subscribed_and_emptied_when_the_subscription_fails() {
        let c = DenyCache::default();
        c.insert("k", 1_000, denied(500, 5_000), c.generation());
        assert_eq!(
            c.lookup("k", 1_000).ok(),
            None,
            "not subscribed yet: nothing cached"
        );
        c.set_live(true);
        let sent = c.lookup("k", 1_000).unwrap_err();
        c.insert("k", 1_000, denied(500, 5_000), sent);
        assert_eq!(c.lookup("k", 1_100).ok(), Some(denied(400, 4_900)));
        // A check on its way when the subscription fails caches nothing, even once it is
        // back: an invalidation may have been missed in between.
        let in_flight = c.lookup("other", 1_100).unwrap_err();
        c.set_live(false);
        assert_eq!(c.lookup("k", 1_100).ok(), None, "down: every entry dropped");
        c.set_live(true);
        assert_eq!(c.lookup("k", 1_100).ok(), None, "up again, empty");
        c.insert("other", 1_100, denied(500, 5_000), in_flight);
        assert_eq!(c.lookup("other", 1_100).ok(), None);
    }

    #[test]
    fn answers_until_retry_after_with_the_time_elapsed_taken_off() {
        let c = live();
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
        let c = live();
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
        let c = live();
        for i in 0..CAPACITY + 10 {
            c.insert(&format!("k{i}"), 1, denied(10, 10), c.generation());
        }
        assert_eq!(c.state.lock().entries.len(), CAPACITY);
        // A second later every entry has expired: swept, room again.
        c.insert("late", 2_000_000, denied(10, 10), c.generation());
        assert_eq!(c.state.lock().entries.len(), 1);
        // A configured bound, clamped to 1 ..= CAPACITY.
        let small = DenyCache::new(5);
        small.set_live(true);
        for i in 0..10 {
            small.insert(&format!("k{i}"), 1, denied(10, 10), small.generation());
        }
        assert_eq!(small.state.lock().entries.len(), 5);
        assert_eq!(DenyCache::new(0).capacity, 1);
        assert_eq!(DenyCache::new(usize::MAX).capacity, CAPACITY);
    }
}
