//! `floodgate audit redis URL`: what the rate-limit keys of a Redis cost, and what is wrong
//! with them, read-only and sampled.
//!
//! Commands sent, and nothing else: `INFO` (server, memory, cluster, keyspace sections),
//! `CLUSTER NODES` (on a cluster, to find the masters), and on each master `DBSIZE`,
//! `SCAN cursor COUNT n` (never `KEYS`; the pattern is matched here, so that the share of
//! matching names among those examined projects the total), then for each sampled key `TYPE`,
//! `PTTL`, `MEMORY USAGE`, `OBJECT ENCODING`, and, only for Floodgate-named strings when a
//! configuration is given, `STRLEN` and `GETRANGE key 0 63` (the first 64 bytes, to tell the
//! value layout). Nothing is written; reading a value with `GETRANGE` counts as an access for
//! an LRU/LFU `maxmemory-policy`, the other commands do not.
//!
//! Sampling: at most [`RedisOptions::sample`] keys are inspected (shared out over the masters)
//! and at most [`RedisOptions::scan_max`] names examined per master; when a scan ends early,
//! the number of matching keys is projected as `matched / examined x DBSIZE` and every total
//! is marked as projected.
//!
//! Floodgate's key names are a hash of rule, policy and partition key (see
//! `floodgate_store::redis::keys`), so a name alone says nothing about its rule. With a
//! configuration ([`FloodgateRules`]), a key is attributed **exactly** when its name is
//! recomputed from a rule and a known partition key (a rule keyed by a constant, or a key given
//! with `--key`); otherwise **by layout**: the value's layout (one integer: fixed window or
//! GCRA; two numbers: token or leaky bucket; three: sliding window counter; a binary log:
//! sliding log) and a TTL no longer than the rule's longest leave exactly one rule of the
//! configuration; when several rules fit, the key is reported as ambiguous with every
//! candidate, never assigned to one of them.

mod analyse;
mod render;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Policy};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, Value};
use serde::Serialize;

use crate::Verdict;

use analyse::analyse;
pub use render::table;

/// Keys inspected per pipeline round trip.
const PIPELINE: usize = 100;

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
struct Key {
    name: Vec<u8>,
    kind: String,
    encoding: String,
    pttl: i64,
    bytes: u64,
    /// `STRLEN` and the first 64 bytes, for Floodgate-named strings when attributing.
    value: Option<(u64, Vec<u8>)>,
}

struct Node {
    addr: String,
    conn: MultiplexedConnection,
    info: HashMap<String, String>,
}

fn redis_err(node: &str, e: impl std::fmt::Display) -> RedisAuditError {
    RedisAuditError::Redis {
        node: node.to_string(),
        error: e.to_string(),
    }
}

fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

async fn connect(info: redis::ConnectionInfo, timeout: Duration) -> Result<Node, RedisAuditError> {
    let addr = info.addr().to_string();
    let client = redis::Client::open(info).map_err(|e| redis_err(&addr, e))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| redis_err(&addr, e))?;
    let mut text = String::new();
    for section in ["server", "memory", "cluster"] {
        let s: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_err(&addr, e))?;
        text.push_str(&s);
        text.push('\n');
    }
    Ok(Node {
        addr,
        conn,
        info: parse_info(&text),
    })
}

/// The masters named by `CLUSTER NODES`: `host:port` of every `master` not marked `fail`.
fn masters(nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        // ip:port@cport[,hostname]
        let addr = f[1].split('@').next().unwrap_or("");
        if let Some((host, port)) = addr.rsplit_once(':') {
            if let Ok(port) = port.parse() {
                out.push((host.to_string(), port));
            }
        }
    }
    out.sort();
    out
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

