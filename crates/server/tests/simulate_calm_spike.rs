//! `floodgate simulate --scenario calm-spike`: a calm client (one request per second) and a
//! sudden 15 from the same key, at 10 per 10 s.

mod simulate_support;

use simulate_support::{by_source, simulate_json, totals};

/// With windows the spike uses up the allowance and the calm client gets 429s; with the bucket
/// algorithms the calm client is never rejected.
///
/// - fixed window and sliding log: calm at 0..4 s (5) plus 5 of the spike at 4.5 s fill the 10;
///   the calm requests at 5..9 s are rejected (5); from 10 s on they pass again.
/// - sliding window counter: also at 10 s, where the previous window still weighs 10 x 1.
/// - token bucket, leaky bucket, GCRA: the calm client leaves 9 tokens after each request, so at
///   4.5 s 9.5 are there: 9 of the spike pass, 0.5 remain, and each calm request finds 1.5.
#[test]
fn calm_client_is_starved_by_windows_not_by_buckets() {
    let report = simulate_json(&["--scenario", "calm-spike"]);
    let expected = [
        ("fixed_window", (15, 5), (5, 10), 10),
        ("sliding_log", (15, 5), (5, 10), 10),
        ("sliding_window", (14, 6), (5, 10), 10),
        ("token_bucket", (20, 0), (9, 6), 19),
        ("leaky_bucket", (20, 0), (9, 6), 19),
        ("gcra", (20, 0), (9, 6), 19),
    ];
    for (algorithm, calm, spike, peak) in expected {
        assert_eq!(by_source(&report, algorithm, "calm"), calm, "{algorithm}");
        assert_eq!(by_source(&report, algorithm, "spike"), spike, "{algorithm}");
        assert_eq!(totals(&report, algorithm).2, peak, "{algorithm}");
    }
}
