//! `floodgate bench` end to end through the real binary: small, quick measurements whose
//! shape (not timing) is asserted.

use std::process::Command;

use serde_json::Value;

fn floodgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .output()
        .expect("run floodgate")
}

#[test]
fn memory_json_has_a_row_per_probe_with_every_key_held() {
    let out = floodgate(&[
        "bench",
        "--what",
        "memory",
        "--keys",
        "20000",
        "--limit",
        "10",
        "--format",
        "json",
        "--algorithms",
        "gcra,sliding_log",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert!(report["machine"]["cpus"].as_u64().unwrap() >= 1);
    let section = &report["sections"][0];
    assert_eq!(section["id"], "memory");
    let rows = section["rows"].as_array().unwrap();
    // gcra, sliding_log empty, sliding_log full (10 per key), governor
    assert_eq!(rows.len(), 4);
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(&names[..3], &["gcra", "sliding_log", "sliding_log"]);
    assert!(names[3].starts_with("governor"));
    for r in rows {
        assert_eq!(r[1], 20_000, "every key is held: {r}");
    }
    assert_eq!(
        rows[2][2], 10,
        "the full sliding log remembers --limit requests per key"
    );
    // 20,000 keys cost at least their 16-byte identities.
    assert!(rows[0][3].as_f64().unwrap() >= 16.0, "{}", rows[0][3]);
}

#[test]
fn cpu_table_lists_each_algorithm_and_governor() {
    let out = floodgate(&[
        "bench",
        "--what",
        "cpu",
        "--seconds",
        "0.01",
        "--algorithms",
        "fixed_window,gcra",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("| fixed_window "), "{text}");
    assert!(text.contains("| gcra "), "{text}");
    assert!(text.contains("| governor 0.10 (GCRA, peer) "), "{text}");
    assert!(text.contains("2 threads"), "{text}");
}

#[test]
fn unknown_algorithm_is_a_usage_error() {
    let out = floodgate(&["bench", "--algorithms", "leaky"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown algorithm"));
}

#[test]
fn http_cases_answer_2xx_through_real_serve_processes() {
    let out = floodgate(&[
        "bench",
        "--what",
        "http",
        "--requests",
        "200",
        "--http-seconds",
        "5",
        "--connections",
        "2",
        "--algorithms",
        "gcra",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let rows = report["sections"][0]["rows"].as_array().unwrap().clone();
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "bare axum handler (baseline of /v1/check)",
            "POST /v1/check, gcra, 1,000 keys",
            "hello upstream alone (in-process)",
            "proxy, no rule",
            "proxy, gcra per client IP",
        ]
    );
    for r in &rows {
        assert!(r[1].as_u64().unwrap() > 0, "some requests completed: {r}");
        assert_eq!(r[2], 0, "every request admitted: {r}");
        assert!(r[3].as_f64().unwrap() > 0.0, "a request rate: {r}");
    }
    // Ratios only where there is a baseline: /v1/check to the bare handler, a rule to no rule.
    let ratios: Vec<bool> = rows.iter().map(|r| r[5].is_number()).collect();
    assert_eq!(ratios, [false, true, false, false, true]);
    // Server CPU per request is measured for the child processes (not the in-process upstream).
    let cpu: Vec<bool> = rows.iter().map(|r| r[6].is_number()).collect();
    assert_eq!(cpu, [true, true, false, true, true]);
}

#[test]
fn grpc_and_check_cases_decide_through_one_real_serve_process() {
    let out = floodgate(&[
        "bench",
        "--what",
        "grpc",
        "--requests",
        "200",
        "--http-seconds",
        "5",
        "--connections",
        "2",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let rows = report["sections"][0]["rows"].as_array().unwrap().clone();
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "gRPC ShouldRateLimit, 1 descriptor, gcra, 1,000 keys",
            "POST /v1/check, gcra, 1,000 keys (same rule, same server)",
        ]
    );
    for r in &rows {
        assert_eq!(r[1], 600, "200 decisions in each of 3 rounds: {r}");
        assert_eq!(r[2], 0, "every decision OK: {r}");
        assert!(r[3].as_f64().unwrap() > 0.0, "a decision rate: {r}");
        assert!(
            r[6].as_f64().unwrap() > 0.0 && r[7].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
}

#[test]
fn redis_without_a_store_url_says_so() {
    let out = floodgate(&["bench", "--what", "redis"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--store redis://"));
}

#[test]
fn redis_measures_throughput_and_memory_usage_on_a_real_server() {
    let server = floodgate_store::redis::testing::RedisServer::start().expect("redis-server");
    let out = floodgate(&[
        "bench",
        "--what",
        "redis",
        "--store",
        &server.url(),
        "--requests",
        "300",
        "--http-seconds",
        "5",
        "--algorithms",
        "gcra,sliding_log",
        "--limit",
        "20",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let section = &report["sections"][0];
    let rows = section["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert!(r[1].as_f64().unwrap() > 0.0, "sequential checks/s: {r}");
        // Columns: algorithm, 1 client, its p99, redis-benchmark 1 connection, the ratio,
        // 64 clients, their p99, MEMORY USAGE, ...
        assert!(r[5].as_f64().unwrap() > 0.0, "concurrent checks/s: {r}");
        assert!(r[7].as_i64().unwrap() > 0, "MEMORY USAGE: {r}");
    }
    let notes = section["notes"].to_string();
    assert!(notes.contains("Sliding log holding 20 requests"), "{notes}");
    // The bench may be pointed at a real server: nothing it writes may outlive it for good.
    let keyspace = server.cli(&["info", "keyspace"]).expect("INFO keyspace");
    let field = |name: &str| -> u64 {
        keyspace
            .split(|c: char| c == ',' || c == ':' || c.is_whitespace())
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(0)
    };
    assert!(field("keys") > 0, "the bench wrote keys: {keyspace}");
    assert_eq!(
        field("keys"),
        field("expires"),
        "every key has a TTL: {keyspace}"
    );
}
