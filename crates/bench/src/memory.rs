//! `--what memory`: bytes per key for every algorithm, measured as the resident-set growth of a
//! fresh child process that fills a `MemoryStore` (and, for comparison, governor's keyed
//! limiter) with `--keys` keys of 12 bytes (`user:0000000`).
//!
//! A fresh process per probe keeps one probe's freed memory out of the next. The child runs
//! with glibc's `mmap_threshold` fixed at 128 KiB, so hash tables outgrown while filling are
//! returned to the system instead of staying resident: what remains is what the keys cost,
//! allocator overhead and empty table slots included.

use std::process::Command;
use std::sync::Arc;

use anyhow::{bail, Context};
use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_store::{MemoryStore, MemoryStoreConfig};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::report::{num, Section};
use super::Progress;

/// What a probe child prints (one JSON line on stdout).
#[derive(Debug, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Resident set before the first key, bytes.
    pub rss_before: u64,
    /// Resident set after the last key, bytes.
    pub rss_after: u64,
    /// Keys held at the end (from the store's own count).
    pub keys: usize,
}

/// Resident set size of this process in bytes (`VmRSS` in `/proc/self/status`).
///
/// # Errors
/// When `/proc` is not readable (not Linux).
pub fn rss() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("memory bench needs /proc/self/status (Linux)")?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kib * 1024)
}

/// The probe, run inside the child: `target` is an algorithm name or `governor`. Every key gets
/// `fill` consuming checks (at distinct microseconds for the sliding log, so none merge).
///
/// # Errors
/// Unknown target, unreadable RSS, or a check error.
pub fn probe(target: &str, keys: usize, limit: u64, fill: u64) -> anyhow::Result<ProbeResult> {
    let mut key = String::with_capacity(16);
    let write_key = |key: &mut String, i: usize| {
        use std::fmt::Write as _;
        key.clear();
        let _ = write!(key, "user:{i:07}");
    };
    if target == "governor" {
        let quota = governor::Quota::per_minute(
            std::num::NonZeroU32::new(u32::try_from(limit).unwrap_or(u32::MAX).max(1))
                .expect("non-zero"),
        );
        let limiter: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota);
        let rss_before = rss()?;
        for i in 0..keys {
            write_key(&mut key, i);
            let _ = limiter.check_key(&key);
        }
        let rss_after = rss()?;
        return Ok(ProbeResult {
            rss_before,
            rss_after,
            keys: limiter.len(),
        });
    }
    let kind: AlgorithmKind = target.parse().map_err(anyhow::Error::msg)?;
    let policy = Policy::new(kind, Quota::per_minute(limit)?)?;
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::new(
        MemoryStoreConfig {
            max_keys: keys.saturating_mul(2).max(1),
            ..MemoryStoreConfig::default()
        },
        Arc::new(clock.clone()),
    );
    let distinct_times = kind == AlgorithmKind::SlidingLog;
    // The rule's table is created here, before the first RSS reading (a few KiB of shards).
    let limiter = store.limiter("per-user", &policy);
    let rss_before = rss()?;
    for _ in 0..fill {
        for i in 0..keys {
            write_key(&mut key, i);
            if distinct_times {
                clock.advance(1);
            }
            limiter.check(&key, 1)?;
        }
    }
    let rss_after = rss()?;
    Ok(ProbeResult {
        rss_before,
        rss_after,
        keys: store.stats().keys,
    })
}

