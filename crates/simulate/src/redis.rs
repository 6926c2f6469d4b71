//! [`RedisCounters`]: the simulator's counters kept in Redis (`--store redis://HOST:PORT`).
//!
//! The decisions come from the same Lua scripts `floodgate serve` runs, at the simulated time
//! (the caller's `now`, [`RedisStore::check_at`]), so a run on Redis must admit exactly what
//! the in-process run admits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{
    AlgorithmKind, CheckError, Clock, Decision, Policy, Quota, SystemClock, Timestamp,
};
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{CheckItem, StoreError};

use super::setup::{
    counter_index, counter_policies, CounterError, CounterMode, CounterStore, Setup,
};

/// Counters in Redis, laid out like [`InProcessCounters`](super::setup::InProcessCounters):
/// one Redis key per key for `shared`, one per `(instance, key)` for `local` and `split` (the
/// rule name is `shared` or `instance-<i>`, the quota of `split` divided per instance).
///
/// Each value gets its own key prefix `fgsim:<pid>-<microseconds>-<sequence>:`, so two runs
/// (and the runs of one report: every algorithm, the shared reference) never see each other's
/// state. Owns a current-thread Tokio runtime: [`CounterStore::check`] blocks on one Redis
/// call per request.
pub struct RedisCounters {
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
    url: String,
    mode: CounterMode,
    policies: Vec<Policy>,
    /// The rule name of each counter, by [`counter_index`].
    rules: Vec<String>,
}

impl std::fmt::Debug for RedisCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCounters")
            .field("url", &self.url)
            .field("prefix", &self.store.config().prefix)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// Longest wait for one Redis call: generous, because a slow answer stops the run (a
/// simulation has no fallback) and a busy machine can stall a loopback call for a while.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Added to every key's TTL: keys expire on Redis' real clock while the run moves on the
/// simulated one, so without it a key of a 1 s policy could vanish mid-run. An hour outlives
/// any run; the keys are gone soon after.
const TTL_EXTRA: Duration = Duration::from_secs(3_600);

impl RedisCounters {
    /// Counters for `setup` on the Redis server at `url` (`redis://host:port[/db]`), each
    /// running `kind` on `quota` (or its split share). Pings the server once, so a wrong URL or
    /// a server that is down fails here rather than at the first request.
    ///
    /// # Errors
    /// An invalid setup (see [`counter_policies`]), a runtime that cannot start, or
    /// `redis at URL: ...` when the URL is invalid or the server does not answer.
    pub fn new(
        url: &str,
        kind: AlgorithmKind,
        quota: Quota,
        setup: &Setup,
    ) -> Result<Self, crate::error::Error> {
        let policies = counter_policies(kind, quota, setup)?;
        let rules = match setup.counter {
            CounterMode::Shared => vec!["shared".to_string()],
            CounterMode::Local | CounterMode::Split => (0..policies.len())
                .map(|i| format!("instance-{i}"))
                .collect(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                crate::error::Error::Store(format!(
                    "cannot start the runtime for the redis store: {e}"
                ))
            })?;
        let mut config = RedisStoreConfig::standalone(url);
        config.prefix = unique_prefix();
        config.timeout = CALL_TIMEOUT;
        config.connect_timeout = CALL_TIMEOUT;
        config.time_source = TimeSource::Caller;
        config.ttl_extra = TTL_EXTRA;
        let store = runtime
            .block_on(async {
                let store = RedisStore::new(config, Arc::new(SystemClock))?;
                store.ping().await?;
                Ok::<_, StoreError>(store)
            })
            .map_err(|e| {
                crate::error::Error::Store(format!(
                    "redis at {url}: {e} (is a Redis server listening there?)"
                ))
            })?;
        Ok(Self {
            runtime,
            store,
            url: url.to_string(),
            mode: setup.counter,
            policies,
            rules,
        })
    }
}

/// `fgsim:<pid>-<microseconds since the epoch>-<sequence in this process>:`: unique across
/// processes (pid and start time) and within one (the sequence).
fn unique_prefix() -> String {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    // The start time only tells processes apart (with the pid); it decides nothing.
    let micros = SystemClock.now();
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("fgsim:{}-{micros}-{sequence}:", std::process::id())
}

impl CounterStore for RedisCounters {
    fn check(
        &mut self,
        instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CounterError> {
        let counter = counter_index(self.mode, instance);
        let item = CheckItem {
            rule: &self.rules[counter],
            policy: &self.policies[counter],
            key,
            cost,
        };
        match self
            .runtime
            .block_on(self.store.check_at(std::slice::from_ref(&item), now))
        {
            Ok(batch) => batch.decisions.into_iter().next().ok_or_else(|| {
                CounterError::Store(format!("redis at {}: no decision for the item", self.url))
            }),
            Err(StoreError::InsufficientCapacity { cost, capacity, .. }) => {
                Err(CheckError::InsufficientCapacity { cost, capacity }.into())
            }
            Err(e) => Err(CounterError::Store(format!("redis at {}: {e}", self.url))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_unique_and_brace_free() {
        let (a, b) = (unique_prefix(), unique_prefix());
        assert_ne!(a, b);
        assert!(a.starts_with("fgsim:") && a.ends_with(':'));
        assert!(!a.contains(['{', '}']));
    }

    #[test]
    fn an_unreachable_server_is_a_clear_error() {
        // Port 1 on loopback: nothing listens there, the connection is refused at once.
        let setup = Setup {
            instances: 1,
            counter: CounterMode::Shared,
            balance: super::super::setup::Balance::RoundRobin,
        };
        let err = RedisCounters::new(
            "redis://127.0.0.1:1",
            AlgorithmKind::Gcra,
            "10/s".parse().unwrap(),
            &setup,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("redis at redis://127.0.0.1:1: "),
            "{err}"
        );
    }
}
