//! The memory store's calendar table: batches all-or-nothing, peeks, the key cap, expiry.

use std::sync::Arc;

use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
use floodgate_core::{AlgorithmKind, ManualClock};
use floodgate_store::calendar::{CalendarItem, MemoryCalendar};
use floodgate_store::StoreError;

const DAY: u64 = 86_400_000_000;
/// 2027-11-07T00:00:00-07:00, the start of a 25-hour day in Los Angeles.
const FALL_BACK: u64 = 1_825_570_800_000_000;

fn la_day(kind: AlgorithmKind, limit: u64) -> CalendarQuota {
    let day = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
    CalendarQuota::new(kind, limit, day).unwrap()
}

fn item<'a>(rule: &'a str, quota: &'a CalendarQuota, key: &'a str, cost: u64) -> CalendarItem<'a> {
    CalendarItem {
        rule,
        quota,
        key,
        cost,
    }
}

#[test]
fn a_denied_batch_consumes_nothing() {
    let clock = Arc::new(ManualClock::new(FALL_BACK));
    let store = MemoryCalendar::new(clock.clone(), 100);
    let (two, one) = (
        la_day(AlgorithmKind::FixedWindow, 2),
        la_day(AlgorithmKind::SlidingWindow, 1),
    );
    assert!(store.check(&[item("b", &one, "k", 1)]).unwrap().allowed);
    let batch = store
        .check(&[item("a", &two, "k", 1), item("b", &one, "k", 1)])
        .unwrap();
    assert!(!batch.allowed);
    assert_eq!(batch.decisions[0].remaining, 2, "a was not charged");
    assert!(batch.decisions[0].allowed && !batch.decisions[1].allowed);
    let d = store.check(&[item("a", &two, "k", 2)]).unwrap();
    assert_eq!(
        (d.allowed, d.decisions[0].reset_after),
        (true, DAY + 3_600_000_000)
    );
}

#[test]
fn a_peek_consumes_nothing_and_the_cap_holds_live_keys_only() {
    let clock = Arc::new(ManualClock::new(FALL_BACK));
    let store = MemoryCalendar::new(clock.clone(), 2);
    let q = la_day(AlgorithmKind::FixedWindow, 1);
    let peek = store
        .check_at(&[item("r", &q, "a", 1)], FALL_BACK, false)
        .unwrap();
    assert!(peek.allowed);
    assert_eq!(store.len(), 0);
    assert!(store.check(&[item("r", &q, "a", 1)]).unwrap().allowed);
    assert!(store.check(&[item("r", &q, "b", 1)]).unwrap().allowed);
    assert!(matches!(
        store.check(&[item("r", &q, "c", 1)]),
        Err(StoreError::Unavailable { .. })
    ));
    // After the 25-hour day both keys expired: the cap makes room again.
    clock.advance(DAY + 3_600_000_000);
    assert!(store.check(&[item("r", &q, "c", 1)]).unwrap().allowed);
    assert_eq!(store.len(), 1);
}

#[test]
fn a_cost_above_the_limit_is_refused_before_any_state_is_read() {
    let store = MemoryCalendar::new(Arc::new(ManualClock::new(FALL_BACK)), 10);
    let q = la_day(AlgorithmKind::FixedWindow, 3);
    let err = store
        .check(&[item("r", &q, "k", 2), item("r", &q, "k", 2)])
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::InsufficientCapacity {
            cost: 4,
            capacity: 3,
            ..
        }
    ));
    assert!(store.is_empty());
}
