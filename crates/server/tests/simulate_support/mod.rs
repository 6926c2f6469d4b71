//! Runs the real `floodgate simulate` binary and reads its JSON output.

#![allow(dead_code)] // each test file uses a different subset

use std::process::{Command, Output};

use serde_json::Value;

/// Runs `floodgate simulate ARGS`, returning the raw output.
pub fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("the floodgate binary runs")
}

/// Runs `floodgate simulate ARGS --format json`, asserting success, and parses the document.
pub fn simulate_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let out = simulate(&all);
    assert!(
        out.status.success(),
        "floodgate simulate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The run of `algorithm` in a JSON report.
pub fn run<'a>(report: &'a Value, algorithm: &str) -> &'a Value {
    report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["algorithm"] == algorithm)
        .unwrap_or_else(|| panic!("no run for {algorithm}"))
}

/// `(admitted, rejected, max units in any period)` of `algorithm`.
pub fn totals(report: &Value, algorithm: &str) -> (u64, u64, u64) {
    let s = &run(report, algorithm)["summary"];
    (
        s["admitted"].as_u64().unwrap(),
        s["rejected"].as_u64().unwrap(),
        s["max_in_period"]["units"].as_u64().unwrap(),
    )
}

/// `(admitted, rejected)` of one traffic source (`burst-1`, `calm` ...) for `algorithm`.
pub fn by_source(report: &Value, algorithm: &str, source: &str) -> (u64, u64) {
    let s = run(report, algorithm)["summary"]["per_source"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == source)
        .unwrap_or_else(|| panic!("no source {source}"));
    (
        s["admitted"].as_u64().unwrap(),
        s["rejected"].as_u64().unwrap(),
    )
}

/// The hand-checked `--preset clock-boundary --algorithm all` totals (100 at 0.95 s, 100 at
/// 1.05 s, limit 100/s): (admitted, rejected, most admitted in any 1 s) per algorithm. Shared by
/// the memory and the Redis runs, which must agree with them exactly.
pub fn assert_clock_boundary_totals(report: &Value) {
    let expected = [
        ("fixed_window", 200, 0, 200),
        ("sliding_log", 100, 100, 100),
        ("sliding_window", 105, 95, 105),
        ("token_bucket", 110, 90, 110),
        ("leaky_bucket", 110, 90, 110),
        ("gcra", 110, 90, 110),
    ];
    for (algorithm, admitted, rejected, peak) in expected {
        assert_eq!(
            totals(report, algorithm),
            (admitted, rejected, peak),
            "{algorithm}"
        );
    }
}
