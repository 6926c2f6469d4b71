//! Replays of check and reservation batches on a [`RedisStore`] and on a fresh memory store,
//! compared step by step (the differential tests).

use super::super::RedisStore;

/// One step of a batch replay ([`replay_against_memory`]): microseconds the caller's clock
/// advances first, the items as `(rule index, key index, cost)` (key 0 is `"a"`, 1 is `"b"`;
/// cost is capped at the rule's policy capacity), and whether the batch is a peek (else a check).
pub type BatchStep = (u64, Vec<(usize, usize, u64)>, bool);

/// Replays `steps` on a fresh [`MemoryStore`](crate::MemoryStore) and on `store` (driven by
/// `rt`) at the same caller-supplied times, starting at `start` (microseconds since the Unix
/// epoch), and compares every result (decisions or errors) for equality.
///
/// # Errors
/// The first step (counted from 1) whose results differ, with both results.
///
/// # Panics
/// When a step names a rule index outside `rules` / `policies`, or a key index above 1.
pub fn replay_against_memory(
    rt: &tokio::runtime::Runtime,
    store: &RedisStore,
    rules: &[String],
    policies: &[floodgate_core::Policy],
    start: floodgate_core::Timestamp,
    steps: &[BatchStep],
) -> Result<(), String> {
    let memory = crate::MemoryStore::with_clock(std::sync::Arc::new(
        floodgate_core::ManualClock::new(start),
    ));
    let mut now = start;
    for (n, (dt, items, peek)) in steps.iter().enumerate() {
        now += dt;
        let batch: Vec<crate::CheckItem<'_>> = items
            .iter()
            .map(|&(r, k, cost)| crate::CheckItem {
                rule: &rules[r],
                policy: &policies[r],
                key: ["a", "b"][k],
                cost: cost.min(policies[r].capacity()),
            })
            .collect();
        let (want, got) = if *peek {
            (
                memory.peek_at(&batch, now),
                rt.block_on(store.peek_at(&batch, now)),
            )
        } else {
            (
                memory.check_at(&batch, now),
                rt.block_on(store.check_at(&batch, now)),
            )
        };
        if want != got {
            return Err(format!(
                "step #{}: memory store {want:?} != redis store {got:?}",
                n + 1
            ));
        }
    }
    Ok(())
}

/// One step of a reservation replay ([`replay_reservations_against_memory`]): microseconds the
/// caller's clock advances first, the items as in [`BatchStep`], the wait bound
/// (microseconds), and, when `Some(seed)`, a settle of the granted reservation right away
/// with each item's actual cost `seed % (2 x cost + 1)`.
pub type ReserveStep = (u64, Vec<(usize, usize, u64)>, u64, Option<u64>);

/// Replays reservation batches (and settles) on a fresh [`MemoryStore`](crate::MemoryStore)
/// and on `store` at the same caller-supplied times, and compares every result for equality.
///
/// # Errors
/// The first step (counted from 1) whose results differ, with both results.
///
/// # Panics
/// When a step names a rule index outside `rules` / `policies`, or a key index above 1.
pub fn replay_reservations_against_memory(
    rt: &tokio::runtime::Runtime,
    store: &RedisStore,
    rules: &[String],
    policies: &[floodgate_core::Policy],
    start: floodgate_core::Timestamp,
    steps: &[ReserveStep],
) -> Result<(), String> {
    let memory = crate::MemoryStore::with_clock(std::sync::Arc::new(
        floodgate_core::ManualClock::new(start),
    ));
    let mut now = start;
    for (n, (dt, items, max_wait, settle)) in steps.iter().enumerate() {
        now += dt;
        let batch: Vec<crate::CheckItem<'_>> = items
            .iter()
            .map(|&(r, k, cost)| crate::CheckItem {
                rule: &rules[r],
                policy: &policies[r],
                key: ["a", "b"][k],
                cost: cost.min(policies[r].capacity()),
            })
            .collect();
        let want = memory.reserve_at(&batch, now, *max_wait);
        let got = rt.block_on(store.reserve_at(&batch, now, *max_wait));
        if want != got {
            return Err(format!(
                "step #{}: memory store {want:?} != redis store {got:?}",
                n + 1
            ));
        }
        let (Some(seed), Ok(reservation)) = (settle, &want) else {
            continue;
        };
        if reservation.wait.is_none() {
            continue;
        }
        let settles: Vec<crate::SettleItem<'_>> = batch
            .iter()
            .zip(&reservation.scheduled_at)
            .map(|(i, &at)| crate::SettleItem {
                rule: i.rule,
                policy: i.policy,
                key: i.key,
                reserved: i.cost,
                actual: seed % (2 * i.cost + 1),
                scheduled_at: at,
            })
            .collect();
        let want = memory.settle_at(&settles, now);
        let got = rt.block_on(store.settle_at(&settles, now));
        if want != got {
            return Err(format!(
                "step #{} (settle): memory store {want:?} != redis store {got:?}",
                n + 1
            ));
        }
    }
    Ok(())
}
