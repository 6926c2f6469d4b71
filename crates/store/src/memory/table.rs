//! One rule's keys: a [`Table`] of `shards` spin-locked hash tables of one algorithm's state.
//!
//! [`Kind`] says, per algorithm, what a bucket stores beside the fingerprint and when a stored
//! state becomes equivalent to a fresh key (its *expiry*). Five algorithms derive the expiry
//! from the state and the quota, so a bucket is the 8-byte fingerprint and the state only; the
//! sliding log stores it (its state has no accessor for its newest entry).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use floodgate_core::{
    Algorithm, Decision, FixedWindow, FixedWindowState, Gcra, GcraState, LeakyBucket,
    LeakyBucketState, Micros, Policy, SlidingLog, SlidingLogState, SlidingWindow,
    SlidingWindowState, State, Timestamp, TokenBucket, TokenBucketState,
};
use spinning_top::lock_api;
use spinning_top::relax::Relax;
use spinning_top::RawSpinlock;

use super::fpmap::FpMap;

/// Spin briefly, then give the core away: a critical section is a hash probe and an integer
/// decision (tens of nanoseconds), so a waiter usually gets the lock within a few spins; if
/// the holder was preempted, yielding lets it run instead of burning the waiter's time slice.
#[derive(Debug, Default)]
pub(crate) struct SpinThenYield {
    spins: u32,
}

