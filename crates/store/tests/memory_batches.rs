//! All-or-nothing batches, peeks, resets and impossible costs.

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::{CheckItem, MemoryStore, Store, StoreError};

const T0: u64 = 1_700_000_000_000_000;

fn gcra(quota: &str) -> Policy {
    Policy::new(AlgorithmKind::Gcra, quota.parse().unwrap()).unwrap()
}

fn store() -> (ManualClock, MemoryStore) {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    (clock, store)
}

fn item<'a>(rule: &'a str, policy: &'a Policy, key: &'a str, cost: u64) -> CheckItem<'a> {
    CheckItem {
        rule,
        policy,
        key,
        cost,
    }
}

#[test]
fn a_denial_by_one_item_consumes_nothing_in_the_others() {
    let (_clock, store) = store();
    let tight = gcra("1/h");
    let loose = gcra("5/h");
    let batch = [item("tight", &tight, "k", 1), item("loose", &loose, "k", 1)];

    let first = store.check_now(&batch).unwrap();
    assert!(first.allowed);
    assert_eq!(first.decisions[1].remaining, 4);

    let second = store.check_now(&batch).unwrap();
    assert!(!second.allowed);
    assert_eq!(second.denied_items().collect::<Vec<_>>(), vec![0]);
    assert_eq!(second.decisions[0].retry_after, Some(3_600_000_000));
    // The loose item would have admitted and reports its unchanged allowance.
    assert!(second.decisions[1].allowed);
    assert_eq!(second.decisions[1].remaining, 4);

    // Exactly 4 more fit in `loose`: the denied batch charged it nothing.
    for _ in 0..4 {
        assert!(store.check_now(&[batch[1]]).unwrap().allowed);
    }
    assert!(!store.check_now(&[batch[1]]).unwrap().allowed);
}

#[test]
fn repeated_items_in_one_batch_see_each_other() {
    let (_clock, store) = store();
    // Capacity 2 with one unit already used: the pair fits the capacity (so it is not an
    // InsufficientCapacity error) but not the current allowance.
    let p = gcra("2/h");
    assert!(store.check_now(&[item("r", &p, "k", 1)]).unwrap().allowed);
    let twice = [item("r", &p, "k", 1), item("r", &p, "k", 1)];
    let d = store.check_now(&twice).unwrap();
    assert!(!d.allowed);
    assert!(d.decisions[0].allowed && !d.decisions[1].allowed);
    // Nothing was consumed: a single check still passes.
    assert!(store.check_now(&twice[..1]).unwrap().allowed);
}

#[test]
fn rules_with_equal_keys_do_not_share_state() {
    let (_clock, store) = store();
    let p = gcra("1/h");
    assert!(store.check_now(&[item("a", &p, "k", 1)]).unwrap().allowed);
    assert!(store.check_now(&[item("b", &p, "k", 1)]).unwrap().allowed);
    assert!(!store.check_now(&[item("a", &p, "k", 1)]).unwrap().allowed);
}

#[test]
fn peek_consumes_nothing() {
    let (_clock, store) = store();
    let p = gcra("2/h");
    let i = item("r", &p, "k", 2);
    for _ in 0..3 {
        let d = store.peek_now(&[i]).unwrap();
        assert!(d.allowed);
        assert_eq!(d.decisions[0].remaining, 2);
    }
    assert!(store.check_now(&[i]).unwrap().allowed);
    assert!(!store.peek_now(&[item("r", &p, "k", 1)]).unwrap().allowed);
    assert_eq!(store.stats().keys, 1);
}

#[test]
fn cost_above_capacity_is_an_error_and_touches_nothing() {
    let (_clock, store) = store();
    let small = gcra("10/s");
    let other = gcra("1/h");
    let err = store
        .check_now(&[
            item("other", &other, "k", 1),
            item("small", &small, "k", 11),
        ])
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::InsufficientCapacity {
            rule: "small".into(),
            cost: 11,
            capacity: 10,
        }
    );
    assert_eq!(store.stats().keys, 0);
    assert!(
        store
            .check_now(&[item("other", &other, "k", 1)])
            .unwrap()
            .allowed
    );
    // Exactly the capacity is fine.
    assert!(
        store
            .check_now(&[item("small", &small, "k", 10)])
            .unwrap()
            .allowed
    );
}

