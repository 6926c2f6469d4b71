//! Calendar quotas on a real Redis: the period follows Redis' clock, not the service's.

use std::sync::Arc;

use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
use floodgate_core::{AlgorithmKind, Clock, ManualClock, SystemClock};
use floodgate_store::calendar::CalendarItem;
use floodgate_store::redis::calendar_key;
use floodgate_store::redis::keys;
use floodgate_store::redis::testing::{multi_thread_runtime, RedisCluster, RedisServer};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
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

/// Two items on one key are one item of their summed cost (the script reads each key once):
/// both charged, never one dropped (it was `Unsupported`, which a rule failing open admitted
/// uncounted).
#[tokio::test]
async fn two_items_on_one_calendar_key_are_charged_together() {
    let server = RedisServer::start().unwrap();
    let clock = Arc::new(ManualClock::new(1_805_011_200_000_000));
    let store = store(&server, clock.clone());
    let quota = daily(5);
    let item = CalendarItem {
        rule: "a",
        quota: &quota,
        key: "k",
        cost: 2,
    };
    let now = Some(clock.now());
    let both = store
        .calendar_check_at(&[item, item], now, true)
        .await
        .unwrap();
    assert!(both.allowed);
    assert_eq!(both.decisions.len(), 2);
    assert!(both.decisions.iter().all(|d| d.remaining == 1), "{both:?}");
    // 4 of 5 spent: two more of 2 do not fit, and nothing is charged for them.
    let over = store
        .calendar_check_at(&[item, item], now, true)
        .await
        .unwrap();
    assert!(!over.allowed);
    let one = CalendarItem { cost: 1, ..item };
    let standing = store.calendar_check_at(&[one], now, false).await.unwrap();
    assert_eq!(standing.decisions[0].remaining, 1, "{standing:?}");
}

/// A batch over several Redis Cluster slots is decided slot by slot (peeks, then checks):
/// every key charged when all admit, none when one denies. It was `Unsupported`, and a request
/// matching two calendar rules was admitted uncounted by a rule failing open.
#[test]
fn a_calendar_batch_across_cluster_slots_is_decided_slot_by_slot() {
    let cluster = RedisCluster::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let clock = Arc::new(ManualClock::new(1_805_011_200_000_000));
        let mut config = RedisStoreConfig::cluster(cluster.urls());
        config.time_source = TimeSource::Caller;
        let store = RedisStore::new(config, clock.clone()).unwrap();
        let (small, large) = (daily(2), daily(5));
        let ip = CalendarItem {
            rule: "ip-daily",
            quota: &small,
            key: "10.0.0.1",
            cost: 1,
        };
        let site = CalendarItem {
            rule: "site-daily",
            quota: &large,
            key: "all",
            cost: 1,
        };
        let prefix = "fg:";
        let slot = |i: &CalendarItem<'_>| keys::slot(calendar_key(prefix, i).as_bytes());
        assert_ne!(slot(&ip), slot(&site), "the test needs two slots");
        let now = Some(clock.now());
        for round in 0..2 {
            let batch = store
                .calendar_check_at(&[ip, site], now, true)
                .await
                .unwrap();
            assert!(batch.allowed, "round {round}: {batch:?}");
        }
        // ip-daily is spent: the batch is denied, and site-daily keeps its 3.
        let denied = store
            .calendar_check_at(&[ip, site], now, true)
            .await
            .unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.decisions[0].remaining, 0);
        let standing = store.calendar_check_at(&[site], now, false).await.unwrap();
        assert_eq!(standing.decisions[0].remaining, 3, "{standing:?}");
    });
}
