//! The bounded `descriptor` labels of `floodgate_descriptor_decisions_total`: the stats keys
//! envoyproxy/ratelimit builds from request values (`detailed_metric`, `value_to_metric`),
//! at most `[envoy] metric_values_per_rule` distinct ones per rule; the decisions of any
//! further value are counted under [`OTHER`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// The label of the values beyond a rule's cap.
pub(crate) const OTHER: &str = "other";

/// Most rules with labels remembered (rule names outlive reloads here): beyond it, every new
/// rule's values are `other`.
const MAX_RULES: usize = 10_000;

/// The labels each rule has used so far.
#[derive(Debug, Default)]
pub(crate) struct Labels {
    seen: Mutex<HashMap<Arc<str>, HashSet<Arc<str>>>>,
}

impl Labels {
    /// The label for stats key `key` of rule `rule`: the key itself while the rule has fewer
    /// than `cap` distinct ones (or already has this one), else [`OTHER`].
    pub(crate) fn label(&self, rule: &Arc<str>, key: String, cap: usize) -> Arc<str> {
        // The lock is held for a hash look-up or two, never across I/O.
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains_key(rule) && seen.len() >= MAX_RULES {
            return Arc::from(OTHER);
        }
        let values = seen.entry(Arc::clone(rule)).or_default();
        if let Some(known) = values.get(key.as_str()) {
            return Arc::clone(known);
        }
        if values.len() >= cap {
            return Arc::from(OTHER);
        }
        let key: Arc<str> = Arc::from(key);
        values.insert(Arc::clone(&key));
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_beyond_the_cap_are_other() {
        let labels = Labels::default();
        let rule: Arc<str> = Arc::from("r");
        assert_eq!(&*labels.label(&rule, "a".into(), 2), "a");
        assert_eq!(&*labels.label(&rule, "b".into(), 2), "b");
        assert_eq!(&*labels.label(&rule, "c".into(), 2), OTHER);
        assert_eq!(
            &*labels.label(&rule, "a".into(), 2),
            "a",
            "a known one stays"
        );
        let other: Arc<str> = Arc::from("s");
        assert_eq!(&*labels.label(&other, "c".into(), 2), "c", "per rule");
    }
}
