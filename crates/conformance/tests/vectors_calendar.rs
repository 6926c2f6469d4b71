//! The calendar vectors (`vectors/calendar/`) on the core and the memory store, and checks that
//! the runner notices a wrong answer.

use floodgate_conformance::calendar::{
    calendar_vectors_dir, load_calendar_dir, parse_instant, run_calendar_dir, run_calendar_vector,
    CalendarVector, CoreCalendarBackend, MemoryCalendarBackend,
};

#[test]
fn every_calendar_vector_passes_on_the_core() {
    let report =
        run_calendar_dir(&mut CoreCalendarBackend::default(), &calendar_vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps >= 25, "only {} steps", report.steps);
}

#[test]
fn every_calendar_vector_passes_on_the_memory_store() {
    let report = run_calendar_dir(
        &mut MemoryCalendarBackend::default(),
        &calendar_vectors_dir(),
    )
    .unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps >= 25, "only {} steps", report.steps);
}

#[test]
fn the_calendar_vectors_cover_the_edges_the_spec_names() {
    let files = load_calendar_dir(&calendar_vectors_dir()).unwrap();
    let cases: Vec<_> = files.iter().flat_map(|(_, v)| &v.cases).collect();
    let has = |zone: &str, date: &str| {
        cases
            .iter()
            .any(|c| c.zone == zone && c.steps.iter().any(|s| s.at.starts_with(date)))
    };
    for (zone, date) in [
        ("America/Los_Angeles", "2027-03-14"),
        ("America/Los_Angeles", "2027-11-07"),
        ("Europe/Berlin", "2027-03-28"),
        ("Europe/Berlin", "2027-10-31"),
        ("UTC", "2028-02-29"),
    ] {
        assert!(has(zone, date), "no vector on {date} in {zone}");
    }
    assert!(cases.iter().any(|c| c.algorithm == "sliding_window"));
    assert!(cases
        .iter()
        .any(|c| c.steps.iter().any(|s| s.at.contains("23:59:59.999999"))));
}

#[test]
fn a_wrong_expectation_is_reported_with_its_label() {
    let vector: CalendarVector = toml::from_str(
        r#"
        [[case]]
        name = "wrong"
        algorithm = "fixed_window"
        limit = 1
        unit = "day"
        zone = "America/Los_Angeles"
        [[case.step]]
        at = "2027-03-14T00:00:00-08:00"
        cost = 1
        allowed = true
        remaining = 0
        reset_after_us = 86_400_000_000
        "#,
    )
    .unwrap();
    let report = run_calendar_vector(&mut CoreCalendarBackend::default(), &vector);
    assert_eq!(report.failures.len(), 1, "{report}");
    assert_eq!(report.failures[0].label, "calendar/core/wrong#1");
    assert!(
        report.failures[0].message.contains("82800000000"),
        "{report}"
    );
}

#[test]
fn instants_are_rfc3339_with_microseconds() {
    assert_eq!(
        parse_instant("2027-03-14T23:59:59.999999-07:00"),
        Ok(1_805_094_000_000_000 - 1)
    );
    assert!(parse_instant("2027-03-14").is_err());
}
