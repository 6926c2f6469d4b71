//! [`RedisStore`]: state in Redis or Redis Cluster, so that many Floodgate processes share one
//! limit exactly (feature `redis`).
//!
//! # How a batch is decided
//! Every algorithm is a Lua script implementing the integer formulas of `docs/spec/` (files in
//! `crates/store/lua/`, assembled by [`scripts`]). A batch of [`CheckItem`]s becomes one
//! `EVALSHA` of the batch script per *slot group*: the script reads every state, decides the
//! items in order on Lua tables (an item sees earlier same-key items' tentative consumption),
//! and writes back only if every item admits, each key with a TTL of
//! `ceil(reset_after / 1000)` ms (one `SET .. PX`; the values are described in `docs/redis.md`,
//! "Values": one packed integer for GCRA and the fixed window). Lua scripts run atomically in
//! Redis, so concurrent processes never lose an update and a batch is never half-charged. No
//! key is ever written without a TTL.
//!
//! - **Standalone Redis**: the whole batch is one script, one round trip, atomic. Batches that
//!   wait while [`RedisStoreConfig::coalesce`] calls are in flight are *coalesced*: sent
//!   together as one call of `lua/multi.lua`, each still all-or-nothing on its own (see
//!   `coalesce.rs`: no timers, per-request errors, timeouts and breaker as before).
//! - **Redis Cluster**: keys are grouped by slot (key names are short hashes of
//!   `(rule, policy, key)`, see [`keys`]; the slot is CRC16 of the whole name, out of the
//!   user's reach). One group is one script, atomic, as above. A batch whose
//!   keys span several slots uses the **cross-slot protocol**: all groups are sent at once as
//!   checks; if every group admits, the batch is admitted. If any group denies (or fails), every
//!   group that did commit is *refunded* by the refund script (`lua/refund.lua`, which documents
//!   the exact refund per algorithm; each is exact: the state ends as if the refunded units had
//!   never been consumed), and the batch is denied with every item's peek decision. The window
//!   of imprecision: between a group's commit and its refund (one round trip, about 0.1 ms on a
//!   LAN), other requests on those keys see the tentative consumption and may be denied; if the
//!   refund itself fails (Redis unreachable), the units stay consumed until the key expires.
//!   Both err towards denying: the protocol never admits more than the limit.
//!
//! # Time
//! By default ([`TimeSource::Server`]) the script reads Redis' own clock (`TIME`), so processes
//! with skewed clocks still agree on every window and refill. [`TimeSource::Caller`] passes the
//! store's [`Clock`](floodgate_core::Clock) instead (tests, `simulate`); [`RedisStore::check_at`] passes any time.
//!
//! # Failures
//! Every call is bounded by [`RedisStoreConfig::timeout`] ([`StoreError::Timeout`]); other
//! failures are [`StoreError::Unavailable`]. Connections are multiplexed (concurrent calls are
//! pipelined on one connection) and re-established in the background after a loss. After
//! [`RedisStoreConfig::breaker_failures`] failures with no success for
//! [`RedisStoreConfig::breaker_window`] since the current failures began (so a stall that times
//! out many concurrent calls at once, even after an idle period, does not count as an outage;
//! see `breaker.rs`) a circuit breaker fails every call
//! at once for [`RedisStoreConfig::breaker_cool_down`], then lets one probe through; decisions
//! return to Redis on the first successful probe. What a failed call means for the request
//! (open, closed, or the local fallback of [`FallbackStore`](crate::fallback::FallbackStore)) is
//! the caller's policy. A call that timed out may still have been applied by Redis.
//!
//! # Layout
//! `config.rs` (the settings), `connection.rs` (the connection and one script call),
//! `store.rs` ([`RedisStore`]: building it, the breaker around every call), `batch.rs` (the
//! batch protocol above), `reply.rs` (slot groups, script arguments and replies), `reserve.rs`
//! (reservations and settles), `readiness.rs` (readiness probes and the startup check),
//! `announce.rs` (the instance announcement).

use floodgate_core::{Decision, Policy};

use crate::{BatchDecision, CheckItem, Store, StoreError};

mod announce;
mod asking;
mod auth;
pub use auth::MasterAuth;
mod batch;
mod breaker;
mod calendar;
mod calendar_batch;
mod shard_breakers;
pub use calendar::calendar_key;
mod coalesce;
mod config;
mod connection;
pub mod deny_cache;
pub mod evictions;
pub mod health;
pub mod instances;
pub mod invalidations;
pub mod keys;
mod readiness;
mod reply;
mod reserve;
pub mod scripts;
mod sentinels;
mod shard_probe;
pub mod shards;
mod store;
pub mod topology;
// The test harness (feature `testing`): real servers on free ports, not for production use.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use config::{
    RedisStoreConfig, RedisTarget, RedisTls, TimeSource, DENY_CACHE_ENTRY_BYTES, DENY_CACHE_KEYS,
    SENTINEL_POLL,
};
pub use connection::RECONNECT_MAX_DELAY;
pub use readiness::{policy_may_evict, ServerCheck, READINESS_PING_INTERVAL};
pub use shard_probe::SHARD_PROBE_INTERVAL;
pub use store::{RedisStore, ERROR_REASONS};