impl Relax for SpinThenYield {
    #[inline]
    fn relax(&mut self) {
        if self.spins < 128 {
            self.spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A shard lock: acquiring is one compare-and-swap, releasing a plain store (no second locked
/// instruction, unlike a parking mutex, whose release must also check for sleepers).
pub(crate) type Lock<T> = lock_api::Mutex<RawSpinlock<SpinThenYield>, T>;
/// A held shard lock.
pub(crate) type Guard<'a, T> = lock_api::MutexGuard<'a, RawSpinlock<SpinThenYield>, T>;

/// How a table stores one algorithm's state.
pub(crate) trait Kind: Algorithm {
    /// What a bucket holds beside the fingerprint.
    type Slot: fmt::Debug + Send + Sync + 'static;
    /// Quota-derived constants the expiry needs.
    type Expiry: fmt::Debug + Copy + Send + Sync + 'static;
    /// The constants for this algorithm's quota.
    fn expiry(&self) -> Self::Expiry;
    /// A slot for `state`, whose last consuming decision said "fresh again at `expires_at`".
    fn new_slot(state: Self::State, expires_at: Timestamp) -> Self::Slot;
    fn state(slot: &Self::Slot) -> &Self::State;
    fn state_mut(slot: &mut Self::Slot) -> &mut Self::State;
    /// The first time (microseconds since the epoch) at which the slot decides exactly like a
    /// fresh key; at or after it the slot may be dropped. Never decreases while the key lives.
    fn expires_at(e: &Self::Expiry, slot: &Self::Slot) -> Timestamp;
    /// Records a consuming admission that said "fresh again at `expires_at`" (a stored expiry
    /// moves there if that is later; a derived one already moved with the state).
    #[inline]
    fn extend(_slot: &mut Self::Slot, _expires_at: Timestamp) {}
    fn wrap(state: Self::State) -> State;
    fn unwrap(state: State) -> Option<Self::State>;
}

macro_rules! derived {
    ($alg:ident, $state:ident, $variant:ident, $expiry:ty, |$a:ident| $params:expr, |$e:ident, $s:ident| $at:expr) => {
        impl Kind for $alg {
            type Slot = $state;
            type Expiry = $expiry;
            fn expiry(&self) -> $expiry {
                let $a = self;
                $params
            }
            #[inline]
            fn new_slot(state: $state, _expires_at: Timestamp) -> $state {
                state
            }
            #[inline]
            fn state(slot: &$state) -> &$state {
                slot
            }
            #[inline]
            fn state_mut(slot: &mut $state) -> &mut $state {
                slot
            }
            #[inline]
            fn expires_at($e: &$expiry, $s: &$state) -> Timestamp {
                $at
            }
            fn wrap(state: $state) -> State {
                State::$variant(state)
            }
            fn unwrap(state: State) -> Option<$state> {
                match state {
                    State::$variant(s) => Some(s),
                    _ => None,
                }
            }
        }
    };
}

/// `(capacity in ticks, ticks per microsecond)` of a bucket algorithm's quota.
fn bucket_ticks(quota: &floodgate_core::Quota) -> (u64, u64) {
    let (interval, ticks_per_us) = quota.emission_interval();
    (quota.burst() * interval, ticks_per_us)
}

// GCRA: fresh again at its theoretical arrival time rounded up to the microsecond, which is
// `now + reset_after` of its last admission (and tat never moves backwards).
derived!(Gcra, GcraState, Gcra, (), |_a| (), |_e, s| s
    .tat
    .saturating_add(u64::from(s.tat_ticks > 0)));

// Token bucket: full again `ceil((capacity - tokens) / rate)` after its last refill; an
// admission at `now` sets last_refill = now, so this is `now + reset_after` of that admission.
derived!(
    TokenBucket,
    TokenBucketState,
    TokenBucket,
    (u64, u64),
    |a| bucket_ticks(a.quota()),
    |e, s| s
        .last_refill
        .saturating_add((e.0 as i64 - s.tokens).max(0).unsigned_abs().div_ceil(e.1))
);

// Leaky bucket: empty again `ceil(level / rate)` after its last leak.
derived!(
    LeakyBucket,
    LeakyBucketState,
    LeakyBucket,
    u64,
    |a| a.quota().emission_interval().1,
    |e, s| s.last_leak.saturating_add(s.level.div_ceil(*e))
);

// Fixed window: a count stops counting at the end of its window; what it carries into the
// next window (a count above the limit: units reserved there) at the end of that one.
derived!(
    FixedWindow,
    FixedWindowState,
    FixedWindow,
    (Micros, u64),
    |a| (super::calendar_expiry::period(a), a.quota().limit()),
    |e, s| if s.count > e.1 {
        s.window_start.saturating_add(2 * e.0)
    } else if s.count > 0 {
        s.window_start.saturating_add(e.0)
    } else {
        0
    }
);

// Sliding window counter: a window's count weighs on the sliding window until the last
// microsecond of the next window (the overlap reaches 0 there), the previous count until the
// last microsecond of this one.
derived!(
    SlidingWindow,
    SlidingWindowState,
    SlidingWindow,
    Micros,
    |a| super::calendar_expiry::period(a),
    |e, s| if s.count > 0 {
        s.window_start.saturating_add(2 * *e - 1)
    } else if s.previous_count > 0 {
        s.window_start.saturating_add(*e - 1)
    } else {
        0
    }
);

/// A sliding log state with its expiry stored beside it.
#[derive(Debug)]
pub(crate) struct LogSlot {
    expires_at: Timestamp,
    state: SlidingLogState,
}

impl Kind for SlidingLog {
    type Slot = LogSlot;
    type Expiry = ();
    fn expiry(&self) {}
    fn new_slot(state: SlidingLogState, expires_at: Timestamp) -> LogSlot {
        LogSlot { expires_at, state }
    }
    fn state(slot: &LogSlot) -> &SlidingLogState {
        &slot.state
    }
    fn state_mut(slot: &mut LogSlot) -> &mut SlidingLogState {
        &mut slot.state
    }
    fn expires_at(_e: &(), slot: &LogSlot) -> Timestamp {
        slot.expires_at
    }
    fn extend(slot: &mut LogSlot, expires_at: Timestamp) {
        // A stale `now` must never shorten a live key's life.
        slot.expires_at = slot.expires_at.max(expires_at);
    }
    fn wrap(state: SlidingLogState) -> State {
        State::SlidingLog(state)
    }
    fn unwrap(state: State) -> Option<SlidingLogState> {
        match state {
            State::SlidingLog(s) => Some(s),
            _ => None,
        }
    }
}

/// One bucket: the key's 64-bit fingerprint and its slot (what a unit test measures).
#[cfg(test)]
pub(crate) type Bucket<A> = (u64, <A as Kind>::Slot);

/// One lock's worth of a table.
#[derive(Debug)]
pub(crate) struct Shard<A: Kind> {
    map: FpMap<A::Slot>,
    /// A lower bound on every slot's expiry: while `now` is below it nothing in the shard has
    /// expired and a sweep skips the shard. Valid because an expiry only grows while it lives.
    earliest_expiry: Timestamp,
}

/// What [`Locked::decide_held`] found.
pub(crate) enum Held {
    /// The key was held and live; this is its decision (already applied).
    Live(Decision),
    /// No live entry; `expired` when an expired one was just dropped.
    Absent { expired: bool },
}

/// Shards sit on their own cache lines so that two threads locking neighbouring shards do not
/// contend for one line.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Padded<T>(pub(crate) T);

/// One rule name's key count and its own cap (`[[rules]] max_keys`), shared by every table of
/// that name (one per policy the rule has had). The count changes only when a key is added
/// (reserved before the insert, see `Shared::reserve`) or dropped (here, by the table that
/// drops it), never on a check of a held key.
#[derive(Debug)]
pub(crate) struct RuleKeys {
    /// The rule's name (the `rule` label of `floodgate_store_full_total`).
    pub(crate) name: Arc<str>,
    /// Keys held by the rule's tables, expired ones not yet dropped included.
    pub(crate) held: AtomicUsize,
    /// The rule's cap; `usize::MAX` when it has none of its own (only the store's applies).
    pub(crate) max: AtomicUsize,
}

impl RuleKeys {
    pub(crate) fn new(name: Arc<str>) -> Self {
        Self {
            name,
            held: AtomicUsize::new(0),
            max: AtomicUsize::new(usize::MAX),
        }
    }

    /// Adds `n` to the count unless that would pass the rule's cap.
    pub(crate) fn try_add(&self, n: usize) -> bool {
        let max = self.max.load(Ordering::Relaxed);
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held.saturating_add(n) <= max).then_some(held + n)
            })
            .is_ok()
    }

    /// Takes `n` dropped keys off the count.
    #[inline]
    pub(crate) fn sub(&self, n: usize) {
        if n > 0 {
            self.held.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// One rule's (one rule name and policy's) keys.
#[derive(Debug)]
pub(crate) struct Table<A: Kind> {
    pub(crate) alg: A,
    expiry: A::Expiry,
    shards: Box<[Padded<Lock<Shard<A>>>]>,
    mask: usize,
    /// The rule name's key count, shared with the rule's tables of other policies.
    pub(crate) keys: Arc<RuleKeys>,
}

impl<A: Kind> Table<A> {
    /// A table of `shards` (a power of two) empty shards, counting its keys in `keys`.
    pub(crate) fn new(alg: A, shards: usize, keys: Arc<RuleKeys>) -> Self {
        debug_assert!(shards.is_power_of_two());
        Self {
            keys,
            expiry: alg.expiry(),
            alg,
            shards: (0..shards)
                .map(|_| {
                    Padded(Lock::new(Shard {
                        map: FpMap::new(),
                        earliest_expiry: Timestamp::MAX,
                    }))
                })
                .collect(),
            mask: shards - 1,
        }
    }

    /// The shard of a fingerprint: bits 32 and up (the shard's hash table takes its bucket
    /// index from the low bits and its control byte from the top 7).
    #[inline]
    pub(crate) fn shard_of(&self, fp: u64) -> usize {
        (fp >> 32) as usize & self.mask
    }

    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Buckets allocated by all shards (live, deleted or empty).
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> usize {
        (0..self.shards.len())
            .map(|i| self.lock(i).guard.map.buckets())
            .sum()
    }

    /// The shard's lock when it is free now.
    pub(crate) fn try_lock(&self, shard: usize) -> Option<Locked<'_, A>> {
        Some(Locked {
            table: self,
            guard: self.shards[shard].0.try_lock()?,
        })
    }

    #[inline]
    pub(crate) fn lock(&self, shard: usize) -> Locked<'_, A> {
        Locked {
            table: self,
            guard: self.shards[shard].0.lock(),
        }
    }
}

/// A locked shard of a table.
pub(crate) struct Locked<'a, A: Kind> {
    pub(crate) table: &'a Table<A>,
    guard: Guard<'a, Shard<A>>,
}

impl<A: Kind> Locked<'_, A> {
    #[inline]
    fn find_mut(&mut self, fp: u64) -> Option<&mut A::Slot> {
        self.guard.map.find_mut(fp)
    }

