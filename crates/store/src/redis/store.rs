//! [`RedisStore`]: building it (the connection, the breaker, the coalescer, the deny cache,
//! the announcement), its accessors, and the breaker and timeout around every call.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{Clock, Policy, Timestamp};
use redis::{RedisError, Value};

use super::announce::{announce_call_parts, publish_live, spawn_announcer};
use super::breaker::{self, Breaker};
use super::coalesce;
use super::config::{is_tls_url, RedisStoreConfig, RedisTarget, TimeSource};
use super::connection::{connect, duration_ms, to_store_error, Conn};
use super::{deny_cache, evictions, health, instances, invalidations, keys};
use crate::{BatchDecision, CheckItem, StoreError};

/// The Redis / Redis Cluster [`Store`](crate::Store). See the [module docs](super).
///
/// # Examples
/// Needs a Redis server (so not run here).
///
/// ```no_run
/// use std::sync::Arc;
/// use floodgate_core::{AlgorithmKind, Policy, SystemClock};
/// use floodgate_store::redis::{RedisStore, RedisStoreConfig};
/// use floodgate_store::{CheckItem, Store, StoreError};
///
/// # async fn example() -> Result<(), StoreError> {
/// let config = RedisStoreConfig::standalone("redis://127.0.0.1:6379/0");
/// let store = RedisStore::new(config, Arc::new(SystemClock))?;
/// // Optional: logs a warning when Redis may evict limiter keys, and loads the scripts.
/// store.startup_check().await?;
/// let policy = Policy::new(AlgorithmKind::Gcra, "100/min".parse().unwrap()).unwrap();
/// let item = CheckItem { rule: "per-user", policy: &policy, key: "user=alice", cost: 1 };
/// let batch = store.check(&[item]).await?;
/// println!("allowed: {}, retry after: {:?} us", batch.allowed, batch.decisions[0].retry_after);
/// # Ok(())
/// # }
/// ```
pub struct RedisStore {
    pub(super) conn: Conn,
    /// Standalone Redis: the client, for the startup check's own connection attempt.
    pub(super) client: Option<redis::Client>,
    /// `Some` on standalone Redis with [`RedisStoreConfig::coalesce`] > 0.
    pub(super) coalescer: Option<Arc<coalesce::Coalescer>>,
    pub(super) config: RedisStoreConfig,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) breaker: Arc<Breaker>,
    /// Readiness: when the last readiness `PING` went out (store clock, µs; 0: never).
    pub(super) ping_at: std::sync::atomic::AtomicU64,
    /// Readiness: whether the probe says not ready (its last answer was an error, or its last
    /// [`PROBE_TIMEOUTS_IN_A_ROW`](super::readiness::PROBE_TIMEOUTS_IN_A_ROW) timed out).
    pub(super) ping_failed: std::sync::atomic::AtomicBool,
    /// Readiness: how many probes in a row timed out.
    pub(super) probe_timeouts: std::sync::atomic::AtomicU32,
    /// Whether the last readiness probe that did not time out was answered: a timeout is
    /// forgiven only after an answered probe, never before the first (a Redis down at
    /// startup times out on the shared connection, which retries in the background).
    pub(super) probe_answered: std::sync::atomic::AtomicBool,
    /// Readiness: `evicted_keys` per node (see [`evictions`]).
    pub(super) evictions: evictions::Evictions,
    /// `Some` with [`RedisStoreConfig::deny_cache`] (not on a cluster).
    pub(super) deny_cache: Option<Arc<deny_cache::DenyCache>>,
    /// This process's id in the instance set, and the live count last seen (0: none yet).
    pub(super) instance_id: String,
    pub(super) live_instances: Arc<std::sync::atomic::AtomicU64>,
    /// Cluster: a breaker per master, for the calls on keys (see
    /// [`shard_breakers`](super::shard_breakers)); `breaker` guards the others.
    pub(super) shard_breakers: Option<super::shard_breakers::ShardBreakers>,
    /// Readiness: the outcomes of the last seconds' calls (see [`health`]).
    pub(super) health: health::Health,
    /// Cluster: the same per master, and its probes (see [`shards`](super::shards) and
    /// [`shard_probe`](super::shard_probe)).
    pub(super) shards: Option<Arc<super::shards::Shards>>,
}

