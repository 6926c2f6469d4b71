use super::*;
use crate::algorithm::{Algorithm, FixedWindow, SlidingWindow};
use crate::quota::Quota;

const S: u64 = 1_000_000;

fn cal(zone: &str, unit: CalendarUnit) -> Calendar {
    Calendar::new(zone, unit, None).unwrap()
}

/// Local midnight from `date -d <iso> +%s`.
fn at(seconds: u64) -> Timestamp {
    seconds * S
}

#[test]
fn days_across_both_dst_changes_in_two_zones() {
    // (zone, local midnight before, next local midnight, hours)
    let cases = [
        ("America/Los_Angeles", 1_805_011_200, 1_805_094_000, 23), // 2027-03-14
        ("America/Los_Angeles", 1_825_570_800, 1_825_660_800, 25), // 2027-11-07
        ("Europe/Berlin", 1_806_188_400, 1_806_271_200, 23),       // 2027-03-28
        ("Europe/Berlin", 1_824_933_600, 1_825_023_600, 25),       // 2027-10-31
    ];
    for (zone, start, end, hours) in cases {
        let c = cal(zone, CalendarUnit::Day);
        let (start, end) = (at(start), at(end));
        assert_eq!((end - start) / HOUR, hours, "{zone}");
        for t in [start, start + 1, start + 2 * HOUR, end - 1] {
            assert_eq!(c.period_at(t), Some((start, end)), "{zone} {t}");
        }
        assert_eq!(c.period_at(end).map(|p| p.0), Some(end));
        assert_eq!(c.period_at(start - 1).map(|p| p.1), Some(start));
        assert_eq!(c.irregular_len(start), Some(hours * HOUR));
        assert_eq!(
            c.irregular_len(end + DAY),
            None,
            "{zone}: an ordinary day after"
        );
    }
}

#[test]
fn february_of_a_leap_year_is_29_days() {
    let c = cal("UTC", CalendarUnit::Month);
    let (feb, mar) = (at(1_832_976_000), at(1_835_481_600));
    assert_eq!(c.period_at(feb + 5), Some((feb, mar)));
    assert_eq!(c.period_at(mar - 1), Some((feb, mar)));
    assert_eq!((mar - feb) / DAY, 29);
    let w = c.window_at(mar - 1).unwrap();
    assert_eq!((w.start - w.previous_start) / DAY, 31, "January");
    assert_eq!((w.next_end - w.end) / DAY, 31, "March");
}

#[test]
fn weeks_start_on_the_configured_weekday() {
    // 2027-03-14 is a Sunday.
    let sunday = at(1_805_011_200);
    let from_sunday = Calendar::new(
        "America/Los_Angeles",
        CalendarUnit::Week,
        Some(parse_weekday("Sun").unwrap()),
    )
    .unwrap();
    let (start, end) = from_sunday.period_at(sunday + HOUR).unwrap();
    assert_eq!(start, sunday);
    assert_eq!(
        end - start,
        7 * DAY - HOUR,
        "the week holding the spring change"
    );
    let iso = cal("America/Los_Angeles", CalendarUnit::Week);
    let (start, end) = iso.period_at(sunday + HOUR).unwrap();
    assert_eq!(
        end,
        sunday + DAY - HOUR,
        "the ISO week ends at Monday 00:00 PDT"
    );
    assert_eq!(end - start, 7 * DAY - HOUR);
    assert_eq!(
        parse_weekday("someday"),
        Err(CalendarError::UnknownWeekday("someday".into()))
    );
}

#[test]
fn unknown_zones_and_unfit_algorithms_are_refused() {
    assert_eq!(
        Calendar::new("Mars/Olympus", CalendarUnit::Day, None),
        Err(CalendarError::UnknownZone("Mars/Olympus".into()))
    );
    let day = cal("UTC", CalendarUnit::Day);
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::SlidingLog,
    ] {
        assert_eq!(
            CalendarQuota::new(kind, 10, day.clone()),
            Err(CalendarError::Algorithm(kind))
        );
    }
    let largest = MAX_EXACT / CalendarUnit::Day.max_period();
    assert!(CalendarQuota::new(AlgorithmKind::SlidingWindow, largest, day.clone()).is_ok());
    assert!(matches!(
        CalendarQuota::new(AlgorithmKind::SlidingWindow, largest + 1, day.clone()),
        Err(CalendarError::NotExact { largest: l, .. }) if l == largest
    ));
    assert!(CalendarQuota::new(AlgorithmKind::FixedWindow, MAX_EXACT, day).is_ok());
}

#[test]
fn boundaries_give_the_calendars_windows_within_their_range() {
    let c = cal("Europe/Berlin", CalendarUnit::Day);
    let now = at(1_806_188_400) + 5 * HOUR; // the 23-hour day
    let b = c.boundaries_around(now).unwrap();
    assert!(b.0.windows(2).all(|p| p[0] < p[1]));
    for t in [
        b.0[1],
        b.0[1] + 7,
        b.0[2] - 1,
        b.0[2],
        now,
        b.0[3],
        b.0[4] - 1,
    ] {
        assert_eq!(b.window_at(t), c.window_at(t), "{t}");
    }
    assert_eq!(b.window_at(b.0[1] - 1), None);
    assert_eq!(b.window_at(b.0[4]), None);
}

