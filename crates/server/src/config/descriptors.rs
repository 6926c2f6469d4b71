//! Envoy rate limit descriptors: which rule a request's descriptor selects.
//!
//! A rule with a `domain` and `descriptors` (TOML), or a `rate_limit` of envoyproxy/ratelimit's
//! YAML ([`super::envoy`]), is reached through the gRPC rate limit service: a request names a
//! domain and sends descriptors, each a list of `(key, value)` entries. The rules of one
//! domain form a tree, one level per entry, and a descriptor is looked up in it exactly as
//! envoyproxy/ratelimit does:
//!
//! - at each level the entry `(key, value)` is matched against the level's nodes: first a node
//!   with this key and exactly this value, then the first node (in configuration order) whose
//!   value is a wildcard matching it (`*` matches any run of characters, zero or more), then a
//!   node with this key and no value (any value);
//! - the descriptor selects the node it reaches with its **last** entry, and only that node's
//!   limit applies: a node with a limit at a shallower level does not apply to a longer
//!   descriptor, and a descriptor that runs out of tree selects nothing;
//! - the walk never backtracks: a more specific node without the next level wins over a
//!   general one that has it.
//!
//! Each distinct list of request values is its own counter (partition key), also when the
//! node's values are a wildcard or unset.

use std::collections::HashMap;

use floodgate_core::{Micros, Quota};

/// A configured value of a descriptor entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueMatch {
    /// No value configured: any value.
    Any,
    /// Exactly this value.
    Exact(String),
    /// A value with `*` in it: the text split at each `*` (`"a*b"` is `["a", "b"]`).
    Wildcard(Vec<String>),
}

impl ValueMatch {
    /// The match for a configured value (`None` or empty: any value).
    pub(crate) fn parse(value: Option<&str>) -> Self {
        match value {
            None | Some("") => ValueMatch::Any,
            Some(v) if v.contains('*') => {
                ValueMatch::Wildcard(v.split('*').map(String::from).collect())
            }
            Some(v) => ValueMatch::Exact(v.to_string()),
        }
    }

    /// The configured text (`None` for any value).
    pub(crate) fn text(&self) -> Option<String> {
        match self {
            ValueMatch::Any => None,
            ValueMatch::Exact(v) => Some(v.clone()),
            ValueMatch::Wildcard(parts) => Some(parts.join("*")),
        }
    }
}

/// Whether `value` matches a wildcard split at its `*`s: starts with the first part, ends
/// with the last, and holds the middle parts in order in between (envoyproxy/ratelimit's
/// matching).
fn wildcard_matches(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// One entry of a rule's descriptor path: a key and the values it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryMatch {
    /// The entry's key (`remote_address`, `generic_key`, a header's descriptor key, ...).
    pub(crate) key: String,
    /// The values it accepts.
    pub(crate) value: ValueMatch,
}

/// A rule's place in the descriptor tree (`domain` + `descriptors` of a rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DescriptorRule {
    /// The domain of the rate limit requests it answers.
    pub(crate) domain: String,
    /// The entries a descriptor must have, in order.
    pub(crate) entries: Vec<EntryMatch>,
    /// The name other rules' `replaces` refer to (the YAML `rate_limit.name`; a TOML rule's own
    /// name). `None`: nothing can replace it.
    pub(crate) limit_name: Option<String>,
    /// Names of limits this one replaces when both apply to one request.
    pub(crate) replaces: Vec<String>,
    /// Limit overrides a request may ask for on this rule's descriptors (Envoy's
    /// `RateLimitDescriptor.limit`): each is a rule of its own (see [`Overrides`]).
    pub(crate) overrides: Vec<Quota>,
    /// envoyproxy/ratelimit's per-descriptor keys (`share_threshold`, `value_to_metric`,
    /// `detailed_metric`, `metadata`); all off for a TOML rule.
    pub(crate) extras: DescriptorExtras,
}

/// envoyproxy/ratelimit's per-descriptor keys along a rule's path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DescriptorExtras {
    /// `share_threshold` of each entry (`entries[i]`): all values matching that entry's
    /// wildcard share one counter.
    pub(crate) share: Vec<bool>,
    /// `value_to_metric` of each entry: the request's value goes into the metric label.
    pub(crate) value_to_metric: Vec<bool>,
    /// `detailed_metric` of the last entry: every request value goes into the metric label.
    pub(crate) detailed_metric: bool,
    /// `metadata`, as JSON: merged into the response's dynamic metadata when admitted.
    pub(crate) metadata: Option<serde_json::Value>,
    /// `quota_mode` of the descriptor holding the `rate_limit`: over its limit, it refuses a
    /// request only when every quota-mode descriptor of the request is over.
    pub(crate) quota_mode: bool,
}

