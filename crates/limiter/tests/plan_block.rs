//! A plan with block list entries ([`Plan::block`]): refused, consuming nothing, and counted by
//! the limiter, not by the front end that found the entry.

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_limiter::{Action, KeySource, Mode, Plan, RateLimiter, Rule, RuleSet};
use floodgate_store::MemoryStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

fn limiter() -> RateLimiter<MemoryStore> {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let policy = Policy::new(AlgorithmKind::Gcra, "3/min".parse().unwrap()).unwrap();
    RateLimiter::new(
        store,
        RuleSet::new(vec![Rule::new(
            "per-address",
            policy,
            KeySource::Constant("x".into()),
        )]),
    )
}

/// Every `floodgate_decisions_total` series recorded: `(rule, outcome, count)`.
fn decisions(recorder: &DebuggingRecorder) -> Vec<(String, String, u64)> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let key = key.key();
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_string())
            };
            match value {
                DebugValue::Counter(n) if key.name() == "floodgate_decisions_total" => {
                    Some((label("rule")?, label("outcome")?, n))
                }
                _ => None,
            }
        })
        .collect()
}

fn run(f: impl std::future::Future<Output = ()>) -> DebuggingRecorder {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    });
    recorder
}

#[test]
fn a_blocked_plan_is_denied_consumes_nothing_and_counts_the_entry() {
    let limiter = limiter();
    let recorder = run(async {
        let mut plan = Plan::new(limiter.rules());
        plan.push(0, "ip=50.0.0.5".into(), 1);
        plan.block("edge_proxy_per_ip_blocked".into());
        assert!(plan.is_blocked());
        assert_eq!(plan.delay(), 0);
        let verdict = limiter.evaluate(&plan, Mode::Check).await;
        assert_eq!(verdict.action, Action::Deny);
        // The item was looked at (a peek shows the key's standing), not charged.
        assert_eq!(verdict.outcomes.len(), 1);
        assert_eq!(verdict.outcomes[0].decision.remaining, 3);

        let mut plain = Plan::new(limiter.rules());
        plain.push(0, "ip=50.0.0.5".into(), 1);
        let verdict = limiter.evaluate(&plain, Mode::Check).await;
        assert!(verdict.is_admitted());
        // Only this check's unit was ever taken.
        assert_eq!(verdict.outcomes[0].decision.remaining, 2);
    });
    // The entry counted denied; the blocked request's item decided nothing, the plain one was
    // charged.
    let mut counted = decisions(&recorder);
    counted.sort();
    assert_eq!(
        counted,
        vec![
            ("edge_proxy_per_ip_blocked".into(), "denied".into(), 1),
            ("per-address".into(), "allowed".into(), 1),
        ]
    );
}

#[test]
fn a_peek_of_a_blocked_plan_counts_nothing() {
    let limiter = limiter();
    let recorder = run(async {
        let mut plan = Plan::new(limiter.rules());
        plan.push(0, "ip=50.0.0.5".into(), 1);
        plan.block("blocked".into());
        let verdict = limiter.evaluate(&plan, Mode::Peek).await;
        assert_eq!(verdict.action, Action::Deny);
    });
    assert_eq!(decisions(&recorder), vec![]);
}
