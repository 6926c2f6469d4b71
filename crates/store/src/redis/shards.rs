//! The recent outcomes of a cluster's calls per shard (master node), and its probes, for
//! readiness.
//!
//! [`health`] counts a store's calls as a whole: one dead master of three,
//! with traffic spread evenly, fails a third of the calls, but a shard that holds few of the
//! keys in use can fail every one of its calls while the store as a whole stays under the
//! threshold. So each decision call on a cluster is also counted under the master of its
//! slot, as the client's slot map last named it ([`topology`]). A shard is not ready when
//! any of these holds (checked in this order, the first one named):
//! - at least [`MIN_CALLS`](super::health::MIN_CALLS) calls in the last
//!   [`WINDOW_SECONDS`](super::health::WINDOW_SECONDS) and at least
//!   [`MAX_FAILED_PERCENT`](super::health::MAX_FAILED_PERCENT) % of them failed;
//! - its last [`FAILED_IN_A_ROW`] calls (or more) failed, with no success since (so 4 of 4
//!   failed calls are not ready at once; issue 30: they needed 20 calls first), and, on a
//!   shard with [`MIN_CALLS`](super::health::MIN_CALLS) calls or more in the window, for at
//!   least [`FAILING_IN_A_ROW_FOR`] (a stall's burst of timeouts is followed by successes);
//! - its last probe failed, with no call or probe succeeding since. Traffic alone cannot
//!   see a master that gets no calls (an idle or freshly started process reported a dead
//!   master ready), so the store probes every master of the slot map that had no call during
//!   the last [`SHARD_PROBE_INTERVAL`](super::SHARD_PROBE_INTERVAL) (see
//!   `shard_probe.rs`).
//!
//! Only the masters of the current slot map (or every shard, before a map was read) decide
//! readiness: a master replaced by its promoted replica keeps its failures in the report but
//! serves no slot, so it fails no decision any more. Bounded: one ten-bucket ring and two
//! counters per master, at most [`topology::MAX_NODES`] of them (the rest counted under
//! `"other"`).

use floodgate_core::Timestamp;

use super::health::{self, Health};
use super::topology::{self, SlotRange};

/// The name counted for a slot that no master serves in the client's slot map (deleted
/// slots, or no map read yet).
pub const NO_MASTER: &str = "none";

/// A shard whose last this many calls (or more) all failed is not ready, however few calls
/// it had.
pub const FAILED_IN_A_ROW: u64 = 3;

/// A shard with at least [`MIN_CALLS`](super::health::MIN_CALLS) calls in the window is not
/// ready from [`FAILED_IN_A_ROW`] failures only once they have lasted this long (µs) with no
/// success: one stall on a loaded host times out every call in flight at once, and the next
/// calls succeed (a new user's run, `timeout_ms = 50`, 2,000 checks/s on two cores: 2.4 % of
/// the calls timed out in bursts and `/readyz` said 503 in 5 of 88 polls, issue 30). A dead
/// master's calls go on failing: not ready 250 ms after its first failure.
pub const FAILING_IN_A_ROW_FOR: u64 = 250_000;

/// Longest text kept of a failed probe's error (bytes; longer is cut at a character
/// boundary): what `/readyz` shows of it.
pub const MAX_PROBE_ERROR_BYTES: usize = 200;

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
    /// `false` when the shard is not ready (see the [module docs](self)).
    pub ready: bool,
    /// Why it is not ready (`12 of the 40 calls of the last 10 s failed`, `its last 4 calls
    /// failed`, `its probe (EXISTS on slot 2) failed: ...`); `None` when ready.
    pub reason: Option<String>,
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

/// One master's outcomes.
#[derive(Debug, Default)]
struct Node {
    /// Decision calls per second over the window (store clock).
    health: Health,
    /// Calls that failed since the last success (of a call or a probe).
    failed_in_a_row: u64,
    /// When the first of them ended (store clock, µs).
    failing_since: Timestamp,
    /// The last probe failed (why), and nothing succeeded since.
    probe_failed: Option<String>,
    /// What the last failed call's error said (at most [`MAX_PROBE_ERROR_BYTES`]), while
    /// nothing succeeded since: `CLUSTERDOWN`, a refused connection, a timeout.
    last_error: Option<String>,
    /// A call ended since the probe task last looked ([`Shards::idle_masters`]).
    called: bool,
}

