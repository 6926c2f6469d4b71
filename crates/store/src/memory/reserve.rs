//! Reservations and settles on the memory store ([`Store::reserve`](crate::Store::reserve),
//! [`Store::settle`](crate::Store::settle)), decided as docs/spec/reservations.md says.

use floodgate_core::{Decision, Micros, State, Timestamp};

use super::batch::{LockedBatch, Slot};
use super::MemoryStore;
use crate::{BatchDecision, BatchReservation, CheckItem, SettleItem, StoreError};

impl MemoryStore {
    /// [`Store::reserve`](crate::Store::reserve) at a caller-supplied `now`, synchronously: every item reserved for
    /// the shortest wait after which all of them fit, when it is at most `max_wait`.
    ///
    /// Two passes on working copies under the batch's locks: the first finds each item's
    /// shortest wait (in order, each seeing the earlier items' tentative reservations); the
    /// second reserves every item for the longest of them
    /// ([`Policy::reserve_at`](floodgate_core::Policy::reserve_at)); an item that does not fit
    /// then denies the batch. A granted batch is written as a check is (new keys need room in
    /// the store).
    ///
    /// # Errors
    /// As [`MemoryStore::check_at`].
    pub fn reserve_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        crate::validate_batch(items)?;
        let LockedBatch {
            fps,
            rules,
            mut guards,
            guard_index,
        } = self.lock_batch(items);
        let mut slots: Vec<Slot> = Vec::with_capacity(items.len());
        let mut slot_of_item = Vec::with_capacity(items.len());
        let mut expired = 0;
        for (i, item) in items.iter().enumerate() {
            let (fp, g) = (fps[i], guard_index[i]);
            let index = match slots.iter().position(|s| s.guard == g && s.fp == fp) {
                Some(index) => index,
                None => {
                    let (loaded, was_expired) = guards[g].load_any(fp, now);
                    expired += usize::from(was_expired);
                    slots.push(Slot {
                        fp,
                        item: i,
                        guard: g,
                        held: loaded.is_some(),
                        state: loaded.map_or_else(|| item.policy.initial_state(), |(s, _)| s),
                        consumed_reset_after: None,
                    });
                    slots.len() - 1
                }
            };
            slot_of_item.push(index);
        }
        self.shared.count_expired(expired);

        // Pass 1: each item's shortest wait (after its key's effective now).
        let mut trial: Vec<State> = slots.iter().map(|s| s.state.clone()).collect();
        let mut peeks = Vec::with_capacity(items.len());
        let mut longest = Some(0);
        for (item, &slot) in items.iter().zip(&slot_of_item) {
            let state = &mut trial[slot];
            peeks.push(
                item.policy
                    .decide(&mut state.clone(), now, item.cost, false),
            );
            let r = item
                .policy
                .decide_reserve(state, now, item.cost, Micros::MAX);
            longest = match (longest, r.wait) {
                (Some(l), Some(wait)) => Some(wait.max(l)),
                _ => None,
            };
        }
        let denied = |peeks: Vec<Decision>| BatchReservation {
            batch: BatchDecision {
                allowed: false,
                decisions: peeks,
                store_full: None,
            },
            wait: None,
            scheduled_at: Vec::new(),
        };
        let Some(wait) = longest.filter(|&wait| wait <= max_wait) else {
            return Ok(denied(peeks));
        };

        // Pass 2: every item for that wait.
        let mut decisions = Vec::with_capacity(items.len());
        let mut scheduled_at = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let slot = &mut slots[slot_of_item[i]];
            let reserved = if item.cost == 0 {
                // Nothing to reserve: the standing of its key at this point of the batch.
                let mut state = slot.state.clone();
                item.policy.reserve_at(&mut state, now, 0, 0).map(|r| {
                    let at = r.scheduled_at.map(|t| t + wait);
                    (r.decision, at)
                })
            } else {
                item.policy
                    .reserve_at(&mut slot.state, now, item.cost, wait)
                    .map(|r| (r.decision, r.scheduled_at))
            };
            match reserved {
                Some((decision, Some(at))) => {
                    if item.cost > 0 {
                        slot.consumed_reset_after = Some(decision.reset_after);
                    }
                    decisions.push(decision);
                    scheduled_at.push(at);
                }
                _ => return Ok(denied(peeks)),
            }
        }
        let batch = self.commit_slots(
            items,
            &rules,
            slots,
            &slot_of_item,
            peeks,
            decisions,
            guards,
            &fps,
            now,
        );
        let granted = batch.allowed;
        Ok(BatchReservation {
            batch,
            wait: granted.then_some(wait),
            scheduled_at: if granted { scheduled_at } else { Vec::new() },
        })
    }

    /// [`Store::settle`](crate::Store::settle) at a caller-supplied `now`, synchronously: each item under its shard's
    /// lock. A key that expired (or was never stored) gets nothing back; a charge on it starts
    /// it from a fresh state (if the store has room: a full store drops the charge, counted as
    /// a full-store event).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] when an item's `reserved` exceeds its policy's
    /// capacity (nothing is settled).
    pub fn settle_at(
        &self,
        items: &[SettleItem<'_>],
        now: Timestamp,
    ) -> Result<Vec<Decision>, StoreError> {
        crate::validate_settle(items)?;
        let mut standings = Vec::with_capacity(items.len());
        for item in items {
            let entry = self.entry(item.rule, item.policy);
            let fp = self.shared.fingerprint(item.key);
            let shard = entry.table.shard_of(fp);
            let mut guard = entry.table.lock_any(shard);
            let (loaded, expired) = guard.load_any(fp, now);
            self.shared.count_expired(usize::from(expired));
            let held = loaded.is_some();
            let mut state = loaded.map_or_else(|| item.policy.initial_state(), |(s, _)| s);
            if !held && item.actual <= item.reserved {
                // Nothing to give back to a fresh key.
                standings.push(item.policy.decide(&mut state, now, 0, false));
                continue;
            }
            let d = item.policy.decide_settle(
                &mut state,
                now,
                item.scheduled_at,
                item.reserved,
                item.actual,
            );
            let rule = &**entry.table.keys();
            let room = if held {
                Ok(())
            } else {
                self.shared.reserve(&[(rule, 1)], now, |now| {
                    guard.drop_expired(now) + self.shared.drop_expired_elsewhere(shard, now)
                })
            };
            match room {
                Ok(()) => guard.save_any(fp, state, now.saturating_add(d.reset_after)),
                Err(cap) => self.shared.count_full(rule, 1, cap),
            }
            standings.push(d);
        }
        Ok(standings)
    }
}
