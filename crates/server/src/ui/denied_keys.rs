//! The busiest denied keys: a bounded top-k of `(rule, key)` pairs by denials, kept with the
//! space-saving algorithm (Metwally, Agrawal and El Abbadi, "Efficient Computation of Frequent
//! and Top-k Elements in Data Streams", ICDT 2005).
//!
//! At most `capacity` entries are held whatever the traffic. A new pair arriving when all are
//! taken replaces the entry with the fewest denials and inherits its count plus one, recording
//! that count as the entry's possible overestimate (`error`): the true count of an entry lies in
//! `[count - error, count]`, and any pair denied more than `total / capacity` times is held.
//!
//! Opt-in: keys can be personal data (an IP, a user id). [`DeniedKeys::record_denied`] is the
//! entry point for the one place that makes decisions.
//!
//! The page never shows a secret in clear: [`DeniedKeys::shown`] replaces the value of every
//! key component but the public ones ([`PUBLIC_TAGS`]: the client address and network, the
//! method, path and route, a constant) with `#` and 8 hex digits of an HMAC-SHA256 under a
//! random per-process key, e.g. `api_key=#3f9a1c2b|path=/v1/items`. The admin API
//! (`/v1/keys/{rule}/{key}?encoded=true`, admin token) resolves such a key among the held
//! ones ([`DeniedKeys::resolve`]). An encoded component never holds `#` but as `#` and 64 hex
//! digits (a long value's SHA-256), so a shown key is never mistaken for a real one.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde::Serialize;
use sha2::Sha256;

/// Key tags shown in clear on the page: what every proxy log holds anyway. Every other tag
/// (`user`, `api_key`, `key` of `/v1/check`, a header's name) is shown hashed.
pub(crate) const PUBLIC_TAGS: &[&str] = &["ip", "net", "method", "path", "route", "const"];

/// Hex digits of a shown key component's HMAC (32 bits: enough to tell the held keys apart,
/// too few to test guesses against offline, and the key is per process anyway).
const SHOWN_HEX_DIGITS: usize = 8;

/// Longest key kept, in bytes (longer keys are cut at a character boundary).
pub(crate) const MAX_KEY_BYTES: usize = 256;

/// Most entries a [`DeniedKeys`] may hold.
const MAX_CAPACITY: usize = 1_000;

/// One held pair: its denials, at most `error` of them overcounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DeniedKey {
    /// The rule that denied.
    pub(crate) rule: String,
    /// The key it denied (cut to [`MAX_KEY_BYTES`]).
    pub(crate) key: String,
    /// Denials counted for the pair (an upper bound of the true count).
    pub(crate) count: u64,
    /// How many of `count` may belong to pairs it replaced (`count - error` is a lower bound).
    pub(crate) error: u64,
}

/// A bounded top-k of denied `(rule, key)` pairs (see the module docs). Cheap to share: one
/// short lock per recorded denial, no allocation once a pair is held.
pub(crate) struct DeniedKeys {
    capacity: usize,
    inner: Mutex<Inner>,
    /// The HMAC of [`DeniedKeys::shown`], under a random per-process key.
    mac: Hmac<Sha256>,
}

#[derive(Debug, Default)]
struct Inner {
    /// rule -> key -> index in `entries`.
    index: HashMap<String, HashMap<String, usize>>,
    entries: Vec<DeniedKey>,
    /// Denials recorded in all.
    total: u64,
}

/// The limiter tells the list of every denial (`[server] ui_denied_keys`).
impl floodgate_tower::DenialObserver for DeniedKeys {
    fn denied(&self, rule: &str, key: &str) {
        self.record_denied(rule, key);
    }
}

impl DeniedKeys {
    /// Holds at most `capacity` pairs (clamped to `1..=MAX_CAPACITY`).
    pub(crate) fn new(capacity: usize) -> Self {
        let mut secret = [0u8; 32];
        // As the reservation signer: a fixed key would let anyone test guesses offline.
        getrandom::fill(&mut secret).expect("the system random number generator works");
        Self {
            capacity: capacity.clamp(1, MAX_CAPACITY),
            inner: Mutex::new(Inner::default()),
            mac: Hmac::<Sha256>::new_from_slice(&secret).expect("HMAC takes a key of any length"),
        }
    }

