//! envoyproxy/ratelimit's answer modes decided and counted by the engine: quota mode
//! ([`ItemOptions::quota_mode`], [`Plan::block_in_quota_mode`], [`Plan::pass_quota`]) and the
//! global shadow mode ([`Plan::shadow_all`]).

use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_limiter::{Action, ItemOptions, KeySource, Mode, Plan, RateLimiter, Rule, RuleSet};
use floodgate_store::MemoryStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Rule 0 `regular` allows 2 a minute, rule 1 `quota` 1, rule 2 `quota2` 3.
fn limiter() -> RateLimiter<MemoryStore> {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let rule = |name: &str, quota: &str| {
        let policy = Policy::new(AlgorithmKind::FixedWindow, quota.parse().unwrap()).unwrap();
        Rule::new(name, policy, KeySource::Constant("x".into()))
    };
    RateLimiter::new(
        store,
        RuleSet::new(vec![
            rule("regular", "2/min"),
            rule("quota", "1/min"),
            rule("quota2", "3/min"),
        ]),
    )
}

/// A plan of `(rule, quota_mode)` items, each costing 1 on key `k`.
fn plan(limiter: &RateLimiter<MemoryStore>, items: &[(usize, bool)]) -> Plan {
    let mut plan = Plan::new(limiter.rules());
    for &(rule, quota_mode) in items {
        let options = ItemOptions {
            quota_mode,
            ..ItemOptions::default()
        };
        plan.push_item(rule, "k".into(), 1, options);
    }
    plan
}

/// `(action, allowed of each outcome in item order, remaining of each)`.
async fn decide(limiter: &RateLimiter<MemoryStore>, plan: &Plan) -> (Action, Vec<bool>, Vec<u64>) {
    let v = limiter.evaluate(plan, Mode::Check).await;
    let items: Vec<usize> = v.outcomes.iter().map(|o| o.item).collect();
    let mut sorted = items.clone();
    sorted.sort_unstable();
    assert_eq!(items, sorted, "outcomes in plan order");
    (
        v.action,
        v.outcomes.iter().map(|o| o.decision.allowed).collect(),
        v.outcomes.iter().map(|o| o.decision.remaining).collect(),
    )
}

/// Every counter recorded, `(name, rule, outcome, count)`, from one snapshot (a snapshot takes
/// the counts: a second one starts from 0).
fn counters(recorder: &DebuggingRecorder) -> Vec<(String, Option<String>, Option<String>, u64)> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let key = key.key();
            let label = |l: &str| {
                key.labels()
                    .find(|x| x.key() == l)
                    .map(|x| x.value().to_string())
            };
            match value {
                DebugValue::Counter(n) => {
                    Some((key.name().to_string(), label("rule"), label("outcome"), n))
                }
                _ => None,
            }
        })
        .collect()
}