impl DescriptorExtras {
    /// Whether entry `i` shares one counter for every value its wildcard matches.
    pub(crate) fn shares(&self, i: usize) -> bool {
        self.share.get(i).copied().unwrap_or(false)
    }

    /// Whether the decisions carry a descriptor label built from request values.
    pub(crate) fn labels_values(&self) -> bool {
        self.detailed_metric || self.value_to_metric.iter().any(|v| *v)
    }
}

/// What a descriptor selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leaf {
    /// A rule: a position in [`super::Config::rules`].
    Rule(usize),
    /// `rate_limit: {unlimited: true}`: answered OK without touching the store.
    Unlimited {
        /// Limits this one replaces.
        replaces: Vec<String>,
    },
    /// `requests_per_unit: 0`: every request is over the limit (a block list entry), answered
    /// without touching the store.
    Blocked {
        /// The rule name it is reported and counted under.
        name: String,
        /// The unit written in the configuration.
        period: Micros,
        /// Limits this one replaces.
        replaces: Vec<String>,
        /// The name other limits' `replaces` refer to.
        limit_name: Option<String>,
        /// Its descriptor's `quota_mode`.
        quota_mode: bool,
    },
}

/// One level of a domain's tree.
#[derive(Debug, Clone, Default)]
struct Node {
    /// Children with an exact value, by `(key, value)`.
    exact: HashMap<(String, String), Node>,
    /// Children with a wildcard value, in configuration order.
    wildcard: Vec<(String, Vec<String>, Node)>,
    /// Children without a value, by key.
    any: HashMap<String, Node>,
    leaf: Option<Leaf>,
}

impl Node {
    fn child_mut(&mut self, entry: &EntryMatch) -> &mut Node {
        match &entry.value {
            ValueMatch::Exact(v) => self
                .exact
                .entry((entry.key.clone(), v.clone()))
                .or_default(),
            ValueMatch::Any => self.any.entry(entry.key.clone()).or_default(),
            ValueMatch::Wildcard(parts) => {
                let at = self
                    .wildcard
                    .iter()
                    .position(|(k, p, _)| *k == entry.key && p == parts);
                let at = match at {
                    Some(at) => at,
                    None => {
                        self.wildcard
                            .push((entry.key.clone(), parts.clone(), Node::default()));
                        self.wildcard.len() - 1
                    }
                };
                &mut self.wildcard[at].2
            }
        }
    }

    fn child(&self, key: &str, value: &str) -> Option<&Node> {
        // Allocation-free look-up of the exact child would need a borrowed key type; the
        // usual level has a handful of children, and this is one hash of two short strings.
        if let Some(n) = self.exact.get(&(key.to_string(), value.to_string())) {
            return Some(n);
        }
        if let Some((_, _, n)) = self
            .wildcard
            .iter()
            .find(|(k, parts, _)| k == key && wildcard_matches(parts, value))
        {
            return Some(n);
        }
        self.any.get(key)
    }
}

/// The descriptor trees of every domain, built from the rules and the YAML's unlimited and
/// block-list entries.
#[derive(Debug, Clone, Default)]
pub(crate) struct DescriptorIndex {
    domains: HashMap<String, Node>,
    overrides: Overrides,
}

/// The limit overrides a configuration allows: `(rule, limit, period)` to the position of the
/// override's own rule in [`super::Config::rules`]. An override is its own rule (named
/// `<rule>@<limit>/<period>`), so its counters never mix with the configured quota's.
#[derive(Debug, Clone, Default)]
struct Overrides(HashMap<(usize, u64, Micros), usize>);

/// The result of looking a descriptor up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup<'a> {
    /// No rule has this domain.
    UnknownDomain,
    /// The domain is known; the descriptor selects nothing (no limit applies).
    NoMatch,
    /// The descriptor selects this.
    Found(&'a Leaf),
}

/// Two configuration entries claim the same descriptor path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DuplicatePath {
    /// The path, as `domain.key_value.key...`.
    pub(crate) path: String,
}

impl DescriptorIndex {
    /// Adds `leaf` at `domain` / `entries`.
    ///
    /// # Errors
    /// [`DuplicatePath`] when something is already there.
    pub(crate) fn insert(
        &mut self,
        domain: &str,
        entries: &[EntryMatch],
        leaf: Leaf,
    ) -> Result<(), DuplicatePath> {
        let mut node = self.domains.entry(domain.to_string()).or_default();
        for entry in entries {
            node = node.child_mut(entry);
        }
        if node.leaf.is_some() {
            return Err(DuplicatePath {
                path: path_name(domain, entries),
            });
        }
        node.leaf = Some(leaf);
        Ok(())
    }

