//! `Mode::Reserve` on the one decision path: the enforcing items reserved as one batch over a
//! MemoryStore on a manual clock, the wait and scheduled times in the verdict, counted as
//! checks are.

mod common;

use common::{counted, gcra, harness, with_metrics, Counted, T0};
use floodgate_limiter::{Action, KeySource, Mode, Plan, Rule, RuleSet, Verdict};

fn rules() -> RuleSet {
    RuleSet::new(vec![
        Rule::new("per-second", gcra("10/s"), KeySource::ClientIp),
        Rule::new("per-minute", gcra("100/min"), KeySource::ClientIp),
        Rule::new("trial", gcra("1/h"), KeySource::ClientIp).with_shadow(true),
    ])
}

async fn evaluate(
    h: &common::Harness<floodgate_store::MemoryStore>,
    items: &[(usize, &str, u64)],
    mode: Mode,
) -> Verdict {
    let mut plan = Plan::new(h.limiter.rules());
    for (rule, key, cost) in items {
        plan.push(*rule, (*key).to_string(), *cost);
    }
    h.limiter.evaluate(&plan, mode).await
}

fn reserve(max_wait: u64) -> Mode {
    Mode::Reserve { max_wait }
}

fn decisions(recorded: &[Counted], rule: &str, outcome: &str) -> u64 {
    counted(
        recorded,
        "floodgate_decisions_total",
        &[("rule", rule), ("outcome", outcome)],
    )
}

#[test]
fn a_reservation_waits_for_its_slot_and_beyond_max_wait_is_denied_consuming_nothing() {
    let recorded = with_metrics(|| async {
        let h = harness(rules());
        // The burst of 10 is admitted at once: wait 0, scheduled now.
        for _ in 0..10 {
            let v = evaluate(&h, &[(0, "ip=a", 1)], reserve(250_000)).await;
            assert_eq!(v.action, Action::Admit);
            assert_eq!(v.wait, Some(0));
            assert_eq!(v.outcomes[0].scheduled_at, Some(T0));
        }
        // Then one slot every 100 ms (the emission interval of 10/s), up to the 250 ms bound.
        for n in 1..=2u64 {
            let v = evaluate(&h, &[(0, "ip=a", 1)], reserve(250_000)).await;
            assert_eq!(v.action, Action::Admit);
            assert_eq!(v.wait, Some(n * 100_000));
            assert_eq!(v.outcomes[0].scheduled_at, Some(T0 + n * 100_000));
            assert_eq!(v.outcomes[0].decision.remaining, 0);
        }
        // The next slot is 300 ms away: denied as a check is, with its retry_after.
        let denied = evaluate(&h, &[(0, "ip=a", 1)], reserve(250_000)).await;
        assert_eq!(denied.action, Action::Deny);
        assert_eq!(denied.wait, None);
        assert_eq!(denied.outcomes[0].scheduled_at, None);
        assert_eq!(denied.outcomes[0].decision.retry_after, Some(300_000));
        // It consumed nothing: the slot at 300 ms is still free for the next one that waits.
        let v = evaluate(&h, &[(0, "ip=a", 1)], reserve(300_000)).await;
        assert_eq!(v.wait, Some(300_000));
        assert_eq!(v.outcomes[0].scheduled_at, Some(T0 + 300_000));
        // A plain check meets the reserved units: the next is 400 ms away.
        let check = evaluate(&h, &[(0, "ip=a", 1)], Mode::Check).await;
        assert_eq!(check.action, Action::Deny);
        assert_eq!(check.wait, None);
        assert_eq!(check.outcomes[0].decision.retry_after, Some(400_000));
        assert_eq!(check.outcomes[0].scheduled_at, None);
    });
    assert_eq!(decisions(&recorded, "per-second", "allowed"), 13);
    assert_eq!(decisions(&recorded, "per-second", "denied"), 2);
}

#[tokio::test]
async fn max_wait_zero_decides_exactly_as_a_check() {
    let a = harness(rules());
    let b = harness(rules());
    for _ in 0..12 {
        let reserved = evaluate(&a, &[(0, "ip=a", 3)], reserve(0)).await;
        let checked = evaluate(&b, &[(0, "ip=a", 3)], Mode::Check).await;
        assert_eq!(reserved.action, checked.action);
        assert_eq!(reserved.outcomes[0].decision, checked.outcomes[0].decision);
        let admitted = reserved.action == Action::Admit;
        assert_eq!(reserved.wait, admitted.then_some(0));
        assert_eq!(reserved.outcomes[0].scheduled_at, admitted.then_some(T0));
    }
}

