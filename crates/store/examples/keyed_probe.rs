//! A keyed-check loop for instruction counts and scaling experiments, beside the criterion
//! bench (`benches/keyed.rs`), whose setup would swamp a whole-process count.
//!
//! `cargo run --release -p floodgate-store --example keyed_probe -- PATH CLOCK KEYS ITERS THREADS [disjoint]`
//!
//! - PATH: `limiter` (`KeyedLimiter::check`), `check_one` (`MemoryStore::check_one`),
//!   `governor` (governor's keyed DashMap limiter).
//! - CLOCK: `quanta` (a TSC read per check: `QuantaClock`, governor's default) or `coarse`
//!   (1 ms: `CoarseClock`, governor's `QuantaUpkeepClock`).
//! - KEYS `user:000000`.. checked in a fixed uniform random order, ITERS checks per thread.
//! - `disjoint`: each thread checks its own rule (its own table or limiter) instead of all
//!   threads sharing one, so no cache line is written by two threads.
//!
//! Prints nanoseconds per check (wall time over all threads), the fastest and the median of
//! 20 rounds. For instruction counts run it
//! under `valgrind --tool=callgrind --toggle-collect='*measured*'`: only `measured` counts.
//! Quota: GCRA 1/s with a burst of 1,000,000, so every check admits and writes state.

#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::{AlgorithmKind, Clock, CoarseClock, Policy, QuantaClock, Quota};
use floodgate_store::{CheckItem, MemoryStore, MemoryStoreConfig};
use governor::clock::QuantaUpkeepClock;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;

fn sequence(n: usize, len: usize) -> Vec<u32> {
    let mut x = 0x0f10_0d6a_7e00_0001u64 ^ n as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as u32
        })
        .collect()
}

#[inline(never)]
fn measured(check: &dyn Fn(usize) -> bool, seq: &[u32], iters: usize) -> u64 {
    let mut admitted = 0;
    for i in 0..iters {
        admitted += u64::from(check(seq[i % seq.len()] as usize));
    }
    admitted
}

// Over 120 lines: the probe's cases in output order, each printed as it is measured.
#[allow(clippy::disallowed_methods)] // measures elapsed wall time
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().map_or("limiter", String::as_str).to_string();
    let clock_name = args.get(1).map_or("quanta", String::as_str).to_string();
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let iters: usize = args
        .get(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let threads: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    let disjoint = args.get(5).is_some_and(|a| a == "disjoint");

    let keys: Vec<String> = (0..n).map(|i| format!("user:{i:06}")).collect();
    let seq = sequence(n, 1 << 20);
    let quota = Quota::with_burst(1, 1_000_000, 1_000_000).expect("valid");
    let policy = Policy::new(AlgorithmKind::Gcra, quota).expect("fits");
    let clock: Arc<dyn Clock> = match clock_name.as_str() {
        "coarse" => Arc::new(CoarseClock::new(Duration::from_millis(1))),
        _ => Arc::new(QuantaClock::new()),
    };
    let store = MemoryStore::new(
        MemoryStoreConfig {
            max_keys: 4 * n.max(1000),
            ..MemoryStoreConfig::default()
        },
        clock,
    );
    let rules: Vec<String> = (0..threads)
        .map(|t| {
            if disjoint {
                format!("rule-{t}")
            } else {
                "rule".into()
            }
        })
        .collect();
    let gq = governor::Quota::per_second(NonZeroU32::MIN)
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero"));

    // One upkeep thread per process: governor refuses a second.
    let upkeep = (path == "governor" && clock_name == "coarse").then(|| {
        QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep thread")
    });
    let checks: Vec<Box<dyn Fn(usize) -> bool + Send + Sync + '_>> = (0..threads)
        .map(|t| -> Box<dyn Fn(usize) -> bool + Send + Sync + '_> {
            let keys = &keys;
            match path.as_str() {
                "check_one" => {
                    let (store, policy, rule) = (&store, &policy, rules[t].clone());
                    Box::new(move |i| {
                        let item = CheckItem {
                            rule: &rule,
                            policy,
                            key: &keys[i],
                            cost: 1,
                        };
                        store.check_one(&item).expect("fits").allowed
                    })
                }
                "governor" if clock_name == "coarse" => {
                    let upkeep = upkeep.clone().expect("one upkeep clock");
                    let g: RateLimiter<String, DashMapStateStore<String>, QuantaUpkeepClock> =
                        RateLimiter::dashmap_with_clock(gq, upkeep);
                    let g = Arc::new(g);
                    Box::new(move |i| g.check_key(&keys[i]).is_ok())
                }
                "governor" => {
                    let g: governor::DefaultKeyedRateLimiter<String> = RateLimiter::keyed(gq);
                    let g = Arc::new(g);
                    Box::new(move |i| g.check_key(&keys[i]).is_ok())
                }
                _ => {
                    let limiter = store.limiter(&rules[t], &policy);
                    Box::new(move |i| limiter.check(&keys[i], 1).expect("fits").allowed)
                }
            }
        })
        .collect();
    // Shared governor: one limiter for all threads unless disjoint.
    let checks: Vec<Box<dyn Fn(usize) -> bool + Send + Sync + '_>> =
        if path == "governor" && !disjoint {
            let first = Arc::new(checks.into_iter().next().expect("one thread at least"));
            (0..threads)
                .map(|_| -> Box<dyn Fn(usize) -> bool + Send + Sync + '_> {
                    let f = Arc::clone(&first);
                    Box::new(move |i| f(i))
                })
                .collect()
        } else {
            checks
        };
    // Every key is held before measuring.
    for check in &checks {
        for i in 0..n {
            assert!(check(i));
        }
    }
    // 20 rounds of ITERS / 20 checks; the fastest round is the figure least disturbed by
    // other processes on the machine, the median the typical one.
    let rounds = 20;
    let per_round = (iters / rounds).max(1);
    let mut times: Vec<f64> = (0..rounds)
        .map(|r| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for (t, check) in checks.iter().enumerate() {
                    let offset = (t * seq.len() / threads + r * per_round) % seq.len();
                    let seq = &seq[offset..];
                    s.spawn(move || black_box(measured(&**check, seq, per_round)));
                }
            });
            start.elapsed().as_nanos() as f64 / (per_round * threads) as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "{path} {clock_name} keys={n} threads={threads}{} : min {:.1} median {:.1} ns/check (aggregate)",
        if disjoint { " disjoint" } else { "" },
        times[0],
        times[rounds / 2]
    );
}
