//! Keyed in-process checks, one run: Floodgate's `KeyedLimiter` beside governor's keyed
//! limiter and limitador's in-memory storage.
//!
//! Run through `scripts/peers` (or `cargo bench --bench keyed` in this folder).
//!
//! Keys are `String`s `user:000000` .. (11 bytes), 1k or 1M of them; every key is checked once
//! before measuring, so each map is at its steady size. Each case replays a fixed uniform
//! sequence of 2^20 key indices on 1 thread or on 2 threads sharing one limiter (the two
//! threads start half the sequence apart); with 2 threads the time is wall time divided by all
//! checks of both threads.
//!
//! Algorithms, matched per peer: governor is GCRA, so beside it Floodgate's GCRA (quota 1 per
//! second, burst 1,000,000 for both: every check admits and writes); limitador's counters are
//! fixed windows, so beside it Floodgate's fixed window (1,000,000 per 1,000 s for both).
//! Clocks: each library's default real clock (governor: quanta, a TSC read; Floodgate:
//! `QuantaClock`, a TSC read; limitador: `SystemTime`, its only clock).
//!
//! limitador is measured at its storage layer (`CounterStorage::check_and_update` of
//! `InMemoryStorage`, the engine under limitador-server and its `RateLimiter`), with each key's
//! `Counter` built once before measuring (one per key and thread, as the call takes the counters
//! mutably to annotate them): the cost of its `RateLimiter`'s per-request CEL evaluation and
//! `Counter` construction is left out, which favours limitador.

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

#[cfg(feature = "limitador")]
use std::collections::HashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate_core::{AlgorithmKind, Clock, Policy, QuantaClock, Quota};
use floodgate_store::{MemoryStore, MemoryStoreConfig};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
#[cfg(feature = "limitador")]
use limitador::{
    counter::Counter,
    limit::{Context, Limit},
    storage::in_memory::InMemoryStorage,
    storage::{Authorization, CounterStorage},
};

const SEQUENCE: usize = 1 << 20;

/// splitmix64: a fixed generator so every run replays the same sequence.
fn sequence(n: usize) -> Vec<u32> {
    let mut s = 0x0f10_0d6a_7e00_0001_u64 ^ n as u64;
    (0..SEQUENCE)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % n as u64) as u32
        })
        .collect()
}

/// Runs `check(thread, key index)` `iters` times on each of `threads` threads; wall time per
/// check.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed wall time
fn run<F: Fn(usize, usize) -> bool + Sync>(
    seq: &[u32],
    threads: usize,
    iters: u64,
    check: &F,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut i = t * SEQUENCE / threads;
                let mut admitted = 0u64;
                for _ in 0..iters {
                    admitted += u64::from(check(t, seq[i] as usize));
                    i = (i + 1) & (SEQUENCE - 1);
                }
                black_box(admitted);
            });
        }
    });
    start.elapsed() / threads as u32
}

// Over 120 lines: one criterion group, the same keyed workload on each peer library in turn,
// kept side by side so the cases stay comparable.
fn keyed(c: &mut Criterion) {
    let clock: Arc<dyn Clock> = Arc::new(QuantaClock::new());
    let gcra = Policy::new(
        AlgorithmKind::Gcra,
        Quota::with_burst(1, 1_000_000, 1_000_000).expect("valid quota"),
    )
    .expect("fits");
    let fixed = Policy::new(
        AlgorithmKind::FixedWindow,
        Quota::new(1_000_000, 1_000_000_000).expect("valid quota"),
    )
    .expect("fits");
    let governor_quota = governor::Quota::per_second(NonZeroU32::MIN)
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero"));

    for (n, label) in [(1_000, "1k"), (1_000_000, "1m")] {
        let keys: Vec<String> = (0..n).map(|i| format!("user:{i:06}")).collect();
        let seq = sequence(n);
        let mut g = c.benchmark_group(format!("peers/{label}"));
        g.throughput(Throughput::Elements(1));
        if n >= 100_000 {
            g.sample_size(20);
        }

        // Interleaved per thread count: A B C D, then again with 2 threads.
        for threads in [1, 2] {
            let store = MemoryStore::new(
                MemoryStoreConfig {
                    max_keys: 2_000_000,
                    ..MemoryStoreConfig::default()
                },
                clock.clone(),
            );
            let limiter = store.limiter("per-user", &gcra);
            for key in &keys {
                assert!(limiter.check(key, 1).expect("fits").allowed);
            }
            g.bench_function(format!("floodgate_gcra/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    run(&seq, threads, iters, &|_, i| {
                        limiter.check(&keys[i], 1).expect("fits").allowed
                    })
                })
            });
            drop(limiter);
            drop(store);

            let governor: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(governor_quota);
            for key in &keys {
                assert!(governor.check_key(key).is_ok());
            }
            g.bench_function(format!("governor/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    run(&seq, threads, iters, &|_, i| {
                        governor.check_key(&keys[i]).is_ok()
                    })
                })
            });
            drop(governor);

            let store = MemoryStore::new(
                MemoryStoreConfig {
                    max_keys: 2_000_000,
                    ..MemoryStoreConfig::default()
                },
                clock.clone(),
            );
            let limiter = store.limiter("per-user", &fixed);
            for key in &keys {
                assert!(limiter.check(key, 1).expect("fits").allowed);
            }
            g.bench_function(format!("floodgate_fixed_window/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    run(&seq, threads, iters, &|_, i| {
                        limiter.check(&keys[i], 1).expect("fits").allowed
                    })
                })
            });
            drop(limiter);
            drop(store);

            #[cfg(feature = "limitador")]
            {
                let storage = InMemoryStorage::new(2_000_000);
                let limit = Arc::new(Limit::new(
                    "bench",
                    1_000_000,
                    1_000,
                    Vec::<limitador::limit::Predicate>::new(),
                    vec!["user".try_into().expect("an identifier")],
                ));
                // One counter list per key and thread: check_and_update annotates them in place.
                let counters: Vec<Vec<std::sync::Mutex<Vec<Counter>>>> = (0..threads)
                    .map(|_| {
                        keys.iter()
                            .map(|k| {
                                let ctx: Context =
                                    HashMap::from([("user".to_string(), k.clone())]).into();
                                let counter = Counter::new(limit.clone(), &ctx)
                                    .expect("resolves")
                                    .expect("applies");
                                std::sync::Mutex::new(vec![counter])
                            })
                            .collect()
                    })
                    .collect();
                for list in &counters[0] {
                    let mut list = list.lock().expect("not poisoned");
                    assert!(matches!(
                        storage.check_and_update(&mut list, 1).expect("stored"),
                        Authorization::Ok
                    ));
                }
                g.bench_function(format!("limitador/{threads}t"), |b| {
                    b.iter_custom(|iters| {
                        run(&seq, threads, iters, &|t, i| {
                            // Each thread owns its lists: this lock is never contended.
                            let mut list = counters[t][i].lock().expect("not poisoned");
                            matches!(
                                storage.check_and_update(&mut list, 1),
                                Ok(Authorization::Ok)
                            )
                        })
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, keyed);
criterion_main!(benches);