#[test]
fn repeated_key_whose_summed_cost_exceeds_capacity_is_insufficient_capacity() {
    // Walkthrough case: two descriptors of cost 6 on one key of a capacity-10 policy. Each fits
    // alone, together they never can; the answer must be an error, not a 429 whose
    // Retry-After promises an admission that never comes.
    let (clock, store) = store();
    let ten = gcra("10/s");
    let other = gcra("1/h");
    let batch = [
        item("other", &other, "k", 1),
        item("per-user", &ten, "u", 6),
        item("per-user", &ten, "u", 6),
    ];
    let expected = StoreError::InsufficientCapacity {
        rule: "per-user".into(),
        cost: 12,
        capacity: 10,
    };
    assert_eq!(store.check_now(&batch).unwrap_err(), expected);
    assert_eq!(store.peek_now(&batch).unwrap_err(), expected);
    // Nothing was touched: no key stored, and the full capacity is still there.
    assert_eq!(store.stats().keys, 0);
    clock.advance(0);
    let fit = store
        .check_now(&[
            item("per-user", &ten, "u", 6),
            item("per-user", &ten, "u", 4),
        ])
        .unwrap();
    assert!(fit.allowed);
    assert_eq!(fit.decisions[1].remaining, 0);
    // The same costs on two different keys, or under two rules, are independent.
    let (_clock, store) = self::store();
    assert!(
        store
            .check_now(&[
                item("per-user", &ten, "u", 6),
                item("per-user", &ten, "v", 6)
            ])
            .unwrap()
            .allowed
    );
    assert!(
        store
            .check_now(&[item("a", &ten, "u", 6), item("b", &ten, "u", 6)])
            .unwrap()
            .allowed
    );
}

#[test]
fn reset_forgets_a_key() {
    let (_clock, store) = store();
    let p = gcra("1/h");
    let i = item("r", &p, "k", 1);
    assert!(store.check_now(&[i]).unwrap().allowed);
    assert!(!store.check_now(&[i]).unwrap().allowed);
    assert!(store.reset_key("r", "k"));
    assert!(!store.reset_key("r", "k"));
    assert!(!store.reset_key("r", "never-seen"));
    assert!(store.check_now(&[i]).unwrap().allowed);
}

#[test]
fn caller_supplied_time_is_used() {
    let (_clock, store) = store();
    let p = gcra("1/s");
    let i = item("r", &p, "k", 1);
    assert!(store.check_at(&[i], T0).unwrap().allowed);
    assert!(!store.check_at(&[i], T0 + 999_999).unwrap().allowed);
    assert!(store.check_at(&[i], T0 + 1_000_000).unwrap().allowed);
}

#[tokio::test]
async fn the_async_trait_works_through_an_arc() {
    let (clock, store) = store();
    let store = Arc::new(store);
    let p = gcra("1/s");
    let items = [item("r", &p, "k", 1)];
    assert!(Store::check(&store, &items).await.unwrap().allowed);
    let denied = Store::check(&store, &items).await.unwrap();
    assert_eq!(denied.decisions[0].retry_after, Some(1_000_000));
    let standing = Store::inspect(&store, "r", &p, "k").await.unwrap();
    assert_eq!(
        (standing.allowed, standing.remaining, standing.reset_after),
        (true, 0, 1_000_000)
    );
    clock.advance(400_000);
    let standing = Store::inspect(&store, "r", &p, "k").await.unwrap();
    assert_eq!(standing.reset_after, 600_000);
    assert!(Store::reset(&store, "r", &p, "k").await.unwrap());
    assert!(Store::peek(&store, &items).await.unwrap().allowed);
}
