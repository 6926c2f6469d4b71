//! The delay mode of the tower layer (`Rule::with_delay`): a request that fits within the
//! delay is reserved and held until its slot, then the inner service is called; beyond it, a
//! 429 at once. On a MemoryStore over a manual clock that the held requests watch
//! (`RateLimiter::with_delay_clock`), so the test moves time itself and nothing sleeps.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{counters, gcra, request, Backend, Counted, T0};
use floodgate_core::ManualClock;
use floodgate_store::MemoryStore;
use floodgate_tower::{KeySource, RateLimit, RateLimiter, Rule, RuleSet};
use http::StatusCode;
use http_body_util::BodyExt;
use metrics_util::debugging::DebuggingRecorder;
use tokio::task::JoinHandle;
use tower::ServiceExt;

struct Delayed {
    clock: ManualClock,
    limiter: RateLimiter<MemoryStore>,
    backend: Backend,
    service: RateLimit<Backend, MemoryStore>,
}

fn delayed(rules: Vec<Rule>, max_delayed: usize) -> Delayed {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let limiter = RateLimiter::new(store, RuleSet::new(rules))
        .with_delay_clock(Arc::new(clock.clone()))
        .with_max_delayed(max_delayed);
    let backend = Backend::default();
    let service = RateLimit::new(backend.clone(), limiter.clone());
    Delayed {
        clock,
        limiter,
        backend,
        service,
    }
}

/// GCRA 2/s: one slot every 500 ms, a burst of 2, a horizon of 1 s; held up to 1 s.
fn two_per_second() -> Rule {
    Rule::new("per-ip", gcra("2/s"), KeySource::ClientIp).with_delay(Duration::from_secs(1))
}

impl Delayed {
    /// Sends a request from the one client on a task; answers (status, Retry-After).
    fn spawn(&self) -> JoinHandle<(StatusCode, Option<String>)> {
        let service = self.service.clone();
        tokio::spawn(async move {
            let response = service
                .oneshot(request("/", "203.0.113.7:5000", &[]))
                .await
                .unwrap();
            let retry = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            let status = response.status();
            response.into_body().collect().await.unwrap();
            (status, retry)
        })
    }

    async fn send(&self) -> (StatusCode, Option<String>) {
        self.spawn().await.unwrap()
    }

    /// Lets the spawned tasks run until `n` requests are held.
    async fn until_held(&self, n: usize) {
        while self.limiter.delayed_now() != n {
            tokio::task::yield_now().await;
        }
    }

