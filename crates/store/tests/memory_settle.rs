//! Settles through the memory store on the manual clock never mint capacity
//! (`docs/spec/reservations.md`, "Settle never mints capacity"): any interleaving of checks,
//! reservations (with and without a wait) and settles (early, late, less, more, zero, out of
//! order), on a manual clock that stands still or moves forward, admits only what the
//! algorithm admits: replayed at their scheduled times, charged their actual costs (the
//! reserved cost where a settle charged more), through a fresh key of the same rule, every
//! admitted request is admitted.
//!
//! (The core's property test `settles_never_mint_capacity` also steps time backwards. Here the
//! clock does not: a key the store dropped as fresh at one time is fresh for a request whose
//! clock then reads earlier, a stale clock's known limit that has nothing to do with settles.)

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota, Timestamp};
use floodgate_store::{CheckItem, MemoryStore, SettleItem, Store, StoreError};
use proptest::prelude::*;

const T0: u64 = 1_699_920_000_000_000;

/// A ready future's output (the memory store decides synchronously).
fn now<T>(f: impl std::future::Future<Output = Result<T, StoreError>>) -> T {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    match f.as_mut().poll(&mut std::task::Context::from_waker(waker)) {
        std::task::Poll::Ready(r) => r.unwrap(),
        std::task::Poll::Pending => panic!("the memory store's futures are ready"),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A check (a reservation without a wait: it also says when it admitted).
    Check {
        cost: u64,
    },
    Reserve {
        cost: u64,
        max_wait: u64,
    },
    /// Settles one unsettled admission: `how` picks zero, the reserved cost, less or more.
    Settle {
        pick: usize,
        how: u8,
        raw: u64,
    },
}

fn ops() -> impl Strategy<Value = Vec<(i64, Op)>> {
    let op = prop_oneof![
        2 => any::<u64>().prop_map(|cost| Op::Check { cost }),
        3 => (any::<u64>(), prop_oneof![Just(0u64), 0u64..3_000_000, Just(u64::MAX)])
            .prop_map(|(cost, max_wait)| Op::Reserve { cost, max_wait }),
        3 => (any::<usize>(), any::<u8>(), any::<u64>())
            .prop_map(|(pick, how, raw)| Op::Settle { pick, how, raw }),
    ];
    let dt = prop_oneof![Just(0i64), 0i64..10, 0i64..1_500_000, 0i64..30_000_000];
    prop::collection::vec((dt, op), 1..60)
}

fn quota() -> impl Strategy<Value = (AlgorithmKind, Quota)> {
    (
        prop::sample::select(AlgorithmKind::ALL.to_vec()),
        prop::sample::select(vec![
            "5/s",
            "10/10s",
            "3/s burst 7",
            "7/2s burst 2",
            "20/min",
        ]),
    )
        .prop_map(|(kind, q)| (kind, q.parse().unwrap()))
}

fn run(kind: AlgorithmKind, quota: Quota, ops: &[(i64, Op)]) -> Result<(), TestCaseError> {
    let Ok(p) = Policy::new(kind, quota) else {
        return Ok(());
    };
    let cap = p.capacity();
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let item = |cost| CheckItem {
        rule: "settle",
        policy: &p,
        key: "k",
        cost,
    };
    // (scheduled_at, reserved, actual once settled)
    let mut admitted: Vec<(Timestamp, u64, Option<u64>)> = Vec::new();
    let mut t = T0;
    for (dt, op) in ops {
        t = t.saturating_add_signed(*dt);
        clock.set(t);
        let (cost, max_wait) = match op {
            Op::Check { cost } => (cost % (cap + 1), 0),
            Op::Reserve { cost, max_wait } => (cost % (cap + 1), *max_wait),
            Op::Settle { pick, how, raw } => {
                let open: Vec<usize> = (0..admitted.len())
                    .filter(|&i| admitted[i].2.is_none())
                    .collect();
                if open.is_empty() {
                    continue;
                }
                let a = &mut admitted[open[pick % open.len()]];
                let actual = match how % 5 {
                    0 => 0,
                    1 => a.1,
                    2 | 3 => raw % a.1,
                    _ => a.1 + 1 + raw % (2 * cap),
                };
                let settle = SettleItem {
                    rule: "settle",
                    policy: &p,
                    key: "k",
                    reserved: a.1,
                    actual,
                    scheduled_at: a.0,
                };
                let d = now(store.settle(&[settle]));
                prop_assert!(d[0].remaining <= cap);
                a.2 = Some(actual);
                continue;
            }
        };
        let r = now(store.reserve(&[item(cost)], max_wait));
        if r.batch.allowed && cost > 0 {
            admitted.push((r.scheduled_at[0], cost, None));
        }
    }
    let replay = MemoryStore::with_clock(Arc::new(ManualClock::new(T0)));
    let mut order: Vec<usize> = (0..admitted.len()).collect();
    order.sort_by_key(|&i| admitted[i].0);
    for i in order {
        let (at, reserved, actual) = admitted[i];
        let cost = actual.map_or(reserved, |a| a.min(reserved));
        if cost == 0 {
            continue;
        }
        let d = replay.check_at(&[item(cost)], at).unwrap();
        prop_assert!(
            d.allowed,
            "{} {:?}: admission {} ({} at +{} us) does not replay; admitted {:?}",
            kind,
            quota,
            i,
            cost,
            at.saturating_sub(T0),
            admitted
        );
    }
    Ok(())
}

/// 256 cases, or `PROPTEST_CASES` when set.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn settles_through_the_memory_store_never_mint_capacity(
        (kind, quota) in quota(),
        ops in ops(),
    ) {
        run(kind, quota, &ops)?;
    }
}
