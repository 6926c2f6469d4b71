//! `floodgate simulate --instances N --counter local|shared|split`: the multi-instance trap.

mod simulate_support;

use simulate_support::{run, simulate_json, totals};

/// 8 instances with their own counters admit 8 x the declared 1,000/s; one shared counter
/// admits exactly 1,000. The flood (10 x the limit, one request per 0.1 ms for 1 s) gives each
/// instance 1,250 requests, more than its own 1,000.
#[test]
fn eight_local_counters_multiply_the_limit_and_a_shared_one_does_not() {
    for algorithm in ["fixed_window", "sliding_log"] {
        let common = [
            "--scenario",
            "flood",
            "--limit",
            "1000/s",
            "--algorithm",
            algorithm,
            "--instances",
            "8",
        ];
        let local = simulate_json(&[&common[..], &["--counter", "local"]].concat());
        assert_eq!(
            totals(&local, algorithm),
            (8_000, 2_000, 8_000),
            "{algorithm}"
        );
        let summary = &run(&local, algorithm)["summary"];
        assert_eq!(summary["over_admission"], 8.0);
        assert_eq!(
            summary["admitted_per_instance"],
            serde_json::json!(vec![1000; 8])
        );
        assert_eq!(summary["shared_reference"]["admitted"], 1_000);

        let shared = simulate_json(&[&common[..], &["--counter", "shared"]].concat());
        assert_eq!(
            totals(&shared, algorithm),
            (1_000, 9_000, 1_000),
            "{algorithm}"
        );
        assert_eq!(run(&shared, algorithm)["summary"]["over_admission"], 1.0);
        assert!(run(&shared, algorithm)["summary"]["shared_reference"].is_null());
    }
}

/// The documents' chart: a flood at 10 per 10 s behind 3 instances. Own counters: 30 pass in
/// ten seconds; one shared counter: 10.
#[test]
fn three_instances_flood_thirty_vs_ten() {
    let common = [
        "--scenario",
        "flood",
        "--algorithm",
        "fixed_window",
        "--instances",
        "3",
    ];
    let local = simulate_json(&[&common[..], &["--counter", "local"]].concat());
    assert_eq!(totals(&local, "fixed_window"), (30, 70, 30));
    let shared = simulate_json(&[&common[..], &["--counter", "shared"]].concat());
    assert_eq!(totals(&shared, "fixed_window"), (10, 90, 10));
}

/// Two bursts of 10 at the boundary behind 3 instances with a sliding log: each instance sees
/// at most 7 of the 20, so all 20 pass; a shared counter admits 10.
#[test]
fn three_instances_boundary_twenty_vs_ten() {
    let common = [
        "--scenario",
        "boundary",
        "--algorithm",
        "sliding_log",
        "--instances",
        "3",
    ];
    let local = simulate_json(&[&common[..], &["--counter", "local"]].concat());
    assert_eq!(totals(&local, "sliding_log"), (20, 0, 20));
    let shared = simulate_json(&[&common[..], &["--counter", "shared"]].concat());
    assert_eq!(totals(&shared, "sliding_log"), (10, 10, 10));
}

/// Splitting 10 per 10 s over 3 instances gives 4 + 3 + 3. Demand of exactly the limit (10
/// requests in 10 s) passes under round-robin, but skewed balancing sends 6 of the 10 to
/// instance 0 (pattern 0,1,0,2,0 ...), which denies 2 it should have admitted.
#[test]
fn split_counters_wrongly_deny_under_skewed_balancing() {
    let common = [
        "--scenario",
        "flood",
        "--rate",
        "10/10s",
        "--algorithm",
        "fixed_window",
        "--instances",
        "3",
        "--counter",
        "split",
    ];
    let fair = simulate_json(&[&common[..], &["--balance", "round-robin"]].concat());
    assert_eq!(totals(&fair, "fixed_window"), (10, 0, 10));
    let skewed = simulate_json(&[&common[..], &["--balance", "skewed"]].concat());
    assert_eq!(totals(&skewed, "fixed_window"), (8, 2, 8));
    let summary = &run(&skewed, "fixed_window")["summary"];
    assert_eq!(
        summary["admitted_per_instance"],
        serde_json::json!([4, 2, 2])
    );
    assert_eq!(summary["shared_reference"]["admitted"], 10);
    let instances: Vec<u64> = run(&skewed, "fixed_window")["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["instance"].as_u64().unwrap())
        .collect();
    assert_eq!(instances, [0, 1, 0, 2, 0, 0, 1, 0, 2, 0]);
}
