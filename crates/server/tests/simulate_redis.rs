//! `floodgate simulate --store redis://...`: the same traffic replayed on a real redis-server
//! (started by the test, deciding at the simulated time with the scripts `serve` runs) admits
//! exactly what the in-process counters admit, request by request.

mod simulate_support;

use floodgate_store::redis::testing::RedisServer;
use simulate_support::{assert_clock_boundary_totals, simulate, simulate_json, totals};

const BOUNDARY: [&str; 6] = [
    "--scenario",
    "boundary",
    "--preset",
    "clock-boundary",
    "--algorithm",
    "all",
];

/// Every run (summary and each request's decision) of `args` on memory and on Redis.
fn memory_and_redis(server: &RedisServer, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let url = format!("redis://127.0.0.1:{}", server.port());
    let memory = simulate_json(args);
    let redis = simulate_json(&[args, &["--store", url.as_str()]].concat());
    (memory, redis)
}

/// One instance, 100/s, 100 requests at 0.95 s and 100 at 1.05 s: the hand-checked numbers of
/// `simulate_boundary.rs` (fixed window 200, sliding log 100, sliding window 105, buckets 110),
/// on Redis as in memory.
#[test]
fn redis_admits_exactly_what_memory_admits_at_the_boundary() {
    let server = RedisServer::start().expect("redis-server starts");
    let (memory, redis) = memory_and_redis(&server, &BOUNDARY);
    assert_eq!(redis["runs"], memory["runs"]);
    assert_clock_boundary_totals(&redis);
    // A second run on the same server starts from fresh keys: the same answer, not a limit
    // already used up by the first run.
    let (_, again) = memory_and_redis(&server, &BOUNDARY);
    assert_eq!(again["runs"], memory["runs"]);
}

/// Three instances with their own counters (67, 67 and 66 requests each, under the limit of
/// 100) admit all 200 requests with every algorithm; the shared reference (one counter, as on
/// one instance) admits 200 / 100 / 105 / 110. Redis keeps one counter per instance too.
#[test]
fn redis_keeps_a_counter_per_instance_with_local_counters() {
    let server = RedisServer::start().expect("redis-server starts");
    let args = [&BOUNDARY[..], &["--instances", "3", "--counter", "local"]].concat();
    let (memory, redis) = memory_and_redis(&server, &args);
    assert_eq!(redis["runs"], memory["runs"]);
    for (algorithm, reference) in [
        ("fixed_window", 200),
        ("sliding_log", 100),
        ("sliding_window", 105),
        ("token_bucket", 110),
        ("leaky_bucket", 110),
        ("gcra", 110),
    ] {
        assert_eq!(totals(&redis, algorithm), (200, 0, 200), "{algorithm}");
        let summary = &simulate_support::run(&redis, algorithm)["summary"];
        assert_eq!(
            summary["admitted_per_instance"],
            serde_json::json!([67, 67, 66])
        );
        assert_eq!(
            summary["shared_reference"]["admitted"], reference,
            "{algorithm}"
        );
    }
}

/// A server that does not answer stops the run with the URL in the message.
#[test]
fn an_unreachable_redis_fails_with_the_url() {
    let mut server = RedisServer::start().expect("redis-server starts");
    let url = format!("redis://127.0.0.1:{}", server.port());
    server.kill();
    let out = simulate(&[&BOUNDARY[..], &["--store", url.as_str()]].concat());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("redis at {url}")), "{stderr}");
}
