//! Every golden vector on Redis and on a 3-master Redis Cluster, through the Lua scripts of
//! `floodgate_store::redis`, and the differential runner comparing Redis with the core.
#![cfg(feature = "redis")]

use floodgate_conformance::{
    differential, run_dir, vectors_dir, CoreBackend, RedisBackend, Request,
};
use floodgate_core::{AlgorithmKind, Policy};
use floodgate_store::redis::testing::{RedisCluster, RedisServer};
use floodgate_store::redis::RedisStoreConfig;

#[test]
fn every_vector_file_passes_on_redis() {
    let server = RedisServer::start().unwrap();
    let mut backend =
        RedisBackend::new("redis", RedisStoreConfig::standalone(server.url())).unwrap();
    let report = run_dir(&mut backend, &vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps > 100, "only {} steps", report.steps);
}

#[test]
fn every_vector_file_passes_on_a_redis_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let mut backend =
        RedisBackend::new("redis-cluster", RedisStoreConfig::cluster(cluster.urls())).unwrap();
    let report = run_dir(&mut backend, &vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps > 100, "only {} steps", report.steps);
}

#[test]
fn redis_and_core_agree_on_a_long_deterministic_sequence() {
    let server = RedisServer::start().unwrap();
    let mut redis = RedisBackend::new("redis", RedisStoreConfig::standalone(server.url())).unwrap();
    // A fixed pseudo-random walk (LCG): time jumps, two keys, costs 0..=capacity+1.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        x >> 33
    };
    for kind in AlgorithmKind::ALL {
        let policy = Policy::new(kind, "7/s burst 9".parse().unwrap())
            .or_else(|_| Policy::new(kind, "7/s".parse().unwrap()))
            .unwrap();
        let mut now = 1_700_000_000_000_000u64;
        let requests: Vec<Request> = (0..400)
            .map(|_| {
                now += next() % 300_000;
                Request {
                    key: ["a", "b"][(next() % 2) as usize].to_string(),
                    now_us: now,
                    cost: next() % (policy.capacity() + 2),
                    peek: next() % 5 == 0,
                }
            })
            .collect();
        let report = differential(
            &mut CoreBackend::default(),
            &mut redis,
            &policy,
            "walk",
            &requests,
        );
        assert!(report.is_ok(), "{report}");
    }
}
