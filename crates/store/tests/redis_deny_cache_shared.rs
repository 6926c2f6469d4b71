//! The deny cache stays exact across processes, on real redis-servers: a denial cached by
//! store A is dropped when store B (another process's store, its own connections) resets,
//! settles or reserves the key, and A's next decision is exactly what a store without the cache
//! answers; a subscription that fails (the server restarted without its data) empties the cache
//! until it is made again; and random traffic through two stores with the cache on decides
//! exactly like the same traffic through two stores without it (caller time, manual clock).
#![cfg(feature = "testing")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::redis::testing::{multi_thread_runtime, RedisServer};
use floodgate_store::redis::{RedisStore, TimeSource};
use floodgate_store::{SettleItem, Store};

use common::*;

/// A store on `server` deciding at caller-supplied times (keys kept for an hour of real time),
/// with the deny cache on or off, under key prefix `prefix`.
fn store(server: &RedisServer, deny_cache: bool, prefix: &str) -> RedisStore {
    let mut config = slow_ok(server);
    config.time_source = TimeSource::Caller;
    config.ttl_extra = Duration::from_secs(3600);
    config.deny_cache = deny_cache;
    config.prefix = prefix.into();
    RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap()
}

/// How B changes the key A has a cached denial of.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// An admin reset.
    Reset,
    /// A settle that gives back what a reservation did not use.
    SettleGivesBack,
    /// A reservation for later, cancelled (settled with nothing used).
    ReservationCancelled,
    /// A reservation granted for later: the key's denial lasts longer than A cached.
    ReservationGranted,
}

/// Process A (cache on) caches a denial; process B (cache on too, its own store) changes the
/// key; once A has received B's invalidation, A's next decisions are exactly those of a pair of
/// stores without the cache given the same calls (every number too), for every kind of
/// write and every algorithm. Before B writes, A's repeated check is answered without Redis.
#[test]
fn a_write_through_another_process_ends_the_cached_denial() {
    let server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let a = store(&server, true, "on:");
        let b = store(&server, true, "on:");
        let reference = store(&server, false, "off:");
        deny_cache_subscribed(&a, 1).await;
        deny_cache_subscribed(&b, 1).await;
        let mut con = raw(&server).await;
        let mut t = T0;
        let mut refused = 0;
        for kind in AlgorithmKind::ALL {
            for write in [
                Write::Reset,
                Write::SettleGivesBack,
                Write::ReservationCancelled,
                Write::ReservationGranted,
            ] {
                let p = policy(kind, "4/s");
                let rule = format!("{kind}-{write:?}");
                let one = [item(&rule, &p, "k", 1)];
                t += 10_000_000;
                // B reserves 2 units now (a settle gives them back later), A uses the rest.
                let two = [item(&rule, &p, "k", 2)];
                let held = b.reserve_at(&two, t, 0).await.unwrap();
                let held_ref = reference.reserve_at(&two, t, 0).await.unwrap();
                assert_eq!(held, held_ref, "{kind} {write:?}");
                loop {
                    let got = a.check_at(&one, t).await.unwrap();
                    assert_eq!(got, reference.check_at(&one, t).await.unwrap());
                    if !got.allowed {
                        break;
                    }
                }
                // Cached: the next denial is answered without a script call.
                let before = command_calls(&mut con, "evalsha").await;
                t += 1_000;
                let got = a.check_at(&one, t).await.unwrap();
                assert_eq!(got, reference.check_at(&one, t).await.unwrap());
                assert!(!got.allowed);
                // The reference's call only.
                assert_eq!(
                    command_calls(&mut con, "evalsha").await - before,
                    1,
                    "{kind} {write:?}: A answered from its cache"
                );
                let received = a.deny_cache_invalidations();
                t += 1_000;
                match write {
                    Write::Reset => {
                        assert!(b.reset(&rule, &p, "k").await.unwrap());
                        assert!(reference.reset(&rule, &p, "k").await.unwrap());
                    }
                    Write::SettleGivesBack | Write::ReservationCancelled => {
                        let actual = u64::from(matches!(write, Write::SettleGivesBack));
                        let settle = [SettleItem {
                            rule: &rule,
                            policy: &p,
                            key: "k",
                            reserved: 2,
                            actual,
                            scheduled_at: held.scheduled_at[0],
                        }];
                        let got = b.settle_at(&settle, t).await.unwrap();
                        assert_eq!(got, reference.settle_at(&settle, t).await.unwrap());
                    }
                    Write::ReservationGranted => {
                        let later = b.reserve_at(&one, t, 10_000_000).await.unwrap();
                        assert_eq!(
                            later,
                            reference.reserve_at(&one, t, 10_000_000).await.unwrap()
                        );
                        if later.wait.is_none() {
                            // This algorithm takes no reservation for later here (the sliding
                            // window counter): nothing changed, nothing published.
                            refused += 1;
                            continue;
                        }
                        assert!(later.wait.unwrap_or(0) > 0, "{kind}: reserved for later");
                    }
                }
                deny_cache_received(&a, received + 1).await;
                // A decides as without the cache, at once and over the next moments.
                for _ in 0..6 {
                    let got = a.check_at(&one, t).await.unwrap();
                    let want = reference.check_at(&one, t).await.unwrap();
                    assert_eq!(got, want, "{kind} {write:?} at +{} us", t - T0);
                    t += 50_000;
                }
            }
        }
        assert!(
            refused <= 1,
            "{refused} algorithms took no reservation for later"
        );
    });
}

