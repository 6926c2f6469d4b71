//! Sliding log: the exact record of what was admitted in the last `period`.
//!
//! Source: the sliding window log, as described in Figma's "An alternative approach to rate
//! limiting" (Nikrad Mahdi, 2017), usually kept in a Redis sorted set (`ZREMRANGEBYSCORE` +
//! `ZCARD` + `ZADD`). A unit admitted at `t` counts during `[t, t + period)`. A request of `cost` units at `now` is
//! admitted when
//!
//! ```text
//! sum of costs of entries with now - t < period  +  cost  <=  limit
//! ```
//!
//! so no interval of length `period` ever holds more than `limit` units: the one exact window
//! algorithm, paid for with memory that grows with the number of requests remembered.
//! `retry_after` is the time until enough of the oldest entries expire. See
//! `docs/spec/sliding_log.md`.
//!
//! # Memory
//! [`SlidingLogState`] keeps one 8-byte word per remembered request: the gap in microseconds
//! since the previous entry (45 bits, enough for [`MAX_PERIOD`](crate::quota::MAX_PERIOD)) and
//! the cost (19 bits), plus a fixed 64 bytes per key (oldest and newest timestamps, total cost,
//! the last update, the `VecDeque` header). Requests at the same microsecond share a word; a cost above
//! 524,287 takes one more word per 524,287 units. The queue grows by doubling but never past
//! `limit` words (every word holds at least one unit and at most `limit` units are kept), so a
//! full log occupies exactly 8 bytes per word, with no spare capacity.
//!
//! ```
//! use floodgate_core::{Algorithm, Quota, SlidingLog};
//! let log = SlidingLog::new("2/s".parse::<Quota>().unwrap()).unwrap();
//! let mut state = log.initial_state();
//! let t0 = 1_700_000_000_000_000;
//! assert!(log.check(&mut state, t0, 1).unwrap().allowed);
//! assert!(log.check(&mut state, t0 + 300_000, 1).unwrap().allowed);
//! let denied = log.check(&mut state, t0 + 999_999, 1).unwrap();
//! assert_eq!(denied.retry_after, Some(1)); // the entry at t0 expires at t0 + 1 s
//! assert!(log.check(&mut state, t0 + 1_000_000, 1).unwrap().allowed);
//! assert_eq!(state.len(), 2); // t0 + 300_000 and t0 + 1_000_000
//! ```

use std::collections::VecDeque;
use std::fmt;

use crate::algorithm::base::{Algorithm, AlgorithmKind};
use crate::decision::{Decision, Reservation};
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::{Micros, Timestamp};

/// Bits of a packed word that hold the cost; the other 45 hold the gap.
const COST_BITS: u32 = 19;
/// The largest cost one word holds (524,287); larger costs spill into more words.
const WORD_COST: u64 = (1 << COST_BITS) - 1;

/// The sliding log prepared for one quota: exactly `limit` units per sliding `period`
/// (`burst` is ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
}

/// Sliding log state of one key: the admitted `(timestamp, cost)` entries in time order, equal
/// timestamps merged.
///
/// Stored compactly (see the module docs): `entries` is a queue of 8-byte words
/// `gap << 19 | cost`, where `gap` is the microseconds since the previous word's timestamp (0 for
/// the first word, and for extra words of one timestamp) and `cost` is at most 524,287. Read the
/// logical entries with [`SlidingLogState::entries`]. Entries older than `period` are dropped
/// only when a request is admitted; until then they are kept but ignored.
#[derive(Clone, PartialEq, Eq, Default, Hash)]
pub struct SlidingLogState {
    /// Timestamp of the first word (0 when empty).
    oldest: Timestamp,
    /// Timestamp of the last word (0 when empty).
    newest: Timestamp,
    /// Sum of the costs of every word kept, live or expired (`<= limit`).
    total: u64,
    /// Packed words, oldest first.
    entries: VecDeque<u64>,
    /// The effective `now` of the last admission, reservation or settle (0 when fresh): a
    /// stale `now` before it is read as it. Entries after it are reserved for later.
    last_update: Timestamp,
}

