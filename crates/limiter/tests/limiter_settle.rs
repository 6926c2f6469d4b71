//! `RateLimiter::settle` on the one decision path: reservations made by `Mode::Reserve` over a
//! MemoryStore on a manual clock, settled with their actual costs, claimed once, counted.

mod common;

use common::{counted, gcra, harness, with_metrics, T0};
use floodgate_core::{AlgorithmKind, Policy};
use floodgate_limiter::{
    Claim, KeySource, Mode, Plan, Reservation, Rule, RuleSet, SettleError, Verdict,
};

fn rules() -> RuleSet {
    RuleSet::new(vec![
        Rule::new("per-second", gcra("10/s"), KeySource::ClientIp),
        Rule::new(
            "per-minute",
            Policy::new(AlgorithmKind::FixedWindow, "100/min".parse().unwrap()).unwrap(),
            KeySource::ClientIp,
        ),
        Rule::new("trial", gcra("1/h"), KeySource::ClientIp).with_shadow(true),
    ])
}

fn plan(h: &common::Harness<floodgate_store::MemoryStore>, items: &[(usize, &str, u64)]) -> Plan {
    let mut plan = Plan::new(h.limiter.rules());
    for (rule, key, cost) in items {
        plan.push(*rule, (*key).to_string(), *cost);
    }
    plan
}

async fn reserve(
    h: &common::Harness<floodgate_store::MemoryStore>,
    items: &[(usize, &str, u64)],
    max_wait: u64,
) -> (Verdict, Option<Reservation>) {
    let plan = plan(h, items);
    let verdict = h.limiter.evaluate(&plan, Mode::Reserve { max_wait }).await;
    let reservation = Reservation::from_verdict(&plan, &verdict);
    (verdict, reservation)
}

async fn remaining(h: &common::Harness<floodgate_store::MemoryStore>, rule: usize) -> u64 {
    let v = h
        .limiter
        .evaluate(&plan(h, &[(rule, "ip=a", 0)]), Mode::Peek)
        .await;
    v.outcomes[0].decision.remaining
}

#[test]
fn a_settle_gives_back_and_charges_exactly_and_is_counted() {
    let recorded = with_metrics(|| async {
        let h = harness(rules());
        let (verdict, reservation) =
            reserve(&h, &[(0, "ip=a", 5), (1, "ip=a", 5), (2, "ip=a", 1)], 0).await;
        assert!(verdict.is_admitted());
        let reservation = reservation.expect("a granted reservation");
        // Shadow items are never reserved.
        assert_eq!(reservation.len(), 2);
        assert_eq!(reservation.items()[0].scheduled_at, T0);
        assert_eq!(reservation.items()[1].key, "ip=a");
        assert_eq!((remaining(&h, 0).await, remaining(&h, 1).await), (5, 95));
        let settled = h.limiter.settle(&reservation, &[2, 8]).await.unwrap();
        // per-second: 3 given back (5 - 2); per-minute: 3 more charged (8 - 5).
        assert_eq!(settled[0].decision.remaining, 8);
        assert_eq!(settled[1].decision.remaining, 92);
        assert_eq!((settled[0].reserved, settled[0].actual), (5, 2));
        assert!(settled.iter().all(|s| s.current));
        assert_eq!(&*settled[1].rule, "per-minute");
        assert_eq!((remaining(&h, 0).await, remaining(&h, 1).await), (8, 92));
        // The wrong number of costs settles nothing.
        assert_eq!(
            h.limiter.settle(&reservation, &[1]).await,
            Err(SettleError::CostCount {
                expected: 2,
                got: 1
            })
        );
        assert_eq!((remaining(&h, 0).await, remaining(&h, 1).await), (8, 92));
    });
    let settles = "floodgate_settles_total";
    assert_eq!(
        counted(
            &recorded,
            settles,
            &[("rule", "per-second"), ("outcome", "refunded")]
        ),
        1
    );
    assert_eq!(
        counted(
            &recorded,
            settles,
            &[("rule", "per-minute"), ("outcome", "charged")]
        ),
        1
    );
    assert_eq!(counted(&recorded, settles, &[]), 2);
    let units = "floodgate_settled_units_total";
    assert_eq!(
        counted(
            &recorded,
            units,
            &[("rule", "per-second"), ("direction", "refunded")]
        ),
        3
    );
    assert_eq!(
        counted(
            &recorded,
            units,
            &[("rule", "per-minute"), ("direction", "charged")]
        ),
        3
    );
}

#[tokio::test]
async fn nothing_is_reserved_when_denied_or_not_a_reservation() {
    let h = harness(rules());
    for _ in 0..10 {
        reserve(&h, &[(0, "ip=a", 1)], 0).await;
    }
    let (denied, reservation) = reserve(&h, &[(0, "ip=a", 1)], 50_000).await;
    assert!(!denied.is_admitted());
    assert_eq!(reservation, None);
    // A check is not a reservation, nor is a plan of shadow items only.
    let p = plan(&h, &[(1, "ip=a", 1)]);
    let checked = h.limiter.evaluate(&p, Mode::Check).await;
    assert_eq!(Reservation::from_verdict(&p, &checked), None);
    let (_, shadow_only) = reserve(&h, &[(2, "ip=a", 1)], 0).await;
    assert_eq!(shadow_only, None);
}

