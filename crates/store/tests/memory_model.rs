//! Randomized model test: the sharded store (with expiry, lazy drops and sweeps) decides every
//! batch exactly as a plain map of states that never forgets anything.
//!
//! This checks the store's all-or-nothing bookkeeping and, for every algorithm, the claim the
//! store's expiry rests on: once `reset_after` has passed, a key's state decides like a fresh one.

use std::collections::HashMap;
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, Decision, ManualClock, Policy, Quota, State};
use floodgate_store::{CheckItem, MemoryStore, MemoryStoreConfig};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// Items as (rule index, key index, cost).
    Check(Vec<(usize, usize, u64)>),
    Peek(Vec<(usize, usize, u64)>),
    Advance(u64),
    Reset(usize, usize),
    Sweep,
}

fn policies() -> Vec<(String, Policy)> {
    let quotas = ["3/s", "5/2s burst 2", "4/1500ms"];
    let mut out = Vec::new();
    for kind in AlgorithmKind::ALL {
        for q in quotas {
            let quota: Quota = q.parse().unwrap();
            out.push((format!("{kind}-{q}"), Policy::new(kind, quota).unwrap()));
        }
    }
    out
}

fn ops(rules: usize) -> impl Strategy<Value = Vec<Op>> {
    let item = (0..rules, 0..3usize, 0..3u64);
    let op = prop_oneof![
        4 => proptest::collection::vec(item.clone(), 1..4).prop_map(Op::Check),
        1 => proptest::collection::vec(item, 1..3).prop_map(Op::Peek),
        3 => prop_oneof![0..50_000u64, 0..3_000_000u64, Just(1_000_000u64)].prop_map(Op::Advance),
        1 => (0..rules, 0..3usize).prop_map(|(r, k)| Op::Reset(r, k)),
        1 => Just(Op::Sweep),
    ];
    proptest::collection::vec(op, 1..80)
}

/// Whether the reference rejects `items` outright: some `(rule, key)`'s summed cost exceeds its
/// policy's capacity, so no waiting could ever admit the batch.
fn model_impossible(policies: &[(String, Policy)], items: &[(usize, usize, u64)]) -> bool {
    let mut sums: HashMap<(usize, usize), u64> = HashMap::new();
    for &(r, k, cost) in items {
        *sums.entry((r, k)).or_default() += cost;
    }
    sums.iter()
        .any(|(&(r, _), &sum)| sum > policies[r].1.capacity())
}

/// The reference: decide in order on copies; keep them only if every item admitted.
fn model_batch(
    model: &mut HashMap<(usize, usize), State>,
    policies: &[(String, Policy)],
    items: &[(usize, usize, u64)],
    now: u64,
    commit: bool,
) -> (bool, Vec<Decision>) {
    let mut scratch = model.clone();
    let (mut peeks, mut consumed) = (Vec::new(), Vec::new());
    for &(r, k, cost) in items {
        let policy = &policies[r].1;
        let state = scratch
            .entry((r, k))
            .or_insert_with(|| policy.initial_state());
        let peek = policy.decide(state, now, cost, false);
        consumed.push(if peek.allowed && cost > 0 {
            policy.decide(state, now, cost, true)
        } else {
            peek
        });
        peeks.push(peek);
    }
    let allowed = peeks.iter().all(|d| d.allowed);
    if allowed && commit {
        *model = scratch;
        (true, consumed)
    } else {
        (allowed, peeks)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn store_matches_a_map_that_never_forgets(ops in ops(18)) {
        let policies = policies();
        prop_assert_eq!(policies.len(), 18);
        let clock = ManualClock::new(T0);
        let config = MemoryStoreConfig { shards: 4, ..MemoryStoreConfig::default() };
        let store = MemoryStore::new(config, Arc::new(clock.clone()));
        let keys = ["k0", "k1", "k2"];
        let mut model: HashMap<(usize, usize), State> = HashMap::new();
        for op in ops {
            match op {
                Op::Check(items) => {
                    let batch: Vec<CheckItem<'_>> = items.iter().map(|&(r, k, cost)| CheckItem {
                        rule: &policies[r].0, policy: &policies[r].1, key: keys[k], cost,
                    }).collect();
                    if model_impossible(&policies, &items) {
                        prop_assert!(store.check_now(&batch).is_err(), "{:?}", items);
                        continue;
                    }
                    let got = store.check_now(&batch).unwrap();
                    let (allowed, decisions) = model_batch(&mut model, &policies, &items, clock.now_for_test(), true);
                    prop_assert_eq!(got.allowed, allowed, "{:?}", items);
                    prop_assert_eq!(got.decisions, decisions, "{:?}", items);
                }
                Op::Peek(items) => {
                    let batch: Vec<CheckItem<'_>> = items.iter().map(|&(r, k, cost)| CheckItem {
                        rule: &policies[r].0, policy: &policies[r].1, key: keys[k], cost,
                    }).collect();
                    if model_impossible(&policies, &items) {
                        prop_assert!(store.peek_now(&batch).is_err(), "{:?}", items);
                        continue;
                    }
                    let got = store.peek_now(&batch).unwrap();
                    let (allowed, decisions) = model_batch(&mut model, &policies, &items, clock.now_for_test(), false);
                    prop_assert_eq!(got.allowed, allowed);
                    prop_assert_eq!(got.decisions, decisions);
                }
                Op::Advance(us) => clock.advance(us),
                Op::Reset(r, k) => {
                    store.reset_key(&policies[r].0, keys[k]);
                    model.remove(&(r, k));
                }
                Op::Sweep => {
                    store.sweep_all(clock.now_for_test());
                }
            }
        }
    }
}

/// `Clock::now` under a name that does not need the trait in scope at every call.
trait NowForTest {
    fn now_for_test(&self) -> u64;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> u64 {
        floodgate_core::Clock::now(self)
    }
}
