//! The calendar vectors through `lua/calendar.lua` on a real Redis and a Redis Cluster, and the
//! boundary following Redis' clock: a service whose clock is a day behind still decides in the
//! period Redis' time falls in.
#![cfg(feature = "redis")]

use floodgate_conformance::calendar::{calendar_vectors_dir, run_calendar_dir};
use floodgate_conformance::RedisBackend;
use floodgate_store::redis::testing::{RedisCluster, RedisServer};
use floodgate_store::redis::RedisStoreConfig;

#[test]
fn every_calendar_vector_passes_on_redis() {
    let server = RedisServer::start().unwrap();
    let mut backend =
        RedisBackend::new("redis", RedisStoreConfig::standalone(server.url())).unwrap();
    let report = run_calendar_dir(&mut backend, &calendar_vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps >= 25, "only {} steps", report.steps);
}

#[test]
fn every_calendar_vector_passes_on_a_redis_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let mut backend =
        RedisBackend::new("redis-cluster", RedisStoreConfig::cluster(cluster.urls())).unwrap();
    let report = run_calendar_dir(&mut backend, &calendar_vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// A fixed pseudo-random walk through the autumn change in Berlin (a 25-hour day between 24-hour
/// ones), both algorithms, two keys, costs 0 to limit + 1, peeks and stale times: Redis and the
/// core answer identically at every step.
#[test]
fn redis_and_core_agree_on_calendar_windows_across_a_dst_change() {
    use floodgate_conformance::calendar::{CalendarBackend, CoreCalendarBackend};
    use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
    use floodgate_core::AlgorithmKind;

    let server = RedisServer::start().unwrap();
    let mut redis = RedisBackend::new("redis", RedisStoreConfig::standalone(server.url())).unwrap();
    let mut core = CoreCalendarBackend::default();
    let hour = 3_600_000_000u64;
    // 2027-10-30T00:00:00+02:00
    let start = 1_824_847_200_000_000u64;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        x >> 33
    };
    for (kind, limit) in [
        (AlgorithmKind::FixedWindow, 7),
        (AlgorithmKind::SlidingWindow, 5),
    ] {
        let day = Calendar::new("Europe/Berlin", CalendarUnit::Day, None).unwrap();
        let quota = CalendarQuota::new(kind, limit, day).unwrap();
        CalendarBackend::reset(&mut redis).unwrap();
        CalendarBackend::reset(&mut core).unwrap();
        let mut now = start;
        for step in 0..600 {
            let r = next();
            // mostly forward by up to 20 min, sometimes a jump of hours, sometimes back
            now = match r % 16 {
                0 => now + (r % 7) * hour,
                1 => now.saturating_sub(r % (2 * hour)),
                _ => now + r % (20 * 60_000_000),
            };
            let key = if r % 5 == 0 { "b" } else { "a" };
            let cost = next() % (limit + 2);
            let peek = next() % 6 == 0;
            let want = core.check(&quota, key, now, cost, peek).unwrap();
            let got = CalendarBackend::check(&mut redis, &quota, key, now, cost, peek).unwrap();
            assert_eq!(
                got, want,
                "{kind} step {step} at {now} cost {cost} peek {peek}"
            );
        }
        assert!(
            now > start + 72 * hour,
            "the walk crosses the change: {now}"
        );
    }
}