/// Where the deny cache subscribes: the standalone server or the Sentinel master; `None` on a
/// cluster (no deny cache there).
fn deny_cache_source(conn: &Conn, client: Option<&redis::Client>) -> Option<invalidations::Source> {
    match conn {
        Conn::Single(_) => client.map(|c| invalidations::Source::Standalone(Box::new(c.clone()))),
        Conn::Sentinel(link) => Some(invalidations::Source::Sentinel(Arc::downgrade(link))),
        Conn::Cluster(_) => None,
    }
}

/// Pause between two recovery `PING`s that failed at once.
const RECOVERY_PING_PAUSE: Duration = Duration::from_millis(10);

/// The labels of `floodgate_store_redis_errors_total{reason}`: `timeout` and `unavailable`
/// (a call that went to Redis and failed), `circuit_open` (failed fast by the open breaker,
/// never sent).
pub const ERROR_REASONS: [&str; 3] = ["timeout", "unavailable", "circuit_open"];

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .field("breaker_open", &self.breaker.is_open())
            .finish_non_exhaustive()
    }
}

/// A call's breaker permits whose outcomes are not yet recorded (one per breaker of its
/// route, in order); abandoned if dropped before [`take`](Self::take).
struct PendingPermits<'a> {
    breakers: &'a [(Arc<Breaker>, Option<&'a str>)],
    permits: smallvec::SmallVec<[breaker::Permit; 2]>,
}

impl PendingPermits<'_> {
    fn take(mut self) -> smallvec::SmallVec<[breaker::Permit; 2]> {
        std::mem::take(&mut self.permits)
    }
}

impl Drop for PendingPermits<'_> {
    fn drop(&mut self) {
        for ((breaker, _), permit) in self.breakers.iter().zip(self.permits.drain(..)) {
            breaker.abandon(permit);
        }
    }
}

