//! Keyed checks: `MemoryStore` beside governor's keyed (DashMap) limiter in the same run.
//!
//! Run: `cargo bench -p floodgate-store --bench keyed`
//! (one case: `cargo bench -p floodgate-store --bench keyed -- 'keyed/1k/uniform/1t'`;
//! quick look: `-- --warm-up-time 1 --measurement-time 2`).
//!
//! Keys are `String`s `user:000000` .. `user:999999` (11 bytes); every key is checked once
//! before measuring, so the maps are at their steady size. Each case replays a fixed sequence
//! of 2^20 key indices drawn uniformly or from Zipf(s = 1.0) (rank 1 the most frequent), on 1
//! thread or on 2 threads sharing one limiter (the two threads start half the sequence apart).
//! With 2 threads the reported time is wall time divided by all checks made, so
//! `1-thread time / 2-thread time` is the scaling factor.
//!
//! Quota: 1 per second with a burst of 1,000,000 (GCRA), the same for governor: no key uses
//! up its burst during a run, so every check admits and writes the key's state, and no key's
//! state expires between two checks (a key is "heavy but within its burst").
//! Floodgate is measured through two paths: `KeyedLimiter::check` (`floodgate_limiter`, the
//! handle from `MemoryStore::limiter`, which resolved the rule once) and
//! `MemoryStore::check_one` (`floodgate_check_one`, which finds the rule's table per check).
//! Neither allocates.
//! Clocks: governor's default (quanta, a TSC read per check) and its `QuantaUpkeepClock`
//! (1 ms, an atomic load); Floodgate with `QuantaClock` (also a TSC read per check) and with
//! `CoarseClock` (1 ms, an atomic load).

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate_core::{AlgorithmKind, Clock, CoarseClock, Policy, QuantaClock, Quota};
use floodgate_store::{CheckItem, MemoryStore, MemoryStoreConfig};
use governor::clock::QuantaUpkeepClock;
use governor::state::keyed::DashMapStateStore;
use governor::{DefaultKeyedRateLimiter, RateLimiter};

const SEQUENCE: usize = 1 << 20;

/// splitmix64: a fixed, dependency-free generator so every run replays the same sequence.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, Debug)]
enum Distribution {
    Uniform,
    Zipf,
}

struct Workload {
    keys: Vec<String>,
    sequence: Vec<u32>,
}

impl Workload {
    fn new(n: usize, distribution: Distribution) -> Self {
        let keys = (0..n).map(|i| format!("user:{i:06}")).collect();
        let mut rng = SplitMix(0x0f10_0d6a_7e00_0001 ^ n as u64);
        let sequence = match distribution {
            Distribution::Uniform => (0..SEQUENCE)
                .map(|_| (rng.next() % n as u64) as u32)
                .collect(),
            Distribution::Zipf => {
                // Inverse-CDF sampling over the exact harmonic weights 1/rank.
                let mut cdf = Vec::with_capacity(n);
                let mut total = 0.0;
                for rank in 1..=n {
                    total += 1.0 / rank as f64;
                    cdf.push(total);
                }
                (0..SEQUENCE)
                    .map(|_| {
                        let u = rng.unit() * total;
                        cdf.partition_point(|&c| c < u).min(n - 1) as u32
                    })
                    .collect()
            }
        };
        Self { keys, sequence }
    }
}

/// Runs `check(key index)` `iters` times on each of `threads` threads; returns wall time per
/// check.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed wall time
fn run<F: Fn(usize) -> bool + Sync>(
    w: &Workload,
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
                    admitted += u64::from(check(w.sequence[i] as usize));
                    i = (i + 1) & (SEQUENCE - 1);
                }
                black_box(admitted);
            });
        }
    });
    start.elapsed() / threads as u32
}

fn memory_store(clock: Arc<dyn Clock>) -> MemoryStore {
    MemoryStore::new(
        MemoryStoreConfig {
            max_keys: 2_000_000,
            ..MemoryStoreConfig::default()
        },
        clock,
    )
}

fn floodgate_check(store: &MemoryStore, policy: &Policy, key: &str) -> bool {
    let item = CheckItem {
        rule: "per-user",
        policy,
        key,
        cost: 1,
    };
    store.check_one(&item).expect("cost 1 fits").allowed
}

fn keyed(c: &mut Criterion) {
    let quota = Quota::with_burst(1, 1_000_000, 1_000_000).expect("valid quota");
    let policy = Policy::new(AlgorithmKind::Gcra, quota).expect("fits");
    let governor_quota = governor::Quota::per_second(NonZeroU32::MIN)
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero"));
    let quanta: Arc<dyn Clock> = Arc::new(QuantaClock::new());
    let coarse: Arc<dyn Clock> = Arc::new(CoarseClock::new(Duration::from_millis(1)));
    // One upkeep thread per process (governor refuses a second), shared by every case.
    let upkeep = QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep");

    for (n, label) in [(1_000, "1k"), (100_000, "100k"), (1_000_000, "1m")] {
        for distribution in [Distribution::Uniform, Distribution::Zipf] {
            let w = Workload::new(n, distribution);
            let dist = format!("{distribution:?}").to_lowercase();
            let mut g = c.benchmark_group(format!("keyed/{label}/{dist}"));
            g.throughput(Throughput::Elements(1));
            if n >= 100_000 {
                g.sample_size(20);
            }

            let governor: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(governor_quota);
            for key in &w.keys {
                assert!(governor.check_key(key).is_ok());
            }
            for threads in [1, 2] {
                g.bench_function(format!("governor/default_clock/{threads}t"), |b| {
                    b.iter_custom(|iters| {
                        run(&w, threads, iters, &|i| {
                            governor.check_key(&w.keys[i]).is_ok()
                        })
                    })
                });
            }
            drop(governor);
            let governor: RateLimiter<String, DashMapStateStore<String>, QuantaUpkeepClock> =
                RateLimiter::dashmap_with_clock(governor_quota, upkeep.clone());
            for key in &w.keys {
                assert!(governor.check_key(key).is_ok());
            }
            for threads in [1, 2] {
                g.bench_function(format!("governor/upkeep_clock_1ms/{threads}t"), |b| {
                    b.iter_custom(|iters| {
                        run(&w, threads, iters, &|i| {
                            governor.check_key(&w.keys[i]).is_ok()
                        })
                    })
                });
            }
            drop(governor);

            for (clock_name, clock) in [("quanta_clock", &quanta), ("coarse_clock_1ms", &coarse)] {
                let store = memory_store(clock.clone());
                let limiter = store.limiter("per-user", &policy);
                for key in &w.keys {
                    assert!(limiter.check(key, 1).expect("cost 1 fits").allowed);
                }
                for threads in [1, 2] {
                    g.bench_function(format!("floodgate_limiter/{clock_name}/{threads}t"), |b| {
                        b.iter_custom(|iters| {
                            run(&w, threads, iters, &|i| {
                                limiter.check(&w.keys[i], 1).expect("cost 1 fits").allowed
                            })
                        })
                    });
                    g.bench_function(
                        format!("floodgate_check_one/{clock_name}/{threads}t"),
                        |b| {
                            b.iter_custom(|iters| {
                                run(&w, threads, iters, &|i| {
                                    floodgate_check(&store, &policy, &w.keys[i])
                                })
                            })
                        },
                    );
                }
            }
            g.finish();
        }
    }
}

criterion_group!(benches, keyed);
criterion_main!(benches);