impl SlidingLogState {
    /// The logical entries `(timestamp, cost)`, oldest first, one per distinct timestamp
    /// (including expired entries not yet pruned).
    pub fn entries(&self) -> impl Iterator<Item = (Timestamp, u64)> + '_ {
        let mut merged: Vec<(Timestamp, u64)> = Vec::new();
        for (t, cost) in self.words() {
            match merged.last_mut() {
                Some((last, c)) if *last == t => *c += cost,
                _ => merged.push((t, cost)),
            }
        }
        merged.into_iter()
    }

    /// The number of packed words kept: one per distinct timestamp (plus one per 524,287 units
    /// of a larger cost).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when nothing is remembered (a fresh key).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes this state occupies: the fixed struct (64 bytes on 64-bit targets) plus 8 bytes per
    /// allocated word (at most twice the words kept, and never more than `limit` words; see
    /// [`shrink_to_fit`](Self::shrink_to_fit)).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.entries.capacity() * std::mem::size_of::<u64>()
    }

    /// Releases allocated but unused words (the queue grows by doubling), so that
    /// [`memory_bytes`](Self::memory_bytes) is the fixed size plus 8 bytes per word kept.
    /// Stores may call it on idle keys; decisions never depend on it.
    pub fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
    }

    /// The words unpacked as `(timestamp, cost)`, oldest first.
    #[inline]
    fn words(&self) -> impl Iterator<Item = (Timestamp, u64)> + '_ {
        let mut t = self.oldest;
        self.entries.iter().enumerate().map(move |(i, &word)| {
            if i > 0 {
                t += word >> COST_BITS;
            }
            (t, word & WORD_COST)
        })
    }

    /// The units still live at `now` (`now >= newest`): the total less the expired prefix.
    /// Out of line: most checks find the oldest word live and never call it.
    #[inline(never)]
    fn live_at(&self, now: Timestamp, period: Micros) -> u64 {
        self.total
            - self
                .words()
                .take_while(|&(t, _)| t.saturating_add(period) <= now)
                .map(|(_, c)| c)
                .sum::<u64>()
    }

    /// Microseconds until enough of the oldest live entries expire to free `excess` units
    /// (`0 < excess <= live`). Out of line: the usual denial is decided by the caller from the
    /// oldest word alone.
    #[inline(never)]
    fn wait_for(&self, now: Timestamp, period: Micros, excess: u64) -> Micros {
        let mut freed = 0;
        // Expiring every live entry frees `live >= excess`, so `find` always succeeds; the
        // fallback (a whole period) is unreachable, and unlike a panic it lets a caller that
        // reads only `allowed` skip this scan entirely.
        self.words()
            .skip_while(|&(t, _)| t.saturating_add(period) <= now)
            .find(|&(_, c)| {
                freed += c;
                freed >= excess
            })
            .map_or(period, |(t, _)| t.saturating_add(period) - now)
    }

    /// Drops the words that expired at `now`, keeping `oldest` and `total` in step. A log that
    /// expired entirely keeps its buffer for the next word.
    #[inline(never)]
    fn prune(&mut self, now: Timestamp, period: Micros) {
        let mut kept_from = None;
        let mut expired_cost = 0;
        for (i, (t, cost)) in self.words().enumerate() {
            if t.saturating_add(period) > now {
                kept_from = Some((i, t));
                break;
            }
            expired_cost += cost;
        }
        match kept_from {
            Some((i, t)) => {
                self.entries.drain(..i);
                // The first word's gap is always 0, so equal logs are equal states.
                self.entries[0] &= WORD_COST;
                self.oldest = t;
                self.total -= expired_cost;
            }
            None => {
                self.entries.clear();
                (self.oldest, self.newest, self.total) = (0, 0, 0);
            }
        }
    }

    /// Appends `cost` units at `now >= newest`; the caller pruned first, so `now - newest` is
    /// below the period and fits the 45-bit gap, and at most `limit` units (so at most `limit`
    /// words) are kept afterwards.
    #[inline]
    fn push(&mut self, now: Timestamp, cost: u64, limit: u64) {
        // The usual case under load: another request in the same microsecond, merged into the
        // last word.
        if now == self.newest {
            if let Some(last) = self.entries.back_mut() {
                if (*last & WORD_COST) + cost <= WORD_COST {
                    *last += cost;
                    self.total += cost;
                    return;
                }
            }
        }
        self.push_words(now, cost, limit);
    }

    /// [`push`](Self::push) for a new timestamp, an empty log or a word that overflows.
    #[inline(never)]
    fn push_words(&mut self, now: Timestamp, mut cost: u64, limit: u64) {
        let mut gap = if self.entries.is_empty() {
            self.oldest = now;
            0
        } else {
            now - self.newest
        };
        self.total += cost;
        self.newest = now;
        if gap == 0 {
            if let Some(last) = self.entries.back_mut() {
                let room = WORD_COST - (*last & WORD_COST);
                let add = room.min(cost);
                *last += add;
                cost -= add;
            }
        }
        while cost > 0 {
            if self.entries.len() == self.entries.capacity() {
                self.grow(limit);
            }
            let chunk = cost.min(WORD_COST);
            self.entries.push_back(gap << COST_BITS | chunk);
            cost -= chunk;
            gap = 0;
        }
    }

    /// Replaces the log with `entries` (`(timestamp, cost)` in time order, costs > 0), keeping
    /// `last_update`. For the rare edits in the middle of the log (a settle).
    fn rebuild(&mut self, entries: &[(Timestamp, u64)], limit: u64) {
        self.entries.clear();
        (self.oldest, self.newest, self.total) = (0, 0, 0);
        for &(t, c) in entries {
            if c > 0 {
                self.push(t, c, limit);
            }
        }
    }

    /// Makes room for one more word: doubles the capacity (at least 4 words) but never past
    /// `limit` words, which is all a log ever keeps, so a full log has no spare capacity.
    fn grow(&mut self, limit: u64) {
        let len = self.entries.len();
        let cap = self.entries.capacity();
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let target = cap.saturating_mul(2).max(4).min(limit).max(len + 1);
        self.entries.reserve_exact(target - len);
    }
}