    /// Moves the clock and lets the held requests see it (they look every 5 ms).
    fn advance_ms(&self, ms: u64) {
        self.clock.advance(ms * 1000);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn a_request_within_the_delay_is_held_until_its_slot_and_one_beyond_is_refused_at_once() {
    runtime().block_on(async {
        let d = delayed(vec![two_per_second()], 16);
        for _ in 0..2 {
            assert_eq!(d.send().await.0, StatusCode::OK);
        }
        let third = d.spawn();
        let fourth = d.spawn();
        d.until_held(2).await;
        // The fifth would wait 1.5 s: beyond the delay, a 429 at once, consuming nothing.
        assert_eq!(
            d.send().await,
            (StatusCode::TOO_MANY_REQUESTS, Some("2".to_string()))
        );
        assert_eq!(
            d.backend.calls(),
            2,
            "the held requests have not been passed on"
        );
        d.advance_ms(500);
        assert_eq!(third.await.unwrap(), (StatusCode::OK, None));
        assert_eq!(d.backend.calls(), 3);
        assert!(!fourth.is_finished(), "the fourth's slot is 500 ms later");
        assert_eq!(d.limiter.delayed_now(), 1);
        d.advance_ms(500);
        assert_eq!(fourth.await.unwrap(), (StatusCode::OK, None));
        assert_eq!(d.backend.calls(), 4);
        assert_eq!(d.limiter.delayed_now(), 0);
    });
}

#[test]
fn a_matching_rule_without_a_delay_means_no_waiting() {
    runtime().block_on(async {
        let site = Rule::new("site", gcra("100/s"), KeySource::Constant("all".into()));
        let d = delayed(vec![two_per_second(), site], 16);
        for _ in 0..2 {
            assert_eq!(d.send().await.0, StatusCode::OK);
        }
        assert_eq!(
            d.send().await,
            (StatusCode::TOO_MANY_REQUESTS, Some("1".to_string()))
        );
        assert_eq!(d.limiter.delayed_now(), 0);
    });
}

#[test]
fn several_rules_wait_at_most_the_smallest_delay() {
    runtime().block_on(async {
        let site = Rule::new("site", gcra("100/s"), KeySource::Constant("all".into()))
            .with_delay(Duration::from_millis(600));
        let d = delayed(vec![two_per_second(), site], 16);
        for _ in 0..2 {
            assert_eq!(d.send().await.0, StatusCode::OK);
        }
        // 500 ms is within 600 ms: held.
        let third = d.spawn();
        d.until_held(1).await;
        // 1 s is within per-ip's delay but not site's: refused.
        assert_eq!(d.send().await.0, StatusCode::TOO_MANY_REQUESTS);
        d.advance_ms(500);
        assert_eq!(third.await.unwrap().0, StatusCode::OK);
        assert_eq!(d.backend.calls(), 3);
    });
}

fn delayed_total(counters: &[Counted], outcome: &str) -> u64 {
    counters
        .iter()
        .filter(|(name, labels, _)| {
            name == "floodgate_requests_delayed_total"
                && labels == &[("outcome".to_string(), outcome.to_string())]
        })
        .map(|(_, _, n)| *n)
        .sum()
}

#[test]
fn beyond_max_delayed_a_request_that_would_wait_is_refused_and_counted_queue_full() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        runtime().block_on(async {
            let d = delayed(vec![two_per_second()], 1);
            for _ in 0..2 {
                assert_eq!(d.send().await.0, StatusCode::OK);
            }
            let third = d.spawn();
            d.until_held(1).await;
            // Within the delay, but one request already waits: refused as a check refuses it.
            assert_eq!(
                d.send().await,
                (StatusCode::TOO_MANY_REQUESTS, Some("1".to_string()))
            );
            d.advance_ms(500);
            assert_eq!(third.await.unwrap().0, StatusCode::OK);
            // The bound is free again: the next one waits its 500 ms.
            let fourth = d.spawn();
            d.until_held(1).await;
            d.advance_ms(500);
            assert_eq!(fourth.await.unwrap().0, StatusCode::OK);
            assert_eq!(d.backend.calls(), 4);
        });
    });
    let counters = counters(&recorder);
    assert_eq!(delayed_total(&counters, "queue_full"), 1, "{counters:?}");
    assert_eq!(delayed_total(&counters, "passed"), 2, "{counters:?}");
    assert_eq!(delayed_total(&counters, "cancelled"), 0, "{counters:?}");
}

#[test]
fn a_request_dropped_while_held_gives_its_slot_back() {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        runtime().block_on(async {
            let d = delayed(vec![two_per_second()], 16);
            for _ in 0..2 {
                assert_eq!(d.send().await.0, StatusCode::OK);
            }
            let third = d.spawn();
            let fourth = d.spawn();
            d.until_held(2).await;
            // The client of the fourth (slot at +1 s) goes away.
            fourth.abort();
            assert!(fourth.await.unwrap_err().is_cancelled());
            d.until_held(1).await;
            // Its units come back once the settle task has run: the next request then gets
            // the +1 s slot (held) instead of +1.5 s (beyond the delay: a 429 at once).
            let mut tries = 0;
            let fifth = loop {
                tries += 1;
                assert!(tries < 100, "the dropped request's units never came back");
                tokio::task::yield_now().await;
                let next = d.spawn();
                tokio::task::yield_now().await;
                if d.limiter.delayed_now() == 2 {
                    break next;
                }
                assert_eq!(next.await.unwrap().0, StatusCode::TOO_MANY_REQUESTS);
            };
            d.advance_ms(500);
            assert_eq!(third.await.unwrap().0, StatusCode::OK);
            assert!(!fifth.is_finished());
            d.advance_ms(500);
            assert_eq!(fifth.await.unwrap().0, StatusCode::OK);
            assert_eq!(d.backend.calls(), 4, "the dropped request never reached it");
        });
    });
    let counters = counters(&recorder);
    assert_eq!(delayed_total(&counters, "cancelled"), 1, "{counters:?}");
    assert_eq!(delayed_total(&counters, "passed"), 2, "{counters:?}");
    let refunded: u64 = counters
        .iter()
        .filter(|(name, labels, _)| {
            name == "floodgate_settled_units_total"
                && labels.contains(&("direction".to_string(), "refunded".to_string()))
        })
        .map(|(_, _, n)| *n)
        .sum();
    assert_eq!(refunded, 1, "{counters:?}");
}
