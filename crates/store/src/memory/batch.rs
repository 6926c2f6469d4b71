//! A batch on the memory store: lock the shards of its keys in one global order, decide on
//! working copies (or in place when every item has its own key), make room for new keys,
//! write back.

use floodgate_core::{Decision, Micros, State, Timestamp};

use super::registry::RuleEntry;
use super::shared::per_rule;
use super::table::{AnyLocked, Held, RuleKeys};
use super::MemoryStore;
use crate::{BatchDecision, CheckItem, OnFull, StoreError};

/// A batch's locked shards: each item's key fingerprint and the index of its shard's guard.
pub(super) struct LockedBatch<'s> {
    pub(super) fps: Vec<u64>,
    /// Each item's rule key count.
    pub(super) rules: Vec<&'s RuleKeys>,
    pub(super) guards: Vec<Box<dyn AnyLocked + 's>>,
    pub(super) guard_index: Vec<usize>,
}

/// Per distinct `(table, key)` of a batch: the working copy of its state.
pub(super) struct Slot {
    pub(super) fp: u64,
    /// The first item of the batch on this slot (its rule is the slot's).
    pub(super) item: usize,
    /// Index into the batch's locked guards.
    pub(super) guard: usize,
    pub(super) state: State,
    /// Whether the key was held (and live) before this batch.
    pub(super) held: bool,
    /// `reset_after` of the last consuming decision on this slot, when any consumed.
    pub(super) consumed_reset_after: Option<Micros>,
}

impl MemoryStore {
    /// When the store is full during a batch: [`Shared::drop_expired_elsewhere`] for the shard
    /// index of every item.
    fn drop_expired_near(&self, fps: &[u64], now: Timestamp) -> usize {
        // Every table has `config.shards` shards, so this is each table's `shard_of`.
        let mask = self.shared.config.shards - 1;
        let mut indices: Vec<usize> = fps.iter().map(|&fp| (fp >> 32) as usize & mask).collect();
        indices.sort_unstable();
        indices.dedup();
        indices
            .into_iter()
            .map(|i| self.shared.drop_expired_elsewhere(i, now))
            .sum()
    }

    /// A batch of one item: [`Shared::single`], wrapped.
    fn run_single(&self, item: &CheckItem<'_>, now: Timestamp, commit: bool) -> BatchDecision {
        let entry = self.entry(item.rule, item.policy);
        let fp = self.shared.fingerprint(item.key);
        let (decision, store_full) =
            self.shared
                .single_any(&entry.table, fp, now, item.cost, commit);
        BatchDecision {
            allowed: decision.allowed,
            decisions: vec![decision],
            store_full,
        }
    }