impl RedisStore {
    /// A store for `config`, reading time (for [`TimeSource::Caller`] and the circuit breaker)
    /// from `clock`. Connects lazily: building the store never waits for Redis, and a store
    /// built while Redis is down starts working once Redis answers. Must be called inside a
    /// Tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when a URL cannot be parsed, or the prefix contains `{` or
    /// `}` (a hash tag would put every key in one cluster slot).
    pub fn new(config: RedisStoreConfig, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        if config.prefix.contains(['{', '}']) {
            return Err(StoreError::Unavailable {
                reason: format!(
                    "redis key prefix {:?} must not contain '{{' or '}}': a hash tag in the \
                     prefix would put every key in one cluster slot",
                    config.prefix
                ),
            });
        }
        let tls = check_tls(&config)?;
        let (conn, standalone_client) = connect(&config, tls)?;
        let breaker = Arc::new(Breaker::new(
            config.breaker_failures,
            u64::try_from(config.breaker_cool_down.as_micros()).unwrap_or(u64::MAX),
            u64::try_from(config.breaker_window.as_micros()).unwrap_or(u64::MAX),
        ));
        let coalescer = (config.coalesce > 0 && !matches!(conn, Conn::Cluster(_))).then(|| {
            Arc::new(coalesce::Coalescer::new(
                conn.clone(),
                duration_ms(config.ttl_extra),
                config.coalesce,
            ))
        });
        // Present from the start, so dashboards and alerts see 0 rather than nothing.
        for reason in ERROR_REASONS {
            metrics::counter!("floodgate_store_redis_errors_total", "reason" => reason)
                .increment(0);
        }
        metrics::gauge!("floodgate_store_breaker_open").increment(0.0);
        for counter in [
            "floodgate_store_redis_evicted_keys_total",
            "floodgate_store_redis_refunds_total",
            "floodgate_store_redis_script_reloads_total",
            "floodgate_store_redis_out_of_memory_answers_total",
        ] {
            metrics::counter!(counter).increment(0);
        }
        if config.deny_cache {
            metrics::counter!("floodgate_store_deny_cache_hits_total").increment(0);
            metrics::counter!("floodgate_store_deny_cache_invalidations_total").increment(0);
        }
        let deny_cache = deny_cache_source(&conn, standalone_client.as_ref())
            .filter(|_| config.deny_cache)
            .map(|source| {
                let cache = Arc::new(deny_cache::DenyCache::new(config.deny_cache_keys));
                metrics::gauge!("floodgate_store_deny_cache_live").set(0.0);
                invalidations::spawn(
                    &cache,
                    source,
                    deny_cache::channel(&config.prefix),
                    config.connect_timeout,
                    config.timeout,
                );
                cache
            });
        let instance_id = instances::process_id(clock.now());
        let live_instances = Arc::new(std::sync::atomic::AtomicU64::new(0));
        if config.announce {
            spawn_announcer(
                conn.clone(),
                announce_call_parts(&config, &instance_id),
                Arc::downgrade(&live_instances),
                config.timeout.max(config.connect_timeout),
            );
        }
        let shards = match &config.target {
            RedisTarget::Cluster(nodes) => Some(Arc::new(super::shards::Shards::new(nodes))),
            _ => None,
        };
        if let Some(shards) = &shards {
            for outcome in ["sent", "reused"] {
                metrics::counter!("floodgate_store_redis_slot_refreshes_total", "outcome" => outcome)
                    .increment(0);
            }
            super::shard_probe::spawn(
                Arc::downgrade(shards),
                conn.clone(),
                config.prefix.clone(),
                config.connect_timeout + config.timeout,
            );
        }
        let shard_breakers = shards.is_some().then(|| {
            super::shard_breakers::ShardBreakers::new(
                config.breaker_failures,
                u64::try_from(config.breaker_cool_down.as_micros()).unwrap_or(u64::MAX),
                u64::try_from(config.breaker_window.as_micros()).unwrap_or(u64::MAX),
            )
        });
        Ok(Self {
            conn,
            client: standalone_client,
            coalescer,
            config,
            clock,
            breaker,
            ping_at: std::sync::atomic::AtomicU64::new(0),
            ping_failed: std::sync::atomic::AtomicBool::new(false),
            probe_timeouts: std::sync::atomic::AtomicU32::new(0),
            probe_answered: std::sync::atomic::AtomicBool::new(false),
            evictions: evictions::Evictions::default(),
            instance_id,
            live_instances,
            deny_cache,
            shard_breakers,
            health: health::Health::default(),
            shards,
        })
    }

    /// The number of Floodgate processes announced in this Redis when this one last announced
    /// itself (see [`instances`]), this one included; 0 before the first announcement
    /// succeeded. Shared: the handle follows every later announcement.
    pub fn live_instances(&self) -> Arc<std::sync::atomic::AtomicU64> {
        Arc::clone(&self.live_instances)
    }

    /// Announces this process now (what the background task of
    /// [`RedisStoreConfig::announce`] does every second) and returns the live count, also
    /// kept for [`live_instances`](Self::live_instances). Uses the decision clock: with
    /// [`TimeSource::Caller`], the store's clock (so tests can expire announcements). Bounded
    /// by the timeout; around the breaker and the error counters.
    ///
    /// # Errors
    /// [`StoreError::Timeout`] / [`StoreError::Unavailable`].
    pub async fn announce(&self) -> Result<u64, StoreError> {
        let mut parts = announce_call_parts(&self.config, &self.instance_id);
        if self.config.time_source == TimeSource::Caller {
            parts.now = Some(self.clock.now());
        }
        let n = tokio::time::timeout(self.config.timeout, parts.send(&self.conn))
            .await
            .map_err(|_| StoreError::Timeout {
                after_ms: duration_ms(self.config.timeout),
            })?
            .map_err(|e| to_store_error(e, self.config.timeout))?;
        publish_live(&self.live_instances, n);
        Ok(n)
    }

