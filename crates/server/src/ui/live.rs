//! The live view's data: what every rule decided per second over the last minutes.
//!
//! The counts come from the one place that counts decisions: the
//! `floodgate_decisions_total{rule, outcome}` series `floodgate_tower::RateLimiter` records.
//! Once a second [`sample`] reads them from the Prometheus handle (the `/metrics` text) and keeps
//! the change since the previous second in a ring of [`WINDOW_SECONDS`] seconds per rule in
//! force, so memory is bounded by the rules, never by the traffic. `GET /v1/ui/live` answers
//! [`Live::to_json`].
//!
//! The outcomes are grouped as the page shows them ([`GROUPS`]): `admitted` (allowed),
//! `denied` (denied, store_full, cost_exceeds_capacity, invalid_cost), `shadow_allowed` and
//! `shadow_denied` (what a shadow rule would have admitted and denied: the `/metrics` series of
//! the same names) and `error` (error_open, error_closed). A further view (leases, say) adds a
//! [`Group`] to [`GROUPS`]; the rings, the totals and the document follow.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::denied_keys::DeniedKeys;

/// Seconds of history kept per rule (5 minutes).
const WINDOW_SECONDS: usize = 300;

/// A group of decisions the live view shows: its member name in `/v1/ui/live`'s `per_second`
/// and `totals`, and the `outcome` labels of `floodgate_decisions_total` it sums.
#[derive(Debug)]
pub(crate) struct Group {
    /// The member name in `per_second` and `totals`.
    pub(crate) name: &'static str,
    /// The `outcome` label values counted in it.
    pub(crate) outcomes: &'static [&'static str],
}

/// The groups the page shows, in order.
pub(crate) const GROUPS: [Group; 5] = [
    Group {
        name: "admitted",
        outcomes: &["allowed"],
    },
    Group {
        name: "denied",
        outcomes: &[
            "denied",
            "store_full",
            "cost_exceeds_capacity",
            "invalid_cost",
        ],
    },
    Group {
        name: "shadow_allowed",
        outcomes: &["shadow_allowed"],
    },
    Group {
        name: "shadow_denied",
        outcomes: &["shadow_denied"],
    },
    Group {
        name: "error",
        outcomes: &["error_open", "error_closed"],
    },
];

/// One count per group of [`GROUPS`].
type Counts = [u64; GROUPS.len()];

/// The group of an `outcome` label, if it is shown.
fn group(outcome: &str) -> Option<usize> {
    GROUPS.iter().position(|g| g.outcomes.contains(&outcome))
}

/// The live view's state: the per-second rings and, when opted in, the busiest denied keys.
#[derive(Debug)]
pub(crate) struct Live {
    rings: Mutex<Rings>,
    /// The busiest denied keys, when opted in (keys can be personal data).
    pub(crate) denied_keys: Option<Arc<DeniedKeys>>,
}

#[derive(Debug, Default)]
struct Rings {
    /// Samples taken so far.
    samples: u64,
    /// The cumulative counts at the previous sample, per rule and group.
    previous: HashMap<String, Counts>,
    /// Per rule: one count per group per second, oldest first.
    seconds: HashMap<String, VecDeque<Counts>>,
}

impl Live {
    /// A live view; `denied_keys` turns the busiest-denied-keys panel on.
    pub(crate) fn new(denied_keys: Option<Arc<DeniedKeys>>) -> Self {
        Self {
            rings: Mutex::new(Rings::default()),
            denied_keys,
        }
    }

    /// Takes one sample: `metrics` is the Prometheus text, `rules` the names in force (rings of
    /// other rules are dropped). The first sample only sets the baseline.
    pub(crate) fn record(&self, metrics: &str, rules: &[&str]) {
        let totals = decision_totals(metrics);
        let mut r = self.rings.lock();
        let first = r.samples == 0;
        r.samples += 1;
        r.seconds.retain(|name, _| rules.contains(&name.as_str()));
        r.previous.retain(|name, _| rules.contains(&name.as_str()));
        for &rule in rules {
            let now = totals.get(rule).copied().unwrap_or_default();
            let before = r.previous.insert(rule.to_string(), now);
            let delta = match (first, before) {
                (false, Some(before)) => std::array::from_fn(|i| now[i].saturating_sub(before[i])),
                // A rule new since the last sample: everything it counted happened since.
                (false, None) => now,
                (true, _) => [0; GROUPS.len()],
            };
            let ring = r.seconds.entry(rule.to_string()).or_default();
            if ring.len() == WINDOW_SECONDS {
                ring.pop_front();
            }
            ring.push_back(delta);
        }
    }

