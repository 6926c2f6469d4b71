use super::table::Kind;
use super::*;
use crate::OnFull;
use floodgate_core::{
    Algorithm, AlgorithmKind, FixedWindow, FixedWindowState, Gcra, GcraState, LeakyBucket,
    LeakyBucketState, ManualClock, Quota, SlidingLog, SlidingWindow, SlidingWindowState,
    TokenBucket, TokenBucketState,
};

const T0: Timestamp = 1_700_000_000_000_000;

fn store(clock: &ManualClock) -> MemoryStore {
    MemoryStore::with_clock(Arc::new(clock.clone()))
}

fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut rng = seed;
    move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    }
}

/// For one algorithm: the derived expiry is exactly what a stored one would be (the latest
/// `now + reset_after` of an admission) while time moves forward, never earlier when the
/// clock steps back, and at the derived expiry the state decides exactly like a fresh one
/// (for costs 0, 1 and the capacity, and in the state it leaves).
fn derived_expiry_is_exact<A: Kind>(alg: &A, seed: u64)
where
    A::Slot: Clone,
{
    let mut next = xorshift(seed);
    let e = alg.expiry();
    let period = alg.quota().period();
    let cap = alg.capacity();
    let mut slot = A::new_slot(alg.initial_state(), 0);
    let mut stored = 0u64;
    let mut stale_seen = false;
    let mut now = T0;
    for step in 0..3_000 {
        let back = next(8) == 0;
        stale_seen |= back;
        now = if back {
            now - next(1_000)
        } else {
            now + next(period / 2 + 2)
        };
        let cost = 1 + next(cap);
        let d = alg.check(A::state_mut(&mut slot), now, cost).unwrap();
        if d.allowed {
            stored = stored.max(now + d.reset_after);
        }
        if stored == 0 {
            continue;
        }
        let derived = A::expires_at(&e, &slot);
        if stale_seen {
            assert!(derived >= stored, "step {step}: {derived} < {stored}");
        } else {
            assert_eq!(derived, stored, "step {step}");
        }
        // Fresh-equivalence at the derived expiry.
        for c in [0, 1, cap] {
            let mut held = A::state(&slot).clone();
            let mut fresh = alg.initial_state();
            let (a, b) = (
                alg.decide(&mut held, derived, c, c > 0),
                alg.decide(&mut fresh, derived, c, c > 0),
            );
            assert_eq!(a, b, "step {step} cost {c}");
            // And they stay equivalent afterwards.
            let later = derived + next(period);
            assert_eq!(
                alg.decide(&mut held, later, 1, true),
                alg.decide(&mut fresh, later, 1, true),
                "step {step} cost {c} later"
            );
        }
    }
}

#[test]
fn derived_expiries_are_exact_for_every_algorithm() {
    for (i, (limit, period, burst)) in [
        (7, 2, 5),
        (1, 1_000_000, 1),
        (3, 1_000_000, 10),
        (1_000, 60_000_000, 50),
        (5, 2_000_000, 2),
    ]
    .into_iter()
    .enumerate()
    {
        let quota = Quota::with_burst(limit, period, burst).unwrap();
        let seed = 0x2545_f491_4f6c_dd1d ^ i as u64;
        derived_expiry_is_exact(&Gcra::new(quota).unwrap(), seed);
        derived_expiry_is_exact(&TokenBucket::new(quota).unwrap(), seed);
        derived_expiry_is_exact(&LeakyBucket::new(quota).unwrap(), seed);
        derived_expiry_is_exact(&FixedWindow::new(quota).unwrap(), seed);
        if let Ok(window) = SlidingWindow::new(quota) {
            derived_expiry_is_exact(&window, seed);
        }
    }
}