    /// Whether the deny cache ([`RedisStoreConfig::deny_cache`]) answers now: `false` without
    /// it, on a cluster, and while its subscription to the other processes' invalidations is
    /// not confirmed (see [`deny_cache`](super::deny_cache)); with it, true within about a
    /// round trip of the store's start.
    pub fn deny_cache_live(&self) -> bool {
        self.deny_cache.as_ref().is_some_and(|c| c.is_live())
    }

    /// The deny cache's invalidations received so far on its subscription (every process's
    /// resets, settles and reservations that can end a denial early, this one's included); 0
    /// without the cache.
    pub fn deny_cache_invalidations(&self) -> u64 {
        self.deny_cache.as_ref().map_or(0, |c| c.received())
    }

    /// The deny cache's subscriptions confirmed so far: 1 after the first, one more after
    /// each time it failed and was made again (each turned the cache on, empty); 0 without
    /// the cache.
    pub fn deny_cache_subscriptions(&self) -> u64 {
        self.deny_cache.as_ref().map_or(0, |c| c.subscriptions())
    }

    /// The configuration in force.
    pub fn config(&self) -> &RedisStoreConfig {
        &self.config
    }

    /// `true` for a Redis Cluster target.
    pub fn is_cluster(&self) -> bool {
        matches!(self.config.target, RedisTarget::Cluster(_))
    }

    /// The Redis key holding the state of `key` under rule `rule` and policy `policy` (see
    /// [`keys`]; the arguments of [`Store::inspect`](crate::Store::inspect)): the way for an
    /// operator to find a key, since names are hashes (`prefix` + 11 base64url characters).
    pub fn key_name(&self, rule: &str, policy: &Policy, key: &str) -> String {
        keys::state_key(&self.config.prefix, rule, policy, key)
    }

    /// [`Store::check`](crate::Store::check) at a caller-supplied `now` (microseconds since the
    /// epoch), whatever the configured [`TimeSource`].
    ///
    /// # Errors
    /// As [`Store::check`](crate::Store::check).
    pub async fn check_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreError> {
        self.run(items, Some(now), true).await
    }

    /// [`Store::peek`](crate::Store::peek) at a caller-supplied `now`.
    ///
    /// # Errors
    /// As [`Store::peek`](crate::Store::peek).
    pub async fn peek_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreError> {
        self.run(items, Some(now), false).await
    }