impl fmt::Debug for SlidingLogState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingLogState")
            .field("entries", &self.entries().collect::<Vec<_>>())
            .finish()
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;
    const KIND: AlgorithmKind = AlgorithmKind::SlidingLog;

    /// Never fails: sums of costs stay at or below `limit` and times at or below `period`, both
    /// already bounded by [`Quota`].
    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self { quota })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> SlidingLogState {
        SlidingLogState::default()
    }

    // Always inlined so that a caller reading only `allowed` pays for nothing else; the rare
    // paths (expired entries, a long denial scan, a new word) are out of line.
    #[inline(always)]
    fn decide(
        &self,
        state: &mut SlidingLogState,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Decision {
        let (limit, period) = (self.quota.limit(), self.quota.period());
        // A stale `now` (before the last admission) is read as that time: it must not expire
        // anything.
        let now = now.max(state.last_update);
        if state.newest > now {
            // Units are reserved for later: a request queues behind them.
            return self.decide_behind(state, now, cost);
        }
        // Live entries are a suffix of the log. Most checks find the oldest word still live:
        // then nothing has expired, the whole total is live and there is nothing to prune.
        // Otherwise the (usually short) expired prefix is summed and subtracted.
        let none_expired = !state.entries.is_empty() && state.oldest.saturating_add(period) > now;
        let live = if none_expired || state.entries.is_empty() {
            state.total
        } else {
            state.live_at(now, period)
        };
        let allowed = cost <= limit.saturating_sub(live);
        let retry_after = (!allowed).then(|| {
            // The oldest live entries expire first; wait for the one that frees `excess`.
            let excess = live + cost - limit;
            if none_expired
                && state
                    .entries
                    .front()
                    .is_some_and(|&w| w & WORD_COST >= excess)
            {
                // The usual denial: the oldest word alone frees enough.
                state.oldest.saturating_add(period) - now
            } else {
                state.wait_for(now, period, excess)
            }
        });
        let live_after = if allowed && consume && cost > 0 {
            if !none_expired {
                state.prune(now, period);
            }
            state.push(now, cost, limit);
            state.last_update = now;
            live + cost
        } else {
            live
        };
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(live_after),
            reset_after: if live_after > 0 {
                state.newest.saturating_add(period) - now
            } else {
                0
            },
            retry_after,
        }
    }

    /// One period, less for periods above 2^44 us (about 200 days), so that a reserved
    /// entry's gap from the newest live one fits the 45-bit word.
    fn max_wait(&self) -> Micros {
        let period = self.quota.period();
        period.min(((1 << 45) - 1_u64).saturating_sub(period))
    }

    fn reserve_at(
        &self,
        state: &mut SlidingLogState,
        now: Timestamp,
        cost: u64,
        wait: Micros,
    ) -> Option<Reservation> {
        let (limit, period) = (self.quota.limit(), self.quota.period());
        if wait > self.max_wait() {
            return None;
        }
        let now = now.max(state.last_update);
        if cost > 0 {
            // Logged at the scheduled time, never before the newest entry (first come, first
            // served). Only what expired by now is dropped: entries that expire before the
            // scheduled time still count until then (a settle may take the reservation back).
            let at = now + wait;
            if at < state.newest || cost > limit.saturating_sub(state.live_at(at, period)) {
                return None;
            }
            state.prune(now, period);
            state.push(at, cost, limit);
            state.last_update = now;
        }
        let standing = self.decide(&mut state.clone(), now, 0, false);
        Some(Reservation::granted_at(standing, now, wait))
    }

    fn decide_settle(
        &self,
        state: &mut SlidingLogState,
        now: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Decision {
        let (limit, period) = (self.quota.limit(), self.quota.period());
        let now = now.max(state.last_update);
        // Expired entries count for nothing: gone first, so that an expired reservation gets
        // nothing back and a charge is never logged where it no longer counts.
        state.prune(now, period);
        let mut entries: Vec<(Timestamp, u64)> = state.entries().collect();
        let own = entries.iter().position(|&(t, _)| t == scheduled_at);
        if actual <= reserved {
            // The reservation's own entry (units logged at one microsecond are alike); gone
            // once it expired and was pruned.
            if let Some(i) = own {
                entries[i].1 -= (reserved - actual).min(entries[i].1);
            }
        } else {
            // Charged unconditionally, up to a total of twice the limit: the bounded debt.
            let extra = (actual - reserved).min((2 * limit).saturating_sub(state.total));
            match own {
                Some(i) => entries[i].1 += extra,
                None => {
                    let at = now.max(state.newest);
                    match entries.last_mut() {
                        Some((t, c)) if *t == at => *c += extra,
                        _ => entries.push((at, extra)),
                    }
                }
            }
        }
        state.rebuild(&entries, limit);
        state.last_update = now;
        self.decide(&mut state.clone(), now, 0, false)
    }
}