/// The sum of counter `name` (of `rule` and `outcome` when `rule` is given).
fn count(
    all: &[(String, Option<String>, Option<String>, u64)],
    name: &str,
    rule: Option<&str>,
    outcome: &str,
) -> u64 {
    all.iter()
        .filter(|(n, r, o, _)| {
            n == name
                && rule
                    .is_none_or(|rule| r.as_deref() == Some(rule) && o.as_deref() == Some(outcome))
        })
        .map(|(.., c)| c)
        .sum()
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
fn some_quota_items_over_admit_charge_the_others_and_count_the_over_ones_denied() {
    let limiter = limiter();
    let recorder = run(async {
        let (action, ..) = decide(&limiter, &plan(&limiter, &[(1, true)])).await;
        assert_eq!(action, Action::Admit);
        let all = plan(&limiter, &[(0, false), (1, true), (2, true)]);
        assert_eq!(
            decide(&limiter, &all).await,
            (Action::Admit, vec![true, false, true], vec![1, 0, 2])
        );
        assert_eq!(
            decide(&limiter, &all).await,
            (Action::Admit, vec![true, false, true], vec![0, 0, 1])
        );
        // regular is over now: an item not in quota mode over refuses, charging nothing.
        let (action, allowed, _) = decide(&limiter, &all).await;
        assert_eq!((action, allowed), (Action::Deny, vec![false, false, true]));
        // quota2 was not charged: it has its last unit.
        let last = plan(&limiter, &[(2, true)]);
        assert_eq!(
            decide(&limiter, &last).await,
            (Action::Admit, vec![true], vec![0])
        );
    });
    let all = counters(&recorder);
    let decided = |rule, outcome| count(&all, "floodgate_decisions_total", Some(rule), outcome);
    assert_eq!(decided("regular", "allowed"), 2);
    assert_eq!(decided("regular", "denied"), 1);
    assert_eq!(decided("quota", "allowed"), 1);
    assert_eq!(decided("quota", "denied"), 3);
    assert_eq!(decided("quota2", "allowed"), 3);
    assert_eq!(decided("quota2", "not_charged"), 1);
    // The peeks before each check counted nothing: 11 decisions in all.
    assert_eq!(count(&all, "floodgate_decisions_total", None, ""), 11);
}

#[test]
fn the_only_quota_item_over_refuses() {
    let limiter = limiter();
    run(async {
        assert_eq!(
            decide(&limiter, &plan(&limiter, &[(1, true)])).await.0,
            Action::Admit
        );
        let both = plan(&limiter, &[(0, false), (1, true)]);
        let (action, allowed, _) = decide(&limiter, &both).await;
        assert_eq!((action, allowed), (Action::Deny, vec![true, false]));
        // Refused as one batch: regular was not charged.
        let regular = plan(&limiter, &[(0, false)]);
        assert_eq!(
            decide(&limiter, &regular).await,
            (Action::Admit, vec![true], vec![1])
        );
    });
}

#[test]
fn every_quota_item_over_refuses() {
    let limiter = limiter();
    run(async {
        let quotas = plan(&limiter, &[(1, true), (2, true)]);
        assert_eq!(decide(&limiter, &quotas).await.0, Action::Admit);
        // quota is over, quota2 not: admitted, quota2 charged.
        assert_eq!(
            decide(&limiter, &quotas).await,
            (Action::Admit, vec![false, true], vec![0, 1])
        );
        assert_eq!(
            decide(&limiter, &quotas).await,
            (Action::Admit, vec![false, true], vec![0, 0])
        );
        let (action, allowed, _) = decide(&limiter, &quotas).await;
        assert_eq!((action, allowed), (Action::Deny, vec![false, false]));
    });
}

#[test]
fn a_quota_block_refuses_only_with_every_quota_item_over() {
    let limiter = limiter();
    run(async {
        let mut blocked = plan(&limiter, &[(2, true)]);
        blocked.block_in_quota_mode("blocked".into());
        // quota2 is under its limit: admitted and charged, the entry counted.
        assert_eq!(
            decide(&limiter, &blocked).await,
            (Action::Admit, vec![true], vec![2])
        );
        let mut alone = Plan::new(limiter.rules());
        alone.block_in_quota_mode("blocked".into());
        assert_eq!(decide(&limiter, &alone).await.0, Action::Deny);
        // A quota descriptor without a limit is never over.
        alone.pass_quota();
        assert_eq!(decide(&limiter, &alone).await.0, Action::Admit);
        // A plain block refuses whatever the quota items say.
        let mut plain = plan(&limiter, &[(2, true)]);
        plain.block("plain".into());
        assert_eq!(decide(&limiter, &plain).await.0, Action::Deny);
    });
}

#[test]
fn global_shadow_mode_answers_a_denial_as_an_admission_and_counts_it() {
    let limiter = limiter();
    let recorder = run(async {
        let mut p = plan(&limiter, &[(1, false)]);
        p.shadow_all();
        assert_eq!(
            decide(&limiter, &p).await,
            (Action::Admit, vec![true], vec![0])
        );
        // Over: decided (and counted) as a denial, answered as an admission.
        assert_eq!(
            decide(&limiter, &p).await,
            (Action::Admit, vec![false], vec![0])
        );
    });
    let all = counters(&recorder);
    assert_eq!(
        count(&all, "floodgate_grpc_global_shadow_mode_total", None, ""),
        1
    );
    assert_eq!(
        count(&all, "floodgate_decisions_total", Some("quota"), "denied"),
        1
    );
}