#[derive(Default)]
struct State {
    /// [`topology::generation`] when `map` was read.
    generation: Option<u64>,
    map: Vec<SlotRange>,
    per_node: Vec<(String, Node)>,
}

impl State {
    /// Reads the slot map again when any node's reply changed since.
    fn refresh(&mut self, seeds: &[String]) {
        let generation = topology::generation();
        if self.generation != Some(generation) {
            self.map = topology::slot_map(seeds);
            self.generation = Some(generation);
        }
    }
}

/// The entry of `node` (or of `"other"` past [`topology::MAX_NODES`]); allocates only for a
/// new one. A list: a cluster has a few masters, looked up by a short scan.
fn node_entry<'a>(per_node: &'a mut Vec<(String, Node)>, node: &str) -> &'a mut Node {
    let name = if per_node.len() < topology::MAX_NODES || per_node.iter().any(|(n, _)| n == node) {
        node
    } else {
        "other"
    };
    let i = match per_node.iter().position(|(n, _)| n == name) {
        Some(i) => i,
        None => {
            per_node.push((name.to_string(), Node::default()));
            per_node.len() - 1
        }
    };
    &mut per_node[i].1
}

/// A master to probe: its address and its slot ranges (inclusive).
pub(super) type IdleMaster = (String, Vec<(u16, u16)>);

