//! Resident memory per key of a MemoryStore: fills it with N distinct 12-byte keys (default
//! 1,000,000) under one rule and prints the RSS growth per key for each algorithm.
//!
//! `cargo run --release -p floodgate-store --example memory_per_key [N]` (Linux: reads
//! `/proc/self/statm`). Each algorithm runs in a fresh store; the process is reused, so run one
//! algorithm per process (`... -- N gcra`) for the cleanest figure.

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_store::{MemoryStore, MemoryStoreConfig};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let only: Option<AlgorithmKind> = args.next().and_then(|a| a.parse().ok());
    let quota = Quota::per_minute(1_000).unwrap();
    for kind in AlgorithmKind::ALL {
        if only.is_some_and(|k| k != kind) || (only.is_none() && kind == AlgorithmKind::SlidingLog)
        {
            continue;
        }
        let policy = Policy::new(kind, quota).unwrap();
        let clock = ManualClock::new(1_700_000_000_000_000);
        let before = rss_bytes();
        let config = MemoryStoreConfig {
            max_keys: n,
            ..MemoryStoreConfig::default()
        };
        let store = MemoryStore::new(config, Arc::new(clock));
        let limiter = store.limiter("r", &policy);
        let mut key = String::with_capacity(12);
        for i in 0..n {
            key.clear();
            use std::fmt::Write;
            let _ = write!(key, "user:{i:07}");
            assert!(limiter.check(&key, 1).unwrap().allowed);
        }
        let after = rss_bytes();
        assert_eq!(store.stats().keys, n);
        println!(
            "{kind:>15}: {n} keys, {:.1} bytes/key",
            (after.saturating_sub(before)) as f64 / n as f64
        );
        drop(limiter);
        drop(store);
    }
}
