//! What the inspected keys add up to: groups by TTL and type, attribution to the rules, and
//! the verdicts.

use std::collections::{BTreeMap, HashMap, HashSet};

use floodgate_core::AlgorithmKind;

use super::model::{
    is_floodgate_name, redact, Attribution, FloodgateRules, Group, Key, NodeScan, RedisOptions,
    RedisReport, RuleSpec, RuleUsage, Unattributed, TTL_BUCKETS,
};
use crate::verdict::{Level, Verdict};

pub(super) fn ttl_class(pttl_ms: i64) -> usize {
    let ms = pttl_ms.max(0) as u64;
    TTL_BUCKETS
        .iter()
        .position(|(_, hi)| ms < *hi)
        .unwrap_or(TTL_BUCKETS.len() - 1)
}

pub(super) fn bytes_text(b: u64) -> String {
    match b {
        _ if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        _ if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        _ if b >= 10 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{b} B"),
    }
}

/// The value layouts Floodgate writes, and the algorithms each may belong to.
pub(super) fn layout(len: u64, head: &[u8]) -> (&'static str, Vec<AlgorithmKind>) {
    use AlgorithmKind::*;
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let all_text = len as usize == head.len();
    if all_text && digits(head) {
        return ("one integer", vec![FixedWindow, Gcra]);
    }
    // GCRA's compact form (docs/redis.md, "Values"): no other value is negative.
    if all_text && head.first() == Some(&b'-') && digits(&head[1..]) {
        return ("one negative integer", vec![Gcra]);
    }
    if all_text {
        let parts: Vec<&[u8]> = head.split(|b| *b == b':').collect();
        if parts.iter().all(|p| digits(p)) {
            match parts.len() {
                2 => {
                    return (
                        "two numbers",
                        vec![TokenBucket, LeakyBucket, FixedWindow, Gcra],
                    )
                }
                3 => return ("three numbers", vec![SlidingWindow]),
                _ => {}
            }
        }
    }
    if len >= 24 && (len - 24).is_multiple_of(8) {
        return ("a binary log", vec![SlidingLog]);
    }
    ("not a Floodgate value", Vec::new())
}

/// Whether a two-number value can belong to `rule` (fixed window and GCRA write one only for
/// factors above 2^23).
fn two_numbers_possible(rule: &RuleSpec) -> bool {
    let q = rule.policy.quota();
    match rule.policy.kind() {
        AlgorithmKind::FixedWindow => q.limit() + 1 > 1 << 23,
        AlgorithmKind::Gcra => q.emission_interval().1 > 1 << 23,
        _ => true,
    }
}

fn attribute(fg: &FloodgateRules, keys: &[(usize, Key)], projection: f64) -> Attribution {
    let mut exact: HashMap<String, (usize, String)> = HashMap::new();
    for (i, r) in fg.rules.iter().enumerate() {
        for k in r.known_keys.iter().chain(fg.known_keys.iter()) {
            let name = floodgate_store::redis::keys::state_key(&fg.prefix, &r.name, &r.policy, k);
            exact.insert(name, (i, k.clone()));
        }
    }
    let mut rules: Vec<RuleUsage> = fg
        .rules
        .iter()
        .map(|r| RuleUsage {
            rule: r.name.clone(),
            policy: format!("{} {}", r.policy.kind(), r.policy.quota()),
            ..RuleUsage::default()
        })
        .collect();
    let mut unattributed: BTreeMap<(Vec<String>, String), Unattributed> = BTreeMap::new();
    let mut floodgate_keys = 0;
    for (_, k) in keys {
        if !is_floodgate_name(&k.name, &fg.prefix) {
            continue;
        }
        floodgate_keys += 1;
        let name = String::from_utf8_lossy(&k.name).into_owned();
        if let Some((i, key)) = exact.get(&name) {
            let u = &mut rules[*i];
            u.exact_keys += 1;
            u.bytes += k.bytes;
            u.found_keys.push(key.clone());
            continue;
        }
        let (layout_name, kinds) = match (&k.kind[..], &k.value) {
            ("string", Some((len, head))) => layout(*len, head),
            _ => ("not a string", Vec::new()),
        };
        let candidates: Vec<usize> = fg
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| kinds.contains(&r.policy.kind()))
            .filter(|(_, r)| layout_name != "two numbers" || two_numbers_possible(r))
            // Every Floodgate key has a TTL no longer than its rule's longest.
            .filter(|(_, r)| k.pttl >= 0 && k.pttl as u64 <= r.max_ttl_ms())
            .map(|(i, _)| i)
            .collect();
        if let [i] = candidates[..] {
            let u = &mut rules[i];
            u.layout_keys += 1;
            u.bytes += k.bytes;
        } else {
            let names: Vec<String> = candidates
                .iter()
                .map(|i| fg.rules[*i].name.clone())
                .collect();
            let e = unattributed
                .entry((names.clone(), layout_name.to_string()))
                .or_insert_with(|| Unattributed {
                    candidates: names,
                    layout: layout_name.to_string(),
                    ..Unattributed::default()
                });
            e.keys += 1;
            e.bytes += k.bytes;
        }
    }
    for r in &mut rules {
        r.projected_bytes = (r.bytes as f64 * projection).round() as u64;
        r.found_keys.sort();
    }
    Attribution {
        prefix: fg.prefix.clone(),
        floodgate_keys,
        rules,
        unattributed: unattributed.into_values().collect(),
        note: "Floodgate names a key by a hash of rule, policy and partition key, so a name alone \
               does not say its rule: keys are attributed exactly when recomputed from a known \
               partition key (a rule keyed by a constant, or --key), otherwise by value layout \
               and TTL only when exactly one rule of the configuration fits; keys that fit several \
               rules are listed as ambiguous with their candidates, never assigned to one"
            .into(),
    }
}