    /// A batch whose items all have different `(table, key)`: peek every item in place, then,
    /// if all admit, consume every item in place. No state is copied; the shards stay locked
    /// throughout, so the second pass sees exactly the states the first one judged.
    #[allow(clippy::too_many_arguments)]
    fn run_distinct(
        &self,
        items: &[CheckItem<'_>],
        rules: &[&RuleKeys],
        fps: &[u64],
        guard_index: &[usize],
        guards: &mut [Box<dyn AnyLocked + '_>],
        now: Timestamp,
        commit: bool,
    ) -> BatchDecision {
        let mut peeks = Vec::with_capacity(items.len());
        let mut held = Vec::with_capacity(items.len());
        let mut expired = 0;
        for ((item, &fp), &g) in items.iter().zip(fps).zip(guard_index) {
            match guards[g].decide_held(fp, now, item.cost, false) {
                Held::Live(d) => {
                    peeks.push(d);
                    held.push(true);
                }
                Held::Absent { expired: e } => {
                    expired += usize::from(e);
                    let mut fresh = item.policy.initial_state();
                    peeks.push(item.policy.decide(&mut fresh, now, item.cost, false));
                    held.push(false);
                }
            }
        }
        self.shared.count_expired(expired);
        let allowed = peeks.iter().all(|d| d.allowed);
        if !allowed || !commit {
            return BatchDecision {
                allowed,
                decisions: peeks,
                store_full: None,
            };
        }

        let is_new = |i: usize| !held[i] && items[i].cost > 0;
        let wants = per_rule((0..items.len()).filter(|&i| is_new(i)).map(|i| rules[i]));
        let room = self.shared.reserve(&wants, now, |now| {
            let locked: usize = guards.iter_mut().map(|g| g.drop_expired(now)).sum();
            locked + self.drop_expired_near(fps, now)
        });
        let full = room.is_err();
        if let Err(cap) = room {
            for &(rule, n) in &wants {
                self.shared.count_full(rule, n, cap);
            }
            if self.shared.config.on_full == OnFull::Reject {
                let decisions = (0..items.len())
                    .map(|i| {
                        if is_new(i) {
                            self.shared.full_denial(items[i].policy.capacity())
                        } else {
                            peeks[i]
                        }
                    })
                    .collect();
                return BatchDecision {
                    allowed: false,
                    decisions,
                    store_full: Some(OnFull::Reject),
                };
            }
        }

        let mut decisions = Vec::with_capacity(items.len());
        for (i, ((item, &fp), &g)) in items.iter().zip(fps).zip(guard_index).enumerate() {
            if item.cost == 0 {
                decisions.push(peeks[i]);
                continue;
            }
            let shard = &mut guards[g];
            if held[i] {
                if let Held::Live(d) = shard.decide_held(fp, now, item.cost, true) {
                    decisions.push(d);
                    continue;
                }
                // Unreachable: the entry was live a moment ago under the same lock. Should
                // it ever happen, deciding as a fresh key below is the safe fallback.
                debug_assert!(false, "a live entry vanished under its shard lock");
            }
            let mut state = item.policy.initial_state();
            let d = item.policy.decide(&mut state, now, item.cost, true);
            if !full {
                shard.save_any(fp, state, now.saturating_add(d.reset_after));
            }
            decisions.push(d);
        }
        BatchDecision {
            allowed: true,
            decisions,
            store_full: full.then_some(OnFull::AdmitUntracked),
        }
    }

    /// Locks the shards of every item's key, in increasing `(table, shard)` order: every batch
    /// acquires locks in the same global order, so no two batches can wait on each other in a
    /// cycle.
    pub(super) fn lock_batch(&self, items: &[CheckItem<'_>]) -> LockedBatch<'_> {
        let entries: Vec<&RuleEntry> = items
            .iter()
            .map(|it| self.entry(it.rule, it.policy))
            .collect();
        let fps: Vec<u64> = items
            .iter()
            .map(|it| self.shared.fingerprint(it.key))
            .collect();

        let lock_of_item: Vec<(usize, usize)> = entries
            .iter()
            .zip(&fps)
            .map(|(e, &fp)| (e.id, e.table.shard_of(fp)))
            .collect();
        let mut locks = lock_of_item.clone();
        locks.sort_unstable();
        locks.dedup();
        let guards: Vec<Box<dyn AnyLocked + '_>> = locks
            .iter()
            .map(|&(id, shard)| {
                let entry = entries
                    .iter()
                    .find(|e| e.id == id)
                    .expect("every lock belongs to an item's table");
                entry.table.lock_any(shard)
            })
            .collect();
        let guard_index: Vec<usize> = lock_of_item
            .iter()
            .map(|l| {
                locks
                    .binary_search(l)
                    .expect("every item's shard is locked")
            })
            .collect();
        LockedBatch {
            fps,
            rules: entries.iter().map(|e| &**e.table.keys()).collect(),
            guards,
            guard_index,
        }
    }

    /// The whole batch algorithm: validate, lock, decide on working copies, then (for a check
    /// whose every item admitted) make room for new keys and write everything back.
    pub(super) fn run(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
        commit: bool,
    ) -> Result<BatchDecision, StoreError> {
        // Summed per (rule, key): repeated items of one key must fit together.
        crate::validate_batch(items)?;
        if let [item] = items {
            return Ok(self.run_single(item, now, commit));
        }
        let LockedBatch {
            fps,
            rules,
            mut guards,
            guard_index,
        } = self.lock_batch(items);

        let same = |i: usize, j: usize| guard_index[i] == guard_index[j] && fps[i] == fps[j];
        let distinct = (0..items.len()).all(|i| (0..i).all(|j| !same(i, j)));
        if distinct {
            return Ok(self.run_distinct(
                items,
                &rules,
                &fps,
                &guard_index,
                &mut guards,
                now,
                commit,
            ));
        }

        // Phase 1: decide every item on working copies. Items sharing (table, key) share a
        // slot and see each other's tentative consumption, in order.
        let mut slots: Vec<Slot> = Vec::with_capacity(items.len());
        let mut slot_of_item = Vec::with_capacity(items.len());
        let mut peeks = Vec::with_capacity(items.len());
        let mut consumed = Vec::with_capacity(items.len());
        let mut expired = 0;
        for (i, item) in items.iter().enumerate() {
            let (fp, g) = (fps[i], guard_index[i]);
            let slot_index = match slots.iter().position(|s| s.guard == g && s.fp == fp) {
                Some(s) => s,
                None => {
                    let (loaded, was_expired) = guards[g].load_any(fp, now);
                    expired += usize::from(was_expired);
                    let held = loaded.is_some();
                    let state = loaded.map_or_else(|| item.policy.initial_state(), |(s, _)| s);
                    slots.push(Slot {
                        fp,
                        item: i,
                        guard: g,
                        state,
                        held,
                        consumed_reset_after: None,
                    });
                    slots.len() - 1
                }
            };
            let slot = &mut slots[slot_index];
            let peek = item.policy.decide(&mut slot.state, now, item.cost, false);
            let after = if peek.allowed && item.cost > 0 {
                let d = item.policy.decide(&mut slot.state, now, item.cost, true);
                slot.consumed_reset_after = Some(d.reset_after);
                d
            } else {
                peek
            };
            slot_of_item.push(slot_index);
            peeks.push(peek);
            consumed.push(after);
        }
        self.shared.count_expired(expired);

        let allowed = peeks.iter().all(|d| d.allowed);
        if !allowed || !commit {
            return Ok(BatchDecision {
                allowed,
                decisions: peeks,
                store_full: None,
            });
        }

        Ok(self.commit_slots(
            items,
            &rules,
            slots,
            &slot_of_item,
            peeks,
            consumed,
            guards,
            &fps,
            now,
        ))
    }

    /// Phases 2 and 3 of a consuming batch whose every item admitted, on the working copies
    /// `slots`: reserves room for new keys before writing anything (so that a rejection leaves
    /// every key untouched), then writes back every slot that consumed. `peeks` answer a
    /// batch the full store rejects, `consumed` an admitted one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit_slots(
        &self,
        items: &[CheckItem<'_>],
        rules: &[&RuleKeys],
        slots: Vec<Slot>,
        slot_of_item: &[usize],
        peeks: Vec<Decision>,
        consumed: Vec<Decision>,
        mut guards: Vec<Box<dyn AnyLocked + '_>>,
        fps: &[u64],
        now: Timestamp,
    ) -> BatchDecision {
        // Phase 2: every item admitted. New keys need room; reserve it before writing
        // anything, so that a rejection leaves every key untouched.
        let wants = per_rule(
            slots
                .iter()
                .filter(|s| !s.held && s.consumed_reset_after.is_some())
                .map(|s| rules[s.item]),
        );
        let room = self.shared.reserve(&wants, now, |now| {
            let locked: usize = guards.iter_mut().map(|g| g.drop_expired(now)).sum();
            locked + self.drop_expired_near(fps, now)
        });
        let full = room.is_err();
        let is_untracked = |slot: &Slot| full && !slot.held;
        let untracked = per_rule(
            slot_of_item
                .iter()
                .enumerate()
                .filter(|&(_, &s)| {
                    is_untracked(&slots[s]) && slots[s].consumed_reset_after.is_some()
                })
                .map(|(i, _)| rules[i]),
        );
        let mut store_full = None;
        if let (Err(cap), false) = (room, untracked.is_empty()) {
            for &(rule, n) in &untracked {
                self.shared.count_full(rule, n, cap);
            }
            if self.shared.config.on_full == OnFull::Reject {
                let decisions = items
                    .iter()
                    .zip(slot_of_item)
                    .zip(peeks)
                    .map(|((item, &s), peek)| {
                        if is_untracked(&slots[s]) && item.cost > 0 {
                            self.shared.full_denial(item.policy.capacity())
                        } else {
                            peek
                        }
                    })
                    .collect();
                return BatchDecision {
                    allowed: false,
                    decisions,
                    store_full: Some(OnFull::Reject),
                };
            }
            store_full = Some(OnFull::AdmitUntracked);
        }

        // Phase 3: write back every slot that consumed (skipping untracked new keys).
        for slot in slots {
            let Some(reset_after) = slot.consumed_reset_after else {
                continue;
            };
            if is_untracked(&slot) {
                continue;
            }
            guards[slot.guard].save_any(slot.fp, slot.state, now.saturating_add(reset_after));
        }
        drop(guards);
        BatchDecision {
            allowed: true,
            decisions: consumed,
            store_full,
        }
    }
}
