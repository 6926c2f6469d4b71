//! A circuit breaker per cluster master.
//!
//! One breaker for a whole cluster reads one dead master as an outage of all: with a master
//! of three dead (no replica, `cluster-require-full-coverage no`), its slots' calls failed
//! while the client's slot map was refreshed, no call succeeded for the breaker's window, the
//! breaker opened, and its half-open probe was as likely to be a call to the dead master's
//! slots as not: calls to the two live masters failed fast for seconds at a time (a new
//! user's review, issue 30: 46 of 266 503s on live masters; with full coverage off 1,401 of
//! 1,526 503s were `circuit_open`). So on a cluster a decision call goes through the breaker
//! of each master its slots belong to (as the client's slot map last named it, see
//! [`Shards::node_of`](super::shards::Shards::node_of); slots without a master share
//! [`NO_MASTER`]'s): each opens by the rule of `breaker.rs` from its own calls only, and its
//! recovery watch probes a key of its own last failed call. Calls that name no key (the
//! announcement, `PING`) keep the store's breaker.
//!
//! Bounded: at most [`topology::MAX_NODES`] breakers, the rest share `"other"`'s. A master
//! replaced by its promoted replica keeps its breaker, which gets no more calls (its watch
//! probes a key that now lives on the replica, which answers, and closes it).

use std::sync::Arc;

use floodgate_core::Micros;
use smallvec::SmallVec;

use super::breaker::Breaker;
use super::reply::slot_number;
use super::shards::{Shards, NO_MASTER};
use super::topology;

/// A call's breakers with one key of the call for each (the probe of its recovery watch).
pub(super) type Route<'k> = SmallVec<[(Arc<Breaker>, Option<&'k str>); 2]>;

/// The breakers of a cluster's masters, made on a master's first call.
pub(crate) struct ShardBreakers {
    threshold: u32,
    cool_down: Micros,
    window: Micros,
    per_node: parking_lot::Mutex<Vec<Arc<Breaker>>>,
}

impl ShardBreakers {
    /// Breakers of `breaker.rs`' rule with these settings.
    pub(crate) fn new(threshold: u32, cool_down: Micros, window: Micros) -> Self {
        Self {
            threshold,
            cool_down,
            window,
            per_node: parking_lot::Mutex::default(),
        }
    }

    /// The breaker of `node` (of `"other"` past [`topology::MAX_NODES`]).
    fn of(&self, node: &str) -> Arc<Breaker> {
        let mut per_node = self.per_node.lock();
        if let Some(b) = per_node.iter().find(|b| b.node() == Some(node)) {
            return Arc::clone(b);
        }
        let name = if per_node.len() < topology::MAX_NODES {
            node
        } else {
            "other"
        };
        if let Some(b) = per_node.iter().find(|b| b.node() == Some(name)) {
            return Arc::clone(b);
        }
        let b = Arc::new(Breaker::for_node(
            self.threshold,
            self.cool_down,
            self.window,
            Some(name.to_string()),
        ));
        per_node.push(Arc::clone(&b));
        b
    }

    /// The breakers of the masters of `keys`' slots, each once, with its first key.
    pub(super) fn route<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
        shards: Option<&Shards>,
    ) -> Route<'k> {
        let mut route = Route::new();
        for key in keys {
            let node = shards.and_then(|s| s.node_of(slot_number(key.as_bytes())));
            let breaker = self.of(node.as_deref().unwrap_or(NO_MASTER));
            if !route.iter().any(|(b, _)| Arc::ptr_eq(b, &breaker)) {
                route.push((breaker, Some(key)));
            }
        }
        route
    }

    /// The first open breaker's master and its last failure, if one is open.
    pub(crate) fn first_open(&self) -> Option<(String, Option<String>)> {
        self.per_node
            .lock()
            .iter()
            .find(|b| b.is_open())
            .map(|b| (b.node().unwrap_or_default().to_string(), b.cause()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_breaker_per_master_and_the_rest_share_other() {
        let breakers = ShardBreakers::new(1, 1_000, 0);
        let a = breakers.of("10.0.0.1:7000");
        assert!(Arc::ptr_eq(&a, &breakers.of("10.0.0.1:7000")));
        assert!(!Arc::ptr_eq(&a, &breakers.of("10.0.0.2:7000")));
        for i in 2..topology::MAX_NODES {
            breakers.of(&format!("10.0.1.{i}:7000"));
        }
        let other = breakers.of("10.9.9.9:7000");
        assert_eq!(other.node(), Some("other"));
        assert!(Arc::ptr_eq(&other, &breakers.of("10.9.9.8:7000")));
        assert_eq!(breakers.per_node.lock().len(), topology::MAX_NODES + 1);
    }

    #[test]
    fn a_route_names_each_breaker_once_with_its_first_key() {
        let breakers = ShardBreakers::new(1, 1_000, 0);
        // No slot map: every key is on `none`'s breaker.
        let route = breakers.route(["fg:a", "fg:b"], None);
        assert_eq!(route.len(), 1);
        assert_eq!(route[0].0.node(), Some(NO_MASTER));
        assert_eq!(route[0].1, Some("fg:a"));
    }
}
