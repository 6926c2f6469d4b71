//! What the lease property tests share (memory store and Redis): random steps of several
//! instances on one manual clock, and the check that what clients were admitted fits the
//! exact algorithm with its capacity raised by the bound `D` (`docs/spec/leases.md`).

use floodgate_core::{AlgorithmKind, Clock, ManualClock, Policy, Quota};
use floodgate_limiter::{KeySource, Lease, Mode, Plan, RateLimiter, Rule, RuleSet};
use floodgate_store::Store;
use proptest::prelude::*;

pub const ALGORITHMS: [AlgorithmKind; 6] = [
    AlgorithmKind::FixedWindow,
    AlgorithmKind::SlidingWindow,
    AlgorithmKind::SlidingLog,
    AlgorithmKind::TokenBucket,
    AlgorithmKind::LeakyBucket,
    AlgorithmKind::Gcra,
];

pub fn is_bucket(kind: AlgorithmKind) -> bool {
    matches!(
        kind,
        AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra
    )
}

/// The exact algorithm with its capacity raised by `bound`: the buckets' burst at the same
/// rate, the windows' and the log's limit per period.
pub fn relaxed(policy: &Policy, bound: u64) -> Policy {
    let q = policy.quota();
    let quota = if is_bucket(policy.kind()) {
        Quota::with_burst(q.limit(), q.period(), q.burst() + bound).unwrap()
    } else {
        Quota::new(q.limit() + bound, q.period()).unwrap()
    };
    Policy::new(policy.kind(), quota).unwrap()
}

/// The rule set of one instance: rule `hot` with `policy` and `lease`.
pub fn leased_rules(policy: &Policy, lease: Lease) -> RuleSet {
    RuleSet::new(vec![Rule::new(
        "hot",
        policy.clone(),
        KeySource::Constant("all".into()),
    )
    .with_lease(lease)])
}

/// One request of `cost` on the hot key through `limiter`: admitted?
pub async fn request<S: Store>(limiter: &RateLimiter<S>, cost: u64) -> bool {
    let mut plan = Plan::new(limiter.rules());
    plan.push(0, "k".into(), cost);
    limiter.evaluate(&plan, Mode::Check).await.is_admitted()
}

/// What one random step does.
#[derive(Debug, Clone)]
pub enum Step {
    /// After `gap` us, instance `on` asks for `cost` units.
    Request { on: usize, gap: u64, cost: u64 },
    /// After `gap` us, instance `on` ends its expired leases (the service's timer).
    EndExpired { on: usize, gap: u64 },
    /// After `gap` us, instance `on` returns every lease (a reload or a shutdown).
    Return { on: usize, gap: u64 },
}

pub fn steps(instances: usize, max_gap: u64, most: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        12 => (0..instances, 0..max_gap, 1u64..=3).prop_map(|(on, gap, cost)| Step::Request { on, gap, cost }),
        2 => (0..instances, 0..max_gap).prop_map(|(on, gap)| Step::EndExpired { on, gap }),
        1 => (0..instances, 0..max_gap).prop_map(|(on, gap)| Step::Return { on, gap }),
    ];
    proptest::collection::vec(step, 1..most)
}

/// Runs `steps` on `instances` (their leases on `clock`), costs capped at `limit`: what was
/// admitted, as (use time, cost).
pub async fn drive<S: Store>(
    clock: &ManualClock,
    instances: &[RateLimiter<S>],
    limit: u64,
    steps: &[Step],
) -> Vec<(u64, u64)> {
    let mut admitted = Vec::new();
    for step in steps {
        match *step {
            Step::Request { on, gap, cost } => {
                clock.advance(gap);
                if request(&instances[on], cost.min(limit)).await {
                    admitted.push((clock.now(), cost.min(limit)));
                }
            }
            Step::EndExpired { on, gap } => {
                clock.advance(gap);
                instances[on].end_expired_leases().await;
            }
            Step::Return { on, gap } => {
                clock.advance(gap);
                instances[on].return_leases().await;
            }
        }
    }
    admitted
}

/// Whether `admitted`, replayed at its use times on a fresh key of `policy` with its capacity
/// raised by `bound`, is admitted in full.
pub fn within_bound(
    policy: &Policy,
    bound: u64,
    t0: u64,
    admitted: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let exact = relaxed(policy, bound);
    let mut state = exact.initial_state();
    for (i, &(at, cost)) in admitted.iter().enumerate() {
        let decision = exact.check(&mut state, at, cost).unwrap();
        prop_assert!(
            decision.allowed,
            "{:?} {}, bound {bound}: admission {i} ({cost} at +{} us) exceeds the exact \
             algorithm plus the bound; admitted so far {:?}",
            policy.kind(),
            policy.quota(),
            at - t0,
            &admitted[..=i]
        );
    }
    Ok(())
}