#[test]
fn a_batch_is_reserved_for_one_wait_and_a_denial_consumes_nothing_in_the_other_rules() {
    let recorded = with_metrics(|| async {
        let h = harness(rules());
        // Spend the per-second burst on key a; the per-minute rule of key a has room.
        for _ in 0..10 {
            evaluate(&h, &[(0, "ip=a", 1)], Mode::Check).await;
        }
        let items = [(0, "ip=a", 1), (1, "ip=a", 1)];
        // Both rules are reserved for the longest wait: 100 ms, the per-second slot.
        let v = evaluate(&h, &items, reserve(150_000)).await;
        assert_eq!(v.action, Action::Admit);
        assert_eq!(v.wait, Some(100_000));
        let scheduled: Vec<_> = v.outcomes.iter().map(|o| o.scheduled_at).collect();
        assert_eq!(scheduled, vec![Some(T0 + 100_000); 2]);
        // Beyond the bound: denied by the per-second rule, nothing charged in the per-minute.
        let before = evaluate(&h, &[(1, "ip=a", 0)], Mode::Peek).await;
        let denied = evaluate(&h, &items, reserve(150_000)).await;
        assert_eq!(denied.action, Action::Deny);
        assert_eq!(denied.wait, None);
        assert!(denied.outcomes.iter().all(|o| o.scheduled_at.is_none()));
        let after = evaluate(&h, &[(1, "ip=a", 0)], Mode::Peek).await;
        assert_eq!(
            before.outcomes[0].decision.remaining,
            after.outcomes[0].decision.remaining
        );
    });
    assert_eq!(decisions(&recorded, "per-second", "allowed"), 11);
    assert_eq!(decisions(&recorded, "per-second", "denied"), 1);
    assert_eq!(decisions(&recorded, "per-minute", "allowed"), 1);
    assert_eq!(decisions(&recorded, "per-minute", "not_charged"), 1);
}

#[test]
fn shadow_items_are_checked_as_today_and_carry_no_scheduled_time() {
    let recorded = with_metrics(|| async {
        let h = harness(rules());
        for _ in 0..10 {
            evaluate(&h, &[(0, "ip=a", 1)], Mode::Check).await;
        }
        let items = [(0, "ip=a", 1), (2, "ip=a", 1)];
        let first = evaluate(&h, &items, reserve(200_000)).await;
        assert_eq!(first.action, Action::Admit);
        assert_eq!(first.wait, Some(100_000));
        assert_eq!(first.outcomes.len(), 2);
        assert!(first.outcomes[1].shadow);
        assert!(first.outcomes[1].decision.allowed);
        assert_eq!(first.outcomes[1].scheduled_at, None);
        // The shadow rule (1/h) was charged by the admitted reservation: it now denies, and
        // never enforces.
        let second = evaluate(&h, &items, reserve(200_000)).await;
        assert_eq!(second.action, Action::Admit);
        assert_eq!(second.wait, Some(200_000));
        assert!(!second.outcomes[1].decision.allowed);
    });
    assert_eq!(decisions(&recorded, "trial", "shadow_allowed"), 1);
    assert_eq!(decisions(&recorded, "trial", "shadow_denied"), 1);
}

#[tokio::test]
async fn a_cost_above_capacity_is_refused_before_reserving() {
    let h = harness(rules());
    let v = evaluate(&h, &[(0, "ip=a", 11)], reserve(10_000_000)).await;
    assert!(matches!(v.action, Action::CostExceedsCapacity { .. }));
    assert_eq!(v.wait, None);
    let check = evaluate(&h, &[(0, "ip=a", 10)], Mode::Check).await;
    assert_eq!(check.action, Action::Admit, "nothing was consumed");
}

#[tokio::test]
async fn a_reservation_with_only_shadow_items_is_admitted_at_once() {
    let h = harness(rules());
    // The shadow rule's one unit an hour, spent twice: still admitted, waiting for nothing.
    for _ in 0..2 {
        let v = evaluate(&h, &[(2, "ip=a", 1)], reserve(250_000)).await;
        assert_eq!(v.action, Action::Admit);
        assert_eq!(v.wait, Some(0));
    }
    // Nothing applied at all: the same.
    let v = evaluate(&h, &[], reserve(250_000)).await;
    assert_eq!((v.action, v.wait), (Action::Admit, Some(0)));
    // A check is no reservation: no wait.
    assert_eq!(
        evaluate(&h, &[(2, "ip=a", 1)], Mode::Check).await.wait,
        None
    );
}