/// A UTC day is the epoch-aligned `/day` window: the calendar decisions equal the fixed-duration
/// algorithms' for the same sequence.
#[test]
fn a_utc_day_decides_as_the_epoch_aligned_day() {
    let day = cal("UTC", CalendarUnit::Day);
    let fixed = FixedWindow::new(Quota::new(5, DAY).unwrap()).unwrap();
    let sliding = SlidingWindow::new(Quota::new(5, DAY).unwrap()).unwrap();
    let (mut fa, mut fb) = (fixed.initial_state(), FixedWindowState::default());
    let (mut sa, mut sb) = (sliding.initial_state(), SlidingWindowState::default());
    let mut now = 1_700_000_000 * S;
    let mut seed = 7u64;
    for _ in 0..3_000 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        now += (seed >> 33) % (DAY / 6);
        let cost = (seed >> 20) % 4;
        let expect = fixed.check(&mut fa, now, cost).unwrap();
        assert_eq!(
            decide_fixed_window(5, &mut fb, now, cost, cost > 0, &day),
            Some(expect)
        );
        assert_eq!(fa, fb);
        let expect = sliding.check(&mut sa, now, cost).unwrap();
        assert_eq!(
            decide_sliding_window(5, &mut sb, now, cost, cost > 0, &day),
            Some(expect)
        );
        assert_eq!(sa, sb);
    }
}

/// Periods of unequal lengths (7, 5, 8, 3, 8 us): `retry_after` is exact, denied one
/// microsecond before and admitted at it, from every state reachable on a small quota.
#[test]
fn retry_after_is_exact_over_unequal_periods() {
    let b = Boundaries([0, 7, 12, 20, 23, 31]);
    for limit in 1..=4u64 {
        for first in 7..20 {
            for c1 in 1..=limit {
                for now in first..20 {
                    for cost in 1..=limit {
                        let mut fixed = FixedWindowState::default();
                        let mut sliding = SlidingWindowState::default();
                        decide_fixed_window(limit, &mut fixed, first, c1, true, &b).unwrap();
                        decide_sliding_window(limit, &mut sliding, first, c1, true, &b).unwrap();
                        let d = decide_fixed_window(limit, &mut fixed, now, cost, false, &b);
                        assert_exact(d.unwrap(), now, |t| {
                            decide_fixed_window(limit, &mut fixed.clone(), t, cost, false, &b)
                        });
                        let d = decide_sliding_window(limit, &mut sliding, now, cost, false, &b);
                        assert_exact(d.unwrap(), now, |t| {
                            decide_sliding_window(limit, &mut sliding.clone(), t, cost, false, &b)
                        });
                    }
                }
            }
        }
    }
}

fn assert_exact(d: Decision, now: Timestamp, at: impl Fn(Timestamp) -> Option<Decision>) {
    if let Some(retry) = d.retry_after {
        assert!(retry >= 1);
        if retry > 1 {
            assert!(!at(now + retry - 1).unwrap().allowed, "{now} + {retry} - 1");
        }
        assert!(at(now + retry).unwrap().allowed, "{now} + {retry}");
    } else {
        assert!(d.allowed);
    }
}

#[test]
fn the_last_microsecond_of_a_day_and_the_first_of_the_next() {
    let c = cal("America/Los_Angeles", CalendarUnit::Day);
    let quota = CalendarQuota::new(AlgorithmKind::FixedWindow, 3, c).unwrap();
    let end = at(1_805_094_000); // 2027-03-15T00:00:00-07:00
    let mut state = FixedWindowState::default();
    let d = quota.check_fixed(&mut state, end - 1, 3).unwrap();
    assert_eq!((d.allowed, d.reset_after), (true, 1));
    let denied = quota.check_fixed(&mut state, end - 1, 1).unwrap();
    assert_eq!(denied.retry_after, Some(1));
    let d = quota.check_fixed(&mut state, end, 3).unwrap();
    assert_eq!((d.allowed, d.reset_after), (true, DAY));
    // A stale `now` back in the previous day reads as the state's window start.
    let stale = quota.check_fixed(&mut state, end - 1, 1).unwrap();
    assert_eq!(stale.retry_after, Some(DAY));
    assert!(matches!(
        quota.check_fixed(&mut state, end, 4),
        Err(CalendarCheckError::Check(
            CheckError::InsufficientCapacity { .. }
        ))
    ));
}

#[test]
fn check_config_describes_a_calendar_in_words() {
    let new_year = at(1_798_790_400); // 2027-01-01T00:00:00-08:00
    let la = cal("America/Los_Angeles", CalendarUnit::Day);
    assert_eq!(
        la.describe(new_year),
        "resets at 00:00 America/Los_Angeles; 23 h on 2027-03-14, 25 h on 2027-11-07"
    );
    let berlin_weeks = Calendar::new(
        "Europe/Berlin",
        CalendarUnit::Week,
        Some(parse_weekday("sunday").unwrap()),
    )
    .unwrap();
    assert_eq!(
        berlin_weeks.describe(new_year),
        "resets at 00:00 on sunday Europe/Berlin; 6 d 23 h on 2027-03-28, 7 d 1 h on 2027-10-31"
    );
    assert_eq!(
        cal("UTC", CalendarUnit::Month).describe(new_year),
        "resets at 00:00 on the 1st UTC"
    );
}