#[test]
fn derived_expiries_hand_checked() {
    // Token bucket 2/s burst 4: 500,000 us per token; 1 token left at T0 -> full 1.5 s later.
    let quota = Quota::with_burst(2, 1_000_000, 4).unwrap();
    let tb = TokenBucket::new(quota).unwrap();
    let (interval, _) = quota.emission_interval();
    let s = TokenBucketState {
        tokens: interval as i64,
        last_refill: T0,
        last_scheduled_at: 0,
    };
    assert_eq!(TokenBucket::expires_at(&tb.expiry(), &s), T0 + 1_500_000);
    // Leaky bucket: level of 3 units drains in 1.5 s.
    let lb = LeakyBucket::new(quota).unwrap();
    let s = LeakyBucketState {
        level: 3 * interval,
        last_leak: T0,
        last_scheduled_at: 0,
    };
    assert_eq!(LeakyBucket::expires_at(&lb.expiry(), &s), T0 + 1_500_000);
    // Fixed window of 1 s starting at T0: done at T0 + 1 s; an empty one is fresh already.
    let fw = FixedWindow::new(quota).unwrap();
    let s = FixedWindowState {
        window_start: T0,
        count: 1,
    };
    assert_eq!(FixedWindow::expires_at(&fw.expiry(), &s), T0 + 1_000_000);
    assert_eq!(
        FixedWindow::expires_at(&fw.expiry(), &FixedWindowState::default()),
        0
    );
    // Sliding window of 1 s: a count weighs until the last microsecond of the next window.
    let sw = SlidingWindow::new(quota).unwrap();
    let s = SlidingWindowState {
        window_start: T0,
        count: 1,
        previous_count: 0,
    };
    assert_eq!(SlidingWindow::expires_at(&sw.expiry(), &s), T0 + 1_999_999);
    // GCRA: the arrival time rounded up.
    let g = Gcra::new(quota).unwrap();
    let s = GcraState {
        tat: T0,
        tat_ticks: 1,
        last_update: T0 - 10,
        last_scheduled_at: 0,
    };
    assert_eq!(Gcra::expires_at(&g.expiry(), &s), T0 + 1);
}

#[test]
fn bucket_sizes_are_as_documented() {
    fn bucket<A: Kind>() -> usize {
        std::mem::size_of::<table::Bucket<A>>()
    }
    // GCRA keeps the time of its last admission too (a stale `now` reads as it, issue 17).
    // The buckets keep the scheduled time of their latest reservation for later too (a
    // settle never gives back what a later admission stands on).
    assert_eq!(bucket::<Gcra>(), 40);
    assert_eq!(bucket::<TokenBucket>(), 32);
    assert_eq!(bucket::<LeakyBucket>(), 32);
    assert_eq!(bucket::<FixedWindow>(), 24);
    assert_eq!(bucket::<SlidingWindow>(), 32);
    assert_eq!(bucket::<SlidingLog>(), 80);
}

#[test]
fn shards_are_a_power_of_two_no_more_than_max_keys() {
    let clock = Arc::new(ManualClock::new(0));
    let cfg = |max_keys, shards| MemoryStoreConfig {
        max_keys,
        shards,
        ..MemoryStoreConfig::default()
    };
    assert_eq!(
        MemoryStore::new(cfg(1000, 60), clock.clone())
            .config()
            .shards,
        64
    );
    assert_eq!(
        MemoryStore::new(cfg(5, 64), clock.clone()).config().shards,
        4
    );
    assert_eq!(MemoryStore::new(cfg(0, 64), clock).config().max_keys, 1);
}

fn gcra(q: &str) -> Policy {
    Policy::new(AlgorithmKind::Gcra, q.parse().unwrap()).unwrap()
}