    /// The document of `GET /v1/ui/live` without the store: `rules` as given (`(name, about)`),
    /// each `about` object extended with `per_second` (one array per group, a count per second,
    /// oldest first) and `totals` (their sums).
    pub(crate) fn to_json(&self, rules: &[(&str, Value)]) -> Value {
        let r = self.rings.lock();
        let rules: Vec<Value> = rules
            .iter()
            .map(|(name, about)| {
                let empty = VecDeque::new();
                let ring = r.seconds.get(*name).unwrap_or(&empty);
                let mut rule = about.clone();
                let mut per_second = serde_json::Map::new();
                let mut totals = serde_json::Map::new();
                for (g, group) in GROUPS.iter().enumerate() {
                    let series: Vec<u64> = ring.iter().map(|s| s[g]).collect();
                    totals.insert(group.name.into(), series.iter().sum::<u64>().into());
                    per_second.insert(group.name.into(), series.into());
                }
                rule["per_second"] = per_second.into();
                rule["totals"] = totals.into();
                rule
            })
            .collect();
        let denied_keys = self.denied_keys.as_ref().map(|d| {
            let (mut keys, total) = d.top();
            // Secret key components are never shown in clear (see `DeniedKeys::shown`).
            for entry in &mut keys {
                entry.key = d.shown(&entry.key);
            }
            json!({ "capacity": d.capacity(), "denials": total, "keys": keys })
        });
        json!({
            "interval_s": 1,
            "window_s": WINDOW_SECONDS,
            "samples": r.samples,
            "rules": rules,
            "denied_keys": denied_keys,
        })
    }
}

/// What [`sample`] reads once a second: the rules in force and the `/metrics` text (the
/// application state, `crate::state::AppState`; a trait so that this module does not import the
/// state that holds it).
pub(crate) trait Sampled: Send + Sync + 'static {
    /// The names of the rules in force.
    fn rule_names(&self) -> Vec<String>;
    /// The Prometheus text of `/metrics`.
    fn metrics_text(&self) -> String;
}

/// Samples `state`'s decision counters into `live` once a second until shutdown.
pub(crate) async fn sample<S: Sampled>(
    state: Arc<S>,
    live: Arc<Live>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let names = state.rule_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        live.record(&state.metrics_text(), &names);
    }
}

/// `floodgate_decisions_total` in Prometheus text, summed per rule into the page's groups.
fn decision_totals(metrics: &str) -> HashMap<String, Counts> {
    let mut out: HashMap<String, Counts> = HashMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("floodgate_decisions_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let labels = parse_labels(labels);
        let label = |name: &str| {
            labels
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let (Some(rule), Some(g)) = (label("rule"), label("outcome").and_then(group)) else {
            continue;
        };
        // Counters are rendered as integers (or floats for large values).
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if value.is_finite() && value >= 0.0 {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let v = value as u64;
            out.entry(rule.to_string()).or_default()[g] += v;
        }
    }
    out
}

/// `a="x",b="y\"z"` -> `[("a", "x"), ("b", "y\"z")]` (Prometheus escapes `\\`, `\"`, `\n`).
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let name = name.trim_start_matches([',', ' ']).to_string();
        if name.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                c => value.push(c),
            }
        }
        out.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(allowed: u64, denied: u64) -> String {
        format!(
            "# TYPE floodgate_decisions_total counter\n\
             floodgate_decisions_total{{rule=\"per-ip\",outcome=\"allowed\"}} {allowed}\n\
             floodgate_decisions_total{{rule=\"per-ip\",outcome=\"denied\"}} {denied}\n\
             floodgate_decisions_total{{rule=\"per-ip\",outcome=\"store_full\"}} 1\n\
             floodgate_decisions_total{{rule=\"odd \\\"name\\\"\",outcome=\"error_open\"}} 4\n\
             floodgate_decisions_total{{rule=\"per-ip\",outcome=\"skipped\"}} 9\n\
             floodgate_decisions_total{{rule=\"trial\",outcome=\"shadow_allowed\"}} 13\n\
             floodgate_decisions_total{{rule=\"trial\",outcome=\"shadow_denied\"}} 41\n\
             floodgate_store_keys 3\n"
        )
    }

    #[test]
    fn totals_group_the_outcomes_per_rule() {
        let t = decision_totals(&metrics(5, 2));
        assert_eq!(t["per-ip"], [5, 3, 0, 0, 0]);
        assert_eq!(t["odd \"name\""], [0, 0, 0, 0, 4]);
        // A shadow rule: what it would have admitted and denied, apart.
        assert_eq!(t["trial"], [0, 0, 13, 41, 0]);
    }

    #[test]
    fn each_second_holds_the_change_and_the_ring_is_bounded() {
        let live = Live::new(None);
        live.record(&metrics(5, 2), &["per-ip"]);
        live.record(&metrics(8, 2), &["per-ip"]);
        live.record(&metrics(8, 6), &["per-ip"]);
        let about = json!({"name": "per-ip"});
        let doc = live.to_json(&[("per-ip", about.clone())]);
        let rule = &doc["rules"][0];
        assert_eq!(rule["per_second"]["admitted"], json!([0, 3, 0]));
        assert_eq!(rule["per_second"]["denied"], json!([0, 0, 4]));
        assert_eq!(rule["name"], "per-ip");
        assert_eq!(rule["totals"]["denied"], 4);
        assert_eq!(doc["samples"], 3);
        for _ in 0..WINDOW_SECONDS + 10 {
            live.record(&metrics(8, 6), &["per-ip"]);
        }
        let doc = live.to_json(&[("per-ip", about)]);
        assert_eq!(
            doc["rules"][0]["per_second"]["admitted"]
                .as_array()
                .unwrap()
                .len(),
            WINDOW_SECONDS
        );
        // A rule no longer in force is dropped.
        live.record(&metrics(8, 6), &[]);
        assert!(live.rings.lock().seconds.is_empty());
    }
}
