//! RedisStore coalescing against real redis-server processes started by each test: coalesced
//! checks decide exactly like sequential ones, and a failing batch fails alone.
#![cfg(feature = "testing")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, ManualClock, SystemClock};
use floodgate_store::redis::testing::{current_thread_runtime, RedisServer};
use floodgate_store::redis::{RedisStore, TimeSource};
use floodgate_store::{Store, StoreError};

use common::*;

/// Coalescing on: 60 checks of one key submitted together (one task) are decided in two script
/// calls, exactly as if one by one: the first goes at once, alone (a lone batch waits for
/// nothing), and the 59 queued while it was out go together in the next call. Each algorithm
/// admits exactly its 10, with remaining 9, 8, ... 0 in submission order.
#[test]
fn coalesced_checks_decide_exactly_like_sequential_ones_in_one_call() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let mut config = slow_ok(&server);
        config.time_source = TimeSource::Caller;
        config.coalesce = 1;
        let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
        store.startup_check().await.unwrap();
        let mut con = raw(&server).await;
        for kind in AlgorithmKind::ALL {
            let p = policy(kind, "10/h");
            let before = command_calls(&mut con, "evalsha").await;
            let batch = [item("co", &p, "k", 1)];
            let checks = (0..60).map(|_| store.check_at(&batch, T0));
            let results = futures_util::future::join_all(checks).await;
            let calls = command_calls(&mut con, "evalsha").await - before;
            let remaining: Vec<u64> = results
                .iter()
                .map(|r| r.as_ref().unwrap())
                .filter(|d| d.allowed)
                .map(|d| d.decisions[0].remaining)
                .collect();
            assert_eq!(remaining, (0..10).rev().collect::<Vec<_>>(), "{kind}");
            // On this one-thread runtime the first check's call is out before the others are
            // polled, and they are all queued when its reply arrives: one more call carries
            // them all.
            assert_eq!(calls, 2, "{kind}");
        }
    });
}

/// A cost-1 check followed by a cost-0 check at the same time: the cost-0 check reports the
/// unit as consumed, exactly as the memory store does, whether the two are separate calls
/// (each a one-item batch: the coalescing script's one-decide path), two batches that go out
/// in one coalesced call, or two items of one batch (`batch.lua`). Every algorithm, at a
/// window edge and inside a window, for a quota with denominator 1 and one with 7. (A
/// regression test: the randomized differential tests meet two requests at the same
/// microsecond only by chance.)
#[test]
fn a_cost_0_check_right_after_a_cost_1_check_at_the_same_time_sees_the_unit_consumed() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let mut config = slow_ok(&server);
        config.time_source = TimeSource::Caller;
        config.ttl_extra = Duration::from_secs(3600);
        config.coalesce = 1;
        let store = RedisStore::new(config, Arc::new(ManualClock::new(T0))).unwrap();
        store.startup_check().await.unwrap();
        let memory = floodgate_store::MemoryStore::with_clock(Arc::new(ManualClock::new(T0)));
        let mut con = raw(&server).await;
        for kind in AlgorithmKind::ALL {
            for (quota, capacity) in [("10/h", 10), ("7/s", 7)] {
                let p = policy(kind, quota);
                for t in [T0, T0 + 123_457] {
                    let case = format!("{kind} {quota} at +{}", t - T0);
                    let want = |d: &floodgate_store::BatchDecision, i: usize| {
                        let d = d.decisions[i];
                        assert!(d.allowed, "{case}: {d:?}");
                        assert_eq!(d.remaining, capacity - 1, "{case}: {d:?}");
                        assert!(d.reset_after > 0, "{case}: {d:?}");
                    };

                    // Two calls, one after the other.
                    let rule = format!("apart {case}");
                    let one = [item(&rule, &p, "k", 1)];
                    let zero = [item(&rule, &p, "k", 0)];
                    for batch in [&one, &zero, &zero] {
                        let got = store.check_at(batch, t).await.unwrap();
                        assert_eq!(got, memory.check_at(batch, t).unwrap(), "{case}");
                    }
                    want(&store.check_at(&zero, t).await.unwrap(), 0);
                    want(&store.peek_at(&zero, t).await.unwrap(), 0);

                    // Two batches in one coalesced call: queued while the first check's own call
                    // is out, they go together in the next (two calls in all).
                    let rule = format!("together {case}");
                    let one = [item(&rule, &p, "k", 1)];
                    let zero = [item(&rule, &p, "k", 0)];
                    let before = command_calls(&mut con, "evalsha").await;
                    let (a, b, c) = futures_util::future::join3(
                        store.check_at(&one, t),
                        store.check_at(&zero, t),
                        store.peek_at(&zero, t),
                    )
                    .await;
                    assert_eq!(
                        command_calls(&mut con, "evalsha").await - before,
                        2,
                        "{case}"
                    );
                    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
                    assert_eq!(a, memory.check_at(&one, t).unwrap(), "{case}");
                    assert_eq!(b, memory.check_at(&zero, t).unwrap(), "{case}");
                    assert_eq!(c, memory.peek_at(&zero, t).unwrap(), "{case}");
                    want(&b, 0);
                    want(&c, 0);

                    // Two items of one batch.
                    let rule = format!("one batch {case}");
                    let both = [item(&rule, &p, "k", 1), item(&rule, &p, "k", 0)];
                    let got = store.check_at(&both, t).await.unwrap();
                    assert_eq!(got, memory.check_at(&both, t).unwrap(), "{case}");
                    want(&got, 1);
                }
            }
        }
    });
}

/// One bad batch in a coalesced call (its key holds a set: WRONGTYPE) fails alone; the batches
/// sent with it are decided.
#[test]
fn a_failing_batch_does_not_fail_its_coalesced_neighbours() {
    let server = RedisServer::start().unwrap();
    let rt = current_thread_runtime().unwrap();
    rt.block_on(async {
        let mut config = slow_ok(&server);
        config.coalesce = 1;
        let store = RedisStore::new(config, Arc::new(SystemClock)).unwrap();
        store.startup_check().await.unwrap();
        let mut con = raw(&server).await;
        let p = policy(AlgorithmKind::Gcra, "100/s");
        let _: i64 = redis::cmd("SADD")
            .arg(store.key_name("bad", &p, "k"))
            .arg("x")
            .query_async(&mut con)
            .await
            .unwrap();
        let keys: Vec<String> = (0..20).map(|i| format!("user{i}")).collect();
        let checks = keys.iter().enumerate().map(|(i, k)| {
            let rule = if i == 7 { "bad" } else { "good" };
            let key = if i == 7 { "k" } else { k.as_str() };
            let store = &store;
            let p = &p;
            async move { store.check(&[item(rule, p, key, 1)]).await }
        });
        let results = futures_util::future::join_all(checks).await;
        for (i, r) in results.iter().enumerate() {
            if i == 7 {
                let e = r.as_ref().unwrap_err();
                assert!(
                    matches!(e, StoreError::Unavailable { reason } if reason.contains("WRONGTYPE")),
                    "{e}"
                );
            } else {
                assert!(r.as_ref().unwrap().allowed, "#{i}: {r:?}");
            }
        }
    });
}