#[test]
fn limiter_shares_state_with_check_one_and_counts_keys() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let policy = gcra("2/s");
    let limiter = store.limiter("per-user", &policy);
    assert_eq!(limiter.rule(), "per-user");
    assert_eq!(limiter.policy().kind(), AlgorithmKind::Gcra);
    let d = limiter.check("alice", 1).unwrap();
    assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 1, 500_000));
    let item = CheckItem {
        rule: "per-user",
        policy: &policy,
        key: "alice",
        cost: 1,
    };
    // The second unit through the store's one-item path, the third through the handle.
    assert!(store.check_one(&item).unwrap().allowed);
    let d = limiter.check("alice", 1).unwrap();
    assert_eq!((d.allowed, d.retry_after), (false, Some(500_000)));
    assert_eq!(store.stats().keys, 1);
    // A clone is the same limiter.
    let clone = limiter.clone();
    clock.advance(500_000);
    assert!(clone.check("alice", 1).unwrap().allowed);
    assert!(!limiter.check("alice", 1).unwrap().allowed);
}

#[test]
fn limiter_rules_and_policies_never_share_state() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let one = gcra("1/s");
    let a = store.limiter("a", &one);
    let b = store.limiter("b", &one);
    assert!(a.check("k", 1).unwrap().allowed);
    assert!(!a.check("k", 1).unwrap().allowed);
    // Same key, another rule: fresh.
    assert!(b.check("k", 1).unwrap().allowed);
    // Same rule, another quota or algorithm: fresh, and the old state is untouched.
    let two = gcra("2/s");
    assert!(store.limiter("a", &two).check("k", 2).unwrap().allowed);
    let tb = Policy::new(AlgorithmKind::TokenBucket, "1/s".parse().unwrap()).unwrap();
    assert!(store.limiter("a", &tb).check("k", 1).unwrap().allowed);
    assert!(!a.check("k", 1).unwrap().allowed);
    assert_eq!(store.stats().keys, 4);
    // reset_key forgets the key under every policy of the rule, and only that rule.
    assert!(store.reset_key("a", "k"));
    assert_eq!(store.stats().keys, 1);
    assert!(a.check("k", 1).unwrap().allowed);
    assert!(!b.check("k", 1).unwrap().allowed);
}

#[test]
fn limiter_peek_reset_and_errors() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let policy = Policy::new(AlgorithmKind::FixedWindow, "3/s".parse().unwrap()).unwrap();
    let limiter = store.limiter("r", &policy);
    // A peek of a fresh key stores nothing (and reports the remaining before the cost).
    let d = limiter.peek_at("k", 2, T0).unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 3));
    assert_eq!(store.stats().keys, 0);
    assert_eq!(limiter.check_at("k", 2, T0).unwrap().remaining, 1);
    // Peeking at a cost that does not fit: denied until the window ends (T0 is a second edge).
    let d = limiter.peek_at("k", 2, T0 + 250_000).unwrap();
    assert_eq!((d.allowed, d.retry_after), (false, Some(750_000)));
    assert_eq!(limiter.check_at("k", 1, T0 + 250_000).unwrap().remaining, 0);
    // Cost 0 reports without consuming.
    let d = limiter.check_at("k", 0, T0 + 250_000).unwrap();
    assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 0, 750_000));
    assert_eq!(
        limiter.check("k", 4),
        Err(StoreError::InsufficientCapacity {
            rule: "r".into(),
            cost: 4,
            capacity: 3
        })
    );
    assert!(limiter.reset("k"));
    assert!(!limiter.reset("k"));
    assert_eq!(store.stats().keys, 0);
    assert_eq!(limiter.check("k", 3).unwrap().remaining, 0);
}

#[test]
fn limiter_respects_the_cap_and_reuses_expired_slots() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new(
        MemoryStoreConfig {
            max_keys: 2,
            ..MemoryStoreConfig::default()
        },
        Arc::new(clock.clone()),
    );
    let limiter = store.limiter("r", &gcra("1/s"));
    assert!(limiter.check("a", 1).unwrap().allowed);
    assert!(limiter.check("b", 1).unwrap().allowed);
    let d = limiter.check("c", 1).unwrap();
    assert_eq!((d.allowed, d.retry_after), (false, Some(1_000_000)));
    assert_eq!(store.stats().full_rejections, 1);
    // One second later "a" and "b" have expired: "a" is reused in its slot, and "c" finds
    // room by evicting the expired "b" of its locked shard, or the sweep frees it.
    clock.advance(1_000_000);
    assert!(limiter.check("a", 1).unwrap().allowed);
    assert_eq!(store.stats().expirations, 1);
    store.sweep_all(clock.now());
    assert!(limiter.check("c", 1).unwrap().allowed);
    assert_eq!(store.stats().keys, 2);
}