/// Calls, failures and probes per master over the last seconds.
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

    /// Counts one call on `slot` that ended at `now` (the tests' short form).
    #[cfg(test)]
    fn record(&self, now: Timestamp, slot: u16, ok: bool) {
        self.record_outcome(now, slot, if ok { Ok(()) } else { Err(None) });
    }

    /// Counts one call on `slot` that ended at `now`: succeeded, or failed (with the error's
    /// text when known).
    fn record_outcome(&self, now: Timestamp, slot: u16, outcome: Result<(), Option<&str>>) {
        let ok = outcome.is_ok();
        let mut state = self.state.lock();
        state.refresh(&self.seeds);
        let State { map, per_node, .. } = &mut *state;
        let name = topology::node_of(map, slot).unwrap_or(NO_MASTER);
        let node = node_entry(per_node, name);
        node.health.record(now, ok);
        node.called = true;
        match outcome {
            Ok(()) => {
                node.failed_in_a_row = 0;
                node.probe_failed = None;
                node.last_error = None;
            }
            Err(error) => {
                if node.failed_in_a_row == 0 {
                    node.failing_since = now;
                }
                node.failed_in_a_row += 1;
                if let Some(error) = error {
                    node.last_error = Some(bounded(error.to_string()));
                }
            }
        }
    }

    /// Counts one call of a batch under the master of each of its slots: succeeded, or failed
    /// with `error`.
    pub(super) fn record_slots(
        &self,
        now: Timestamp,
        slots: impl Iterator<Item = u16>,
        error: Option<&crate::StoreError>,
    ) {
        let text = error.map(ToString::to_string);
        for slot in slots {
            let outcome = match &text {
                None => Ok(()),
                Some(text) => Err(Some(text.as_str())),
            };
            self.record_outcome(now, slot, outcome);
        }
    }

    /// The master of `slot` in the slot map last read, if one serves it.
    pub(super) fn node_of(&self, slot: u16) -> Option<String> {
        let state = self.state.lock();
        topology::node_of(&state.map, slot).map(str::to_string)
    }

    /// The masters of the slot map (address and slot ranges) that had no call since the
    /// last time this was asked, for the probe; `None` before a slot map was read.
    pub(super) fn idle_masters(&self) -> Option<Vec<IdleMaster>> {
        let mut state = self.state.lock();
        state.refresh(&self.seeds);
        if state.map.is_empty() {
            return None;
        }
        let mut idle: Vec<IdleMaster> = Vec::new();
        for range in &state.map {
            let called = state
                .per_node
                .iter()
                .any(|(n, node)| *n == range.node && node.called);
            if called {
                continue;
            }
            match idle.iter_mut().find(|(n, _)| *n == range.node) {
                Some((_, ranges)) => ranges.push((range.start, range.end)),
                None => idle.push((range.node.clone(), vec![(range.start, range.end)])),
            }
        }
        for (_, node) in &mut state.per_node {
            node.called = false;
        }
        Some(idle)
    }

    /// A probe of `node` (see [`shard_probe`](super::shard_probe)) succeeded (`Ok`) or
    /// failed (why).
    pub(super) fn record_probe(&self, node: &str, outcome: Result<(), String>) {
        let mut state = self.state.lock();
        let node = node_entry(&mut state.per_node, node);
        match outcome {
            Ok(()) => {
                node.failed_in_a_row = 0;
                node.probe_failed = None;
            }
            Err(why) => node.probe_failed = Some(bounded(why)),
        }
    }

    /// Every shard that had calls in the window ending at `now` or a failed probe, and every
    /// master of the slot map, sorted by node.
    pub(crate) fn report(&self, now: Timestamp) -> Vec<ShardReport> {
        let mut state = self.state.lock();
        state.refresh(&self.seeds);
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
                        reason: None,
                    });
                    out.len() - 1
                }
            }
        };
        let mut slots: Vec<(usize, (u16, u16))> = Vec::new();
        // The map is sorted by slot: its gaps are the slots no master serves.
        let mut next = 0u32;
        let mut gaps = false;
        for range in &state.map {
            if u32::from(range.start) > next {
                let gap = (u16::try_from(next).unwrap_or(0), range.start - 1);
                gaps = true;
                slots.push((entry(NO_MASTER), gap));
            }
            slots.push((entry(&range.node), (range.start, range.end)));
            next = u32::from(range.end) + 1;
        }
        if !state.map.is_empty() && next < 16_384 {
            gaps = true;
            slots.push((entry(NO_MASTER), (u16::try_from(next).unwrap_or(0), 16_383)));
        }
        let mut counts = Vec::new();
        for (name, node) in &state.per_node {
            let (failed, calls) = node.health.recent(now);
            // A node that serves no slot of the map (a master replaced by its replica)
            // decides nothing: shown while it has calls in the window, never not ready.
            let decides = state.map.is_empty()
                || (name == NO_MASTER && gaps)
                || state.map.iter().any(|r| r.node == *name);
            let reason = decides.then(|| not_ready(node, now)).flatten();
            if calls > 0 || reason.is_some() {
                counts.push((entry(name), failed, calls, reason));
            }
        }
        for (i, range) in slots {
            out[i].slots.push(range);
        }
        for (i, failed, calls, reason) in counts {
            out[i].failed = failed;
            out[i].calls = calls;
            out[i].ready = reason.is_none();
            out[i].reason = reason;
        }
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
    }
}