/// Runs one probe in a fresh child process.
fn run_child(target: &str, keys: usize, limit: u64, fill: u64) -> anyhow::Result<ProbeResult> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let out = Command::new(exe)
        .args(["bench", "--memory-probe", target])
        .args(["--keys", &keys.to_string()])
        .args(["--limit", &limit.to_string()])
        .args(["--fill", &fill.to_string()])
        .env("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072")
        .output()
        .context("starting the memory probe")?;
    if !out.status.success() {
        bail!(
            "memory probe {target} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("reading the memory probe's result")
}

/// The documents' figures for 1M users at 1,000 per minute in Redis (their "MB" are MiB:
/// 56 B x 1M = 53.4). Their table has no sliding window counter row; its figure here is
/// their 56 B per user x 1M, the same projection (noted under the table).
fn documents_1m_at_1000(kind: Option<AlgorithmKind>) -> Option<f64> {
    match kind? {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => Some(53.4),
        AlgorithmKind::TokenBucket => Some(68.7),
        AlgorithmKind::SlidingLog => Some(87_913.5),
        _ => None,
    }
}

/// The documents' Redis bytes per user (fixed 56, token 72, sliding window 56, log 92,184 at
/// 1,000 per minute).
fn documents_redis_bytes(kind: Option<AlgorithmKind>, limit: u64) -> Option<f64> {
    match kind? {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => Some(56.0),
        AlgorithmKind::TokenBucket => Some(72.0),
        AlgorithmKind::SlidingLog if limit == 1_000 => Some(92_184.0),
        _ => None,
    }
}

/// Measures every algorithm in `kinds` plus governor; `keys` keys (the sliding log's full-log
/// probe uses fewer, so that `keys x limit` remembered requests fit in memory and in one period).
///
/// # Errors
/// A probe that fails (e.g. not on Linux).
pub fn run(
    kinds: &[AlgorithmKind],
    keys: usize,
    limit: u64,
    progress: &Progress,
) -> anyhow::Result<Section> {
    let mut section = Section::new(
        "memory",
        format!("Memory: bytes per key, {keys} keys of 12 bytes, quota {limit}/min"),
        &[
            "algorithm",
            "keys",
            "requests remembered per key",
            "bytes per key",
            &format!("projected: 1M users at {limit}/min (MiB)"),
            "source documents, Redis (bytes/user)",
            "source documents, Redis, 1M users (MiB)",
        ],
    );
    let mut log_base = None;
    let mut targets: Vec<(String, Option<AlgorithmKind>, usize, u64)> = Vec::new();
    for &kind in kinds {
        if kind == AlgorithmKind::SlidingLog {
            targets.push((kind.as_str().into(), Some(kind), keys, 1));
            // keys x limit microseconds must stay inside one minute, and in memory.
            let log_keys = keys.min((50_000_000 / limit.max(1)) as usize).max(1);
            targets.push((kind.as_str().into(), Some(kind), log_keys, limit));
        } else {
            targets.push((kind.as_str().into(), Some(kind), keys, 1));
        }
    }
    targets.push(("governor".into(), None, keys, 1));

    for (name, kind, n, fill) in targets {
        progress.step(format!("memory: {name}, {n} keys x {fill}"));
        let r = run_child(&name, n, limit, fill)?;
        let per_key = r.rss_after.saturating_sub(r.rss_before) as f64 / r.keys.max(1) as f64;
        if kind == Some(AlgorithmKind::SlidingLog) {
            if fill == 1 {
                log_base = Some(per_key);
            } else if let Some(base) = log_base {
                section.note(format!(
                    "Sliding log: {:.1} bytes per remembered request above the empty-log key \
                     ({per_key:.0} B at {fill} remembered, {base:.0} B at 1).",
                    (per_key - base) / (fill - 1).max(1) as f64
                ));
            }
        }
        let label = match kind {
            Some(_) => name.clone(),
            None => "governor 0.10 keyed (GCRA, String keys, peer)".to_string(),
        };
        // The documents' sliding-log figures are for a full log; compare only that row.
        let full_row = kind != Some(AlgorithmKind::SlidingLog) || fill == limit;
        let documents_total = documents_1m_at_1000(kind).filter(|_| limit == 1_000 && full_row);
        let documents_bytes = documents_redis_bytes(kind, limit).filter(|_| full_row);
        section.row(vec![
            Value::from(label),
            Value::from(r.keys),
            Value::from(fill),
            num(per_key, 1),
            num(per_key * 1e6 / f64::from(1u32 << 20), 1),
            documents_bytes.map_or(Value::Null, |b| num(b, 0)),
            documents_total.map_or(Value::Null, |m| num(m, 1)),
        ]);
    }
    section.note(
        "Bytes per key: resident-set growth of a fresh process while the keys are added, \
         divided by the keys held; it includes hash-table slack (tables are 44-88% full), \
         allocator overhead and, for the sliding log, the log buffers. The projection is bytes \
         per key x 1,000,000 (in MiB, the unit behind the documents' \"MB\"); the documents' \
         1M-user column for the sliding window counter is their 56 B per user x 1M (their \
         table has no such row). The documents' \
         figures are Redis memory for Lua-script limiters, quoted as theirs; their in-process \
         (JVM) figures are 134 B per key for the token bucket and 2,967 B for the sliding log at \
         limit 100.",
    );
    Ok(section)
}
