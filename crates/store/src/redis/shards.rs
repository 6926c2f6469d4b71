//! The recent error rate of a cluster's calls per shard (master node), for readiness.
//!
//! [`health`](super::health) counts a store's calls as a whole: one dead master of three,
//! with traffic spread evenly, fails a third of the calls, but a shard that holds few of the
//! keys in use can fail every one of its calls while the store as a whole stays under the
//! threshold. So each decision call on a cluster is also counted under the master of its
//! slot, as the client's slot map last named it ([`topology`]), and
//! readiness asks every shard the same question as the store: at least
//! [`MIN_CALLS`](super::health::MIN_CALLS) calls in the last
//! [`WINDOW_SECONDS`](super::health::WINDOW_SECONDS) and at least
//! [`MAX_FAILED_PERCENT`](super::health::MAX_FAILED_PERCENT) % of them failed. Bounded: one
//! ten-bucket ring per master, at most [`topology::MAX_NODES`]
//! of them (the rest counted under `"other"`).

use std::collections::HashMap;

use floodgate_core::Timestamp;

use super::health::Health;
use super::topology::{self, SlotRange};

/// The name counted for a slot that no master serves in the client's slot map (deleted
/// slots, or no map read yet).
pub const NO_MASTER: &str = "none";

/// One shard's recent calls, as readiness reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardReport {
    /// The master's address (`ip:port`), or [`NO_MASTER`].
    pub node: String,
    /// Its slot ranges (inclusive), as the client's slot map last named them.
    pub slots: Vec<(u16, u16)>,
    /// Calls in the last [`WINDOW_SECONDS`](super::health::WINDOW_SECONDS).
    pub calls: u64,
    /// Of which failed.
    pub failed: u64,
    /// `false` when the failures make the shard not ready (see the [module docs](self)).
    pub ready: bool,
}

impl ShardReport {
    /// `0-5460, 10923-16383`, or `-` without ranges.
    pub fn slot_text(&self) -> String {
        if self.slots.is_empty() {
            return "-".into();
        }
        let ranges: Vec<String> = self
            .slots
            .iter()
            .map(|(s, e)| {
                if s == e {
                    s.to_string()
                } else {
                    format!("{s}-{e}")
                }
            })
            .collect();
        ranges.join(", ")
    }
}

#[derive(Default)]
struct State {
    /// [`topology::generation`] when `map` was read.
    generation: Option<u64>,
    map: Vec<SlotRange>,
    per_node: HashMap<String, Health>,
}

/// Calls and failures per master over the last seconds.
pub(crate) struct Shards {
    /// The configured nodes' `host:port`, which pick this cluster's slot map.
    seeds: Vec<String>,
    state: parking_lot::Mutex<State>,
}

impl Shards {
    pub(crate) fn new(seed_urls: &[String]) -> Self {
        Self {
            seeds: seed_urls
                .iter()
                .filter_map(|u| topology::url_address(u))
                .collect(),
            state: parking_lot::Mutex::default(),
        }
    }

    /// Counts one call on `slot` that ended at `now`.
    pub(crate) fn record(&self, now: Timestamp, slot: u16, ok: bool) {
        let generation = topology::generation();
        let mut state = self.state.lock();
        if state.generation != Some(generation) {
            state.map = topology::slot_map(&self.seeds);
            state.generation = Some(generation);
        }
        let State { map, per_node, .. } = &mut *state;
        let node = topology::node_of(map, slot).unwrap_or(NO_MASTER);
        if let Some(health) = per_node.get(node) {
            health.record(now, ok);
            return;
        }
        let name = if per_node.len() < topology::MAX_NODES {
            node
        } else {
            "other"
        };
        per_node
            .entry(name.to_string())
            .or_default()
            .record(now, ok);
    }

    /// Counts one call of a batch under the master of each of its slots.
    pub(super) fn record_slots(&self, now: Timestamp, slots: impl Iterator<Item = u16>, ok: bool) {
        for slot in slots {
            self.record(now, slot, ok);
        }
    }

    /// The master of `slot` in the slot map last read, if one serves it.
    pub(super) fn node_of(&self, slot: u16) -> Option<String> {
        let state = self.state.lock();
        topology::node_of(&state.map, slot).map(str::to_string)
    }

    /// Every shard that had calls in the window ending at `now`, and every master of the
    /// slot map, sorted by node.
    pub(crate) fn report(&self, now: Timestamp) -> Vec<ShardReport> {
        let state = self.state.lock();
        let mut out: Vec<ShardReport> = Vec::new();
        let mut entry = |node: &str| -> usize {
            match out.iter().position(|r| r.node == node) {
                Some(i) => i,
                None => {
                    out.push(ShardReport {
                        node: node.to_string(),
                        slots: Vec::new(),
                        calls: 0,
                        failed: 0,
                        ready: true,
                    });
                    out.len() - 1
                }
            }
        };
        let mut slots: Vec<(usize, (u16, u16))> = Vec::new();
        // The map is sorted by slot: its gaps are the slots no master serves.
        let mut next = 0u32;
        for range in &state.map {
            if u32::from(range.start) > next {
                let gap = (u16::try_from(next).unwrap_or(0), range.start - 1);
                slots.push((entry(NO_MASTER), gap));
            }
            slots.push((entry(&range.node), (range.start, range.end)));
            next = u32::from(range.end) + 1;
        }
        if !state.map.is_empty() && next < 16_384 {
            slots.push((entry(NO_MASTER), (u16::try_from(next).unwrap_or(0), 16_383)));
        }
        let mut counts = Vec::new();
        for (node, health) in &state.per_node {
            let (failed, calls) = health.recent(now);
            if calls > 0 {
                counts.push((entry(node), failed, calls, health.failing(now).is_none()));
            }
        }
        for (i, range) in slots {
            out[i].slots.push(range);
        }
        for (i, failed, calls, ready) in counts {
            out[i].failed = failed;
            out[i].calls = calls;
            out[i].ready = ready;
        }
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = 1_700_000_000_000_000;

    #[test]
    fn a_shard_with_failing_calls_is_not_ready_and_the_others_are() {
        // No slot map read (no cluster in this test): every slot counts under NO_MASTER.
        let shards = Shards::new(&["redis://192.0.2.77:1".to_string()]);
        for i in 0..30 {
            shards.record(T0 + i, 100, false);
        }
        let report = shards.report(T0 + 1_000_000);
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].node, NO_MASTER);
        assert_eq!((report[0].failed, report[0].calls), (30, 30));
        assert!(!report[0].ready);
        assert_eq!(report[0].slot_text(), "-");
        // Ten seconds later the window has passed: nothing to report.
        assert!(shards.report(T0 + 11_000_000).is_empty());
    }

    #[test]
    fn slot_text_joins_ranges() {
        let r = ShardReport {
            node: "n".into(),
            slots: vec![(0, 5460), (16383, 16383)],
            calls: 0,
            failed: 0,
            ready: true,
        };
        assert_eq!(r.slot_text(), "0-5460, 16383");
    }
}