    /// Runs `fut` (one store operation, possibly several round trips) through the store's
    /// circuit breaker and the timeout, mapping errors: for calls that name no key (on a
    /// cluster, calls on keys go through [`guarded_keys`](Self::guarded_keys)).
    pub(super) async fn guarded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        self.guarded_by(&[(Arc::clone(&self.breaker), None)], fut)
            .await
    }

    /// [`guarded`](Self::guarded) for a call on `keys` (names in Redis): on a cluster,
    /// through the breaker of each master of their slots (see
    /// [`shard_breakers`](super::shard_breakers)), so a dead master fails only its own
    /// slots' calls fast.
    pub(super) async fn guarded_keys<'k, T>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
        fut: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match &self.shard_breakers {
            Some(breakers) => {
                let route = breakers.route(keys, self.shards.as_deref());
                self.guarded_by(&route, fut).await
            }
            None => self.guarded(fut).await,
        }
    }

    /// Runs `fut` through every breaker of `route` (each with a key of the call for its
    /// recovery watch, or none: `PING`) and the timeout.
    async fn guarded_by<T>(
        &self,
        route: &[(Arc<Breaker>, Option<&str>)],
        fut: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        // Until the outcomes are recorded: if this future is dropped mid-call (or a later
        // breaker refuses), each breaker forgets its permit (a dropped probe would otherwise
        // block every later probe).
        let mut pending = PendingPermits {
            breakers: route,
            permits: smallvec::SmallVec::new(),
        };
        for (breaker, _) in route {
            let permit = breaker.permit(&*self.clock).inspect_err(|_| {
                metrics::counter!("floodgate_store_redis_errors_total", "reason" => "circuit_open")
                    .increment(1);
            })?;
            pending.permits.push(permit);
        }
        let result = match tokio::time::timeout(self.config.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(to_store_error(e, self.config.timeout)),
            Err(_) => Err(StoreError::Timeout {
                after_ms: duration_ms(self.config.timeout),
            }),
        };
        self.health.record(self.clock.now(), result.is_ok());
        if let Err(e) = &result {
            let reason = if matches!(e, StoreError::Timeout { .. }) {
                "timeout"
            } else {
                "unavailable"
            };
            metrics::counter!("floodgate_store_redis_errors_total", "reason" => reason)
                .increment(1);
        }
        for ((breaker, key), permit) in route.iter().zip(pending.take()) {
            if let Err(e) = &result {
                breaker.note_cause(e);
                if let Some(key) = key {
                    breaker.note_probe_key(key);
                }
            }
            breaker.record(permit, result.is_ok(), &*self.clock);
            if breaker.start_watch() {
                self.watch_recovery(breaker);
            }
        }
        result
    }

    /// Starts the recovery watch of an open breaker (`breaker.rs`): a task that sends `PING`
    /// (on a cluster: `EXISTS` on a key of the last failed call, see [`recovery_probe`])
    /// after `PING` (each waiting up to `connect_timeout + timeout`, which includes waiting
    /// for the background reconnection) until one succeeds, which closes the breaker, or
    /// until the breaker closed otherwise or the store is dropped. So decisions return to
    /// Redis one reconnection after Redis accepts connections again (the reconnection is
    /// retried every 10 to [`RECONNECT_MAX_DELAY`](super::RECONNECT_MAX_DELAY), twice that with jitter), not at the next
    /// cool-down. The `PING`s count in no error metric.
    fn watch_recovery(&self, breaker: &Arc<Breaker>) {
        let breaker = Arc::downgrade(breaker);
        let conn = self.conn.clone();
        let clock = Arc::clone(&self.clock);
        let wait = self.config.connect_timeout + self.config.timeout;
        tokio::spawn(async move {
            loop {
                let Some(probe) = breaker
                    .upgrade()
                    .map(|b| recovery_probe(b.probe_key.lock().as_deref()))
                else {
                    return;
                };
                let answered = matches!(
                    tokio::time::timeout(wait, conn.query::<Value>(&probe)).await,
                    Ok(Ok(_))
                );
                let Some(breaker) = breaker.upgrade() else {
                    return;
                };
                if answered {
                    breaker.recovered(&*clock);
                }
                if !breaker.is_open() && !breaker.watch_ended() {
                    return;
                }
                if !answered {
                    // A PING that failed at once (no connection yet on a cluster): do not spin.
                    tokio::time::sleep(RECOVERY_PING_PAUSE).await;
                }
            }
        });
    }

    pub(super) fn now_arg(&self, now: Option<Timestamp>) -> Option<Timestamp> {
        now.or(match self.config.time_source {
            TimeSource::Server => None,
            TimeSource::Caller => Some(self.clock.now()),
        })
    }
}

