//! `floodgate simulate --scenario boundary`: the two boundary measurements of the source
//! documents, reproduced on the simulated clock with hand-checked numbers.

mod simulate_support;

use simulate_support::{assert_clock_boundary_totals, by_source, run, simulate_json, totals};

/// Limit 100/s, 100 requests at 0.95 s and 100 at 1.05 s (the simulated-clock case).
///
/// - fixed window: each window sees 100, so all 200 pass within 0.1 s: 2x the limit.
/// - sliding log: the 100 entries from 0.95 s are still within 1 s at 1.05 s: exactly 100.
/// - sliding window counter: at 1.05 s the previous window weighs 100 x (1 - 0.05) = 95, so
///   5 more fit: 105 (the document's float version reports 6%).
/// - token bucket, leaky bucket, GCRA (burst 100): 0.1 s refills 10 units: 110 (+10%).
#[test]
fn clock_boundary_matches_the_documents() {
    let report = simulate_json(&[
        "--scenario",
        "boundary",
        "--limit",
        "100/s",
        "--algorithm",
        "all",
    ]);
    assert_clock_boundary_totals(&report);
    let fixed = &run(&report, "fixed_window")["summary"];
    assert_eq!(fixed["over_admission"], 2.0);
    assert_eq!(fixed["max_in_period"]["start_us"], 950_000);
    assert_eq!(
        run(&report, "sliding_log")["summary"]["over_admission"],
        1.0
    );
    // The preset is the same traffic.
    let preset = simulate_json(&["--preset", "clock-boundary"]);
    assert_eq!(preset["runs"], report["runs"]);
}

/// Limit 100/s, 200 requests at the end of one window and 200 at the start of the next (the
/// Redis measurement: 100/100, 100/0, 100/2, 101/14). Each burst takes 14 ms (request i at
/// start + 70i us), starting at 0.87 s and 1.01 s.
///
/// - sliding window counter: in the second burst the weight of the previous window is
///   100 x (1 - f) with f = (10,000 + 70i) / 10^6; a request fits while count + 1 <= 1 + 0.007i:
///   i = 0 and i = 143, so 2.
/// - token bucket (capacity 100): the first burst gets 100 plus the token refilled by i = 143
///   (101); at 1.01 s 100 + 14 - 101 = 13 tokens are there, and one more refills by i = 143: 14.
#[test]
fn redis_boundary_matches_the_documents() {
    let report = simulate_json(&["--preset", "redis-boundary"]);
    let expected = [
        ("fixed_window", (100, 100), (100, 100)),
        ("sliding_log", (100, 100), (0, 200)),
        ("sliding_window", (100, 100), (2, 198)),
        ("token_bucket", (101, 99), (14, 186)),
        ("leaky_bucket", (101, 99), (14, 186)),
        ("gcra", (101, 99), (14, 186)),
    ];
    for (algorithm, first, second) in expected {
        assert_eq!(
            by_source(&report, algorithm, "burst-1"),
            first,
            "{algorithm}"
        );
        assert_eq!(
            by_source(&report, algorithm, "burst-2"),
            second,
            "{algorithm}"
        );
    }
    assert_eq!(totals(&report, "fixed_window").2, 200);
    assert_eq!(totals(&report, "sliding_log").2, 100);
    assert_eq!(totals(&report, "sliding_window").2, 102);
    assert_eq!(totals(&report, "token_bucket").2, 115);
    // The same traffic spelled out with flags.
    let by_hand = simulate_json(&[
        "--scenario",
        "boundary",
        "--limit",
        "100/s",
        "--requests",
        "200",
        "--before",
        "130ms",
        "--after",
        "10ms",
        "--spread",
        "14ms",
    ]);
    assert_eq!(by_hand["runs"], report["runs"]);
}

/// The documents' chart: 10 per 10 s, 10 requests at 9.5 s and 10 at 10.5 s. The fixed window
/// lets all 20 through; the sliding windows reject the second burst.
#[test]
fn chart_boundary_twenty_vs_ten() {
    let report = simulate_json(&["--scenario", "boundary"]);
    assert_eq!(totals(&report, "fixed_window"), (20, 0, 20));
    assert_eq!(totals(&report, "sliding_log"), (10, 10, 10));
    // 10 x (1 - 0.05) = 9.5 already counted: no room for even one more.
    assert_eq!(totals(&report, "sliding_window"), (10, 10, 10));
    // One second refills one unit.
    for algorithm in ["token_bucket", "leaky_bucket", "gcra"] {
        assert_eq!(totals(&report, algorithm), (11, 9, 11), "{algorithm}");
    }
}
