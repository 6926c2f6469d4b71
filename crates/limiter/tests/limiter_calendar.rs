//! A rule that counts in calendar periods takes no reservation: the engine refuses
//! `Mode::Reserve` of a plan with such an item (every front end and the library alike),
//! charging nothing, and never holds such a plan in the delay mode.

mod common;

use std::time::Duration;

use common::{gcra, harness};
use floodgate_core::calendar::{Calendar, CalendarUnit};
use floodgate_core::{AlgorithmKind, Policy};
use floodgate_limiter::{Action, KeySource, Mode, Plan, Rule, RuleSet};

/// Two units a UTC day (fixed window), and a GCRA guard.
fn rules(calendar_delay: Option<Duration>) -> RuleSet {
    let day = Calendar::new("UTC", CalendarUnit::Day, None).unwrap();
    let daily = Policy::new(AlgorithmKind::FixedWindow, "2/d".parse().unwrap())
        .unwrap()
        .with_calendar(day)
        .unwrap();
    let mut daily = Rule::new("daily", daily, KeySource::ClientIp);
    if let Some(delay) = calendar_delay {
        daily = daily.with_delay(delay);
    }
    RuleSet::new(vec![
        Rule::new("guard", gcra("10/s"), KeySource::ClientIp).with_delay(Duration::from_secs(1)),
        daily,
    ])
}

fn plan(h: &common::Harness<floodgate_store::MemoryStore>, rules: &[usize]) -> Plan {
    let mut plan = Plan::new(h.limiter.rules());
    for &rule in rules {
        plan.push(rule, "ip=a".to_string(), 1);
    }
    plan
}

#[tokio::test]
async fn a_reservation_of_a_calendar_rule_is_refused_and_charges_nothing() {
    let h = harness(rules(None));
    for (items, max_wait, item) in [
        (&[1][..], 0, 0),
        (&[1][..], 5_000_000, 0),
        (&[0, 1][..], 10_000, 1),
    ] {
        let v = h
            .limiter
            .evaluate(&plan(&h, items), Mode::Reserve { max_wait })
            .await;
        match &v.action {
            Action::NoReservation { rule, item: at } => {
                assert_eq!(&**rule, "daily");
                assert_eq!(*at, item);
            }
            other => panic!("{items:?} {max_wait}: {other:?}"),
        }
        assert!(v.outcomes.is_empty(), "{v:?}");
        assert_eq!(v.wait, None);
    }
    // A reservation of the guard alone is taken as ever.
    let v = h
        .limiter
        .evaluate(&plan(&h, &[0]), Mode::Reserve { max_wait: 0 })
        .await;
    assert_eq!(v.action, Action::Admit);
    // Nothing was charged to the calendar rule: the day's two units are both there.
    for remaining in [1, 0] {
        let v = h.limiter.evaluate(&plan(&h, &[1]), Mode::Check).await;
        assert_eq!(v.action, Action::Admit);
        assert_eq!(v.outcomes[0].decision.remaining, remaining);
    }
    let v = h.limiter.evaluate(&plan(&h, &[1]), Mode::Check).await;
    assert_eq!(v.action, Action::Deny);
}

#[tokio::test]
async fn a_plan_with_a_calendar_item_is_never_delayed() {
    // Even with a delay on the calendar rule itself (the config refuses one; a library may
    // set it), the plan is decided as a check: refused at once, never held.
    let h = harness(rules(Some(Duration::from_secs(60))));
    assert!(plan(&h, &[0]).delay() > 0);
    assert_eq!(plan(&h, &[0, 1]).delay(), 0);
    assert_eq!(plan(&h, &[1]).delay(), 0);
    for _ in 0..2 {
        let v = h.limiter.admit(plan(&h, &[1])).await;
        assert_eq!(v.action, Action::Admit);
    }
    let v = h.limiter.admit(plan(&h, &[1])).await;
    assert_eq!(v.action, Action::Deny);
    assert_eq!(v.wait, None);
}
