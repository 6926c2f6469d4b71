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