    /// Decides in place on the slot of `fp`, if there is one. An expired slot is decided as a
    /// fresh key *in its slot* (state reset to the initial one): equivalent to dropping it and
    /// inserting a fresh one, without the two table operations or a change to the key count.
    /// `None` when `fp` is not held; the flag says whether the slot had expired.
    #[inline]
    pub(crate) fn decide_reusing(
        &mut self,
        fp: u64,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Option<(Decision, bool)> {
        let table = self.table;
        let slot = self.find_mut(fp)?;
        let expired = A::expires_at(&table.expiry, slot) <= now;
        if expired {
            *A::state_mut(slot) = table.alg.initial_state();
        }
        let d = table.alg.decide(A::state_mut(slot), now, cost, consume);
        if consume && d.allowed {
            A::extend(slot, now.saturating_add(d.reset_after));
        }
        Some((d, expired))
    }

    /// Decides in place on the live slot of `fp`, with no copy of the state. An expired slot
    /// is dropped and reported as absent.
    pub(crate) fn decide_held(
        &mut self,
        fp: u64,
        now: Timestamp,
        cost: u64,
        consume: bool,
    ) -> Held {
        let table = self.table;
        let Some(slot) = self.guard.map.find_mut(fp) else {
            return Held::Absent { expired: false };
        };
        if A::expires_at(&table.expiry, slot) > now {
            let d = table.alg.decide(A::state_mut(slot), now, cost, consume);
            if consume && d.allowed {
                A::extend(slot, now.saturating_add(d.reset_after));
            }
            Held::Live(d)
        } else {
            self.guard.map.remove(fp);
            table.keys.sub(1);
            Held::Absent { expired: true }
        }
    }

    /// Stores a fresh key's consumed `state` (the key must not be held).
    pub(crate) fn insert(&mut self, fp: u64, state: A::State, expires_at: Timestamp) {
        let slot = A::new_slot(state, expires_at);
        let at = A::expires_at(&self.table.expiry, &slot);
        self.guard.earliest_expiry = self.guard.earliest_expiry.min(at);
        self.guard.map.insert_new(fp, slot);
    }

    /// A copy of the live state of `fp` and its expiry; `None` when absent or expired (an
    /// expired slot is dropped on the way; the flag says whether that happened).
    pub(crate) fn load(
        &mut self,
        fp: u64,
        now: Timestamp,
    ) -> (Option<(A::State, Timestamp)>, bool) {
        let table = self.table;
        let Some(slot) = self.guard.map.find(fp) else {
            return (None, false);
        };
        let at = A::expires_at(&table.expiry, slot);
        if at > now {
            (Some((A::state(slot).clone(), at)), false)
        } else {
            self.guard.map.remove(fp);
            table.keys.sub(1);
            (None, true)
        }
    }

    /// A copy of the state of `fp` when held and live at `now`.
    pub(crate) fn get_live(&self, fp: u64, now: Timestamp) -> Option<A::State> {
        self.guard
            .map
            .find(fp)
            .filter(|slot| A::expires_at(&self.table.expiry, slot) > now)
            .map(|slot| A::state(slot).clone())
    }

    /// Writes back a consumed state: into its slot when the key is held, else as a new key.
    pub(crate) fn save(&mut self, fp: u64, state: A::State, expires_at: Timestamp) {
        let table = self.table;
        match self.find_mut(fp) {
            Some(slot) => {
                *A::state_mut(slot) = state;
                A::extend(slot, expires_at);
                // A settle that gives units back can bring a derived expiry forward: keep the
                // shard's lower bound a lower bound.
                let at = A::expires_at(&table.expiry, slot);
                self.guard.earliest_expiry = self.guard.earliest_expiry.min(at);
            }
            None => self.insert(fp, state, expires_at),
        }
    }

    /// Removes `fp`; returns its expiry when it was held.
    pub(crate) fn remove(&mut self, fp: u64) -> Option<Timestamp> {
        let table = self.table;
        let removed = self.guard.map.remove(fp);
        if removed.is_some() {
            table.keys.sub(1);
        }
        removed.map(|slot| A::expires_at(&table.expiry, &slot))
    }

    /// Drops every slot expired at `now`; returns how many. O(1) when nothing can have expired.
    pub(crate) fn drop_expired(&mut self, now: Timestamp) -> usize {
        if now < self.guard.earliest_expiry {
            return 0;
        }
        let expiry = self.table.expiry;
        let before = self.guard.map.len();
        let mut earliest = Timestamp::MAX;
        self.guard.map.retain(|slot| {
            let at = A::expires_at(&expiry, slot);
            let keep = at > now;
            if keep {
                earliest = earliest.min(at);
            }
            keep
        });
        self.guard.earliest_expiry = earliest;
        let dropped = before - self.guard.map.len();
        self.table.keys.sub(dropped);
        dropped
    }
}

/// A locked shard of any algorithm's table, for the batch path (which handles items of several
/// rules at once, through [`State`] copies).
pub(crate) trait AnyLocked {
    fn decide_held(&mut self, fp: u64, now: Timestamp, cost: u64, consume: bool) -> Held;
    /// See [`Locked::load`], with the state as a [`State`].
    fn load_any(&mut self, fp: u64, now: Timestamp) -> (Option<(State, Timestamp)>, bool);
    /// See [`Locked::save`]; a state of another algorithm is ignored (never happens: the batch
    /// decides with the table's own policy).
    fn save_any(&mut self, fp: u64, state: State, expires_at: Timestamp);
    fn drop_expired(&mut self, now: Timestamp) -> usize;
}

impl<A: Kind> AnyLocked for Locked<'_, A> {
    fn decide_held(&mut self, fp: u64, now: Timestamp, cost: u64, consume: bool) -> Held {
        Locked::decide_held(self, fp, now, cost, consume)
    }
    fn load_any(&mut self, fp: u64, now: Timestamp) -> (Option<(State, Timestamp)>, bool) {
        let (held, expired) = self.load(fp, now);
        (held.map(|(s, at)| (A::wrap(s), at)), expired)
    }
    fn save_any(&mut self, fp: u64, state: State, expires_at: Timestamp) {
        if let Some(state) = A::unwrap(state) {
            self.save(fp, state, expires_at);
        } else {
            debug_assert!(false, "a state of another algorithm");
        }
    }
    fn drop_expired(&mut self, now: Timestamp) -> usize {
        Locked::drop_expired(self, now)
    }
}