/// Runs the audit.
///
/// # Errors
/// [`RedisAuditError`]: a bad URL, a server that does not answer, or a command refused (say
/// `MEMORY USAGE` renamed away). Keys that vanish between `SCAN` and their inspection are
/// counted (`vanished`), not errors.
pub async fn audit(opts: &RedisOptions) -> Result<RedisReport, RedisAuditError> {
    if opts.sample == 0 || opts.scan_count == 0 {
        return Err(RedisAuditError::Option(
            "--sample and the SCAN COUNT must be at least 1".into(),
        ));
    }
    let info = opts
        .url
        .as_str()
        .into_connection_info()
        .map_err(|e| RedisAuditError::Url {
            url: redact(&opts.url),
            error: e.to_string(),
        })?;
    let timeout = Duration::from_millis(opts.timeout_ms.max(1));
    let mut first = connect(info.clone(), timeout).await?;
    let cluster = first.info.get("cluster_enabled").map(String::as_str) == Some("1");
    let mut nodes = Vec::new();
    if cluster {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut first.conn)
            .await
            .map_err(|e| redis_err(&first.addr, e))?;
        for (host, port) in masters(&text) {
            let node_info = info.clone().set_addr(ConnectionAddr::Tcp(host, port));
            nodes.push(connect(node_info, timeout).await?);
        }
    } else {
        nodes.push(first);
    }
    let bar = if opts.progress {
        ProgressBar::with_draw_target(Some(opts.sample), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} keys, {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let per_node = opts.sample.div_ceil(nodes.len().max(1) as u64);
    let prefix = opts.floodgate.as_ref().map(|f| f.prefix.clone());
    let mut scans = Vec::new();
    let mut keys: Vec<(usize, Key)> = Vec::new();
    let mut matched_names: Vec<Vec<u8>> = Vec::new();
    for (i, node) in nodes.iter_mut().enumerate() {
        bar.set_message(format!("scanning {}", node.addr));
        let (scan, names) = scan_node(node, opts, per_node).await?;
        let (inspected, vanished) = inspect(
            node,
            &names[..names.len().min(per_node as usize)],
            prefix.as_deref(),
            &bar,
        )
        .await?;
        let mut scan = scan;
        scan.inspected = inspected.len() as u64;
        scan.vanished = vanished;
        keys.extend(inspected.into_iter().map(|k| (i, k)));
        matched_names.extend(names);
        scans.push(scan);
    }
    bar.finish_and_clear();
    Ok(analyse(opts, cluster, scans, keys, &matched_names))
}

/// Scans one master: returns its counts and the matching names (up to `per_node` are kept,
/// all of them are counted).
async fn scan_node(
    node: &mut Node,
    opts: &RedisOptions,
    per_node: u64,
) -> Result<(NodeScan, Vec<Vec<u8>>), RedisAuditError> {
    let dbsize: u64 = redis::cmd("DBSIZE")
        .query_async(&mut node.conn)
        .await
        .map_err(|e| redis_err(&node.addr, e))?;
    // Matching names, to count each once (SCAN may return a name twice while the table
    // rehashes); the others are only counted, so memory follows the matches, not the keyspace.
    let mut matched_seen: HashSet<Vec<u8>> = HashSet::new();
    let mut names = Vec::new();
    let mut examined = 0u64;
    let mut cursor: u64 = 0;
    let pattern = opts.pattern.as_bytes();
    let complete = loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(opts.scan_count)
            .query_async(&mut node.conn)
            .await
            .map_err(|e| redis_err(&node.addr, e))?;
        for name in batch {
            // The reservation-signing secret the service shares through a Redis store
            // (`<prefix>secret:reservation`, kept without a TTL on purpose) is no counter: no
            // state or claim name holds `secret:`.
            if !crate::glob::matches(pattern, &name) || is_reservation_secret(&name) {
                examined += 1;
                continue;
            }
            if matched_seen.contains(&name) {
                continue;
            }
            examined += 1;
            if (names.len() as u64) < per_node {
                names.push(name.clone());
            }
            matched_seen.insert(name);
        }
        cursor = next;
        if cursor == 0 {
            break true;
        }
        // Enough of a sample, and enough names seen to project from: stop early.
        if (names.len() as u64 >= per_node && examined >= 10 * per_node)
            || examined >= opts.scan_max
        {
            break false;
        }
    };
    let matched = matched_seen.len() as u64;
    let projected = if complete || examined == 0 {
        matched
    } else {
        ((matched as f64 / examined as f64) * dbsize as f64).round() as u64
    };
    let info = |k: &str| node.info.get(k).cloned().unwrap_or_default();
    Ok((
        NodeScan {
            node: node.addr.clone(),
            dbsize,
            examined,
            matched,
            inspected: 0,
            vanished: 0,
            complete,
            projected_keys: projected.max(matched),
            maxmemory_policy: info("maxmemory_policy"),
            maxmemory: info("maxmemory").parse().unwrap_or(0),
        },
        names,
    ))
}

