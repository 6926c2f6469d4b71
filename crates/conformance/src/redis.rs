//! [`RedisBackend`]: the golden vectors through `floodgate_store::redis::RedisStore` (feature
//! `redis`), on a standalone Redis or a Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{CheckError, ManualClock, Policy, Timestamp};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{CheckItem, SettleItem, StoreError};

use crate::{reserve_reply, settle_reply, Backend, BackendFailure, Reply, ReserveReply};

/// Runs each step as a one-item batch on a [`RedisStore`] with the step's time passed to the
/// script ([`RedisStore::check_at`]). [`Backend::reset`] switches to a new rule name, so every
/// key of the next case is a Redis key never written before.
#[derive(Debug)]
pub struct RedisBackend {
    name: String,
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
    case: u64,
    rule: String,
}

impl RedisBackend {
    /// A backend on `config` (its time source is forced to the caller's, and keys are kept an
    /// hour longer than their TTL, because vector times do not follow real time). `name`
    /// labels failures (`"redis"`, `"redis-cluster"`).
    ///
    /// # Errors
    /// When the runtime cannot start or a URL is invalid.
    pub fn new(name: &str, mut config: RedisStoreConfig) -> Result<Self, BackendFailure> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        config.time_source = TimeSource::Caller;
        config.ttl_extra = Duration::from_secs(3600);
        config.timeout = config.timeout.max(Duration::from_secs(2));
        let store = {
            let _guard = runtime.enter();
            RedisStore::new(config, Arc::new(ManualClock::new(0)))?
        };
        Ok(Self {
            name: name.to_string(),
            runtime,
            store,
            case: 0,
            rule: "conformance-0".into(),
        })
    }

    /// The store under test.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }
}

impl Backend for RedisBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn reset(&mut self) -> Result<(), BackendFailure> {
        self.case += 1;
        // A per-process nonce keeps reruns against one server apart too.
        self.rule = format!("conformance-{}-{}", std::process::id(), self.case);
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
        let item = CheckItem {
            rule: &self.rule,
            policy,
            key,
            cost,
        };
        let result = self.runtime.block_on(async {
            if peek {
                self.store.peek_at(&[item], now_us).await
            } else {
                self.store.check_at(&[item], now_us).await
            }
        });
        match result {
            Ok(batch) => Reply::Answer(Ok(batch.decisions[0])),
            Err(StoreError::InsufficientCapacity { cost, capacity, .. }) => {
                Reply::Answer(Err(CheckError::InsufficientCapacity { cost, capacity }))
            }
            Err(e) => Reply::Failed(Box::new(e)),
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
        let item = CheckItem {
            rule: &self.rule,
            policy,
            key,
            cost,
        };
        reserve_reply(
            self.runtime
                .block_on(self.store.reserve_at(&[item], now_us, max_wait)),
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
        let item = SettleItem {
            rule: &self.rule,
            policy,
            key,
            reserved,
            actual,
            scheduled_at,
        };
        settle_reply(self.runtime.block_on(self.store.settle_at(&[item], now_us)))
    }
}

impl crate::calendar::CalendarBackend for RedisBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn reset(&mut self) -> Result<(), BackendFailure> {
        Backend::reset(self)
    }

    fn check(
        &mut self,
        quota: &floodgate_core::calendar::CalendarQuota,
        key: &str,
        now_us: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Result<Result<floodgate_core::Decision, CheckError>, BackendFailure> {
        let item = floodgate_store::calendar::CalendarItem {
            rule: &self.rule,
            quota,
            key,
            cost,
        };
        let result =
            self.runtime
                .block_on(self.store.calendar_check_at(&[item], Some(now_us), !peek));
        match result {
            Ok(batch) => Ok(Ok(batch.decisions[0])),
            Err(StoreError::InsufficientCapacity { cost, capacity, .. }) => {
                Ok(Err(CheckError::InsufficientCapacity { cost, capacity }))
            }
            Err(e) => Err(Box::new(e)),
        }
    }
}
