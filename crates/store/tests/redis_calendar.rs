//! Calendar quotas on a real Redis: the period follows Redis' clock, not the service's.

use std::sync::Arc;

use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
use floodgate_core::{AlgorithmKind, Clock, ManualClock, SystemClock};
use floodgate_store::calendar::CalendarItem;
use floodgate_store::redis::testing::RedisServer;
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::StoreError;

const HOUR: u64 = 3_600_000_000;

fn daily(limit: u64) -> CalendarQuota {
    let day = Calendar::new("UTC", CalendarUnit::Day, None).unwrap();
    CalendarQuota::new(AlgorithmKind::FixedWindow, limit, day).unwrap()
}

fn store(server: &RedisServer, clock: Arc<dyn Clock>) -> RedisStore {
    RedisStore::new(RedisStoreConfig::standalone(server.url()), clock).unwrap()
}

#[tokio::test]
async fn instances_whose_clocks_differ_decide_in_redis_period() {
    let server = RedisServer::start().unwrap();
    let real = SystemClock.now();
    let quota = daily(1);
    let item = CalendarItem {
        rule: "daily",
        quota: &quota,
        key: "api",
        cost: 1,
    };
    let on_time = store(&server, Arc::new(ManualClock::new(real)));
    let first = on_time
        .calendar_check_at(&[item], None, true)
        .await
        .unwrap();
    assert!(first.allowed);
    // A day's end in UTC, from Redis' time (about `real`): within a second of the local view.
    let to_midnight = 24 * HOUR - real % (24 * HOUR);
    assert!(first.decisions[0].reset_after.abs_diff(to_midnight) < 1_000_000);
    // An instance whose clock is 20 h behind (often yesterday for it) still counts in Redis'
    // period: the key is spent, and the reset lands on the same midnight.
    let behind = store(&server, Arc::new(ManualClock::new(real - 20 * HOUR)));
    let denied = behind.calendar_check_at(&[item], None, true).await.unwrap();
    assert!(!denied.allowed);
    let retry = denied.decisions[0].retry_after.unwrap();
    assert!(
        retry.abs_diff(to_midnight) < 1_000_000,
        "{retry} vs {to_midnight}"
    );
    // Three days off is beyond the boundaries sent: refused, nothing written.
    let far = store(&server, Arc::new(ManualClock::new(real - 72 * HOUR)));
    let err = far
        .calendar_check_at(&[item], None, true)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Unavailable { reason } if reason.contains("calendar_out_of_range")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_denied_calendar_batch_consumes_nothing_on_redis() {
    let server = RedisServer::start().unwrap();
    let clock = Arc::new(ManualClock::new(1_805_011_200_000_000));
    let store = store(&server, clock.clone());
    let (two, one) = (daily(2), daily(1));
    let now = Some(clock.now());
    let a = CalendarItem {
        rule: "a",
        quota: &two,
        key: "k",
        cost: 1,
    };
    let b = CalendarItem {
        rule: "b",
        quota: &one,
        key: "k",
        cost: 1,
    };
    assert!(
        store
            .calendar_check_at(&[b], now, true)
            .await
            .unwrap()
            .allowed
    );
    let batch = store.calendar_check_at(&[a, b], now, true).await.unwrap();
    assert!(!batch.allowed);
    assert_eq!(batch.decisions[0].remaining, 2, "a was not charged");
    let again = store.calendar_check_at(&[a], now, true).await.unwrap();
    assert_eq!(again.decisions[0].remaining, 1);
}

#[tokio::test]
async fn two_items_on_one_calendar_key_are_refused_rather_than_undercounted() {
    let server = RedisServer::start().unwrap();
    let clock = Arc::new(ManualClock::new(1_805_011_200_000_000));
    let store = store(&server, clock.clone());
    let quota = daily(5);
    let item = CalendarItem {
        rule: "a",
        quota: &quota,
        key: "k",
        cost: 1,
    };
    let err = store
        .calendar_check_at(&[item, item], Some(clock.now()), true)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unsupported { .. }), "{err:?}");
    let standing = store
        .calendar_check_at(&[item], Some(clock.now()), false)
        .await
        .unwrap();
    assert_eq!(standing.decisions[0].remaining, 5, "nothing was written");
}
