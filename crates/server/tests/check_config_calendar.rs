//! `floodgate check-config` on calendar rules: the rule in words (where it resets and the
//! irregular days of the coming year), and the errors naming file, line and field for an
//! unknown zone, a calendar on another algorithm, a period other than day, week or month.

use std::process::Command;

fn check(text: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.toml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).replace(file.to_str().unwrap(), "FILE"),
    )
}

#[test]
fn check_config_describes_a_calendar_rule_in_words() {
    let (code, out, err) = check(
        "[[rules]]\nname = \"daily\"\nalgorithm = \"fixed_window\"\nlimit = \"10000/day\"\n\
         calendar = \"America/Los_Angeles\"\nkey = \"header:x-api-key\"\n\n\
         [[rules]]\nname = \"weekly\"\nalgorithm = \"sliding_window\"\nlimit = \"500/week\"\n\
         calendar = \"Europe/Berlin\"\nweek_start = \"sunday\"\nkey = \"header:x-api-key\"\n",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("daily: fixed_window 10000/day in America/Los_Angeles"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.contains("per calendar day"))
        .unwrap_or_else(|| panic!("{out}"));
    // The two changes of the coming year, whatever today is: a 23-hour day in March and a
    // 25-hour one in November, both Sundays.
    let rest = line
        .split("at most 10000 per calendar day; resets at 00:00 America/Los_Angeles; ")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    let parts: Vec<&str> = rest.split(", ").collect();
    assert_eq!(parts.len(), 2, "{line}");
    let short = parts.iter().find(|p| p.starts_with("23 h on ")).unwrap();
    let long = parts.iter().find(|p| p.starts_with("25 h on ")).unwrap();
    assert_eq!(&short[13..15], "03", "{short}");
    assert_eq!(&long[13..15], "11", "{long}");
    assert!(
        out.contains("at most about 500 per calendar week (the previous period weighted); resets at 00:00 on sunday Europe/Berlin; 6 d 23 h on "),
        "{out}"
    );
}

#[test]
fn calendar_errors_name_file_line_and_field() {
    let (code, _, err) = check(
        "[[rules]]\nname = \"a\"\nalgorithm = \"fixed_window\"\nlimit = \"10/day\"\n\
         calendar = \"America/Los_Angeles_\"\n\n\
         [[rules]]\nname = \"b\"\nalgorithm = \"gcra\"\nlimit = \"10/day\"\ncalendar = \"UTC\"\n\n\
         [[rules]]\nname = \"c\"\nalgorithm = \"fixed_window\"\nlimit = \"10/h\"\ncalendar = \"UTC\"\n\n\
         [[rules]]\nname = \"d\"\nalgorithm = \"fixed_window\"\nlimit = \"10/day\"\nweek_start = \"monday\"\n\n\
         [[rules]]\nname = \"e\"\nalgorithm = \"fixed_window\"\nlimit = \"10/week\"\ncalendar = \"UTC\"\n\
         week_start = \"someday\"\ndelay = \"1s\"\n",
    );
    assert_eq!(code, Some(1), "{err}");
    for want in [
        "FILE:5: rules[0].calendar: unknown time zone \"America/Los_Angeles_\"",
        "FILE:9: rules[1].algorithm: calendar periods need algorithm = \"fixed_window\" or \"sliding_window\", not gcra",
        "FILE:16: rules[2].limit: a calendar period is day, week or month, got \"h\"",
        "FILE:23: rules[3].week_start: week_start applies to calendar weeks only",
        "FILE:30: rules[4].week_start: unknown weekday \"someday\"",
        "FILE:31: rules[4].delay: a calendar rule refuses at once",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}