impl Store for RedisStore {
    fn is_shared(&self) -> bool {
        true
    }

    /// [`RedisStoreConfig::timeout`]: every call is bounded by it.
    fn round_trip_deadline(&self) -> Option<std::time::Duration> {
        Some(self.config.timeout)
    }

    /// [`RedisStore::share_secret`].
    async fn shared_secret(&self, candidate: &str) -> Result<Option<String>, StoreError> {
        RedisStore::share_secret(self, candidate).await.map(Some)
    }

    /// [`RedisStore::readiness`]: up, or down with the reason; on a cluster each master's
    /// recent calls ([`RedisStore::shard_readiness`]).
    async fn ready_state(&self) -> crate::ReadyState {
        let readiness = match RedisStore::readiness(self).await {
            Ok(()) => crate::Readiness::Up,
            Err(e) => crate::Readiness::Down(e.to_string()),
        };
        let shards = self.is_cluster().then(|| {
            self.shard_readiness()
                .into_iter()
                .map(|s| crate::ShardState {
                    slots: s.slot_text(),
                    node: s.node,
                    calls: s.calls,
                    failed: s.failed,
                    ready: s.ready,
                    reason: s.reason,
                })
                .collect()
        });
        crate::ReadyState { readiness, shards }
    }

    async fn holds(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> Result<Option<bool>, StoreError> {
        RedisStore::holds(self, rule, policy, key).await.map(Some)
    }

    fn reserve(
        &self,
        items: &[CheckItem<'_>],
        max_wait: floodgate_core::Micros,
    ) -> impl std::future::Future<Output = Result<crate::BatchReservation, StoreError>> + Send {
        self.reserve_run(items, None, max_wait)
    }

    fn settle(
        &self,
        items: &[crate::SettleItem<'_>],
    ) -> impl std::future::Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        self.settle_run(items, None)
    }

    fn check(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl std::future::Future<Output = Result<BatchDecision, StoreError>> + Send {
        self.run(items, None, true)
    }

    fn peek(
        &self,
        items: &[CheckItem<'_>],
    ) -> impl std::future::Future<Output = Result<BatchDecision, StoreError>> + Send {
        self.run(items, None, false)
    }

    fn reset(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl std::future::Future<Output = Result<bool, StoreError>> + Send {
        // The one name of (rule, policy, key): the state of the rule's other policies (under
        // other names) expires on its own.
        let name = keys::state_key(&self.config.prefix, rule, policy, key);
        tracing::debug!(rule, key, redis_key = %name, "redis store: reset");
        if let Some(cache) = &self.deny_cache {
            cache.invalidate(&name);
        }
        async move {
            // `DEL` and the deny caches' invalidation in one script (`reset.lua`).
            let keys = [name];
            let call = connection::ScriptCall {
                script: &scripts::RESET,
                source: scripts::RESET_SOURCE,
                keys: &keys,
                args: Vec::new(),
                now: None,
            };
            let deleted = self
                .guarded_keys(keys.iter().map(String::as_str), async {
                    Ok(self.conn.invoke::<u64>(&call).await? > 0)
                })
                .await;
            let [name] = keys;
            // Again once done (or failed): a check answered before the DEL caches nothing.
            if let Some(cache) = &self.deny_cache {
                cache.invalidate(&name);
            }
            deleted
        }
    }

    /// `SET <prefix>claim:<hash of id> 1 NX PX <ttl in ms, rounded up>` ([`keys::claim_key`]):
    /// one atomic command on one key, so exactly one of any number of processes (on a
    /// cluster too) gets `true`. The TTL runs on Redis' clock.
    fn claim(
        &self,
        id: &str,
        ttl: floodgate_core::Micros,
    ) -> impl std::future::Future<Output = Result<bool, StoreError>> + Send {
        let name = keys::claim_key(&self.config.prefix, id);
        let mut cmd = redis::cmd("SET");
        cmd.arg(&name)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(ttl.div_ceil(1_000).max(1));
        async move {
            self.guarded_keys([name.as_str()], async {
                // `OK` when set, nil when the key exists.
                let reply: Option<String> = self.conn.query(&cmd).await?;
                Ok(reply.is_some())
            })
            .await
        }
    }

    fn inspect(
        &self,
        rule: &str,
        policy: &Policy,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Decision, StoreError>> + Send {
        let rule = rule.to_string();
        let key = key.to_string();
        let policy = policy.clone();
        async move {
            let item = CheckItem {
                rule: &rule,
                policy: &policy,
                key: &key,
                cost: 0,
            };
            let batch = self.run(&[item], None, false).await?;
            Ok(batch.decisions[0])
        }
    }
}
