//! `floodgate simulate --trace FILE`: CSV and JSON-lines traffic, weighted costs, impossible
//! requests and bad lines.

mod simulate_support;

use std::path::PathBuf;

use simulate_support::{run, simulate, simulate_json, totals};

/// Writes `text` to a fresh file in the test's temporary directory.
fn trace_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("simulate_trace");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A weighted trace against 100 units per second (GCRA, burst 100): a 100-unit search call,
/// a 1-unit list call, a 150-unit call that can never fit, and a 60-unit call 0.6 s later.
#[test]
fn weighted_trace_reports_impossible_requests_as_errors() {
    let path = trace_file(
        "weighted.csv",
        "t_ms,key,cost\n\
         0,alice,100\n\
         1,alice,1\n\
         {\"t_ms\": 2, \"key\": \"alice\", \"cost\": 150}\n\
         600,alice,60\n\
         600.5,bob,1\n",
    );
    let report = simulate_json(&[
        "--trace",
        path.to_str().unwrap(),
        "--limit",
        "100/s",
        "-a",
        "gcra",
    ]);
    let decisions = run(&report, "gcra")["decisions"]
        .as_array()
        .unwrap()
        .clone();
    let fields: Vec<_> = decisions
        .iter()
        .map(|d| {
            (
                d["t_us"].as_u64().unwrap(),
                d["key"].as_str().unwrap(),
                d["cost"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            (0, "alice", 100),
            (1_000, "alice", 1),
            (2_000, "alice", 150),
            (600_000, "alice", 60),
            (600_500, "bob", 1)
        ]
    );
    // 100 units at 0 s empty the bucket; 1 ms later only 0.1 unit has refilled.
    assert_eq!(decisions[0]["allowed"], true);
    assert_eq!(decisions[0]["remaining"], 0);
    assert_eq!(decisions[1]["allowed"], false);
    assert_eq!(decisions[1]["retry_after_us"], 9_000);
    // 150 > capacity 100: refused as impossible, not a plain denial.
    assert_eq!(decisions[2]["error"], "insufficient_capacity");
    assert_eq!(decisions[2]["capacity"], 100);
    assert!(decisions[2].get("allowed").is_none());
    // At 0.6 s, 60 units have refilled: exactly enough.
    assert_eq!(decisions[3]["allowed"], true);
    assert_eq!(decisions[3]["remaining"], 0);
    assert_eq!(decisions[3]["reset_after_us"], 1_000_000);
    assert_eq!(decisions[4]["allowed"], true);
    assert_eq!(decisions[4]["remaining"], 99);

    let summary = &run(&report, "gcra")["summary"];
    assert_eq!(summary["admitted"], 3);
    assert_eq!(summary["rejected"], 1);
    assert_eq!(summary["impossible"], 1);
    assert_eq!(summary["units_admitted"], 161);
    // alice: 100 at 0 s and 60 at 0.6 s fall in one second.
    assert_eq!(summary["max_in_period"]["key"], "alice");
    assert_eq!(summary["max_in_period"]["units"], 160);
    assert_eq!(totals(&report, "gcra"), (3, 1, 160));
}

/// Every bad line is reported with the file, the line number and the field; exit status 2.
#[test]
fn bad_trace_lines_name_file_line_and_field() {
    let cases = [
        (
            "bad_time.csv",
            "t_ms,key,cost\n0,a,1\nsoon,a,1\n",
            ":3: field `t_ms`",
        ),
        ("bad_cost.csv", "0,a,1\n5,a,-2\n", ":2: field `cost`"),
        (
            "bad_key.jsonl",
            "{\"t_ms\": 1, \"key\": \"\"}\n",
            ":1: field `key`",
        ),
        (
            "bad_json.jsonl",
            "{\"t_ms\": 1, \"key\": \"a\"}\n{\"t_ms\": 2,\n",
            ":2: field `line`",
        ),
    ];
    for (name, text, expected) in cases {
        let path = trace_file(name, text);
        let out = simulate(&["--trace", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(name) && stderr.contains(expected),
            "{name}: {stderr}"
        );
    }
    let out = simulate(&["--trace", "/nonexistent/trace.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the trace"));
}