#[tokio::test]
async fn a_waiting_reservation_given_up_in_the_middle_of_the_queue_gives_nothing_back() {
    let h = harness(rules());
    for _ in 0..10 {
        reserve(&h, &[(0, "ip=a", 1)], 0).await;
    }
    let (first, held) = reserve(&h, &[(0, "ip=a", 1)], 500_000).await;
    assert_eq!(first.wait, Some(100_000));
    let held = held.unwrap();
    assert_eq!(held.items()[0].scheduled_at, T0 + 100_000);
    let (second, _) = reserve(&h, &[(0, "ip=a", 1)], 500_000).await;
    assert_eq!(second.wait, Some(200_000));
    // The first gives up (a client that went away): settled with nothing used, from a task
    // that owns the reservation, as a Drop guard would.
    let limiter = h.limiter.clone();
    tokio::spawn(async move { limiter.settle(&held, &held.nothing_used()).await })
        .await
        .unwrap()
        .unwrap();
    // The second is queued behind its slot, so nothing comes back (a settle never gives back
    // what a later reservation stands on: docs/spec/reservations.md): the next waiter is
    // scheduled after the second, 300 ms out.
    let (third, _) = reserve(&h, &[(0, "ip=a", 1)], 500_000).await;
    assert_eq!(third.wait, Some(300_000));
}

#[tokio::test]
async fn the_last_waiting_reservation_given_up_gives_its_slot_back() {
    let h = harness(rules());
    for _ in 0..10 {
        reserve(&h, &[(0, "ip=a", 1)], 0).await;
    }
    let (_, first) = reserve(&h, &[(0, "ip=a", 1)], 500_000).await;
    let (second, held) = reserve(&h, &[(0, "ip=a", 1)], 500_000).await;
    assert_eq!(second.wait, Some(200_000));
    let (first, held) = (first.unwrap(), held.unwrap());
    // The last in the queue gives up: its slot is free again, the next waiter takes it.
    let limiter = h.limiter.clone();
    tokio::spawn(async move { limiter.settle(&held, &held.nothing_used()).await })
        .await
        .unwrap()
        .unwrap();
    let (third, _) = reserve(&h, &[(0, "ip=a", 1)], 500_000).await;
    assert_eq!(third.wait, Some(200_000));
    drop(first);
}

#[test]
fn a_claimed_reservation_settles_once() {
    let recorded = with_metrics(|| async {
        let h = harness(rules());
        let (_, reservation) = reserve(&h, &[(0, "ip=a", 4)], 0).await;
        let claim = Claim {
            id: "r-1".into(),
            ttl: 60_000_000,
        };
        let reservation = reservation.unwrap().with_claim(claim.clone());
        assert_eq!(reservation.claim(), Some(&claim));
        assert_eq!(remaining(&h, 0).await, 6);
        let settled = h.limiter.settle(&reservation, &[0]).await.unwrap();
        assert_eq!(settled[0].decision.remaining, 10);
        // Presented again, here or by a copy: refused, nothing given back twice.
        reserve(&h, &[(0, "ip=a", 4)], 0).await;
        assert_eq!(
            h.limiter.settle(&reservation, &[0]).await,
            Err(SettleError::AlreadySettled)
        );
        assert_eq!(
            h.limiter.settle(&reservation.clone(), &[0]).await,
            Err(SettleError::AlreadySettled)
        );
        assert_eq!(remaining(&h, 0).await, 6);
    });
    assert_eq!(
        counted(
            &recorded,
            "floodgate_settles_total",
            &[("outcome", "replayed")]
        ),
        2
    );
    assert_eq!(
        counted(
            &recorded,
            "floodgate_settles_total",
            &[("outcome", "refunded")]
        ),
        1
    );
}

#[tokio::test]
async fn a_reservation_of_a_rule_changed_by_a_reload_settles_on_its_old_state() {
    let h = harness(rules());
    let (_, reservation) = reserve(&h, &[(0, "ip=a", 6)], 0).await;
    let reservation = reservation.unwrap();
    // The rule is given another quota: its keys start fresh under the new policy.
    let mut changed = rules();
    changed.rules[0] = Rule::new("per-second", gcra("20/s"), KeySource::ClientIp);
    h.limiter.replace_rules(changed);
    assert_eq!(remaining(&h, 0).await, 20);
    let settled = h.limiter.settle(&reservation, &[1]).await.unwrap();
    assert!(!settled[0].current);
    assert_eq!(settled[0].quota, "10/s".parse().unwrap());
    // Given back to the state the units came from (10/s: 4 + 5 = 9 left), not the new one.
    assert_eq!(settled[0].decision.remaining, 9);
    assert_eq!(remaining(&h, 0).await, 20);
}
