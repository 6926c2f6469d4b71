//! Expiry, sweeping and the key cap: a key that is still limited is never forgotten.

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::{CheckItem, MemoryStore, MemoryStoreConfig, OnFull};

const T0: u64 = 1_700_000_000_000_000;

fn gcra(quota: &str) -> Policy {
    Policy::new(AlgorithmKind::Gcra, quota.parse().unwrap()).unwrap()
}

fn capped(max_keys: usize, on_full: OnFull) -> (ManualClock, MemoryStore) {
    let clock = ManualClock::new(T0);
    let config = MemoryStoreConfig {
        max_keys,
        shards: 1,
        on_full,
        full_retry_after: 2_000_000,
        ..MemoryStoreConfig::default()
    };
    (clock.clone(), MemoryStore::new(config, Arc::new(clock)))
}

fn check(store: &MemoryStore, policy: &Policy, key: &str) -> floodgate_store::BatchDecision {
    store
        .check_now(&[CheckItem {
            rule: "r",
            policy,
            key,
            cost: 1,
        }])
        .unwrap()
}

#[test]
fn sweep_drops_exactly_the_expired_entries() {
    let (clock, store) = capped(100, OnFull::Reject);
    let fast = gcra("1/s");
    let slow = gcra("1/min");
    check(&store, &fast, "a");
    check(&store, &slow, "b");
    assert_eq!(store.stats().keys, 2);
    // "a" is fresh again at T0 + 1 s exactly, not a microsecond before.
    assert_eq!(store.sweep_all(T0 + 999_999), 0);
    assert_eq!(store.sweep_all(T0 + 1_000_000), 1);
    let stats = store.stats();
    assert_eq!((stats.keys, stats.expirations), (1, 1));
    // "b" is still limited after the sweep.
    clock.set(T0 + 1_000_000);
    assert!(!check(&store, &slow, "b").allowed);
    assert!(check(&store, &fast, "a").allowed);
}

#[test]
fn an_expired_entry_touched_again_is_a_fresh_key() {
    let (clock, store) = capped(100, OnFull::Reject);
    let p = gcra("2/s");
    check(&store, &p, "a");
    clock.advance(1_000_000);
    let d = check(&store, &p, "a");
    assert_eq!(d.decisions[0].remaining, 1);
    assert_eq!(store.stats().expirations, 1);
}

#[test]
fn a_full_store_rejects_new_keys_and_never_evicts_a_limited_one() {
    let (clock, store) = capped(2, OnFull::Reject);
    let hour = gcra("1/h");
    let second = gcra("1/s");
    assert!(check(&store, &hour, "abuser").allowed);
    assert!(!check(&store, &hour, "abuser").allowed);
    assert!(check(&store, &second, "calm").allowed);

    // Full of live keys: a new key is refused, nothing is evicted.
    let d = check(&store, &hour, "newcomer");
    assert!(!d.allowed);
    assert_eq!(d.store_full, Some(OnFull::Reject));
    assert_eq!(d.decisions[0].retry_after, Some(2_000_000));
    assert_eq!(d.decisions[0].remaining, 0);
    let stats = store.stats();
    assert_eq!(
        (stats.keys, stats.full_rejections, stats.evictions),
        (2, 1, 0)
    );
    assert!(!check(&store, &hour, "abuser").allowed);

    // Once "calm" has expired its slot is reused; the abuser is still limited.
    clock.advance(1_000_000);
    let d = check(&store, &hour, "newcomer");
    assert!(d.allowed);
    assert_eq!(d.store_full, None);
    let stats = store.stats();
    assert_eq!((stats.keys, stats.evictions), (2, 1));
    assert!(!check(&store, &hour, "abuser").allowed);
    // Existing keys keep working while full.
    assert!(!check(&store, &hour, "newcomer").allowed);
}

#[test]
fn admit_untracked_serves_new_keys_without_storing_them() {
    let (_clock, store) = capped(1, OnFull::AdmitUntracked);
    let hour = gcra("1/h");
    assert!(check(&store, &hour, "abuser").allowed);
    for _ in 0..3 {
        let d = check(&store, &hour, "newcomer");
        assert!(d.allowed);
        assert_eq!(d.store_full, Some(OnFull::AdmitUntracked));
    }
    let stats = store.stats();
    assert_eq!((stats.keys, stats.full_untracked), (1, 3));
    assert!(!check(&store, &hour, "abuser").allowed);
}

#[test]
fn a_rejected_batch_with_a_new_key_charges_no_existing_key() {
    let (_clock, store) = capped(1, OnFull::Reject);
    let p = gcra("3/h");
    check(&store, &p, "old");
    let batch = [
        CheckItem {
            rule: "r",
            policy: &p,
            key: "old",
            cost: 1,
        },
        CheckItem {
            rule: "r",
            policy: &p,
            key: "new",
            cost: 1,
        },
    ];
    let d = store.check_now(&batch).unwrap();
    assert!(!d.allowed);
    assert!(d.decisions[0].allowed && !d.decisions[1].allowed);
    // "old" still has 2 left: the rejected batch charged nothing.
    assert_eq!(check(&store, &p, "old").decisions[0].remaining, 1);
}

#[test]
fn on_full_parses_from_config_words() {
    assert_eq!("reject".parse::<OnFull>(), Ok(OnFull::Reject));
    assert_eq!(
        "admit-untracked".parse::<OnFull>(),
        Ok(OnFull::AdmitUntracked)
    );
    assert!("drop".parse::<OnFull>().is_err());
    assert_eq!(OnFull::default(), OnFull::Reject);
}

#[test]
fn the_cap_is_exact_across_shards_and_freed_by_reset_and_sweep() {
    let clock = ManualClock::new(T0);
    let config = MemoryStoreConfig {
        max_keys: 10,
        shards: 8,
        ..MemoryStoreConfig::default()
    };
    let store = MemoryStore::new(config, Arc::new(clock.clone()));
    let p = gcra("1/s");
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let admitted = keys.iter().filter(|k| check(&store, &p, k).allowed).count();
    // Exactly max_keys distinct keys fit, however they spread over the shards.
    assert_eq!(admitted, 10);
    assert_eq!(store.stats().keys, 10);
    assert_eq!(store.stats().full_rejections, 2);

    // A reset frees one place.
    assert!(store.reset_key("r", "k0"));
    assert_eq!(store.stats().keys, 9);
    assert!(check(&store, &p, "k10").allowed);
    assert!(!check(&store, &p, "k11").allowed);

    // Once everything has expired, a full sweep frees every place.
    clock.advance(1_000_000);
    assert_eq!(store.sweep_all(clock_now(&clock)), 10);
    assert_eq!(store.stats().keys, 0);
    assert!(check(&store, &p, "k11").allowed);
    assert_eq!(store.stats().keys, 1);
}

fn clock_now(clock: &ManualClock) -> u64 {
    floodgate_core::Clock::now(clock)
}
