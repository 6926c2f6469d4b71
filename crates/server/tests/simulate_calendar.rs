//! `floodgate simulate --calendar ZONE`: the limit counts per calendar day of the zone and the
//! run starts at local midnight, so a day of daily-jobs in Los Angeles spends exactly what the
//! same day spends against an epoch-aligned (UTC) day; without the move to local midnight the
//! Los Angeles day would end 16 hours into the run and admit a second day's budget.

mod simulate_support;

use simulate_support::{run, simulate, simulate_json};

#[test]
fn daily_jobs_in_a_time_zone_spend_one_local_day() {
    let args = [
        "--scenario",
        "daily-jobs",
        "--algorithm",
        "fixed_window",
        "--runners",
        "32",
    ];
    let utc = simulate_json(&args);
    let mut la_args = args.to_vec();
    la_args.extend(["--calendar", "America/Los_Angeles"]);
    let la = simulate_json(&la_args);
    let (u, l) = (run(&utc, "fixed_window"), run(&la, "fixed_window"));
    assert_eq!(u["summary"], l["summary"]);
    let units = l["summary"]["units_admitted"].as_u64().unwrap();
    assert!(units <= 10_000 && units > 9_800, "{units}");
    assert!(
        l["summary"]["rejected"].as_u64().unwrap() > 100,
        "{}",
        l["summary"]
    );
}

#[test]
fn calendar_flags_that_do_not_fit_are_refused_naming_them() {
    for (extra, want) in [
        (
            vec![
                "--calendar",
                "Mars/Olympus_Mons",
                "--algorithm",
                "fixed_window",
            ],
            "unknown time zone \"Mars/Olympus_Mons\"",
        ),
        (
            vec!["--calendar", "UTC"],
            "--calendar needs --algorithm fixed_window or sliding_window",
        ),
        (
            vec![
                "--calendar",
                "UTC",
                "-a",
                "sliding_window",
                "--limit",
                "10/h",
            ],
            "--calendar counts the limit per calendar day",
        ),
    ] {
        let mut args = vec!["--scenario", "daily-jobs"];
        args.extend(extra);
        let out = simulate(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
