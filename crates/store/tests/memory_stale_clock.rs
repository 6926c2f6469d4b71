//! Issue 17, case 1, through the memory store: a clock stepped back (a `ManualClock` set to an
//! earlier time, as an NTP step would do to a wall clock) must not make GCRA refuse what the
//! token and leaky buckets admit; every algorithm reads the stale time as "no time passed".

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::{CheckItem, MemoryStore};

const T0: u64 = 1_699_920_000_000_000;
const HOUR: u64 = 3_600_000_000;

/// Admissions out of `attempts` one-unit checks of a 5/s rule after one unit at `T0`, with the
/// clock stepped back by `lag` before them.
fn admitted_after_step_back(kind: AlgorithmKind, lag: u64, attempts: usize) -> usize {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let policy = Policy::new(kind, "5/s".parse().unwrap()).unwrap();
    let item = CheckItem {
        rule: "stepped-back",
        policy: &policy,
        key: "user=alice",
        cost: 1,
    };
    assert!(store.check_now(&[item]).unwrap().allowed);
    clock.set(T0 - lag);
    (0..attempts)
        .filter(|_| store.check_now(&[item]).unwrap().allowed)
        .count()
}

#[test]
fn gcra_with_a_clock_stepped_back_admits_what_the_buckets_admit() {
    for lag in [HOUR, 10_000] {
        for kind in [
            AlgorithmKind::Gcra,
            AlgorithmKind::TokenBucket,
            AlgorithmKind::LeakyBucket,
        ] {
            // 4 of 5 cells free: exactly 4 more, the same as without the step back.
            assert_eq!(
                admitted_after_step_back(kind, lag, 6),
                4,
                "{kind} lag {lag}"
            );
        }
    }
}

#[test]
fn every_algorithm_reads_a_clock_stepped_back_as_no_time_passed() {
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new(T0 + 500_000);
        let store = MemoryStore::with_clock(Arc::new(clock.clone()));
        let policy = Policy::new(kind, "5/s".parse().unwrap()).unwrap();
        let item = CheckItem {
            rule: "stepped-back",
            policy: &policy,
            key: "k",
            cost: 2,
        };
        assert!(store.check_now(&[item]).unwrap().allowed);
        let at_last = store.peek_now(&[item]).unwrap().decisions[0];
        // An hour back: the same decision as at the time of the last admission (windows: at
        // their window's start, which holds the same counts).
        clock.set(T0 + 500_000 - HOUR);
        let stale = store.peek_now(&[item]).unwrap().decisions[0];
        assert_eq!(
            (stale.allowed, stale.remaining),
            (at_last.allowed, at_last.remaining),
            "{kind}"
        );
        // And consuming at the stale time leaves the key exactly as consuming then would.
        assert!(store.check_now(&[item]).unwrap().allowed, "{kind}");
        clock.set(T0 + 500_000);
        let after = store.peek_now(&[item]).unwrap().decisions[0];
        assert_eq!(after.remaining, 1, "{kind}");
    }
}