macro_rules! any_table {
    ($($variant:ident),* $(,)?) => {
        /// A table of whichever algorithm its policy chose.
        #[derive(Debug)]
        pub(crate) enum AnyTable {
            $($variant(Table<$variant>),)*
        }

        impl AnyTable {
            pub(crate) fn new(policy: &Policy, shards: usize, keys: Arc<RuleKeys>) -> Self {
                match policy {
                    $(Policy::$variant(a) => AnyTable::$variant(Table::new(a.clone(), shards, keys)),)*
                }
            }

            /// The rule name's key count.
            pub(crate) fn keys(&self) -> &Arc<RuleKeys> {
                match self {
                    $(AnyTable::$variant(t) => &t.keys,)*
                }
            }

            pub(crate) fn shard_of(&self, fp: u64) -> usize {
                match self {
                    $(AnyTable::$variant(t) => t.shard_of(fp),)*
                }
            }

            pub(crate) fn shard_count(&self) -> usize {
                match self {
                    $(AnyTable::$variant(t) => t.shard_count(),)*
                }
            }

            /// Buckets allocated by all shards.
            #[cfg(test)]
            pub(crate) fn buckets(&self) -> usize {
                match self {
                    $(AnyTable::$variant(t) => t.buckets(),)*
                }
            }

            pub(crate) fn lock_any(&self, shard: usize) -> Box<dyn AnyLocked + '_> {
                match self {
                    $(AnyTable::$variant(t) => Box::new(t.lock(shard)),)*
                }
            }

            /// Drops the expired slots of one shard; returns how many.
            pub(crate) fn drop_expired(&self, shard: usize, now: Timestamp) -> usize {
                match self {
                    $(AnyTable::$variant(t) => t.lock(shard).drop_expired(now),)*
                }
            }

            /// Drops the expired slots of one shard unless its lock is taken (by another thread
            /// or by the caller itself: never waits, so it cannot deadlock); returns how many.
            pub(crate) fn try_drop_expired(&self, shard: usize, now: Timestamp) -> usize {
                match self {
                    $(AnyTable::$variant(t) => t.try_lock(shard).map_or(0, |mut l| l.drop_expired(now)),)*
                }
            }

            /// Removes `fp`; returns its expiry when it was held.
            pub(crate) fn remove(&self, fp: u64) -> Option<Timestamp> {
                match self {
                    $(AnyTable::$variant(t) => t.lock(t.shard_of(fp)).remove(fp),)*
                }
            }

            /// A copy of the live state of `fp`, if any.
            pub(crate) fn get_live(&self, fp: u64, now: Timestamp) -> Option<State> {
                match self {
                    $(AnyTable::$variant(t) => t
                        .lock(t.shard_of(fp))
                        .get_live(fp, now)
                        .map(<$variant as Kind>::wrap),)*
                }
            }
        }
    };
}

any_table!(
    FixedWindow,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    LeakyBucket,
    Gcra
);
