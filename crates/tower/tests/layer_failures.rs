//! Failure modes with a failing store, shadow rules, and the metrics the layer records.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{gcra, harness, request, with_store, T0};
use floodgate_core::{Decision, ManualClock, Policy};
use floodgate_store::{BatchDecision, CheckItem, OnFull, Store, StoreError};
use floodgate_tower::{FailureMode, KeySource, Rule, RuleSet};
use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// A store that is always down.
#[derive(Debug, Default)]
struct DownStore {
    calls: AtomicUsize,
}

impl Store for DownStore {
    async fn check(&self, _: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::Unavailable {
            reason: "connection refused".into(),
        })
    }

    async fn peek(&self, _: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        Err(StoreError::Timeout { after_ms: 50 })
    }

    async fn reset(&self, _: &str, _: &Policy, _: &str) -> Result<bool, StoreError> {
        Err(StoreError::Timeout { after_ms: 50 })
    }

    async fn inspect(&self, _: &str, _: &Policy, _: &str) -> Result<Decision, StoreError> {
        Err(StoreError::Timeout { after_ms: 50 })
    }
}

fn rule(name: &str, mode: FailureMode) -> Rule {
    Rule::new(name, gcra("1/h"), KeySource::ClientIp).with_failure_mode(mode)
}

fn down(rules: Vec<Rule>) -> common::Harness<DownStore> {
    with_store(
        ManualClock::new(T0),
        Arc::new(DownStore::default()),
        RuleSet::new(rules),
    )
}

/// Everything recorded while `f` ran on a current-thread runtime with a local recorder.
type Labels = Vec<(String, String)>;
struct Recorded(Vec<(String, Labels, DebugValue)>);

fn with_metrics<F: std::future::Future<Output = ()>>(f: impl FnOnce() -> F) -> Recorded {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f());
    });
    // A snapshot drains the recorder, so take exactly one.
    Recorded(
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let labels = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect();
                (key.key().name().to_string(), labels, value)
            })
            .collect(),
    )
}

fn counter(recorded: &Recorded, name: &str, labels: &[(&str, &str)]) -> u64 {
    recorded
        .0
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, value)| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[test]
fn fail_open_admits_and_counts() {
    let metrics = with_metrics(|| async {
        let h = down(vec![rule("open", FailureMode::Open)]);
        let r = h.send(request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header("ratelimit"), None);
        assert_eq!(h.backend.calls(), 1);
    });
    assert_eq!(
        counter(
            &metrics,
            "floodgate_decisions_total",
            &[("rule", "open"), ("outcome", "error_open")]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "floodgate_store_errors_total",
            &[("kind", "unavailable")]
        ),
        1
    );
}

#[tokio::test]
async fn fail_closed_answers_503_with_retry_after() {
    let h = down(vec![rule("closed", FailureMode::Closed)]);
    let r = h.send(request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.json()["type"], "urn:floodgate:problem:store-unavailable");
    assert!(
        !r.body.contains("connection refused"),
        "store errors are not disclosed"
    );
    assert_eq!(h.backend.calls(), 0);
}