    /// `key` as the page shows it: every component whose tag is not in [`PUBLIC_TAGS`] has its
    /// value replaced by `#` and [`SHOWN_HEX_DIGITS`] hex digits of its HMAC.
    pub(crate) fn shown(&self, key: &str) -> String {
        let mut out = String::with_capacity(key.len().min(128));
        for (i, component) in key.split('|').enumerate() {
            if i > 0 {
                out.push('|');
            }
            match component.split_once('=') {
                Some((tag, _)) if PUBLIC_TAGS.contains(&tag) => out.push_str(component),
                Some((tag, _)) => {
                    out.push_str(tag);
                    out.push_str("=#");
                    out.push_str(&self.digest(component));
                }
                // Not an encoded component (kept total): hashed whole.
                None => {
                    out.push('#');
                    out.push_str(&self.digest(component));
                }
            }
        }
        out
    }

    fn digest(&self, component: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(component.as_bytes());
        let bytes = mac.finalize().into_bytes();
        let mut hex = String::with_capacity(SHOWN_HEX_DIGITS);
        for byte in bytes.iter().take(SHOWN_HEX_DIGITS / 2) {
            use std::fmt::Write;
            let _ = write!(hex, "{byte:02x}");
        }
        hex
    }

    /// Whether `key` has a component in the page's hashed form (`tag=#` and 8 hex digits).
    pub(crate) fn is_shown_form(key: &str) -> bool {
        key.split('|').any(|c| {
            c.split_once('=').is_some_and(|(_, v)| {
                v.strip_prefix('#').is_some_and(|hex| {
                    hex.len() == SHOWN_HEX_DIGITS && hex.bytes().all(|b| b.is_ascii_hexdigit())
                })
            })
        })
    }

    /// The held keys of `rule` that the page shows as `shown` (usually one; two only on a
    /// 32-bit collision).
    pub(crate) fn resolve(&self, rule: &str, shown: &str) -> Vec<String> {
        let keys: Vec<String> = {
            let inner = self.inner.lock();
            inner
                .index
                .get(rule)
                .map(|keys| keys.keys().cloned().collect())
                .unwrap_or_default()
        };
        let mut found: Vec<String> = keys
            .into_iter()
            .filter(|k| self.shown(k) == shown)
            .collect();
        found.sort();
        found
    }

    /// The most pairs held.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counts one denial of `key` by `rule`.
    fn record_denied(&self, rule: &str, key: &str) {
        let key = cut(key);
        let mut inner = self.inner.lock();
        inner.total += 1;
        // Look up without allocating; the owned pair is built only for a new entry.
        if let Some(&i) = inner.index.get(rule).and_then(|keys| keys.get(key)) {
            inner.entries[i].count += 1;
            return;
        }
        if inner.entries.len() < self.capacity {
            let i = inner.entries.len();
            inner.entries.push(DeniedKey {
                rule: rule.to_string(),
                key: key.to_string(),
                count: 1,
                error: 0,
            });
            inner.insert_index(rule, key, i);
            return;
        }
        // Replace the entry with the fewest denials; the newcomer inherits its count.
        let Some((i, min)) = inner
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
            .map(|(i, e)| (i, e.count))
        else {
            return;
        };
        let old = std::mem::replace(
            &mut inner.entries[i],
            DeniedKey {
                rule: rule.to_string(),
                key: key.to_string(),
                count: min + 1,
                error: min,
            },
        );
        if let Some(keys) = inner.index.get_mut(&old.rule) {
            keys.remove(&old.key);
            if keys.is_empty() {
                inner.index.remove(&old.rule);
            }
        }
        inner.insert_index(rule, key, i);
    }

    /// The held pairs, most denied first (ties by rule, then key), and the denials recorded.
    pub(crate) fn top(&self) -> (Vec<DeniedKey>, u64) {
        let inner = self.inner.lock();
        let mut entries = inner.entries.clone();
        entries.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.rule.cmp(&b.rule))
                .then_with(|| a.key.cmp(&b.key))
        });
        (entries, inner.total)
    }
}

