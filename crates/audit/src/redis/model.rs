//! What `audit redis` is given, what it reports and how it tells Floodgate's key names: the
//! leaf the scan, the analysis and the renderer share.

use floodgate_core::{AlgorithmKind, Policy};
use serde::Serialize;

use crate::verdict::Verdict;

/// What to audit and how much of it.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// `redis://[user:password@]host:port[/db]` of a standalone server or any cluster node.
    pub url: String,
    /// Redis glob of the names to audit (default Floodgate's `fg:*`).
    pub pattern: String,
    /// Most keys inspected in all.
    pub sample: u64,
    /// Most names examined by `SCAN` on one master.
    pub scan_max: u64,
    /// `SCAN ... COUNT` hint.
    pub scan_count: u64,
    /// Floodgate's rules, to attribute its keys.
    pub floodgate: Option<FloodgateRules>,
    /// Timeout of one command, in milliseconds.
    pub timeout_ms: u64,
    /// Draw a progress bar on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
}

impl RedisOptions {
    /// Defaults for `url`: pattern `fg:*`, 10,000 keys, 1,000,000 names per master, COUNT
    /// 1,000, no rules, 2 s per command, no progress bar.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pattern: "fg:*".into(),
            sample: 10_000,
            scan_max: 1_000_000,
            scan_count: 1_000,
            floodgate: None,
            timeout_ms: 2_000,
            progress: false,
        }
    }
}

/// Floodgate's rules as `floodgate serve` names its keys.
#[derive(Debug, Clone)]
pub struct FloodgateRules {
    /// The key prefix (`[store] prefix`, default `fg:`).
    pub prefix: String,
    /// The rules.
    pub rules: Vec<RuleSpec>,
    /// Partition keys to recompute names for under every rule (`--key ip=203.0.113.7`).
    pub known_keys: Vec<String>,
}

/// One rule.
#[derive(Debug, Clone)]
pub struct RuleSpec {
    /// The rule's name.
    pub name: String,
    /// Algorithm and quota.
    pub policy: Policy,
    /// Partition keys this rule always uses (a rule keyed by a constant).
    pub known_keys: Vec<String>,
}

impl RuleSpec {
    /// Longest TTL Floodgate gives this rule's keys, in milliseconds: the longest
    /// `reset_after` (a window algorithm: one period, two for the sliding window counter; a
    /// bucket: the time to refill or drain its whole capacity), rounded up to a millisecond.
    pub fn max_ttl_ms(&self) -> u64 {
        let q = self.policy.quota();
        let us = match self.policy.kind() {
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingLog => q.period(),
            AlgorithmKind::SlidingWindow => 2 * q.period(),
            _ => {
                let (num, den) = q.emission_interval();
                (u128::from(q.burst()) * u128::from(num)).div_ceil(u128::from(den.max(1))) as u64
            }
        };
        us.div_ceil(1000)
    }
}

/// Why the audit did not run.
#[derive(Debug, thiserror::Error)]
pub enum RedisAuditError {
    /// The URL does not parse.
    #[error("URL {url:?}: {error}")]
    Url {
        /// As given.
        url: String,
        /// Why.
        error: String,
    },
    /// A bad option.
    #[error("{0}")]
    Option(String),
    /// Redis failed or did not answer.
    #[error("{node}: {error}")]
    Redis {
        /// `host:port`.
        node: String,
        /// What failed.
        error: String,
    },
}

/// TTL classes of the distribution, upper bounds in milliseconds (the last is open).
pub const TTL_BUCKETS: [(&str, u64); 8] = [
    ("< 1 s", 1_000),
    ("1-10 s", 10_000),
    ("10-60 s", 60_000),
    ("1-10 min", 600_000),
    ("10-60 min", 3_600_000),
    ("1-24 h", 86_400_000),
    ("1-7 days", 604_800_000),
    ("> 7 days", u64::MAX),
];

/// Keys of one type and encoding among the sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Group {
    /// `string`, `hash`, `zset`, `list`, `set`, `stream`, ...
    pub kind: String,
    /// `OBJECT ENCODING`: `int`, `embstr`, `raw`, `listpack`, `skiplist`, `hashtable`, ...
    pub encoding: String,
    /// Sampled keys.
    pub keys: u64,
    /// `MEMORY USAGE` summed over them.
    pub bytes: u64,
    /// Smallest and largest `MEMORY USAGE`.
    pub min_bytes: u64,
    /// Largest.
    pub max_bytes: u64,
    /// Keys with `PTTL` -1.
    pub no_ttl: u64,
    /// Keys per TTL class of [`TTL_BUCKETS`] (keys without TTL not counted).
    pub ttl: Vec<u64>,
    /// Projected keys of this group in the whole keyspace.
    pub projected_keys: u64,
    /// Projected bytes.
    pub projected_bytes: u64,
}