    /// Creates the nodes of `domain` / `entries` without a leaf (a YAML descriptor without a
    /// limit still stops the look-up there).
    pub(crate) fn touch(&mut self, domain: &str, entries: &[EntryMatch]) {
        let mut node = self.domains.entry(domain.to_string()).or_default();
        for entry in entries {
            node = node.child_mut(entry);
        }
    }

    /// Makes `domain` known without any descriptor (a YAML file with no limits).
    pub(crate) fn add_domain(&mut self, domain: &str) {
        self.domains.entry(domain.to_string()).or_default();
    }

    /// Allows override `quota` on rule `rule`, decided by rule `override_rule`.
    pub(crate) fn allow_override(&mut self, rule: usize, quota: &Quota, override_rule: usize) {
        self.overrides
            .0
            .insert((rule, quota.limit(), quota.period()), override_rule);
    }

    /// The rule deciding override `limit` per `period` of rule `rule`, if allowed.
    pub(crate) fn override_rule(&self, rule: usize, limit: u64, period: Micros) -> Option<usize> {
        self.overrides.0.get(&(rule, limit, period)).copied()
    }

    /// Looks up the descriptor with these `(key, value)` entries in `domain`.
    pub(crate) fn lookup<'a, I>(&self, domain: &str, entries: I) -> Lookup<'_>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let Some(mut node) = self.domains.get(domain) else {
            return Lookup::UnknownDomain;
        };
        let mut any = false;
        for (key, value) in entries {
            any = true;
            match node.child(key, value) {
                Some(next) => node = next,
                None => return Lookup::NoMatch,
            }
        }
        match (&node.leaf, any) {
            (Some(leaf), true) => Lookup::Found(leaf),
            _ => Lookup::NoMatch,
        }
    }

    /// The configured domains.
    pub(crate) fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }
}

/// The name of a descriptor path as envoyproxy/ratelimit writes its stats key:
/// `domain.key_value.key` (a wildcard value as written, an unset value left out).
pub(crate) fn path_name(domain: &str, entries: &[EntryMatch]) -> String {
    let mut out = domain.to_string();
    for e in entries {
        out.push('.');
        out.push_str(&e.key);
        if let Some(v) = e.value.text() {
            out.push('_');
            out.push_str(&v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: Option<&str>) -> EntryMatch {
        EntryMatch {
            key: key.into(),
            value: ValueMatch::parse(value),
        }
    }

    #[test]
    fn wildcards_match_like_envoyproxy_ratelimit() {
        let w = |p: &str| p.split('*').map(String::from).collect::<Vec<_>>();
        assert!(wildcard_matches(&w("value*"), "value1"));
        assert!(wildcard_matches(&w("value*"), "value"));
        assert!(!wildcard_matches(&w("value*"), "valu"));
        assert!(wildcard_matches(&w("/api/*/action"), "/api/123/action"));
        assert!(!wildcard_matches(&w("/api/*/action"), "/api/123/other"));
        assert!(wildcard_matches(
            &w("/api/*/resource/*/action"),
            "/api/v1/resource/123/action"
        ));
        assert!(!wildcard_matches(&w("a*a"), "a"));
        assert!(wildcard_matches(&w("a*a"), "aa"));
    }

    #[test]
    fn exact_then_wildcard_then_any_and_only_the_last_level() {
        let mut index = DescriptorIndex::default();
        index
            .insert("d", &[entry("ip", None)], Leaf::Rule(0))
            .unwrap();
        index
            .insert("d", &[entry("ip", Some("50.0.0.5"))], Leaf::Rule(1))
            .unwrap();
        index
            .insert("d", &[entry("ip", Some("10.*"))], Leaf::Rule(2))
            .unwrap();
        index
            .insert(
                "d",
                &[entry("type", Some("m")), entry("to", None)],
                Leaf::Rule(3),
            )
            .unwrap();
        let found = |e: &[(&str, &str)]| match index.lookup("d", e.iter().copied()) {
            Lookup::Found(Leaf::Rule(i)) => Some(*i),
            _ => None,
        };
        assert_eq!(found(&[("ip", "1.2.3.4")]), Some(0));
        assert_eq!(found(&[("ip", "50.0.0.5")]), Some(1));
        assert_eq!(found(&[("ip", "10.0.0.1")]), Some(2));
        assert_eq!(found(&[("type", "m"), ("to", "123")]), Some(3));
        assert_eq!(found(&[("type", "m")]), None, "no limit at the first level");
        assert_eq!(found(&[("ip", "1.2.3.4"), ("x", "y")]), None, "too deep");
        assert_eq!(index.lookup("other", [("ip", "1")]), Lookup::UnknownDomain);
        assert_eq!(
            index.insert("d", &[entry("ip", None)], Leaf::Rule(9)),
            Err(DuplicatePath {
                path: "d.ip".into()
            })
        );
    }
}
