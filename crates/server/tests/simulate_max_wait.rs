//! `floodgate simulate --max-wait` (queue vs reject) and `--scenario daily-jobs` (job runners
//! sharing a daily quota with weighted costs).

mod simulate_support;

use serde_json::Value;
use simulate_support::{by_source, run, simulate, simulate_json, totals};

fn summary<'a>(report: &'a Value, algorithm: &str) -> &'a Value {
    &run(report, algorithm)["summary"]
}

/// GCRA at 10 per 10 s (one unit a second, burst 10), a calm client every second and a spike
/// of 15 at 4.5 s, waiting up to 2 s:
///
/// - rejecting (no wait): the spike finds 9.5 units: 9 pass, 6 are rejected; the calm client
///   always passes (29 admitted, 6 rejected);
/// - queueing: the 10th and 11th of the spike wait 0.5 s and 1.5 s; the 12th would wait 2.5 s
///   and is rejected, as are the rest (11 of the spike, 4 rejected). The queue then stays 2 s
///   long: every calm request from 5 s on waits exactly 2 s (15 of them), none is rejected.
#[test]
fn queueing_the_calm_spike_admits_what_fits_within_the_wait_at_its_slot() {
    let report = simulate_json(&[
        "--scenario",
        "calm-spike",
        "--algorithm",
        "gcra",
        "--max-wait",
        "2s",
    ]);
    assert_eq!(report["max_wait_us"], 2_000_000);
    let s = summary(&report, "gcra");
    assert_eq!(by_source(&report, "gcra", "spike"), (11, 4));
    assert_eq!(by_source(&report, "gcra", "calm"), (20, 0));
    assert_eq!(s["queued"], 17);
    assert_eq!(s["longest_wait_us"], 2_000_000);
    assert_eq!(s["total_wait_us"], 2 * 1_000_000 + 15 * 2_000_000);
    let reference = &s["reject_reference"];
    assert_eq!(
        (
            reference["admitted"].as_u64(),
            reference["rejected"].as_u64()
        ),
        (Some(29), Some(6))
    );
    // Every admitted decision says its wait, never above --max-wait; a denial has none.
    for d in run(&report, "gcra")["decisions"].as_array().unwrap() {
        if d["allowed"] == true {
            assert!(d["wait_us"].as_u64().unwrap() <= 2_000_000, "{d}");
        } else {
            assert!(d.get("wait_us").is_none(), "{d}");
        }
    }
    // The waited requests run in later columns: the last calm request (19 s) runs at 21 s.
    let columns = s["columns"].as_array().unwrap();
    assert_eq!(columns.len(), 22);
    assert_eq!(columns[21]["admitted"], 1);
    assert_eq!(columns[21]["queued"], 1);
    let admitted: u64 = columns
        .iter()
        .map(|c| c["admitted"].as_u64().unwrap())
        .sum();
    assert_eq!(admitted, 31);
}

/// Waiting never lets a window algorithm exceed its bound at the times the requests run: the
/// sliding log still admits at most 10 units in any 10 s, now counted at the scheduled times.
#[test]
fn at_their_scheduled_times_the_sliding_log_still_holds_the_limit() {
    for wait in ["500ms", "2s", "10s"] {
        let report = simulate_json(&["--scenario", "calm-spike", "--max-wait", wait]);
        let (admitted, _, peak) = totals(&report, "sliding_log");
        assert!(peak <= 10, "--max-wait {wait}: {peak}");
        let reference = summary(&report, "sliding_log")["reject_reference"]["admitted"]
            .as_u64()
            .unwrap();
        assert!(
            admitted >= reference,
            "--max-wait {wait}: queueing admits no fewer"
        );
    }
}

#[test]
fn the_table_compares_queueing_with_rejecting() {
    let out = simulate(&["--scenario", "calm-spike", "-a", "gcra", "--max-wait", "2s"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("waiting:  up to 2 s for a slot"), "{text}");
    let row = text
        .lines()
        .skip_while(|l| !l.starts_with("queue vs reject"))
        .nth(1)
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..4], ["gcra", "31/4", "17", "2"], "{row}");
    assert_eq!(cells.last(), Some(&"29/6"), "{row}");
}