/// One master's scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeScan {
    /// `host:port`.
    pub node: String,
    /// `DBSIZE`.
    pub dbsize: u64,
    /// Names `SCAN` returned (matching ones counted once; another name returned twice
    /// during a rehash counts twice).
    pub examined: u64,
    /// Of those, matching the pattern.
    pub matched: u64,
    /// Inspected (`TYPE`, `PTTL`, ...).
    pub inspected: u64,
    /// Matched keys gone before they were inspected (expired meanwhile).
    pub vanished: u64,
    /// The scan went all the way round (the counts are exact).
    pub complete: bool,
    /// Projected matching keys on this master.
    pub projected_keys: u64,
    /// `maxmemory-policy`.
    pub maxmemory_policy: String,
    /// `maxmemory` in bytes (0: no limit).
    pub maxmemory: u64,
}

/// Floodgate keys attributed to one rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuleUsage {
    /// The rule's name.
    pub rule: String,
    /// `algorithm quota`, e.g. `token_bucket 100/10s`.
    pub policy: String,
    /// Keys whose names were recomputed from this rule and a known partition key.
    pub exact_keys: u64,
    /// Keys only this rule's value layout and TTL fit.
    pub layout_keys: u64,
    /// `MEMORY USAGE` of both.
    pub bytes: u64,
    /// Projected bytes in the whole keyspace.
    pub projected_bytes: u64,
    /// The known partition keys found (`key=alice`).
    pub found_keys: Vec<String>,
}

/// Floodgate keys that could not be given one rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Unattributed {
    /// The candidate rules (several fit), or empty (none fits).
    pub candidates: Vec<String>,
    /// The value layout seen.
    pub layout: String,
    /// Keys.
    pub keys: u64,
    /// `MEMORY USAGE`.
    pub bytes: u64,
}

/// How Floodgate's keys were attributed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Attribution {
    /// The prefix.
    pub prefix: String,
    /// Sampled keys named like Floodgate's (prefix + 11 base64url characters).
    pub floodgate_keys: u64,
    /// Per rule, in configuration order.
    pub rules: Vec<RuleUsage>,
    /// Ambiguous or unmatched, by candidates and layout.
    pub unattributed: Vec<Unattributed>,
    /// What exact attribution needs, in words.
    pub note: String,
}

/// Everything the Redis audit found.
#[derive(Debug, Clone, Serialize)]
pub struct RedisReport {
    /// The URL given (password removed).
    pub url: String,
    /// The pattern.
    pub pattern: String,
    /// `true` for a Redis Cluster.
    pub cluster: bool,
    /// Per master.
    pub nodes: Vec<NodeScan>,
    /// Keys inspected in all.
    pub inspected: u64,
    /// Every scan was complete: the totals are counts, not projections.
    pub complete: bool,
    /// `MEMORY USAGE` summed over the inspected keys.
    pub bytes: u64,
    /// Projected matching keys in the whole keyspace.
    pub projected_keys: u64,
    /// Projected bytes.
    pub projected_bytes: u64,
    /// Inspected keys without TTL.
    pub no_ttl: u64,
    /// Per TTL class of [`TTL_BUCKETS`], over all inspected keys with a TTL.
    pub ttl: Vec<u64>,
    /// By type and encoding, largest bytes first.
    pub groups: Vec<Group>,
    /// Floodgate attribution (with a configuration).
    pub attribution: Option<Attribution>,
    /// The verdicts.
    pub verdicts: Vec<Verdict>,
}

impl RedisReport {
    /// `true` when any verdict is a danger (the command then exits with status 1).
    pub fn has_danger(&self) -> bool {
        self.verdicts.iter().any(Verdict::is_danger)
    }

    /// The JSON document of `--format json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

/// One inspected key.
#[derive(Debug, Clone)]
pub(super) struct Key {
    pub(super) name: Vec<u8>,
    pub(super) kind: String,
    pub(super) encoding: String,
    pub(super) pttl: i64,
    pub(super) bytes: u64,
    /// `STRLEN` and the first 64 bytes, for Floodgate-named strings when attributing.
    pub(super) value: Option<(u64, Vec<u8>)>,
}

pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

pub(super) fn is_floodgate_name(name: &[u8], prefix: &str) -> bool {
    name.len() == prefix.len() + floodgate_store::redis::keys::HASH_CHARS
        && name.starts_with(prefix.as_bytes())
        && name[prefix.len()..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}