#[test]
fn batches_lock_shards_of_several_rule_tables() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let one = gcra("1/s");
    let tb = Policy::new(AlgorithmKind::TokenBucket, "2/s".parse().unwrap()).unwrap();
    let item = |rule, policy, key| CheckItem {
        rule,
        policy,
        key,
        cost: 1,
    };
    let batch = [
        item("a", &one, "k"),
        item("b", &tb, "k"),
        item("b", &tb, "k"),
    ];
    let d = store.check_now(&batch).unwrap();
    assert!(d.allowed);
    assert_eq!(
        d.decisions.iter().map(|d| d.remaining).collect::<Vec<_>>(),
        [0, 1, 0]
    );
    // "a" and "b" are both spent at the same instant: both items deny.
    let d = store.check_now(&batch[..2]).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.denied_items().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(store.stats().keys, 2);
}

/// The spin-locked shards lose no update: four threads hammering eight keys through one handle
/// (and the store's one-item path) at a fixed time admit exactly the burst of every key.
#[test]
fn concurrent_checks_admit_exactly_the_burst() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new(
        MemoryStoreConfig {
            shards: 2,
            ..MemoryStoreConfig::default()
        },
        Arc::new(clock.clone()),
    );
    let policy = Policy::new(
        AlgorithmKind::TokenBucket,
        Quota::with_burst(1, 3_600_000_000, 500).unwrap(),
    )
    .unwrap();
    let limiter = store.limiter("r", &policy);
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let admitted: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (limiter, store, policy, keys) = (&limiter, &store, &policy, &keys);
                s.spawn(move || {
                    let mut n = 0;
                    for i in 0..2_000 {
                        let key = &keys[(i + t) % keys.len()];
                        let allowed = if t % 2 == 0 {
                            limiter.check(key, 1).unwrap().allowed
                        } else {
                            let item = CheckItem {
                                rule: "r",
                                policy,
                                key,
                                cost: 1,
                            };
                            store.check_one(&item).unwrap().allowed
                        };
                        n += usize::from(allowed);
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // 4 x 2,000 = 8,000 checks over 8 keys of burst 500: exactly 4,000 admitted.
    assert_eq!(admitted, 8 * 500);
    assert_eq!(store.stats().keys, 8);
}

/// A sweep gives a rule table's memory back: 1,000 keys in one shard take 2,048 buckets; a
/// sweep that leaves 100 live (fewer than 1/8) moves them to 256 buckets, and one that leaves
/// none frees the table's buckets. The survivors keep their state.
#[test]
fn sweeps_shrink_and_free_rule_tables() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new(
        MemoryStoreConfig {
            shards: 1,
            ..MemoryStoreConfig::default()
        },
        Arc::new(clock.clone()),
    );
    let policy = gcra("1/s");
    let limiter = store.limiter("r", &policy);
    let buckets = || {
        let entry = store.shared.registry.find("r", &policy).unwrap();
        entry.table.buckets()
    };
    assert_eq!(buckets(), 0);
    // Key i admitted at T0 + i ms: it expires at T0 + i ms + 1 s.
    for i in 0..1_000u64 {
        let d = limiter
            .check_at(&format!("k{i}"), 1, T0 + i * 1_000)
            .unwrap();
        assert!(d.allowed);
    }
    assert_eq!((store.stats().keys, buckets()), (1_000, 2_048));
    // At T0 + 1.899999 s keys 0..=899 have expired.
    let now = T0 + 1_899_999;
    assert_eq!(store.sweep_all(now), 900);
    assert_eq!((store.stats().keys, buckets()), (100, 256));
    assert_eq!(store.stats().expirations, 900);
    // A survivor still holds its state: k950 is spent until T0 + 1.95 s.
    let d = limiter.peek_at("k950", 1, now).unwrap();
    assert_eq!((d.allowed, d.retry_after), (false, Some(50_001)));
    // An expired key decides as fresh.
    assert!(limiter.peek_at("k10", 1, now).unwrap().allowed);
    // Everything expired: the table holds no buckets, and grows again on the next key
    // (hashbrown's smallest table for 24-byte entries: 4 buckets).
    assert_eq!(store.sweep_all(T0 + 3_000_000), 100);
    assert_eq!((store.stats().keys, buckets()), (0, 0));
    assert!(limiter.check_at("k0", 1, T0 + 3_000_000).unwrap().allowed);
    assert_eq!((store.stats().keys, buckets()), (1, 4));
}

/// Issue 10 item 7: junk keys on one rule must not lock out another rule's new clients.
#[test]
fn a_flood_on_one_rule_leaves_room_for_new_keys_on_another() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new(
        MemoryStoreConfig {
            max_keys: 100,
            ..MemoryStoreConfig::default()
        },
        Arc::new(clock.clone()),
    );
    store.set_rule_max_keys("api", Some(60));
    let p = gcra("1/min");
    let api = store.limiter("api", &p);
    let mut admitted = 0;
    for i in 0..1_000 {
        admitted += usize::from(api.check(&format!("junk-{i}"), 1).unwrap().allowed);
    }
    assert_eq!((admitted, store.rule_keys("api")), (60, 60));
    assert_eq!(store.stats().full_rejections, 940);
    // Rule "web" (no cap of its own) still gets the rest of the store's room, through every
    // path: the one-item check, a batch, and a batch mixing both rules' new keys.
    let web = store.limiter("web", &p);
    for i in 0..30 {
        assert!(web.check(&format!("client-{i}"), 1).unwrap().allowed, "{i}");
    }
    let item = |rule, key| CheckItem {
        rule,
        policy: &p,
        key,
        cost: 1,
    };
    let d = store
        .check_now(&[item("web", "x1"), item("web", "x2")])
        .unwrap();
    assert!(d.allowed && d.store_full.is_none());
    // A batch with a new key on the full rule is refused whole (its new keys get the full
    // store's denial) and leaves no trace.
    let d = store
        .check_now(&[item("web", "y1"), item("api", "y1")])
        .unwrap();
    assert_eq!((d.allowed, d.store_full), (false, Some(OnFull::Reject)));
    assert!(d.decisions.iter().all(|d| d.retry_after == Some(1_000_000)));
    assert_eq!((store.rule_keys("web"), store.rule_keys("api")), (32, 60));
    // The store's own cap still holds for the rules together.
    for i in 0..20 {
        let allowed = web.check(&format!("late-{i}"), 1).unwrap().allowed;
        assert_eq!(allowed, i < 8, "{i}");
    }
    assert_eq!(store.stats().keys, 100);
    // Held keys of the full rule are still decided as usual.
    assert!(!api.check("junk-0", 1).unwrap().allowed);
    assert_eq!(
        api.check("junk-0", 1).unwrap().retry_after,
        Some(60_000_000)
    );
}