#[test]
fn one_closed_rule_in_the_batch_makes_it_fail_closed_but_each_rule_counts_its_own_mode() {
    let metrics = with_metrics(|| async {
        let h = down(vec![
            rule("open", FailureMode::Open),
            rule("closed", FailureMode::Closed),
        ]);
        let r = h.send(request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    });
    let count = |rule: &str, outcome: &str| {
        counter(
            &metrics,
            "floodgate_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    };
    assert_eq!(count("open", "error_open"), 1);
    assert_eq!(count("open", "error_closed"), 0);
    assert_eq!(count("closed", "error_closed"), 1);
}

#[tokio::test]
async fn a_request_no_rule_applies_to_never_touches_the_store() {
    // A request no rule applies to never touches the store.
    let h = down(vec![rule("closed", FailureMode::Closed).with_matcher(
        floodgate_tower::Matcher {
            path_prefix: Some("/api".into()),
            ..Default::default()
        },
    )]);
    assert_eq!(h.status("/", "192.0.2.1:1").await, StatusCode::OK);
    assert_eq!(h.limiter.store().calls.load(Ordering::SeqCst), 0);
}

#[test]
fn shadow_rules_count_denials_but_never_deny() {
    let metrics = with_metrics(|| async {
        let h = harness(RuleSet::new(vec![Rule::new(
            "trial",
            gcra("1/h"),
            KeySource::ClientIp,
        )
        .with_shadow(true)]));
        for _ in 0..3 {
            let r = h.send(request("/", "192.0.2.1:1", &[])).await;
            assert_eq!(r.status, StatusCode::OK);
            assert_eq!(r.header("ratelimit"), None, "shadow rules are invisible");
        }
    });
    let c = |outcome| {
        counter(
            &metrics,
            "floodgate_decisions_total",
            &[("rule", "trial"), ("outcome", outcome)],
        )
    };
    assert_eq!((c("shadow_allowed"), c("shadow_denied")), (1, 2));
}

#[test]
fn shadow_rules_are_not_charged_for_requests_an_enforcing_rule_denied() {
    let metrics = with_metrics(|| async {
        let h = harness(RuleSet::new(vec![
            Rule::new("enforced", gcra("1/h"), KeySource::ClientIp),
            Rule::new("trial", gcra("2/h"), KeySource::ClientIp).with_shadow(true),
        ]));
        let statuses: Vec<StatusCode> = {
            let mut v = Vec::new();
            for _ in 0..4 {
                v.push(h.status("/", "192.0.2.1:1").await);
            }
            v
        };
        assert_eq!(statuses[0], StatusCode::OK);
        assert!(statuses[1..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS));
    });
    let c = |rule, outcome| {
        counter(
            &metrics,
            "floodgate_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    };
    // Only the one admitted request charged the 2/h trial rule, so it never denied.
    assert_eq!(
        (c("trial", "shadow_allowed"), c("trial", "shadow_denied")),
        (4, 0)
    );
    assert_eq!((c("enforced", "allowed"), c("enforced", "denied")), (1, 3));
}

#[test]
fn skipped_rules_and_latency_are_recorded() {
    let metrics = with_metrics(|| async {
        let h = harness(RuleSet::new(vec![Rule::new(
            "per-user",
            gcra("1/h"),
            KeySource::User {
                header: http::HeaderName::from_static("x-user-id"),
            },
        )]));
        h.send(request("/", "192.0.2.1:1", &[])).await;
        h.send(request("/", "192.0.2.1:1", &[("x-user-id", "u")]))
            .await;
    });
    assert_eq!(
        counter(
            &metrics,
            "floodgate_decisions_total",
            &[("rule", "per-user"), ("outcome", "skipped")]
        ),
        1
    );
    let histograms = metrics
        .0
        .iter()
        .filter(|(name, _, _)| name == "floodgate_decision_duration_seconds")
        .map(|(_, _, v)| match v {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        })
        .sum::<usize>();
    assert_eq!(
        histograms, 1,
        "one store round trip, for the request that had a key"
    );
}

/// A store that is full of live keys and refuses every new one.
#[derive(Debug, Default)]
struct FullStore;

impl Store for FullStore {
    async fn check(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        Ok(BatchDecision {
            allowed: false,
            decisions: items
                .iter()
                .map(|_| Decision {
                    allowed: false,
                    limit: 1,
                    remaining: 0,
                    reset_after: 0,
                    retry_after: Some(1_000_000),
                })
                .collect(),
            store_full: Some(OnFull::Reject),
        })
    }

    async fn peek(&self, items: &[CheckItem<'_>]) -> Result<BatchDecision, StoreError> {
        self.check(items).await
    }

    async fn reset(&self, _: &str, _: &Policy, _: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn inspect(&self, _: &str, _: &Policy, _: &str) -> Result<Decision, StoreError> {
        Err(StoreError::Timeout { after_ms: 50 })
    }
}

#[test]
fn a_store_full_refusal_is_counted_as_store_full_and_its_t_agrees_with_retry_after() {
    let metrics = with_metrics(|| async {
        let h = with_store(
            ManualClock::new(T0),
            Arc::new(FullStore),
            RuleSet::new(vec![rule("per-ip", FailureMode::Open)]),
        );
        let r = h.send(request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=0;t=1"));
    });
    let count = |outcome: &str| {
        counter(
            &metrics,
            "floodgate_decisions_total",
            &[("rule", "per-ip"), ("outcome", outcome)],
        )
    };
    assert_eq!(count("store_full"), 1);
    assert_eq!(count("denied"), 0);
}

/// An app served without connect info (`axum::serve(listener, app)`) has no peer address: a
/// client-IP rule used to skip every request silently; it is now a 500 problem naming the
/// rule, counted, and rules that do not need the address still decide.
#[tokio::test]
async fn a_client_ip_rule_without_a_peer_address_is_a_loud_500() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let policy =
        floodgate_core::Policy::parse(floodgate_core::AlgorithmKind::Gcra, "5/min").unwrap();
    let h = common::harness(RuleSet::new(vec![Rule::new(
        "per-ip",
        policy.clone(),
        KeySource::ClientIp,
    )]));
    // No PeerAddr and no ConnectInfo in the request's extensions.
    let r = h.send(http::Request::new(String::new())).await;
    assert_eq!(r.status, http::StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let body = r.json();
    assert_eq!(body["type"], "urn:floodgate:problem:no-client-address");
    assert_eq!(body["rule"], "per-ip");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("into_make_service_with_connect_info"));
    assert_eq!(h.backend.calls(), 0, "not passed on unlimited");
    let counted = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .any(|(k, _, _, v)| {
            k.key().name() == "floodgate_decisions_total"
                && k.key()
                    .labels()
                    .any(|l| l.key() == "outcome" && l.value() == "no_client_address")
                && v == metrics_util::debugging::DebugValue::Counter(1)
        });
    assert!(counted, "counted as no_client_address");

    // A rule that does not need the address decides as usual.
    let h = common::harness(RuleSet::new(vec![Rule::new(
        "global",
        policy,
        KeySource::Constant("all".into()),
    )]));
    let r = h.send(http::Request::new(String::new())).await;
    assert_eq!(r.status, http::StatusCode::OK);
}
