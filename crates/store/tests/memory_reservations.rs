//! Reservations and settles through the memory store (issue 11): one scheduled time for a whole
//! batch, all or nothing, exact give-backs, and `max_wait = 0` answering as a check.

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::{CheckItem, MemoryStore, SettleItem, Store, StoreError};

const T0: u64 = 1_699_920_000_000_000;

fn policy(kind: AlgorithmKind, quota: &str) -> Policy {
    Policy::new(kind, quota.parse().unwrap()).unwrap()
}

fn item<'a>(rule: &'a str, policy: &'a Policy, cost: u64) -> CheckItem<'a> {
    CheckItem {
        rule,
        policy,
        key: "user=alice",
        cost,
    }
}

/// A per-user GCRA rule and a per-route fixed window in one batch: the batch waits for the
/// later of the two, and both items are reserved for that one time.
#[test]
fn a_batch_is_reserved_for_one_scheduled_time() {
    let clock = ManualClock::new(T0 + 900_000);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let gcra = policy(AlgorithmKind::Gcra, "2/s");
    let window = policy(AlgorithmKind::FixedWindow, "3/s");
    let batch = [item("user", &gcra, 1), item("route", &window, 1)];
    // GCRA: 2 at once; the window: 3 in [0, 1 s).
    assert!(store.check_now(&[item("user", &gcra, 2)]).unwrap().allowed);
    assert!(
        store
            .check_now(&[item("route", &window, 3)])
            .unwrap()
            .allowed
    );
    // GCRA frees a unit in 500 ms, the window in 100 ms: the batch waits 500 ms.
    let denied = store
        .reserve_at(&batch, clock_now(&clock), 499_999)
        .unwrap();
    assert_eq!((denied.batch.allowed, denied.wait), (false, None));
    let granted = store
        .reserve_at(&batch, clock_now(&clock), 500_000)
        .unwrap();
    assert!(granted.batch.allowed);
    assert_eq!(granted.wait, Some(500_000));
    assert_eq!(granted.scheduled_at, [T0 + 1_400_000, T0 + 1_400_000]);
    // At the scheduled time both rules hold the reserved unit: GCRA has 0 left, the window
    // [1 s, 2 s) has counted 1 of 3.
    clock.set(T0 + 1_400_000);
    assert_eq!(
        store
            .inspect("user", &gcra, "user=alice")
            .await_now()
            .remaining,
        0
    );
    assert_eq!(
        store
            .inspect("route", &window, "user=alice")
            .await_now()
            .remaining,
        2
    );
    // The request was never made: settle with 0 gives both units back.
    let settle = [
        SettleItem {
            rule: "user",
            policy: &gcra,
            key: "user=alice",
            reserved: 1,
            actual: 0,
            scheduled_at: T0 + 1_400_000,
        },
        SettleItem {
            rule: "route",
            policy: &window,
            key: "user=alice",
            reserved: 1,
            actual: 0,
            scheduled_at: T0 + 1_400_000,
        },
    ];
    let standings = store.settle_at(&settle, T0 + 1_400_000).unwrap();
    assert_eq!(
        standings.iter().map(|d| d.remaining).collect::<Vec<_>>(),
        [1, 3]
    );
}

fn clock_now(clock: &ManualClock) -> u64 {
    use floodgate_core::Clock;
    clock.now()
}

/// A ready future's output (the memory store decides synchronously).
trait AwaitNow {
    type Output;
    fn await_now(self) -> Self::Output;
}

impl<F: std::future::Future<Output = Result<T, StoreError>>, T> AwaitNow for F {
    type Output = T;
    fn await_now(self) -> T {
        let mut f = std::pin::pin!(self);
        let waker = std::task::Waker::noop();
        match f.as_mut().poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(r) => r.unwrap(),
            std::task::Poll::Pending => panic!("the memory store's futures are ready"),
        }
    }
}

/// `max_wait = 0` is a check, for every algorithm: same decisions, same state.
#[test]
fn max_wait_zero_answers_as_a_check() {
    for kind in AlgorithmKind::ALL {
        let p = policy(kind, "3/s");
        let a = MemoryStore::with_clock(Arc::new(ManualClock::new(T0)));
        let b = MemoryStore::with_clock(Arc::new(ManualClock::new(T0)));
        for (dt, cost) in [(0, 2), (10, 2), (20, 1), (500_000, 1), (1_000_000, 3)] {
            let r = a.reserve_at(&[item("r", &p, cost)], T0 + dt, 0).unwrap();
            let c = b.check_at(&[item("r", &p, cost)], T0 + dt).unwrap();
            assert_eq!(r.batch, c, "{kind} at +{dt}");
            assert_eq!(r.wait.is_some(), c.allowed, "{kind} at +{dt}");
        }
    }
}

/// Through the `Store` trait: a reservation the store cannot grant within `max_wait` consumes
/// nothing; one it grants is charged, and a settle above the reservation charges the rest.
#[test]
fn settle_charges_what_was_used_beyond_the_reservation() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let p = policy(AlgorithmKind::TokenBucket, "10/s");
    let r = store.reserve(&[item("llm", &p, 4)], 0).await_now();
    assert_eq!((r.batch.allowed, r.wait), (true, Some(0)));
    assert_eq!(r.batch.decisions[0].remaining, 6);
    // The call used 7 units: 3 more.
    let settle = SettleItem {
        rule: "llm",
        policy: &p,
        key: "user=alice",
        reserved: 4,
        actual: 7,
        scheduled_at: r.scheduled_at[0],
    };
    assert_eq!(store.settle(&[settle]).await_now()[0].remaining, 3);
    // A reserved cost above the capacity was never a reservation.
    let bad = SettleItem {
        reserved: 11,
        ..settle
    };
    assert!(matches!(
        store.settle(&[bad]).await_now_err(),
        StoreError::InsufficientCapacity { cost: 11, .. }
    ));
}

trait AwaitNowErr {
    fn await_now_err(self) -> StoreError;
}

impl<F: std::future::Future<Output = Result<T, StoreError>>, T: std::fmt::Debug> AwaitNowErr for F {
    fn await_now_err(self) -> StoreError {
        let mut f = std::pin::pin!(self);
        let waker = std::task::Waker::noop();
        match f.as_mut().poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(r) => r.unwrap_err(),
            std::task::Poll::Pending => panic!("the memory store's futures are ready"),
        }
    }
}
