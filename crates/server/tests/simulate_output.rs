//! `floodgate simulate` output formats: the table with its terminal chart, the SVG chart,
//! `-a` as a list or repeated, and errors for flags that do not apply.

mod simulate_support;

use simulate_support::{simulate, simulate_json, totals};

fn stdout_of(args: &[&str]) -> String {
    let out = simulate(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn table_shows_totals_true_rate_and_a_chart_per_algorithm() {
    let text = stdout_of(&["--preset", "clock-boundary"]);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name} in\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("fixed_window"),
        ["fixed_window", "200", "0", "200", "2.00x"]
    );
    assert_eq!(
        row("sliding_log"),
        ["sliding_log", "100", "100", "100", "1.00x"]
    );
    assert_eq!(
        row("sliding_window"),
        ["sliding_window", "105", "95", "105", "1.05x"]
    );
    assert!(text.contains("max in any 1 s"));
    // Per-column table: 0.9 s and 1 s rows carry the bursts.
    assert!(
        text.lines()
            .any(|l| l.starts_with("0.9 s") && l.contains("100/0")),
        "{text}"
    );
    // One chart per algorithm with admitted and rejected cells.
    assert_eq!(
        text.matches("(one column per 0.1 s; | marks a window edge)")
            .count(),
        6
    );
    assert!(text.contains("sliding_log: 100 admitted (█), 100 rejected (x)"));
    assert!(text.contains("██ xx"), "{text}");
}

#[test]
fn svg_has_one_panel_per_algorithm_with_hatched_rejections() {
    let svg = stdout_of(&["--scenario", "calm-spike", "--format", "svg"]);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("<pattern id=\"rejected\""));
    for algorithm in [
        "fixed_window",
        "sliding_log",
        "sliding_window",
        "token_bucket",
        "leaky_bucket",
        "gcra",
    ] {
        assert_eq!(
            svg.matches(&format!(">{algorithm}: ")).count(),
            1,
            "{algorithm}"
        );
    }
    // 20 one-second columns. Hatched bars: the spike's column for all six, then the calm
    // requests the windows reject (5..9 s; the sliding window counter also 10 s).
    let hatched = "fill=\"url(#rejected)\" stroke=\"#d1352b\" stroke-width=\"0.8\"";
    assert_eq!(svg.matches(hatched).count(), 6 + 6 + 7 + 1 + 1 + 1);
    // The 4 s column: calm + 5 of the spike under windows, calm + 9 under buckets.
    assert_eq!(svg.matches("<title>4 s: 6 admitted</title>").count(), 3);
    assert_eq!(svg.matches("<title>4 s: 10 admitted</title>").count(), 3);
    // Balanced element count: every <rect ...> with a title is closed.
    assert_eq!(
        svg.matches("<title>").count(),
        svg.matches("</title>").count()
    );

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("simulate_output.svg");
    let out = simulate(&[
        "--scenario",
        "flood",
        "--format",
        "svg",
        "--output",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(std::fs::read_to_string(&path).unwrap().contains("flood"));
}

#[test]
fn flags_that_do_not_fit_are_clear_errors() {
    for (args, message) in [
        (
            &["--scenario", "flood", "--before", "1s"][..],
            "--before applies only to --scenario boundary",
        ),
        (
            &["--instances", "11", "--counter", "split"][..],
            "cannot split limit 10 over 11 instances",
        ),
        (&["--store", "mongo://127.0.0.1"][..], "unknown store"),
        (&["--limit", "ten/s"][..], "invalid quota"),
        (&["--algorithm", "random"][..], "unknown algorithm"),
    ] {
        let out = simulate(args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// `-a` takes a comma-separated list and may be repeated: each named algorithm runs once, in
/// the usual order, and no other; an unknown name in a list is refused, naming it.
#[test]
fn algorithms_as_a_list_or_repeated_run_each_once() {
    let names = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--scenario", "calm-spike"];
        all.extend(args);
        simulate_json(&all)["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["algorithm"].as_str().unwrap().to_string())
            .collect()
    };
    let two = ["fixed_window", "token_bucket"];
    assert_eq!(names(&["-a", "fixed_window,token_bucket"]), two);
    assert_eq!(names(&["-a", "token_bucket", "-a", "fixed_window"]), two);
    assert_eq!(
        names(&[
            "-a",
            "token_bucket,fixed_window",
            "--algorithm",
            "token_bucket"
        ]),
        two
    );
    assert_eq!(names(&["-a", "gcra"]), ["gcra"]);
    assert_eq!(names(&[]).len(), 6);
    // The totals are the same as each algorithm run alone.
    let pair = simulate_json(&["--scenario", "calm-spike", "-a", "fixed_window,gcra"]);
    for one in ["fixed_window", "gcra"] {
        let alone = simulate_json(&["--scenario", "calm-spike", "-a", one]);
        assert_eq!(totals(&pair, one), totals(&alone, one), "{one}");
    }
    // The table and the SVG show the two panels.
    let table = stdout_of(&["-a", "fixed_window,gcra"]);
    assert!(
        table.contains("fixed_window:") && table.contains("gcra:"),
        "{table}"
    );
    assert!(!table.contains("token_bucket"), "{table}");
    let out = simulate(&["-a", "fixed_window,nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown algorithm \"nope\""), "{err}");
}