#[test]
fn a_rule_cap_is_exact_and_expiry_frees_its_count() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    store.set_rule_max_keys("r", Some(5));
    // One key that stays live throughout, four that expire after a second.
    let long = Policy::new(AlgorithmKind::FixedWindow, "1/h".parse().unwrap()).unwrap();
    let short = gcra("1/s");
    assert!(
        store
            .limiter("r", &long)
            .check("keeper", 1)
            .unwrap()
            .allowed
    );
    let r = store.limiter("r", &short);
    for k in ["a", "b", "c", "d"] {
        assert!(r.check(k, 1).unwrap().allowed);
    }
    // Exactly five: the sixth new key of the rule is refused, under either of its policies.
    assert!(!r.check("e", 1).unwrap().allowed);
    assert!(!store.limiter("r", &long).check("e", 1).unwrap().allowed);
    // A peek of a new key stores nothing and is not refused.
    assert!(r.peek_at("e", 1, clock.now()).unwrap().allowed);
    assert_eq!(store.rule_keys("r"), 5);
    // A second later four keys have expired: with no sweep, new keys find their room (the
    // rule's shards are searched for expired entries when its own cap is reached).
    clock.advance(1_000_000);
    for k in ["e", "f", "g", "h"] {
        assert!(r.check(k, 1).unwrap().allowed, "{k}");
    }
    assert!(!r.check("i", 1).unwrap().allowed);
    assert_eq!((store.rule_keys("r"), store.stats().keys), (5, 5));
    assert_eq!(store.stats().evictions, 4);
    // A sweep and a reset take keys off the rule's count too.
    clock.advance(1_000_000);
    assert_eq!(store.sweep_all(clock.now()), 4);
    assert_eq!(store.rule_keys("r"), 1);
    assert!(store.reset_key("r", "keeper"));
    assert_eq!((store.rule_keys("r"), store.stats().keys), (0, 0));
    // Raising the cap (a reload) applies to the next new key; removing it leaves the store's.
    store.set_rule_max_keys("r", Some(6));
    for i in 0..6 {
        assert!(r.check(&format!("n{i}"), 1).unwrap().allowed);
    }
    assert!(!r.check("n6", 1).unwrap().allowed);
    store.set_rule_max_keys("r", None);
    assert!(r.check("n6", 1).unwrap().allowed);
    assert_eq!(store.rule_keys("r"), 7);
}

