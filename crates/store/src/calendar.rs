//! Calendar quotas in the stores: a batch of [`CalendarItem`]s decided all-or-nothing, as
//! [`Store::check`](crate::Store::check) decides a batch, under
//! [`CalendarQuota`]s (the fixed window or the sliding window counter in a time zone's days,
//! weeks or months; `docs/spec/calendar.md`). [`MemoryCalendar`] is the in-process table; the
//! Redis store's is `RedisStore::calendar_check_at` (feature `redis`).
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::calendar::{Calendar, CalendarQuota, CalendarUnit};
//! use floodgate_core::{AlgorithmKind, ManualClock};
//! use floodgate_store::calendar::{CalendarItem, MemoryCalendar};
//!
//! let la = Calendar::new("America/Los_Angeles", CalendarUnit::Day, None).unwrap();
//! let quota = CalendarQuota::new(AlgorithmKind::FixedWindow, 1, la).unwrap();
//! // 2027-03-14T23:00:00-07:00: an hour before midnight in Los Angeles
//! let clock = ManualClock::new(1_805_090_400_000_000);
//! let store = MemoryCalendar::new(Arc::new(clock.clone()), 1_000);
//! let item = CalendarItem { rule: "daily", quota: &quota, key: "api", cost: 1 };
//! assert!(store.check(&[item]).unwrap().allowed);
//! let denied = store.check(&[item]).unwrap();
//! assert_eq!(denied.decisions[0].retry_after, Some(3_600_000_000));
//! clock.advance(3_600_000_000);
//! assert!(store.check(&[item]).unwrap().allowed);
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use floodgate_core::calendar::{CalendarCheckError, CalendarQuota};
use floodgate_core::{
    AlgorithmKind, CheckError, Clock, Decision, FixedWindowState, SlidingWindowState, Timestamp,
};
use parking_lot::Mutex;

use crate::StoreError;

/// One item of a calendar batch: charge `cost` units to `key` of rule `rule`.
#[derive(Debug, Clone, Copy)]
pub struct CalendarItem<'a> {
    /// The rule's name.
    pub rule: &'a str,
    /// The rule's algorithm, limit and calendar.
    pub quota: &'a CalendarQuota,
    /// The encoded partition key.
    pub key: &'a str,
    /// Units, `0..=limit`.
    pub cost: u64,
}

/// The answer for a calendar batch: as [`BatchDecision`](crate::BatchDecision), `allowed` when
/// every item admitted (and, for a check, was consumed); otherwise nothing was consumed and
/// each decision is a peek.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarBatch {
    /// Every item admitted.
    pub allowed: bool,
    /// One decision per item, in order.
    pub decisions: Vec<Decision>,
}

/// The identity of a state: the rule, the quota (algorithm, limit, unit, zone, first weekday)
/// and the key, so a changed quota starts from fresh keys, as in the other stores.
pub fn identity(item: &CalendarItem<'_>) -> String {
    let q = item.quota;
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}",
        item.rule,
        q.kind(),
        q.limit(),
        q.calendar(),
        item.key
    )
}

/// Rejects a batch whose summed cost on one `(rule, key)` exceeds its limit.
///
/// # Errors
/// [`StoreError::InsufficientCapacity`].
pub fn validate_calendar_batch(items: &[CalendarItem<'_>]) -> Result<(), StoreError> {
    for (i, item) in items.iter().enumerate() {
        let summed = items[i..]
            .iter()
            .filter(|o| o.rule == item.rule && o.key == item.key)
            .fold(0u64, |sum, o| sum.saturating_add(o.cost));
        if summed > item.quota.limit() {
            return Err(StoreError::InsufficientCapacity {
                rule: item.rule.to_string(),
                cost: summed,
                capacity: item.quota.limit(),
            });
        }
    }
    Ok(())
}

/// The state of one calendar key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CalendarState {
    Fixed(FixedWindowState),
    Sliding(SlidingWindowState),
}

impl CalendarState {
    fn fresh(kind: AlgorithmKind) -> Self {
        if kind == AlgorithmKind::FixedWindow {
            Self::Fixed(FixedWindowState::default())
        } else {
            Self::Sliding(SlidingWindowState::default())
        }
    }