/// Groups, totals, projections and verdicts.
// Over 120 lines: one report in the order it is read (totals, groups, then the verdicts on
// keys without TTL, sorted-set logs, the eviction policy and slots), each verdict reading the
// same groups, totals and projection computed at the top.
pub(super) fn analyse(
    opts: &RedisOptions,
    cluster: bool,
    nodes: Vec<NodeScan>,
    keys: Vec<(usize, Key)>,
    matched_names: &[Vec<u8>],
) -> RedisReport {
    let inspected = keys.len() as u64;
    let complete = nodes
        .iter()
        .all(|n| n.complete && n.inspected + n.vanished == n.matched);
    let projected_keys: u64 = nodes.iter().map(|n| n.projected_keys).sum();
    let bytes: u64 = keys.iter().map(|(_, k)| k.bytes).sum();
    // Each inspected key stands for projected / inspected keys.
    let projection = if inspected == 0 {
        0.0
    } else {
        projected_keys as f64 / inspected as f64
    };
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    let mut ttl = vec![0u64; TTL_BUCKETS.len()];
    let mut no_ttl = 0u64;
    for (_, k) in &keys {
        let g = groups
            .entry((k.kind.clone(), k.encoding.clone()))
            .or_insert_with(|| Group {
                kind: k.kind.clone(),
                encoding: k.encoding.clone(),
                min_bytes: u64::MAX,
                ttl: vec![0; TTL_BUCKETS.len()],
                ..Group::default()
            });
        g.keys += 1;
        g.bytes += k.bytes;
        g.min_bytes = g.min_bytes.min(k.bytes);
        g.max_bytes = g.max_bytes.max(k.bytes);
        if k.pttl == -1 {
            g.no_ttl += 1;
            no_ttl += 1;
        } else {
            g.ttl[ttl_class(k.pttl)] += 1;
            ttl[ttl_class(k.pttl)] += 1;
        }
    }
    let mut groups: Vec<Group> = groups
        .into_values()
        .map(|mut g| {
            g.projected_keys = (g.keys as f64 * projection).round() as u64;
            g.projected_bytes = (g.bytes as f64 * projection).round() as u64;
            g
        })
        .collect();
    groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
    let projected_bytes = (bytes as f64 * projection).round() as u64;
    let scope = if complete {
        format!("all {inspected} keys matching {:?}", opts.pattern)
    } else {
        format!(
            "{inspected} sampled keys matching {:?} (projected to {projected_keys} keys)",
            opts.pattern
        )
    };

    let mut verdicts = Vec::new();
    // Keys without TTL.
    let v = if inspected == 0 {
        Verdict::new(
            "no_ttl",
            Level::Inconclusive,
            format!("no key matches {:?}: nothing to check", opts.pattern),
        )
    } else if no_ttl > 0 {
        let proj = (no_ttl as f64 * projection).round() as u64;
        let b: u64 = keys
            .iter()
            .filter(|(_, k)| k.pttl == -1)
            .map(|(_, k)| k.bytes)
            .sum();
        Verdict::new(
            "no_ttl",
            Level::Danger,
            format!(
                "{no_ttl} of {scope} have no TTL ({}{}): they live forever, one per user who ever called",
                bytes_text(b),
                if complete { String::new() } else { format!("; projected {proj} keys, {}", bytes_text((b as f64 * projection) as u64)) }
            ),
        )
        .with("keys", no_ttl)
        .with("bytes", b)
        .with("projected_keys", proj)
    } else {
        Verdict::new(
            "no_ttl",
            Level::Ok,
            format!("every one of {scope} has a TTL"),
        )
    };
    verdicts.push(v.with("inspected", inspected));

    // Sorted-set logs.
    let zsets: Vec<&Key> = keys
        .iter()
        .map(|(_, k)| k)
        .filter(|k| k.kind == "zset")
        .collect();
    let v = if zsets.is_empty() {
        Verdict::new(
            "sorted_set_logs",
            Level::Ok,
            format!("no sorted sets among {scope}"),
        )
    } else {
        let zb: u64 = zsets.iter().map(|k| k.bytes).sum();
        let max = zsets.iter().map(|k| k.bytes).max().unwrap_or(0);
        let n = zsets.len() as u64;
        Verdict::new(
            "sorted_set_logs",
            Level::Danger,
            format!(
                "{n} of {scope} are sorted sets (a sliding log, one member per request): {} in all, {} per key on average, {} the largest{}; the memory grows with the limit (92,184 B per user at 1,000/min in the documents)",
                bytes_text(zb),
                bytes_text(zb / n),
                bytes_text(max),
                if complete { String::new() } else { format!(", projected {}", bytes_text((zb as f64 * projection) as u64)) }
            ),
        )
        .with("keys", n)
        .with("bytes", zb)
        .with("max_bytes", max)
    };
    verdicts.push(v);

    // Eviction policy.
    let evicting: Vec<&NodeScan> = nodes
        .iter()
        .filter(|n| {
            n.maxmemory_policy.starts_with("allkeys") || n.maxmemory_policy.starts_with("volatile")
        })
        .collect();
    // Each policy once, with the nodes that have it: "noeviction on 127.0.0.1:6401".
    let mut by_policy: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for n in &nodes {
        let policy = if n.maxmemory_policy.is_empty() {
            "?"
        } else {
            &n.maxmemory_policy
        };
        by_policy.entry(policy).or_default().push(&n.node);
    }
    let policies: Vec<String> = by_policy
        .iter()
        .map(|(policy, on)| format!("{policy} on {}", on.join(", ")))
        .collect();
    let v = if let Some(n) = evicting.first() {
        let what = if n.maxmemory_policy.starts_with("allkeys") {
            "evicts any key"
        } else {
            "evicts keys with a TTL, which rate-limit keys should all have"
        };
        Verdict::new(
            "eviction",
            Level::Danger,
            format!(
                "maxmemory-policy {} on {} of {} node(s) {what}: an evicted counter is a silent reset (a fresh allowance nobody notices){}; use noeviction",
                n.maxmemory_policy,
                evicting.len(),
                nodes.len(),
                if n.maxmemory == 0 { " once maxmemory is set (it is 0 now)" } else { "" }
            ),
        )
        .with("policies", policies)
    } else {
        Verdict::new(
            "eviction",
            Level::Ok,
            format!(
                "maxmemory-policy {}: nothing is evicted",
                policies.join("; ")
            ),
        )
        .with("policies", policies)
    };
    verdicts.push(v);

    // The service's reservation claims (`<prefix>claim:<hash>`, one per settled token, with
    // the token's TTL): Floodgate's keys, but no counter of any rule.
    let prefix = opts.floodgate.as_ref().map_or("fg:", |f| f.prefix.as_str());
    let claim = format!("{prefix}claim:");
    let claims = keys
        .iter()
        .filter(|(_, k)| k.name.starts_with(claim.as_bytes()))
        .count() as u64;
    if claims > 0 {
        verdicts.push(
            Verdict::new(
                "claims",
                Level::Ok,
                format!(
                    "{claims} sampled {} {claim}*: reservation claims (one per settled \
                     reservation token, expiring with it), not counters of a rule",
                    if claims == 1 { "key is" } else { "keys are" }
                ),
            )
            .with("claims", claims),
        );
    }

    // One user's keys in different slots.
    verdicts.push(slots_verdict(cluster, matched_names));

    let attribution = opts
        .floodgate
        .as_ref()
        .map(|fg| attribute(fg, &keys, projection));
    if let Some(a) = &attribution {
        let exact: u64 = a.rules.iter().map(|r| r.exact_keys).sum();
        let by_layout: u64 = a.rules.iter().map(|r| r.layout_keys).sum();
        let left: u64 = a.unattributed.iter().map(|u| u.keys).sum();
        let level = if left > 0 { Level::Note } else { Level::Ok };
        verdicts.push(
            Verdict::new(
                "attribution",
                level,
                format!(
                    "{} Floodgate-named keys: {exact} attributed exactly (name recomputed), {by_layout} by value layout and TTL, {left} not attributable to one rule (see the table)",
                    a.floodgate_keys
                ),
            )
            .with("floodgate_keys", a.floodgate_keys)
            .with("exact", exact)
            .with("by_layout", by_layout)
            .with("unattributed", left),
        );
    }

    RedisReport {
        url: redact(&opts.url),
        pattern: opts.pattern.clone(),
        cluster,
        nodes,
        inspected,
        complete,
        bytes,
        projected_keys,
        projected_bytes,
        no_ttl,
        ttl,
        groups,
        attribution,
        verdicts,
    }
}