fn is_floodgate_name(name: &[u8], prefix: &str) -> bool {
    name.len() == prefix.len() + floodgate_store::redis::keys::HASH_CHARS
        && name.starts_with(prefix.as_bytes())
        && name[prefix.len()..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

fn text(v: &Value) -> String {
    match v {
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Okay => "OK".into(),
        _ => String::new(),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// Whether `name` is the service's shared reservation secret, `<prefix>secret:reservation`.
fn is_reservation_secret(name: &[u8]) -> bool {
    name.ends_with(b"secret:reservation")
}

/// `TYPE`, `PTTL`, `MEMORY USAGE`, `OBJECT ENCODING` (and for Floodgate strings `STRLEN`,
/// `GETRANGE 0 63`) for `names`, pipelined; returns the keys still there and how many vanished.
async fn inspect(
    node: &mut Node,
    names: &[Vec<u8>],
    prefix: Option<&str>,
    bar: &ProgressBar,
) -> Result<(Vec<Key>, u64), RedisAuditError> {
    let mut out = Vec::with_capacity(names.len());
    let mut vanished = 0u64;
    for chunk in names.chunks(PIPELINE) {
        let mut pipe = redis::pipe();
        // Errors come back per command (a key replaced by another type meanwhile).
        pipe.ignore_errors();
        let fg: Vec<bool> = chunk
            .iter()
            .map(|n| prefix.is_some_and(|p| is_floodgate_name(n, p)))
            .collect();
        for (name, fg) in chunk.iter().zip(&fg) {
            pipe.cmd("TYPE").arg(name);
            pipe.cmd("PTTL").arg(name);
            pipe.cmd("MEMORY").arg("USAGE").arg(name);
            pipe.cmd("OBJECT").arg("ENCODING").arg(name);
            if *fg {
                pipe.cmd("STRLEN").arg(name);
                pipe.cmd("GETRANGE").arg(name).arg(0).arg(63);
            }
        }
        let replies: Vec<redis::RedisResult<Value>> = pipe
            .query_async(&mut node.conn)
            .await
            .map_err(|e| redis_err(&node.addr, e))?;
        let mut replies = replies.into_iter().map(|r| r.unwrap_or(Value::Nil));
        for (name, fg) in chunk.iter().zip(&fg) {
            let n = if *fg { 6 } else { 4 };
            let r: Vec<Value> = replies.by_ref().take(n).collect();
            if r.len() < n {
                break;
            }
            let kind = text(&r[0]);
            if kind == "none" || kind.is_empty() {
                vanished += 1;
                continue;
            }
            let Some(bytes) = int(&r[2]) else {
                vanished += 1;
                continue;
            };
            let value = (*fg && kind == "string").then(|| {
                let len = int(&r[4]).unwrap_or(0).max(0) as u64;
                let head = match &r[5] {
                    Value::BulkString(b) => b.clone(),
                    _ => Vec::new(),
                };
                (len, head)
            });
            out.push(Key {
                name: name.clone(),
                kind,
                encoding: text(&r[3]),
                pttl: int(&r[1]).unwrap_or(-2),
                bytes: bytes.max(0) as u64,
                value,
            });
        }
        bar.inc(chunk.len() as u64);
    }
    Ok((out, vanished))
}

#[cfg(test)]
mod tests {
    use super::analyse::{layout, slots_verdict};
    use super::*;
    use crate::Level;

    #[test]
    fn layouts() {
        assert_eq!(layout(16, b"1800000000123456").0, "one integer");
        assert_eq!(layout(5, b"3:123").0, "two numbers");
        assert_eq!(layout(7, b"1:2:345").0, "three numbers");
        assert_eq!(layout(32, &[0u8; 24]).0, "a binary log");
        assert_eq!(layout(5, b"hello").0, "not a Floodgate value");
    }

    #[test]
    fn cluster_nodes_masters() {
        let text = "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922\n\
                    c3 127.0.0.1:7003@17003 slave b2 0 0 2 connected\n\
                    d4 127.0.0.1:7002@17002 master,fail - 0 0 3 connected\n";
        assert_eq!(
            masters(text),
            vec![
                ("127.0.0.1".to_string(), 7000),
                ("127.0.0.1".to_string(), 7001)
            ]
        );
    }

    #[test]
    fn password_is_redacted() {
        assert_eq!(redact("redis://:secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn split_siblings() {
        let names: Vec<Vec<u8>> = [
            "rate:alice:tokens",
            "rate:alice:ts",
            "rate:carol:tokens",
            "rate:carol:ts",
            "rate:{bob}:tokens",
            "rate:{bob}:ts",
            "fg:abc",
            "fg:abd",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let v = slots_verdict(true, &names);
        assert_eq!(v.level, Level::Danger, "{}", v.summary);
        // alice's and carol's pairs (bob's hash tag keeps his together; fg:<hash> names nobody).
        assert_eq!(v.numbers["groups"], 2);
        assert!(v.numbers["split"].as_u64().unwrap() >= 1);
        let v = slots_verdict(true, &names[4..]);
        // With one user only, which part is the user cannot be told: nothing is claimed.
        let v1 = slots_verdict(true, &names[..2]);
        assert_eq!(v1.level, Level::Ok);
        assert_eq!(
            (v.level, &v.numbers["groups"]),
            (Level::Ok, &serde_json::json!(0))
        );
    }
}