    /// Decides `cost` at `now`, writing the state only when `consume`.
    fn decide(
        &mut self,
        quota: &CalendarQuota,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Result<Decision, CalendarCheckError> {
        match (self, consume) {
            (Self::Fixed(s), true) => quota.check_fixed(s, now, cost),
            (Self::Fixed(s), false) => quota.peek_fixed(s, now, cost),
            (Self::Sliding(s), true) => quota.check_sliding(s, now, cost),
            (Self::Sliding(s), false) => quota.peek_sliding(s, now, cost),
        }
    }
}

fn store_error(rule: &str, e: CalendarCheckError) -> StoreError {
    match e {
        CalendarCheckError::Check(CheckError::InsufficientCapacity { cost, capacity }) => {
            StoreError::InsufficientCapacity {
                rule: rule.to_string(),
                cost,
                capacity,
            }
        }
        other => StoreError::Unavailable {
            reason: format!("rule {rule:?}: {other}"),
        },
    }
}

/// The in-process table of calendar states: one lock (a calendar check is a few hundred
/// nanoseconds), a hard cap on keys, expired keys swept when the cap is reached.
pub struct MemoryCalendar {
    clock: Arc<dyn Clock>,
    max_keys: usize,
    /// identity -> (state, expires at)
    table: Mutex<HashMap<String, (CalendarState, Timestamp)>>,
}

impl std::fmt::Debug for MemoryCalendar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCalendar")
            .field("max_keys", &self.max_keys)
            .field("keys", &self.table.lock().len())
            .finish()
    }
}

impl MemoryCalendar {
    /// A table reading `clock`, holding at most `max_keys` live keys.
    pub fn new(clock: Arc<dyn Clock>, max_keys: usize) -> Self {
        Self {
            clock,
            max_keys,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// [`MemoryCalendar::check_at`] at the clock's now.
    ///
    /// # Errors
    /// As [`MemoryCalendar::check_at`].
    pub fn check(&self, items: &[CalendarItem<'_>]) -> Result<CalendarBatch, StoreError> {
        self.check_at(items, self.clock.now(), true)
    }

    /// Decides `items` at `now` all-or-nothing; `commit = false` is a peek.
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] (before any state is read);
    /// [`StoreError::Unavailable`] when `now` has no calendar period or a new key finds the
    /// table full of live keys.
    pub fn check_at(
        &self,
        items: &[CalendarItem<'_>],
        now: Timestamp,
        commit: bool,
    ) -> Result<CalendarBatch, StoreError> {
        validate_calendar_batch(items)?;
        let ids: Vec<String> = items.iter().map(identity).collect();
        let mut table = self.table.lock();
        let state_of =
            |table: &HashMap<_, (CalendarState, Timestamp)>, i: usize| match table.get(&ids[i]) {
                Some(&(state, expires)) if expires > now => state,
                _ => CalendarState::fresh(items[i].quota.kind()),
            };
        // First every item as a peek (items on one key see the earlier ones' consumption).
        let mut tentative: HashMap<&str, CalendarState> = HashMap::new();
        let mut decisions = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let state = tentative
                .entry(ids[i].as_str())
                .or_insert_with(|| state_of(&table, i));
            let d = state
                .decide(item.quota, now, item.cost, true)
                .map_err(|e| store_error(item.rule, e))?;
            decisions.push(d);
        }
        let allowed = decisions.iter().all(|d| d.allowed);
        if !(allowed && commit) {
            // Nothing consumed: each decision a peek of the stored state.
            let peeks = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    state_of(&table, i)
                        .decide(item.quota, now, item.cost, false)
                        .map_err(|e| store_error(item.rule, e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(CalendarBatch {
                allowed,
                decisions: if allowed { decisions } else { peeks },
            });
        }
        let new_keys = tentative
            .keys()
            .filter(|id| !table.contains_key(**id))
            .count();
        if table.len() + new_keys > self.max_keys {
            table.retain(|_, (_, expires)| *expires > now);
            if table.len() + new_keys > self.max_keys {
                return Err(StoreError::Unavailable {
                    reason: format!("the calendar table holds {} live keys", table.len()),
                });
            }
        }
        for (id, d) in ids.iter().zip(&decisions) {
            let state = tentative[id.as_str()];
            let expires = now.saturating_add(d.reset_after.max(1));
            let entry = table.entry(id.clone()).or_insert((state, expires));
            entry.0 = state;
            entry.1 = entry.1.max(expires);
        }
        Ok(CalendarBatch { allowed, decisions })
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        self.table.lock().len()
    }

    /// No live keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every key.
    pub fn clear(&self) {
        self.table.lock().clear();
    }
}

/// `local` (a local fallback's divided policy, built from `original`'s quota) with
/// `original`'s calendar, if it has one: the fallback counts in the same periods.
pub(crate) fn keep_calendar(
    original: &floodgate_core::Policy,
    local: floodgate_core::Policy,
) -> Option<floodgate_core::Policy> {
    match original.calendar() {
        Some(c) => local.with_calendar(c.calendar().clone()).ok(),
        None => Some(local),
    }
}