/// The command of the breaker's recovery watch: `EXISTS <key>` for a key of the last failed
/// decision call on a cluster, else `PING`. On a cluster any live node answers `PING`, also
/// while the slot that failed has no master or the cluster is down (`CLUSTERDOWN`): a `PING`
/// closed the breaker at once, the next calls failed again and opened it, 60 times in 20 s
/// (issue 30). `EXISTS` on that key goes where its slot lives and fails as the decision did
/// (`CLUSTERDOWN`, a dead master), a cheap read that writes nothing.
fn recovery_probe(key: Option<&str>) -> redis::Cmd {
    match key {
        Some(key) => {
            let mut cmd = redis::cmd("EXISTS");
            cmd.arg(key);
            cmd
        }
        None => redis::cmd("PING"),
    }
}

impl RedisStore {
    /// The secret shared by every process on this store, kept under
    /// [`keys::secret_key`] (`<prefix>secret:reservation`): `candidate` when none was kept
    /// yet, else the one kept before. `SET NX` makes the first writer win atomically (of
    /// processes starting together, exactly one's candidate is kept) and `GET` reads the
    /// winner. The key has no TTL: it must outlive every token signed with it; deleting it
    /// (and restarting every process) rotates the secret.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] (after `connect_timeout +
    /// timeout`) when Redis cannot be asked.
    pub async fn share_secret(&self, candidate: &str) -> Result<String, StoreError> {
        let name = keys::secret_key(&self.config.prefix);
        let mut set = redis::cmd("SET");
        set.arg(&name).arg(candidate).arg("NX");
        let mut get = redis::cmd("GET");
        get.arg(&name);
        // Outside the circuit breaker, as `startup_check`: this is no request, and its
        // outcome must not move the breaker's window.
        let wait = self.config.connect_timeout + self.config.timeout;
        let attempt = async {
            let _: Option<String> = self.conn.query(&set).await?;
            self.conn.query::<Option<String>>(&get).await
        };
        let kept = tokio::time::timeout(wait, attempt)
            .await
            .map_err(|_| StoreError::Timeout {
                after_ms: duration_ms(wait),
            })?
            .map_err(|e| to_store_error(e, wait))?;
        // Only a DEL between the two commands leaves nothing: ours was the last word.
        Ok(kept.unwrap_or_else(|| candidate.to_string()))
    }

    /// Whether Redis holds state for `key` under `rule` and `policy` (`EXISTS` on its one
    /// name): false for a key never checked (or only peeked) and for one whose TTL ran out.
    /// For admin APIs, which tell an unknown key from one whose quota is full again.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] as for every call.
    pub async fn holds(&self, rule: &str, policy: &Policy, key: &str) -> Result<bool, StoreError> {
        let name = keys::state_key(&self.config.prefix, rule, policy, key);
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&name);
        self.guarded_keys([name.as_str()], async {
            Ok(self.conn.query::<u64>(&cmd).await? > 0)
        })
        .await
    }
}

/// Whether `config` connects over TLS (`rediss://`): every URL or none, with its files
/// readable; installs the process's crypto provider when it does.
fn check_tls(config: &RedisStoreConfig) -> Result<bool, StoreError> {
    let urls: Vec<&str> = match &config.target {
        RedisTarget::Standalone(url) => vec![url.as_str()],
        RedisTarget::Cluster(nodes) => nodes.iter().map(String::as_str).collect(),
        RedisTarget::Sentinel { sentinels, .. } => sentinels.iter().map(String::as_str).collect(),
    };
    let tls = urls.iter().any(|u| is_tls_url(u));
    if tls && !urls.iter().all(|u| is_tls_url(u)) {
        return Err(StoreError::Unavailable {
            reason: "redis cluster nodes or sentinels mix rediss:// (TLS) and plain URLs".into(),
        });
    }
    if !tls && !config.tls.is_empty() {
        return Err(StoreError::Unavailable {
            reason: "redis TLS files (CA, client certificate) are given, but the URL is not \
                     rediss://"
                .into(),
        });
    }
    if tls {
        config
            .tls
            .check()
            .map_err(|(field, e)| StoreError::Unavailable {
                reason: format!("redis TLS {field}: {e}"),
            })?;
        // One process-wide crypto provider for rustls (ring); already installed is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    Ok(tls)
}