/// A subscription that fails empties the cache: the server restarts without persistence (every
/// key is gone, no invalidation was sent), and once A has subscribed again its next check is
/// decided by Redis and admitted, as without the cache.
#[test]
fn a_restarted_server_empties_the_cache() {
    let mut server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let a = store(&server, true, "fg:");
        deny_cache_subscribed(&a, 1).await;
        let p = policy(AlgorithmKind::Gcra, "3/h");
        let one = [item("restart", &p, "k", 1)];
        while a.check_at(&one, T0).await.unwrap().allowed {}
        assert!(!a.check_at(&one, T0).await.unwrap().allowed);
        server.restart().unwrap();
        // The second subscription, made after the restart (by the background task).
        deny_cache_subscribed(&a, 2).await;
        // The breaker may have seen nothing fail; the connection comes back on its own.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let got = loop {
            match a.check_at(&one, T0).await {
                Ok(got) => break got,
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(
            got.allowed,
            "the lost state is fresh in Redis, and so is A's answer"
        );
    });
}

/// A tiny deterministic generator (xorshift64*), so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The same random traffic (cost-1 checks mostly, larger checks, peeks, resets, reservations
/// now and for later, settles giving back, using all or charging more, time steps) through two
/// stores with the cache on (one Redis) and through two without it (another Redis), each call
/// made through the same one of the two, gives identical answers (every number). After each
/// write the cached side waits until both its stores have received every invalidation
/// published so far (counted by the server), as a process's next decision after another's
/// write does once the write's message has arrived.
#[test]
fn random_traffic_decides_the_same_with_the_cache_on_and_off() {
    let on_server = RedisServer::start().unwrap();
    let off_server = RedisServer::start().unwrap();
    let rt = multi_thread_runtime(2).unwrap();
    rt.block_on(async {
        let on = [
            store(&on_server, true, "fg:"),
            store(&on_server, true, "fg:"),
        ];
        let off = [
            store(&off_server, false, "fg:"),
            store(&off_server, false, "fg:"),
        ];
        for s in &on {
            deny_cache_subscribed(s, 1).await;
        }
        let mut con = raw(&on_server).await;
        let policies: Vec<(String, Policy)> = AlgorithmKind::ALL
            .iter()
            .flat_map(|&kind| {
                ["3/s", "5/10s burst 2"]
                    .iter()
                    .enumerate()
                    .map(move |(i, q)| (format!("{kind}-{i}"), policy(kind, q)))
            })
            .collect();
        let mut hits = 0u64;
        for seed in 1..=6u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut t = T0 + seed * 1_000_000_000;
            // Reservations not yet settled: (policy index, key, reserved, scheduled_at).
            let mut open: Vec<(usize, String, u64, u64)> = Vec::new();
            for step in 0..400 {
                let which = usize::from(rng.below(2) == 1);
                let pi = rng.below(policies.len() as u64) as usize;
                let (rule, p) = (&policies[pi].0, &policies[pi].1);
                let key = format!("k{}", rng.below(2));
                let what = rng.below(100);
                t += [0, 1, 1_000, 20_000, 300_000][rng.below(5) as usize];
                let context = format!("seed {seed} step {step} op {what} {rule} {key}");
                let wrote = if what < 74 {
                    let cost = if what < 66 { 1 } else { 2 };
                    let items = [item(rule, p, &key, cost)];
                    let before = command_calls(&mut con, "evalsha").await;
                    let got = on[which].check_at(&items, t).await.unwrap();
                    if command_calls(&mut con, "evalsha").await == before {
                        hits += 1;
                    }
                    let want = off[which].check_at(&items, t).await.unwrap();
                    assert_eq!(got, want, "{context}");
                    false
                } else if what < 78 {
                    let items = [item(rule, p, &key, 1)];
                    let got = on[which].peek_at(&items, t).await.unwrap();
                    assert_eq!(
                        got,
                        off[which].peek_at(&items, t).await.unwrap(),
                        "{context}"
                    );
                    false
                } else if what < 81 {
                    let got = on[which].reset(rule, p, &key).await.unwrap();
                    assert_eq!(
                        got,
                        off[which].reset(rule, p, &key).await.unwrap(),
                        "{context}"
                    );
                    true
                } else if what < 90 || open.is_empty() {
                    let items = [item(rule, p, &key, 1 + rng.below(2))];
                    let max_wait = [0, 500_000, 5_000_000][rng.below(3) as usize];
                    let got = on[which].reserve_at(&items, t, max_wait).await.unwrap();
                    let want = off[which].reserve_at(&items, t, max_wait).await.unwrap();
                    assert_eq!(got, want, "{context}");
                    if got.wait.is_some() {
                        open.push((pi, key.clone(), items[0].cost, got.scheduled_at[0]));
                    }
                    true
                } else {
                    let (pi, key, reserved, at) =
                        open.swap_remove(rng.below(open.len() as u64) as usize);
                    let (rule, p) = (&policies[pi].0, &policies[pi].1);
                    let settle = [SettleItem {
                        rule,
                        policy: p,
                        key: &key,
                        reserved,
                        actual: rng.below(reserved + 2),
                        scheduled_at: at,
                    }];
                    let got = on[which].settle_at(&settle, t).await.unwrap();
                    assert_eq!(
                        got,
                        off[which].settle_at(&settle, t).await.unwrap(),
                        "{context}"
                    );
                    true
                };
                if wrote {
                    let published = command_calls(&mut con, "publish").await;
                    for s in &on {
                        deny_cache_received(s, published).await;
                    }
                }
            }
        }
        println!("{hits} checks answered by a deny cache");
        assert!(hits > 20, "the cache was used ({hits} hits)");
    });
}