#[test]
fn a_rule_cap_counts_batches_reservations_and_settles() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new(
        MemoryStoreConfig {
            on_full: OnFull::AdmitUntracked,
            ..MemoryStoreConfig::default()
        },
        Arc::new(clock.clone()),
    );
    store.set_rule_max_keys("r", Some(3));
    let p = gcra("2/s");
    let item = |key| CheckItem {
        rule: "r",
        policy: &p,
        key,
        cost: 1,
    };
    // A batch with a repeated key (the slot path), then one with distinct keys.
    let d = store.check_now(&[item("a"), item("a"), item("b")]).unwrap();
    assert!(d.allowed && d.store_full.is_none());
    let d = store.check_now(&[item("a"), item("b")]).unwrap();
    assert!(!d.allowed, "a is spent");
    assert_eq!(store.rule_keys("r"), 2);
    // A reservation of two new keys: room for one only, so both go untracked.
    let r = store
        .reserve_at(&[item("c"), item("d")], clock.now(), 0)
        .unwrap();
    assert_eq!(r.batch.store_full, Some(OnFull::AdmitUntracked));
    assert_eq!(store.rule_keys("r"), 2);
    assert_eq!(store.stats().full_untracked, 2);
    let r = store.reserve_at(&[item("c")], clock.now(), 0).unwrap();
    assert!(r.batch.allowed && r.batch.store_full.is_none());
    assert_eq!(store.rule_keys("r"), 3);
    // A settle charging a new key finds the rule full: counted, the key is not stored.
    let settle = SettleItem {
        rule: "r",
        policy: &p,
        key: "e",
        reserved: 0,
        actual: 1,
        scheduled_at: clock.now(),
    };
    store.settle_at(&[settle], clock.now()).unwrap();
    assert_eq!((store.rule_keys("r"), store.stats().full_untracked), (3, 3));
    assert!(store.holds_at("r", &p, "c", clock.now()));
    assert!(!store.holds_at("r", &p, "e", clock.now()));
    assert!(!store.holds_at("other", &p, "c", clock.now()));
}
