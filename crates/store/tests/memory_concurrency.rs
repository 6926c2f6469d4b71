//! Many threads on one key admit exactly what the algorithm allows: no lost updates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota};
use floodgate_store::{CheckItem, MemoryStore};

const T0: u64 = 1_700_000_000_000_000;

/// Runs `threads x per_thread` single-item checks on one key with a clock that never moves and
/// returns how many were admitted.
fn hammer(policy: &Policy, threads: usize, per_thread: usize) -> u64 {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let item = CheckItem {
                    rule: "hot",
                    policy,
                    key: "user=alice",
                    cost: 1,
                };
                let mut mine = 0;
                for _ in 0..per_thread {
                    if store.check_now(&[item]).unwrap().allowed {
                        mine += 1;
                    }
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    admitted.load(Ordering::Relaxed)
}

#[test]
fn two_threads_on_one_key_admit_exactly_the_burst() {
    // 50,000 per hour: with a frozen clock nothing refills, so exactly 50,000 of the 200,000
    // attempts may pass, whatever the interleaving.
    let quota = Quota::per_hour(50_000).unwrap();
    for kind in [
        AlgorithmKind::Gcra,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindow,
    ] {
        let policy = Policy::new(kind, quota).unwrap();
        assert_eq!(hammer(&policy, 2, 100_000), 50_000, "{kind}");
    }
}

#[test]
fn two_threads_on_one_key_sliding_log() {
    // The log's state grows with the limit, so a smaller limit keeps the test quick.
    let policy = Policy::new(AlgorithmKind::SlidingLog, Quota::per_hour(500).unwrap()).unwrap();
    assert_eq!(hammer(&policy, 2, 5_000), 500);
}

#[test]
fn crossing_multi_key_batches_neither_deadlock_nor_overadmit() {
    // Two threads check the same two keys in opposite item orders (and so, for many key
    // pairs, opposite shard orders). Locks are taken in shard order, so this cannot deadlock,
    // and since every batch charges both keys, exactly `burst` batches are admitted.
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let policy = Policy::new(AlgorithmKind::Gcra, Quota::per_hour(5_000).unwrap()).unwrap();
    let pairs: Vec<(String, String)> = (0..16)
        .map(|i| (format!("a{i}"), format!("b{i}")))
        .collect();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for reversed in [false, true] {
            let (store, policy, pairs, admitted) = (&store, &policy, &pairs, &admitted);
            s.spawn(move || {
                let mut mine = 0;
                for n in 0..100_000 {
                    let (a, b) = &pairs[n % pairs.len()];
                    let (first, second) = if reversed { (b, a) } else { (a, b) };
                    let items = [
                        CheckItem {
                            rule: "pair",
                            policy,
                            key: first,
                            cost: 1,
                        },
                        CheckItem {
                            rule: "pair",
                            policy,
                            key: second,
                            cost: 1,
                        },
                    ];
                    if store.check_now(&items).unwrap().allowed {
                        mine += 1;
                    }
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    // 12,500 attempts per pair, of which exactly 5,000 fit.
    assert_eq!(admitted.load(Ordering::Relaxed), 16 * 5_000);
}
