//! MemoryStore check cost: one key (hot), 1k and 100k keys, one thread; and a two-rule batch.
//! `cargo bench -p floodgate-store`. A frozen ManualClock keeps the work identical per check.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_store::{CheckItem, MemoryStore};

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i:06}")).collect()
}

fn single(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_check");
    group.throughput(Throughput::Elements(1));
    // A huge quota: every check admits, the state changes every time.
    let quota = Quota::per_second(1_000_000).unwrap();
    for kind in [
        AlgorithmKind::Gcra,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::SlidingWindow,
    ] {
        let policy = Policy::new(kind, quota).unwrap();
        for n in [1usize, 1_000, 100_000] {
            let clock = ManualClock::new(1_700_000_000_000_000);
            let store = MemoryStore::with_clock(Arc::new(clock.clone()));
            let keys = keys(n);
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::new(kind.as_str(), n), &n, |b, _| {
                b.iter(|| {
                    // Advance 1 us per check so the bucket refills and checks keep admitting.
                    clock.advance(1);
                    i = (i + 7919) % keys.len();
                    let item = CheckItem {
                        rule: "bench",
                        policy: &policy,
                        key: &keys[i],
                        cost: 1,
                    };
                    black_box(store.check_now(&[item]).unwrap().allowed)
                })
            });
        }
    }
    group.finish();
}

fn batch(c: &mut Criterion) {
    let policy = Policy::new(AlgorithmKind::Gcra, Quota::per_second(1_000_000).unwrap()).unwrap();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let keys = keys(1_000);
    let mut i = 0usize;
    c.bench_function("memory_check_batch_of_2/1000", |b| {
        b.iter(|| {
            clock.advance(1);
            i = (i + 7919) % keys.len();
            let items = [
                CheckItem {
                    rule: "per-user",
                    policy: &policy,
                    key: &keys[i],
                    cost: 1,
                },
                CheckItem {
                    rule: "global",
                    policy: &policy,
                    key: "all",
                    cost: 1,
                },
            ];
            black_box(store.check_now(&items).unwrap().allowed)
        })
    });
}

criterion_group!(benches, single, batch);
criterion_main!(benches);