/// One user's keys on a cluster must share a slot (a hash tag), or a script touching two of
/// them fails with CROSSSLOT. Which part of a name is the user is guessed per name shape (the
/// number of `:`/`.`-separated parts): the position with the most distinct values
/// (`rate:{kind}:{user}` has few kinds and many users; `rate:{user}:{field}` many users and
/// few fields). Names sharing that part are one user's keys; names with a hash tag are left
/// out (their tag decides the slot), and so are names of fewer than three parts (`fg:<hash>`:
/// a prefix and one part name nobody). It takes several users in the sample to tell.
pub(super) fn slots_verdict(cluster: bool, names: &[Vec<u8>]) -> Verdict {
    let split_name = |n: &[u8]| -> Vec<Vec<u8>> {
        n.split(|b| *b == b':' || *b == b'.')
            .map(<[u8]>::to_vec)
            .collect()
    };
    let has_tag = |n: &[u8]| {
        n.iter().position(|b| *b == b'{').is_some_and(|o| {
            n[o + 1..]
                .iter()
                .position(|b| *b == b'}')
                .is_some_and(|c| c > 0)
        })
    };
    // Part count -> (name, its parts).
    type Shaped<'a> = Vec<(&'a [u8], Vec<Vec<u8>>)>;
    let mut shapes: BTreeMap<usize, Shaped<'_>> = BTreeMap::new();
    for n in names.iter().filter(|n| !has_tag(n)) {
        let parts = split_name(n);
        if parts.len() >= 3 {
            shapes.entry(parts.len()).or_default().push((n, parts));
        }
    }
    let mut groups = 0u64;
    let mut split = 0u64;
    let mut example: Option<(String, String)> = None;
    for (len, members) in &shapes {
        // The user's position: most distinct values (ties: the earlier position). Position 0
        // (the prefix) is never it.
        let Some(pos) = (1..*len).max_by_key(|p| {
            let distinct: HashSet<&Vec<u8>> = members.iter().map(|(_, parts)| &parts[*p]).collect();
            (distinct.len(), std::cmp::Reverse(*p))
        }) else {
            continue;
        };
        let mut users: HashMap<&Vec<u8>, Vec<&[u8]>> = HashMap::new();
        for (n, parts) in members {
            users.entry(&parts[pos]).or_default().push(n);
        }
        for keys in users.values().filter(|k| k.len() > 1) {
            groups += 1;
            let slot0 = floodgate_store::redis::keys::slot(keys[0]);
            if let Some(other) = keys
                .iter()
                .find(|m| floodgate_store::redis::keys::slot(m) != slot0)
            {
                split += 1;
                if example.is_none() {
                    example = Some((
                        String::from_utf8_lossy(keys[0]).into_owned(),
                        String::from_utf8_lossy(other).into_owned(),
                    ));
                }
            }
        }
    }
    let v = match (&example, cluster) {
        (None, _) => Verdict::new(
            "cluster_slots",
            Level::Ok,
            format!("{groups} groups of one user's keys (names sharing their user part; hash-tagged names left out) found, none split over slots"),
        ),
        (Some((a, b)), true) => Verdict::new(
            "cluster_slots",
            Level::Danger,
            format!("{split} of {groups} groups of one user's keys lie in different slots (e.g. {a} and {b}): a script touching both fails with CROSSSLOT; put the user in a hash tag ({{user}})"),
        ),
        (Some((a, b)), false) => Verdict::new(
            "cluster_slots",
            Level::Note,
            format!("{split} of {groups} groups of one user's keys would lie in different slots on a Redis Cluster (e.g. {a} and {b}); fine on this standalone server, a CROSSSLOT error after a move to a cluster"),
        ),
    };
    v.with("groups", groups).with("split", split)
}
