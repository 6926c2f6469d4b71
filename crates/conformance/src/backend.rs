//! [`Backend`]: what the golden vectors run on, and the two in-process backends, the reference
//! core ([`CoreBackend`]) and the memory store ([`MemoryBackend`]).

use std::collections::HashMap;

use floodgate_core::{CheckError, Decision, Policy, State, Timestamp};

/// A failure of the backend itself (not a denial, not a [`CheckError`]).
pub type BackendFailure = Box<dyn std::error::Error + Send + Sync>;

/// What a backend answers for one request.
#[derive(Debug)]
pub enum Reply {
    /// A decision or the core's [`CheckError`]: compared with the step's expectation.
    Answer(Result<Decision, CheckError>),
    /// The backend failed (connection lost, script error): always a conformance failure.
    Failed(BackendFailure),
}

/// Something that decides requests the way Floodgate specifies: the reference core, a store, a
/// Redis script. Synchronous on purpose: an async backend wraps its calls in its runtime's
/// `block_on`.
pub trait Backend {
    /// A short name for failure labels: `"core"`, `"memory"`, `"redis"`.
    fn name(&self) -> &str;

    /// Called before every case: afterwards every key must be fresh (never seen).
    ///
    /// # Errors
    /// A [`BackendFailure`] when the state cannot be cleared; the case is then reported failed.
    fn reset(&mut self) -> Result<(), BackendFailure>;

    /// Decides a request of `cost` units for `key` at `now_us` under `policy`: a check (consumes
    /// when admitted; cost 0 consumes nothing) or, when `peek`, a decision that never consumes.
    /// `now_us` must be used as given, never replaced by a clock reading.
    fn check(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Reply;

    /// Reserves `cost` units for `key` at `now_us` with the wait bound `max_wait`: the decision
    /// and, when granted, the wait. The default: unsupported (a failure).
    fn reserve(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        max_wait: u64,
    ) -> ReserveReply {
        let _ = (policy, key, now_us, cost, max_wait);
        ReserveReply::Failed("this backend does not reserve".into())
    }

    /// Settles the reservation of `reserved` units for `key` scheduled at `scheduled_at` with
    /// the actual cost `actual`, at `now_us`: the standing after it. The default: unsupported.
    fn settle(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Reply {
        let _ = (policy, key, now_us, scheduled_at, reserved, actual);
        Reply::Failed("this backend does not settle".into())
    }
}

/// What a backend answers for one reservation.
#[derive(Debug)]
pub enum ReserveReply {
    /// The decision and, when granted, the wait (or the core's [`CheckError`]).
    Answer(Result<(Decision, Option<u64>), CheckError>),
    /// The backend failed.
    Failed(BackendFailure),
}

/// The reference backend: `floodgate-core` with one [`State`] per key in a `HashMap`.
#[derive(Debug, Default)]
pub struct CoreBackend {
    states: HashMap<String, State>,
}

impl Backend for CoreBackend {
    fn name(&self) -> &str {
        "core"
    }

    fn reset(&mut self) -> Result<(), BackendFailure> {
        self.states.clear();
        Ok(())
    }

    fn check(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Reply {
        let state = self
            .states
            .entry(key.to_string())
            .or_insert_with(|| policy.initial_state());
        Reply::Answer(if peek {
            policy.peek(state, now_us, cost)
        } else {
            policy.check(state, now_us, cost)
        })
    }

    fn reserve(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        max_wait: u64,
    ) -> ReserveReply {
        let state = self
            .states
            .entry(key.to_string())
            .or_insert_with(|| policy.initial_state());
        ReserveReply::Answer(
            policy
                .reserve(state, now_us, cost, max_wait)
                .map(|r| (r.decision, r.wait)),
        )
    }

    fn settle(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Reply {
        let state = self
            .states
            .entry(key.to_string())
            .or_insert_with(|| policy.initial_state());
        Reply::Answer(policy.settle(state, now_us, scheduled_at, reserved, actual))
    }
}

/// The memory store ([`floodgate_store::MemoryStore`]): each step a one-item batch at the step's
/// time ([`MemoryStore::check_at`](floodgate_store::MemoryStore::check_at) or `peek_at`).
/// [`Backend::reset`] starts a new store.
#[derive(Debug)]
pub struct MemoryBackend {
    store: floodgate_store::MemoryStore,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self {
            store: Self::fresh(),
        }
    }
}

impl MemoryBackend {
    fn fresh() -> floodgate_store::MemoryStore {
        // The clock is never read: every step passes its own time.
        floodgate_store::MemoryStore::with_clock(std::sync::Arc::new(
            floodgate_core::ManualClock::new(0),
        ))
    }
}

impl Backend for MemoryBackend {
    fn name(&self) -> &str {
        "memory"
    }

    fn reset(&mut self) -> Result<(), BackendFailure> {
        self.store = Self::fresh();
        Ok(())
    }

    fn check(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Reply {
        let item = floodgate_store::CheckItem {
            rule: "conformance",
            policy,
            key,
            cost,
        };
        let result = if peek {
            self.store.peek_at(&[item], now_us)
        } else {
            self.store.check_at(&[item], now_us)
        };
        match result {
            Ok(batch) => Reply::Answer(Ok(batch.decisions[0])),
            Err(e) => store_failure(e),
        }
    }

    fn reserve(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        max_wait: u64,
    ) -> ReserveReply {
        let item = floodgate_store::CheckItem {
            rule: "conformance",
            policy,
            key,
            cost,
        };
        reserve_reply(self.store.reserve_at(&[item], now_us, max_wait))
    }

    fn settle(
        &mut self,
        policy: &Policy,
        key: &str,
        now_us: Timestamp,
        scheduled_at: Timestamp,
        reserved: u64,
        actual: u64,
    ) -> Reply {
        let item = floodgate_store::SettleItem {
            rule: "conformance",
            policy,
            key,
            reserved,
            actual,
            scheduled_at,
        };
        settle_reply(self.store.settle_at(&[item], now_us))
    }
}

/// A store's error as a [`Reply`]: the core's error for a cost above the capacity, else a
/// failure.
pub fn store_failure(e: floodgate_store::StoreError) -> Reply {
    match e {
        floodgate_store::StoreError::InsufficientCapacity { cost, capacity, .. } => {
            Reply::Answer(Err(CheckError::InsufficientCapacity { cost, capacity }))
        }
        e => Reply::Failed(Box::new(e)),
    }
}

/// A store's one-item reservation answer as a [`ReserveReply`].
pub fn reserve_reply(
    result: Result<floodgate_store::BatchReservation, floodgate_store::StoreError>,
) -> ReserveReply {
    match result {
        Ok(r) => ReserveReply::Answer(Ok((r.batch.decisions[0], r.wait))),
        Err(e) => match store_failure(e) {
            Reply::Answer(Err(e)) => ReserveReply::Answer(Err(e)),
            Reply::Answer(Ok(_)) => unreachable!("store_failure never answers a decision"),
            Reply::Failed(e) => ReserveReply::Failed(e),
        },
    }
}

/// A store's one-item settle answer as a [`Reply`].
pub fn settle_reply(result: Result<Vec<Decision>, floodgate_store::StoreError>) -> Reply {
    match result {
        Ok(standings) => Reply::Answer(Ok(standings[0])),
        Err(e) => store_failure(e),
    }
}
