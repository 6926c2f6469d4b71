//! The Redis report as a table.

use std::fmt::Write;

use super::analyse::bytes_text;
use super::model::{RedisReport, TTL_BUCKETS};
use crate::http::render_verdicts;

/// The table of `--format table`: the scan, keys by type and encoding, the TTL distribution,
/// the totals, Floodgate's rules (with a configuration) and the verdicts.
// Over 120 lines: the table in output order (scan, types and encodings, TTLs, totals, rules,
// verdicts), each section a few lines of the same formatter.
pub fn table(r: &RedisReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "floodgate audit redis {} --pattern {:?}",
        r.url, r.pattern
    );
    let _ = writeln!(
        s,
        "{}, {} master{}: {}",
        if r.cluster {
            "Redis Cluster"
        } else {
            "standalone"
        },
        r.nodes.len(),
        if r.nodes.len() == 1 { "" } else { "s" },
        r.nodes
            .iter()
            .map(|n| format!(
                "{} (DBSIZE {}, maxmemory-policy {})",
                n.node, n.dbsize, n.maxmemory_policy
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let examined: u64 = r.nodes.iter().map(|n| n.examined).sum();
    let matched: u64 = r.nodes.iter().map(|n| n.matched).sum();
    let vanished: u64 = r.nodes.iter().map(|n| n.vanished).sum();
    let _ = writeln!(
        s,
        "SCAN examined {examined} names, {matched} match; inspected {}{}{}",
        r.inspected,
        if vanished > 0 {
            format!(" ({vanished} expired before inspection)")
        } else {
            String::new()
        },
        if r.complete {
            ": the whole keyspace, exact counts".to_string()
        } else {
            format!(": a sample, totals projected to {} keys", r.projected_keys)
        }
    );
    s.push('\n');
    let _ = writeln!(
        s,
        "{:<8} {:<10} {:>8} {:>11} {:>9} {:>9} {:>9} {:>7} {:>10} {:>11}",
        "type",
        "encoding",
        "keys",
        "bytes",
        "per key",
        "min",
        "max",
        "no TTL",
        "projected",
        "proj. bytes"
    );
    for g in &r.groups {
        let _ = writeln!(
            s,
            "{:<8} {:<10} {:>8} {:>11} {:>9} {:>9} {:>9} {:>7} {:>10} {:>11}",
            g.kind,
            g.encoding,
            g.keys,
            g.bytes,
            g.bytes / g.keys.max(1),
            g.min_bytes,
            g.max_bytes,
            g.no_ttl,
            g.projected_keys,
            bytes_text(g.projected_bytes)
        );
    }
    let _ = writeln!(
        s,
        "{:<19} {:>8} {:>11} {:>9} {:>9} {:>9} {:>7} {:>10} {:>11}",
        "all",
        r.inspected,
        r.bytes,
        r.bytes / r.inspected.max(1),
        "",
        "",
        r.no_ttl,
        r.projected_keys,
        bytes_text(r.projected_bytes)
    );
    s.push('\n');
    let _ = write!(s, "TTL  ");
    for (i, (label, _)) in TTL_BUCKETS.iter().enumerate() {
        let _ = write!(s, " {label}: {}", r.ttl[i]);
        if i + 1 < TTL_BUCKETS.len() {
            s.push(',');
        }
    }
    let _ = writeln!(s, "; no TTL: {}", r.no_ttl);
    if let Some(a) = &r.attribution {
        s.push('\n');
        let _ = writeln!(
            s,
            "Floodgate rules (prefix {:?}, {} Floodgate-named keys sampled):",
            a.prefix, a.floodgate_keys
        );
        let w = a
            .rules
            .iter()
            .map(|u| u.rule.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let pw = a
            .rules
            .iter()
            .map(|u| u.policy.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let _ = writeln!(
            s,
            "{:<w$}  {:<pw$}  {:>6}  {:>9}  {:>11}  {:>11}",
            "rule", "policy", "exact", "by layout", "bytes", "proj. bytes"
        );
        for u in &a.rules {
            let _ = writeln!(
                s,
                "{:<w$}  {:<pw$}  {:>6}  {:>9}  {:>11}  {:>11}",
                u.rule,
                u.policy,
                u.exact_keys,
                u.layout_keys,
                u.bytes,
                bytes_text(u.projected_bytes)
            );
        }
        for u in &a.unattributed {
            let who = if u.candidates.is_empty() {
                "fit no rule of the configuration (a removed or changed rule's keys expire on their TTL)".to_string()
            } else {
                format!("fit several rules: {}", u.candidates.join(", "))
            };
            let _ = writeln!(
                s,
                "not attributed: {} keys ({}, {} B) {who}",
                u.keys, u.layout, u.bytes
            );
        }
        let _ = writeln!(s, "note: {}", a.note);
    }
    s.push('\n');
    render_verdicts(&mut s, &r.verdicts);
    s
}
