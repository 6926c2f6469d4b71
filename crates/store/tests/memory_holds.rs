//! `Store::holds` on the memory store, through the trait and through `AnyStore`: what an admin
//! API asks whichever store it has.

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::{AnyStore, CheckItem, MemoryStore, Store};

const T0: u64 = 1_700_000_000_000_000;

#[tokio::test]
async fn holds_tells_an_unknown_key_from_a_held_one_through_the_trait() {
    let clock = ManualClock::new(T0);
    let memory = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let p = Policy::new(AlgorithmKind::FixedWindow, "5/s".parse().unwrap()).unwrap();
    let item = CheckItem {
        rule: "r",
        policy: &p,
        key: "k",
        cost: 1,
    };
    let any = AnyStore::Memory(Arc::clone(&memory));
    assert_eq!(any.holds("r", &p, "k").await.unwrap(), Some(false));
    any.peek(&[item]).await.unwrap();
    assert_eq!(
        any.holds("r", &p, "k").await.unwrap(),
        Some(false),
        "a peek stores nothing"
    );
    assert!(any.check(&[item]).await.unwrap().allowed);
    assert_eq!(any.holds("r", &p, "k").await.unwrap(), Some(true));
    assert_eq!(
        Store::holds(&*memory, "r", &p, "k").await.unwrap(),
        Some(true)
    );
    assert_eq!(any.holds("other", &p, "k").await.unwrap(), Some(false));
    // Expired state decides as a fresh key does: not held.
    clock.advance(10_000_000);
    assert_eq!(any.holds("r", &p, "k").await.unwrap(), Some(false));
}
