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
//! GCRA; one negative integer: GCRA; two numbers: token or leaky bucket; three: sliding window counter; a binary log:
//! sliding log) and a TTL no longer than the rule's longest leave exactly one rule of the
//! configuration; when several rules fit, the key is reported as ambiguous with every
//! candidate, never assigned to one of them.

mod analyse;
mod model;
mod render;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, Value};

use analyse::analyse;
use model::{is_floodgate_name, redact, Key};
pub use model::{
    Attribution, FloodgateRules, Group, NodeScan, RedisAuditError, RedisOptions, RedisReport,
    RuleSpec, RuleUsage, Unattributed, TTL_BUCKETS,
};
pub use render::table;

/// Keys inspected per pipeline round trip.
const PIPELINE: usize = 100;

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
        assert_eq!(
            layout(20, b"-3600000000246912001"),
            (
                "one negative integer",
                vec![floodgate_core::AlgorithmKind::Gcra]
            )
        );
        assert_eq!(layout(1, b"-").0, "not a Floodgate value");
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