impl SlidingLog {
    /// [`Algorithm::decide`] while entries are logged after `now` (units reserved for later):
    /// nothing is admitted before the newest entry. The request fits first at or after it,
    /// once enough entries expire; only a peek (cost 0) is allowed now, and nothing more can
    /// be admitted now (`remaining` 0).
    #[inline(never)]
    fn decide_behind(&self, state: &SlidingLogState, now: Timestamp, cost: u64) -> Decision {
        let (limit, period) = (self.quota.limit(), self.quota.period());
        let start = state.newest;
        let live = state.live_at(start, period);
        let at_start = if cost <= limit.saturating_sub(live) {
            0
        } else {
            state.wait_for(start, period, live + cost - limit)
        };
        Decision {
            allowed: cost == 0,
            limit,
            remaining: 0,
            reset_after: start.saturating_add(period) - now,
            retry_after: (cost > 0).then_some(start - now + at_start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::test_support::{
        assert_cost_above_capacity_changes_nothing, assert_remaining_and_reset_exact,
        assert_retry_after_exact, decision, xorshift, T0,
    };

    fn log(text: &str) -> SlidingLog {
        SlidingLog::new(text.parse().unwrap()).unwrap()
    }

    #[test]
    fn boundary_burst_admits_exactly_the_limit() {
        let l = log("100/s");
        let mut s = l.initial_state();
        let admitted = |s: &mut SlidingLogState, at| {
            (0..100)
                .filter(|_| l.check(s, at, 1).unwrap().allowed)
                .count()
        };
        assert_eq!(admitted(&mut s, T0 + 950_000), 100);
        assert_eq!(admitted(&mut s, T0 + 1_050_000), 0);
        assert_eq!(s.len(), 1); // 100 requests at one microsecond share a word
        assert_eq!(
            l.check(&mut s, T0 + 1_949_999, 1).unwrap(),
            decision(100, false, 0, 1, Some(1))
        );
        assert_eq!(
            l.check(&mut s, T0 + 1_950_000, 100).unwrap(),
            decision(100, true, 0, 1_000_000, None)
        );
    }

    #[test]
    fn entries_expire_one_by_one() {
        let l = log("3/s");
        let mut s = l.initial_state();
        for (at, remaining) in [(0, 2), (100, 1), (200, 0)] {
            assert_eq!(
                l.check(&mut s, T0 + at, 1).unwrap(),
                decision(3, true, remaining, 1_000_000, None)
            );
        }
        // Cost 2 needs the two oldest to expire: the one at 100 expires at 1_000_100.
        assert_eq!(
            l.check(&mut s, T0 + 500_000, 2).unwrap(),
            decision(3, false, 0, 500_200, Some(500_100))
        );
        assert_eq!(
            l.check(&mut s, T0 + 1_000_099, 2).unwrap(),
            decision(3, false, 1, 101, Some(1))
        );
        assert_eq!(
            l.check(&mut s, T0 + 1_000_100, 2).unwrap(),
            decision(3, true, 0, 1_000_000, None)
        );
        assert_eq!(
            s.entries().collect::<Vec<_>>(),
            [(T0 + 200, 1), (T0 + 1_000_100, 2)]
        );
    }

    #[test]
    fn denials_and_peeks_do_not_prune() {
        let l = log("2/s");
        let mut s = l.initial_state();
        assert!(l.check(&mut s, T0, 2).unwrap().allowed);
        let before = s.clone();
        // Long expired, but only an admitted request prunes.
        assert_eq!(
            l.peek(&s, T0 + 5_000_000, 2).unwrap(),
            decision(2, true, 2, 0, None)
        );
        assert_eq!(
            l.check(&mut s, T0 + 5_000_000, 0).unwrap(),
            decision(2, true, 2, 0, None)
        );
        assert_eq!(s, before);
        assert!(l.check(&mut s, T0 + 5_000_000, 1).unwrap().allowed);
        assert_eq!(s.entries().collect::<Vec<_>>(), [(T0 + 5_000_000, 1)]);
    }

    #[test]
    fn long_idle_forgets_everything() {
        let l = log("3/s");
        let mut s = l.initial_state();
        assert!(l.check(&mut s, T0, 3).unwrap().allowed);
        for idle in [86_400_000_000, 10 * 365 * 86_400_000_000] {
            let mut s2 = s.clone();
            assert_eq!(
                l.check(&mut s2, T0 + idle, 2).unwrap(),
                decision(3, true, 1, 1_000_000, None)
            );
            assert_eq!(s2.entries().collect::<Vec<_>>(), [(T0 + idle, 2)]);
        }
    }

    #[test]
    fn backwards_time_is_read_as_the_newest_entry() {
        let l = log("3/s");
        let mut s = l.initial_state();
        assert!(l.check(&mut s, T0, 2).unwrap().allowed);
        assert!(l.check(&mut s, T0 + 2_000_000, 1).unwrap().allowed);
        let before = s.clone();
        // 1.5 s back: read as T0 + 2 s, so nothing expires and the pruned entry stays gone.
        assert_eq!(
            l.check(&mut s, T0 + 500_000, 3).unwrap(),
            decision(3, false, 2, 1_000_000, Some(1_000_000))
        );
        assert_eq!(s, before);
        // Admitted at the effective time, so the log stays in order.
        assert_eq!(
            l.check(&mut s, T0 + 500_000, 2).unwrap(),
            decision(3, true, 0, 1_000_000, None)
        );
        assert_eq!(s.entries().collect::<Vec<_>>(), [(T0 + 2_000_000, 3)]);
    }

    #[test]
    fn cost_above_capacity_is_an_error_and_changes_nothing() {
        assert_cost_above_capacity_changes_nothing::<SlidingLog>(T0 + 1);
    }

    #[test]
    fn limit_one() {
        let l = log("1/min");
        let mut s = l.initial_state();
        assert_eq!(
            l.check(&mut s, T0 + 30_000_000, 1).unwrap(),
            decision(1, true, 0, 60_000_000, None)
        );
        assert_eq!(
            l.check(&mut s, T0 + 89_999_999, 1).unwrap(),
            decision(1, false, 0, 1, Some(1))
        );
        assert!(l.check(&mut s, T0 + 90_000_000, 1).unwrap().allowed);
    }

    #[test]
    fn one_word_per_request_and_large_costs_spill() {
        let l = log("1000000/s");
        let mut s = l.initial_state();
        assert!(l.check(&mut s, T0, 600_000).unwrap().allowed);
        assert_eq!(s.len(), 2); // 524,287 + 75,713
        assert!(l.check(&mut s, T0, 1).unwrap().allowed);
        assert_eq!(s.len(), 2); // merged into the second word
        for i in 1..=1_000 {
            assert!(l.check(&mut s, T0 + i, 1).unwrap().allowed);
        }
        assert_eq!(s.len(), 1_002);
        assert_eq!(s.entries().count(), 1_001);
        assert_eq!(s.entries().next(), Some((T0, 600_001)));
        assert!(s.memory_bytes() <= std::mem::size_of::<SlidingLogState>() + 2 * 8 * 1_002);
        s.shrink_to_fit();
        assert_eq!(
            s.memory_bytes(),
            std::mem::size_of::<SlidingLogState>() + 8 * 1_002
        );
        // The largest gap (a period just under 2^45) still fits one word.
        let l = SlidingLog::new(Quota::new(2, crate::quota::MAX_PERIOD).unwrap()).unwrap();
        let mut s = l.initial_state();
        assert!(l.check(&mut s, T0, 1).unwrap().allowed);
        let late = T0 + crate::quota::MAX_PERIOD - 1;
        assert!(l.check(&mut s, late, 1).unwrap().allowed);
        assert_eq!(s.entries().collect::<Vec<_>>(), [(T0, 1), (late, 1)]);
        let d = l.check(&mut s, late, 1).unwrap();
        assert_eq!(d.retry_after, Some(1));
    }

    /// The queue doubles but stops at `limit` words: a full log has no spare capacity, and
    /// keeps its buffer (no allocation) once entries start to expire.
    #[test]
    fn a_full_log_holds_exactly_limit_words() {
        let fixed = std::mem::size_of::<SlidingLogState>();
        for limit in [1u64, 3, 5, 100, 1_000] {
            let l = log(&format!("{limit}/s"));
            let mut s = l.initial_state();
            for i in 0..limit {
                assert!(l.check(&mut s, T0 + i, 1).unwrap().allowed);
            }
            assert!(!l.check(&mut s, T0 + limit, 1).unwrap().allowed);
            assert_eq!(s.len() as u64, limit);
            assert_eq!(
                s.memory_bytes(),
                fixed + 8 * limit as usize,
                "limit {limit}"
            );
            // One period later the oldest words expire one by one; the capacity stays.
            for i in 0..limit {
                assert!(l.check(&mut s, T0 + 1_000_000 + i, 1).unwrap().allowed);
            }
            assert_eq!(
                s.memory_bytes(),
                fixed + 8 * limit as usize,
                "limit {limit}"
            );
        }
        // Capacities on the way: 4, 8, ..., 64, then 100.
        let l = log("100/s");
        let mut s = l.initial_state();
        let mut seen = Vec::new();
        for i in 0..100 {
            assert!(l.check(&mut s, T0 + i, 1).unwrap().allowed);
            let words = (s.memory_bytes() - fixed) / 8;
            if seen.last() != Some(&words) {
                seen.push(words);
            }
        }
        assert_eq!(seen, [4, 8, 16, 32, 64, 100]);
    }

    /// Brute force on small quotas against a plain list of `(timestamp, cost)`: the same
    /// decisions, no window of `period` ever holds more than `limit`, every denial's retry_after
    /// is the first microsecond at which the request is admitted, `remaining` is the largest
    /// admissible cost and `reset_after` the first time the whole limit is admissible.
    #[test]
    fn exact_by_brute_force_against_a_plain_log() {
        for (limit, period) in [(1, 1), (1, 5), (2, 3), (3, 7), (5, 10), (8, 4)] {
            let l = SlidingLog::new(Quota::new(limit, period).unwrap()).unwrap();
            let mut s = l.initial_state();
            let mut admitted: Vec<(Timestamp, u64)> = Vec::new();
            let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (limit << 8) ^ period;
            let mut now = 1_000 * period;
            let mut denials = 0;
            for _ in 0..3_000 {
                xorshift(&mut rng);
                now = match rng % 16 {
                    0 => now - (rng >> 8) % period.min(now),
                    1 => now + 3 * period,
                    _ => now + (rng >> 8) % 3,
                };
                let cost = (rng >> 16) % (limit + 1);
                let before = s.clone();
                let d = l.check(&mut s, now, cost).unwrap();
                let eff = admitted.last().map_or(now, |&(t, _)| now.max(t));
                let live: u64 = admitted
                    .iter()
                    .filter(|&&(t, _)| eff - t < period)
                    .map(|&(_, c)| c)
                    .sum();
                assert_eq!(d.allowed, live + cost <= limit);
                if d.allowed && cost > 0 {
                    admitted.push((eff, cost));
                    let window: u64 = admitted
                        .iter()
                        .filter(|&&(t, _)| eff - t < period)
                        .map(|&(_, c)| c)
                        .sum();
                    assert!(window <= limit);
                } else {
                    denials += 1;
                    assert_eq!(s, before);
                }
                assert_brute_force(&l, &before, &s, eff, cost, &d);
            }
            assert!(denials > 100, "{limit}/{period}: only {denials} denials");
        }
    }

    fn assert_brute_force(
        l: &SlidingLog,
        before: &SlidingLogState,
        after: &SlidingLogState,
        now: Timestamp,
        cost: u64,
        d: &Decision,
    ) {
        let ctx = format!("{before:?} now={now} cost={cost} -> {d:?}");
        if let Some(retry) = d.retry_after {
            assert_retry_after_exact(l, before, now, cost, retry, &ctx);
        }
        assert_remaining_and_reset_exact(l, after, now, d, &ctx);
    }
}