/// 8 runners share 10,000 units a day: each calls every 10 minutes (144 calls a day, 1,152 in
/// all), a search (100 units) every 10th call, list calls (1 unit) otherwise: about 12,500
/// units of demand. The window algorithms spend exactly the budget, never more, then refuse;
/// the bucket algorithms refill during the day and spend more than a day's quota (a daily
/// quota is a window, not a bucket).
#[test]
fn eight_runners_never_spend_more_than_the_daily_budget() {
    let report = simulate_json(&["--scenario", "daily-jobs"]);
    assert_eq!(report["policy"]["limit"], 10_000);
    assert_eq!(report["policy"]["period_us"], 86_400_000_000u64);
    for algorithm in ["fixed_window", "sliding_log", "sliding_window"] {
        let s = summary(&report, algorithm);
        assert_eq!(s["requests"], 1_152);
        // The list calls use up the last units a search could not: exactly the budget.
        assert_eq!(s["units_admitted"], 10_000, "{algorithm}");
        assert_eq!(s["max_in_period"]["units"], 10_000, "{algorithm}");
        let (searches, _) = by_source(&report, algorithm, "search");
        let (lists, _) = by_source(&report, algorithm, "list");
        assert_eq!(searches * 100 + lists, 10_000, "{algorithm}");
        // Units spent per hour: 24 columns of one hour, adding up to the total, and once the
        // budget is spent nothing more is.
        assert_eq!(s["column_us"], 3_600_000_000u64);
        let per_hour: Vec<u64> = s["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["units_admitted"].as_u64().unwrap())
            .collect();
        assert_eq!(per_hour.len(), 24);
        assert_eq!(per_hour.iter().sum::<u64>(), 10_000);
        let spent_out = per_hour.iter().position(|u| *u == 0).unwrap();
        assert!(
            per_hour[spent_out..].iter().all(|u| *u == 0),
            "{per_hour:?}"
        );
    }
    for algorithm in ["token_bucket", "leaky_bucket", "gcra"] {
        let peak = totals(&report, algorithm).2;
        assert!(
            peak > 10_000,
            "{algorithm}: the refill spends past a day's quota: {peak}"
        );
    }
    // The table shows the units spent per hour.
    let out = simulate(&["--scenario", "daily-jobs", "-a", "fixed_window"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("units spent"), "{text}");
    assert!(text.contains("total                  10000"), "{text}");
}

#[test]
fn runners_and_every_shape_the_jobs_and_wrong_flags_are_errors() {
    let report = simulate_json(&[
        "--scenario",
        "daily-jobs",
        "--runners",
        "3",
        "--every",
        "1h",
        "-a",
        "fixed_window",
    ]);
    // 3 runners x 24 calls, far below the budget: everything passes.
    let s = summary(&report, "fixed_window");
    assert_eq!(
        (s["requests"].as_u64(), s["rejected"].as_u64()),
        (Some(72), Some(0))
    );
    for (args, message) in [
        (
            &["--scenario", "calm-spike", "--runners", "3"][..],
            "--runners applies only to --scenario daily-jobs",
        ),
        (
            &["--scenario", "daily-jobs", "--requests", "3"][..],
            "do not apply to --scenario daily-jobs",
        ),
        (
            &["--max-wait", "1s", "--store", "redis://127.0.0.1:1"][..],
            "--max-wait needs --store memory",
        ),
        (
            &["--scenario", "daily-jobs", "--runners", "0"][..],
            "--runners must be at least 1",
        ),
    ] {
        let out = simulate(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

/// The queue table reads waits to about three figures: `1.88 s` for GCRA's mean wait on the
/// calm spike (32 s over 17 queued requests: 1.882352... s), never every microsecond.
#[test]
fn the_queue_table_prints_waits_rounded() {
    let out = simulate(&["--scenario", "calm-spike", "--max-wait", "2s", "-a", "gcra"]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .skip_while(|l| !l.starts_with("queue vs reject"))
        .find(|l| l.starts_with("gcra"))
        .unwrap_or_else(|| panic!("no queue row: {table}"));
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        ["gcra", "31/4", "17", "2 s", "1.88 s", "29/6"],
        "{row}"
    );
    assert!(!table.contains("1.882"), "{table}");
}