/// `text` cut to at most [`MAX_PROBE_ERROR_BYTES`] (at a character's edge).
fn bounded(mut text: String) -> String {
    if text.len() > MAX_PROBE_ERROR_BYTES {
        let mut end = MAX_PROBE_ERROR_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Why `node` is not ready at `now` (see the [module docs](self)), or `None`.
fn not_ready(node: &Node, now: Timestamp) -> Option<String> {
    let last = |why: String| match &node.last_error {
        Some(error) => format!("{why}; the last: {error}"),
        None => why,
    };
    if let Some((failed, calls)) = node.health.failing(now) {
        return Some(last(format!(
            "{failed} of the {calls} calls of the last {} s failed (not ready from {} %)",
            health::WINDOW_SECONDS,
            health::MAX_FAILED_PERCENT
        )));
    }
    let (_, calls) = node.health.recent(now);
    if node.failed_in_a_row >= FAILED_IN_A_ROW
        && (calls < health::MIN_CALLS
            || now.saturating_sub(node.failing_since) >= FAILING_IN_A_ROW_FOR)
    {
        return Some(last(format!(
            "its last {} calls failed (not ready from {FAILED_IN_A_ROW} in a row)",
            node.failed_in_a_row
        )));
    }
    node.probe_failed
        .as_ref()
        .map(|why| format!("its probe failed: {why}"))
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
        // Ten seconds later the window has passed, but nothing succeeded since: still not
        // ready (its last 30 calls failed) until a call or a probe succeeds.
        let later = shards.report(T0 + 11_000_000);
        assert_eq!((later[0].calls, later[0].ready), (0, false));
        shards.record_probe(NO_MASTER, Ok(()));
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
            reason: None,
        };
        assert_eq!(r.slot_text(), "0-5460, 16383");
    }

    /// Issue 30: a shard whose 4 calls of 4 failed was "up" (20 calls were needed before the
    /// error rate counted). Three in a row are enough now; a success clears them.
    #[test]
    fn the_last_calls_all_failing_is_not_ready_at_once() {
        let shards = Shards::new(&["redis://192.0.2.78:1".to_string()]);
        shards.record(T0, 7, true);
        shards.record(T0, 7, false);
        shards.record(T0, 7, false);
        assert!(shards.report(T0)[0].ready, "2 failed in a row");
        shards.record(T0, 7, false);
        shards.record(T0, 7, false);
        let report = &shards.report(T0)[0];
        assert_eq!((report.failed, report.calls), (4, 5));
        assert!(!report.ready);
        assert_eq!(
            report.reason.as_deref(),
            Some("its last 4 calls failed (not ready from 3 in a row)")
        );
        shards.record(T0, 7, true);
        assert!(shards.report(T0)[0].ready);
    }

    /// A busy shard's burst of timeouts (one stall times out every call in flight) is no
    /// outage when the next calls succeed; failures that go on for 250 ms are.
    #[test]
    fn a_busy_shard_is_not_ready_from_failures_in_a_row_only_once_they_last() {
        let shards = Shards::new(&["redis://192.0.2.80:1".to_string()]);
        for i in 0..100 {
            shards.record(T0 + i * 1_000, 7, true);
        }
        let t = T0 + 100_000;
        for i in 0..8 {
            shards.record(t + i, 7, false);
        }
        assert!(shards.report(t + 8)[0].ready, "a stall's 8 timeouts");
        assert!(shards.report(t + 249_999)[0].ready);
        let report = &shards.report(t + 250_000)[0];
        assert!(!report.ready);
        assert_eq!(
            report.reason.as_deref(),
            Some("its last 8 calls failed (not ready from 3 in a row)")
        );
        shards.record(t + 250_000, 7, true);
        assert!(shards.report(t + 250_000)[0].ready);
    }

    /// A failed probe makes a shard without calls not ready until a probe or a call on it
    /// succeeds; the error's text is bounded.
    #[test]
    fn a_failed_probe_is_not_ready_until_something_succeeds() {
        let shards = Shards::new(&["redis://192.0.2.79:1".to_string()]);
        assert!(shards.report(T0).is_empty());
        shards.record_probe(NO_MASTER, Err("é".repeat(MAX_PROBE_ERROR_BYTES)));
        let report = &shards.report(T0)[0];
        assert!(!report.ready);
        assert_eq!((report.failed, report.calls), (0, 0));
        let reason = report.reason.as_deref().unwrap_or_default();
        assert!(reason.starts_with("its probe failed: é"), "{reason}");
        assert!(reason.len() <= MAX_PROBE_ERROR_BYTES + "its probe failed: ".len());
        shards.record_probe(NO_MASTER, Ok(()));
        assert!(shards.report(T0).is_empty());
        shards.record_probe(NO_MASTER, Err("refused".into()));
        shards.record(T0, 9, true);
        assert!(shards.report(T0)[0].ready, "a call succeeded since");
    }

    /// Idle masters are those without a call since the last look (none before a map).
    #[test]
    fn no_map_no_idle_masters() {
        let shards = Shards::new(&["redis://192.0.2.80:1".to_string()]);
        assert_eq!(shards.idle_masters(), None);
    }
}