impl std::fmt::Debug for DeniedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The HMAC key stays out of debug output.
        f.debug_struct("DeniedKeys")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn insert_index(&mut self, rule: &str, key: &str, i: usize) {
        match self.index.get_mut(rule) {
            Some(keys) => {
                keys.insert(key.to_string(), i);
            }
            None => {
                self.index
                    .insert(rule.to_string(), HashMap::from([(key.to_string(), i)]));
            }
        }
    }
}

fn cut(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn counts_exactly_while_there_is_room() {
        let d = DeniedKeys::new(3);
        for key in ["a", "b", "a", "c", "a", "b"] {
            d.record_denied("per-ip", key);
        }
        d.record_denied("per-user", "a");
        let (top, total) = d.top();
        assert_eq!(total, 7);
        let got: Vec<_> = top.iter().map(|e| (e.key.as_str(), e.count)).collect();
        // "per-user a" arrived when all three entries were taken: it replaced "c" (1 denial).
        assert_eq!(got, [("a", 3), ("b", 2), ("a", 2)]);
        assert_eq!(top[2].rule, "per-user");
        assert_eq!(top[2].error, 1);
        assert_eq!(top[0].error, 0);
    }

    #[test]
    fn long_keys_are_cut_at_a_character_boundary() {
        let d = DeniedKeys::new(2);
        let long = "é".repeat(200);
        d.record_denied("r", &long);
        let (top, _) = d.top();
        assert!(top[0].key.len() <= MAX_KEY_BYTES);
        assert!(long.starts_with(&top[0].key));
    }

    #[test]
    fn secret_components_are_shown_hashed_and_resolve_back() {
        let d = DeniedKeys::new(4);
        d.record_denied("per-key", "api_key=sk_live_123|path=/v1/items");
        d.record_denied("per-ip", "ip=203.0.113.7");
        let shown = d.shown("api_key=sk_live_123|path=/v1/items");
        assert!(shown.starts_with("api_key=#"), "{shown}");
        assert!(shown.ends_with("|path=/v1/items"), "{shown}");
        assert!(!shown.contains("sk_live"), "{shown}");
        assert_eq!(shown.len(), "api_key=#".len() + 8 + "|path=/v1/items".len());
        assert_eq!(d.shown("ip=203.0.113.7"), "ip=203.0.113.7");
        for secret in ["user=alice", "key=alice", "x-tenant=acme"] {
            assert!(!d.shown(secret).contains("alice") && !d.shown(secret).contains("acme"));
        }
        assert!(DeniedKeys::is_shown_form(&shown));
        assert!(!DeniedKeys::is_shown_form("api_key=sk_live_123"));
        assert!(!DeniedKeys::is_shown_form(&format!(
            "api_key=#{}",
            "a".repeat(64)
        )));
        assert_eq!(
            d.resolve("per-key", &shown),
            ["api_key=sk_live_123|path=/v1/items"]
        );
        assert!(d.resolve("per-ip", &shown).is_empty());
        // Another process (another key) shows another hash.
        assert_ne!(
            DeniedKeys::new(4).shown("user=alice"),
            d.shown("user=alice")
        );
    }

    proptest! {
        /// The space-saving guarantees: bounded size, each held count an upper bound within
        /// `error` of the truth, and every pair denied more than total / capacity times held.
        #[test]
        fn space_saving_bounds(keys in proptest::collection::vec(0u8..20, 0..400), k in 1usize..8) {
            let d = DeniedKeys::new(k);
            let mut truth: HashMap<String, u64> = HashMap::new();
            for key in &keys {
                d.record_denied("r", &key.to_string());
                *truth.entry(key.to_string()).or_default() += 1;
            }
            let (top, total) = d.top();
            prop_assert_eq!(total, keys.len() as u64);
            prop_assert!(top.len() <= k);
            for e in &top {
                let real = truth.get(&e.key).copied().unwrap_or(0);
                prop_assert!(e.count >= real && e.count - e.error <= real);
            }
            for (key, count) in &truth {
                if *count > total / k as u64 {
                    prop_assert!(top.iter().any(|e| &e.key == key), "{key} ({count}) missing");
                }
            }
        }
    }
}
