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
//! store's [`Clock`] instead (tests, `simulate`); [`RedisStore::check_at`] passes any time.
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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AlgorithmKind, Clock, Decision, Policy, Timestamp};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{FromRedisValue, RedisError, Value};
use tokio::sync::OnceCell;

use crate::{BatchDecision, CheckItem, Store, StoreError};

mod asking;
mod breaker;
mod calendar;
pub use calendar::calendar_key;
mod coalesce;
pub mod deny_cache;
pub mod evictions;
pub mod health;
pub mod instances;
pub mod keys;
mod reserve;
pub mod scripts;
// The test harness (feature `testing`): real servers on free ports, not for production use.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use breaker::Breaker;

/// Where the Redis data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis server: `redis://host:port/db`, `rediss://host:port/db` (TLS, see
    /// [`RedisTls`]) or `redis+unix:///path`.
    Standalone(String),
    /// A Redis Cluster, given by one or more of its nodes (`redis://host:port` each, or all
    /// `rediss://` for TLS).
    Cluster(Vec<String>),
    /// The master of `master_name` as Redis Sentinel reports it, given by sentinels
    /// (`redis://host:26379` each; no TLS). The store follows a failover (see
    /// [`SENTINEL_POLL`]).
    Sentinel {
        /// The sentinels' URLs.
        sentinels: Vec<String>,
        /// The monitored master's name (`sentinel monitor <name> ...`).
        master_name: String,
    },
}

/// How often a store on [`RedisTarget::Sentinel`] asks the sentinels for the current master
/// (a background task). A failover is followed within about this long after the sentinels
/// promote a replica.
pub const SENTINEL_POLL: Duration = Duration::from_millis(250);

/// TLS for `rediss://` targets (rustls, through the `redis` crate). The server's certificate
/// is always verified, and its name must match the URL's host: against the CA certificates
/// of [`ca_pem`](Self::ca_pem), or else against the system's trust store. Empty (the default)
/// means system roots and no client certificate. Debug output never shows the contents.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// PEM CA certificate(s) that verify the server, instead of the system's trust store.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain, for mutual TLS (with [`client_key_pem`](Self::client_key_pem)).
    pub client_cert_pem: Option<Vec<u8>>,
    /// PEM private key of the client certificate.
    pub client_key_pem: Option<Vec<u8>>,
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |v: &Option<Vec<u8>>| if v.is_some() { "<set>" } else { "<none>" };
        f.debug_struct("RedisTls")
            .field("ca_pem", &set(&self.ca_pem))
            .field("client_cert_pem", &set(&self.client_cert_pem))
            .field("client_key_pem", &set(&self.client_key_pem))
            .finish()
    }
}

impl RedisTls {
    /// `true` when nothing is set (system roots, no client certificate).
    pub fn is_empty(&self) -> bool {
        self.ca_pem.is_none() && self.client_cert_pem.is_none() && self.client_key_pem.is_none()
    }

    /// Checks that the PEM contents parse (at least one CA certificate, a certificate chain,
    /// a private key) and that a client certificate comes with its key, without connecting.
    ///
    /// # Errors
    /// The first problem, naming the field (`ca_pem`, `client_cert_pem`, `client_key_pem`)
    /// and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = |pem: &[u8]| -> Result<usize, String> {
            let n = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("not PEM certificates: {e}"))?
                .len();
            if n == 0 {
                return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
            }
            Ok(n)
        };
        if let Some(pem) = &self.ca_pem {
            certs(pem).map_err(|e| ("ca_pem", e))?;
        }
        match (&self.client_cert_pem, &self.client_key_pem) {
            (Some(cert), Some(key)) => {
                certs(cert).map_err(|e| ("client_cert_pem", e))?;
                PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                    (
                        "client_key_pem",
                        format!("holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
                    )
                })?;
            }
            (Some(_), None) => {
                return Err((
                    "client_key_pem",
                    "a client certificate needs its private key".into(),
                ))
            }
            (None, Some(_)) => {
                return Err((
                    "client_cert_pem",
                    "a client private key needs its certificate".into(),
                ))
            }
            (None, None) => {}
        }
        Ok(())
    }

    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: match (&self.client_cert_pem, &self.client_key_pem) {
                (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
                _ => None,
            },
            root_cert: self.ca_pem.clone(),
        }
    }
}

/// `true` for a TLS URL (`rediss://`).
fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://")
}

/// Which clock decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// Redis' `TIME` inside the script: one clock for every process (the default).
    #[default]
    Server,
    /// The store's [`Clock`], passed to the script (tests, simulations).
    Caller,
}

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// The server or cluster.
    pub target: RedisTarget,
    /// Prepended to every key name. Default `"fg:"` (3 bytes: the name then has 14 bytes, the
    /// most that fits Redis' smallest key allocation; see [`keys`]). Must not contain `{` or
    /// `}` (a hash tag would put every key in one cluster slot).
    pub prefix: String,
    /// Longest wait for one store call (all its round trips). Default 50 ms. The trade-off: a
    /// longer timeout delays a decision when Redis is slow; a shorter one sends healthy but
    /// momentarily slow calls (a loaded shared host, 64 calls queued on one connection) to the
    /// failure mode. The former 10 ms timed out hundreds of calls within seconds against a
    /// healthy Redis on a loaded 2-core host; 50 ms is many times a healthy p99 (about 1 ms on
    /// loopback) and still bounds a dead Redis's cost per request (Envoy's rate-limit filter
    /// defaults to 20 ms). See `docs/redis.md`, "Failures".
    pub timeout: Duration,
    /// Longest wait for a (re)connection attempt. Default 250 ms.
    pub connect_timeout: Duration,
    /// Which clock decides. Default [`TimeSource::Server`].
    pub time_source: TimeSource,
    /// Added to every key's TTL. Default 0. A longer TTL never changes a decision (a state at
    /// or after its `reset_after` decides like a fresh one); tests whose caller clock does not
    /// follow real time set it so that keys do not expire in real time while still in use.
    pub ttl_extra: Duration,
    /// Failures since the last success that, with [`breaker_window`](Self::breaker_window),
    /// open the circuit breaker. Default 5.
    pub breaker_failures: u32,
    /// The breaker opens only when Redis has been failing for this long: no call has
    /// succeeded since the first failed call of the current streak started (and
    /// `breaker_failures` calls failed). Idle time does not count: a stall that times out many
    /// concurrent calls at once does not open it, even after minutes without traffic; a dead
    /// Redis does, this long after the first call that failed. Default 250 ms; zero opens on
    /// `breaker_failures` consecutive failures alone.
    pub breaker_window: Duration,
    /// How long an open breaker fails fast before letting one probe through. Default 1 s.
    pub breaker_cool_down: Duration,
    /// Answer repeated cost-1 checks of a key Redis just denied locally until its
    /// `retry_after`, without a round trip (see [`deny_cache`]: exact within this process,
    /// but a reset made through another process is not seen). Standalone Redis and Sentinel
    /// only (a cluster's refunds can give units back). Default `false`.
    pub deny_cache: bool,
    /// Announce this process in Redis every [`instances::ANNOUNCE_INTERVAL`] (a background
    /// task), so that [`RedisStore::live_instances`] counts the processes sharing this Redis
    /// (see [`instances`]). Default `false`.
    pub announce: bool,
    /// TLS settings for `rediss://` URLs (CA, client certificate). Default: none (system
    /// roots, no client certificate). Setting any of them requires `rediss://` URLs.
    pub tls: RedisTls,
    /// Coalescing (standalone Redis): at most this many script calls in flight; checks that
    /// arrive while all are out wait and then go together in the next call (see the module
    /// docs). Default 2. `0` turns coalescing off (one script call per batch, all pipelined).
    pub coalesce: usize,
}

impl RedisStoreConfig {
    /// Defaults for one Redis server at `url`.
    pub fn standalone(url: impl Into<String>) -> Self {
        Self::with_target(RedisTarget::Standalone(url.into()))
    }

    /// Defaults for a Redis Cluster reachable through `nodes`.
    pub fn cluster<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Self {
        Self::with_target(RedisTarget::Cluster(
            nodes.into_iter().map(Into::into).collect(),
        ))
    }

    /// Defaults for `target`.
    pub fn with_target(target: RedisTarget) -> Self {
        Self {
            target,
            prefix: "fg:".into(),
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(250),
            time_source: TimeSource::Server,
            ttl_extra: Duration::ZERO,
            breaker_failures: 5,
            breaker_window: Duration::from_millis(250),
            breaker_cool_down: Duration::from_secs(1),
            tls: RedisTls::default(),
            announce: false,
            deny_cache: false,
            coalesce: 2,
        }
    }
}

/// The connection: multiplexed (one TCP connection pipelines every concurrent call) and
/// self-healing.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<ClusterLink>),
    Sentinel(Arc<SentinelLink>),
}

/// The master of a Sentinel-monitored set: a connection to the address the sentinels name,
/// replaced when they name another (a failover).
struct SentinelLink {
    sentinel: tokio::sync::Mutex<redis::sentinel::Sentinel>,
    master_name: String,
    manager_config: ConnectionManagerConfig,
    /// The master's address and the connection to it; `None` until first found.
    current: parking_lot::Mutex<Option<(String, ConnectionManager)>>,
}

impl SentinelLink {
    /// The connection to the current master (asking the sentinels first if none is known).
    async fn manager(&self) -> Result<ConnectionManager, RedisError> {
        if let Some((_, m)) = self.current.lock().clone() {
            return Ok(m);
        }
        self.resolve().await
    }

    /// Asks the sentinels for the master (`redis` checks it answers `ROLE` as a master) and,
    /// when it is another address than the current one, connects to it instead.
    async fn resolve(&self) -> Result<ConnectionManager, RedisError> {
        let client = self
            .sentinel
            .lock()
            .await
            .async_master_for(&self.master_name, None)
            .await?;
        let addr = client.get_connection_info().addr().to_string();
        let mut current = self.current.lock();
        if let Some((known, m)) = current.as_ref() {
            if *known == addr {
                return Ok(m.clone());
            }
        }
        let manager = ConnectionManager::new_lazy_with_config(client, self.manager_config.clone())?;
        if current.is_some() {
            tracing::warn!(master = %addr, name = %self.master_name, "redis sentinel: following a failover to a new master");
        }
        *current = Some((addr, manager.clone()));
        Ok(manager)
    }
}

/// The background task of a Sentinel store: asks for the master every [`SENTINEL_POLL`] until
/// the store is dropped.
fn spawn_sentinel_poll(link: std::sync::Weak<SentinelLink>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SENTINEL_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(link) = link.upgrade() else {
                return;
            };
            let _ = tokio::time::timeout(SENTINEL_POLL * 4, link.resolve()).await;
        }
    });
}

/// A cluster connection made on first use, so that the store can be built while the cluster is
/// down (it connects once the cluster answers).
struct ClusterLink {
    client: ClusterClient,
    conn: OnceCell<ClusterConnection<asking::AskingConnection>>,
}

impl Conn {
    async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, RedisError> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(link) => cmd.query_async(&mut link.connection().await?).await,
            Conn::Sentinel(link) => cmd.query_async(&mut link.manager().await?).await,
        }
    }

    /// `cmd` on every master of a cluster (a map of node to reply), or on the one server.
    async fn query_all_masters(&self, cmd: &redis::Cmd) -> Result<Value, RedisError> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Sentinel(link) => cmd.query_async(&mut link.manager().await?).await,
            Conn::Cluster(link) => {
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                link.connection()
                    .await?
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                    )
                    .await
            }
        }
    }

    /// `EVALSHA`; on `NOSCRIPT` (cache emptied by a restart, failover or `SCRIPT FLUSH`)
    /// `EVAL` with the full source, which cannot answer `NOSCRIPT` and caches the script again.
    /// So no caller ever sees `NOSCRIPT`, even when the cache is flushed again between a
    /// `SCRIPT LOAD` and the retry (which defeats a load-then-`EVALSHA` retry).
    async fn invoke<T: FromRedisValue>(&self, call: &ScriptCall<'_>) -> Result<T, RedisError> {
        match self.query(&call.command(false)).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                metrics::counter!("floodgate_store_redis_script_reloads_total").increment(1);
                self.query(&call.command(true)).await
            }
            other => other,
        }
    }
}

/// One script call: the script, its KEYS and its ARGV.
struct ScriptCall<'a> {
    script: &'a redis::Script,
    source: &'static str,
    keys: &'a [String],
    args: Vec<u64>,
    /// ARGV[1]: `now`, or `None` for the server clock (sent as an empty string).
    now: Option<Timestamp>,
}

impl ScriptCall<'_> {
    fn command(&self, full_source: bool) -> redis::Cmd {
        let mut cmd = if full_source {
            let mut c = redis::cmd("EVAL");
            c.arg(self.source);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(self.script.get_hash());
            c
        };
        cmd.arg(self.keys.len()).arg(self.keys);
        match self.now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(&self.args);
        cmd
    }
}

impl ClusterLink {
    async fn connection(&self) -> Result<ClusterConnection<asking::AskingConnection>, RedisError> {
        self.conn
            // Per-node connections that send `ASKING` with the command it redirects (see
            // `asking.rs`), else the same cluster connection as `get_async_connection`.
            .get_or_try_init(|| self.client.get_async_generic_connection())
            .await
            .cloned()
    }
}

/// The Redis / Redis Cluster [`Store`]. See the [module docs](self).
pub struct RedisStore {
    conn: Conn,
    /// Standalone Redis: the client, for the startup check's own connection attempt.
    client: Option<redis::Client>,
    /// `Some` on standalone Redis with [`RedisStoreConfig::coalesce`] > 0.
    coalescer: Option<Arc<coalesce::Coalescer>>,
    config: RedisStoreConfig,
    clock: Arc<dyn Clock>,
    breaker: Arc<Breaker>,
    /// Readiness: when the last readiness `PING` went out (store clock, µs; 0: never).
    ping_at: std::sync::atomic::AtomicU64,
    /// Readiness: whether that `PING` failed.
    ping_failed: std::sync::atomic::AtomicBool,
    /// Readiness: `evicted_keys` per node (see [`evictions`]).
    evictions: evictions::Evictions,
    /// `Some` with [`RedisStoreConfig::deny_cache`] (not on a cluster).
    deny_cache: Option<deny_cache::DenyCache>,
    /// This process's id in the instance set, and the live count last seen (0: none yet).
    instance_id: String,
    live_instances: Arc<std::sync::atomic::AtomicU64>,
    /// Cluster: a key of the last decision call that failed, which the breaker's recovery
    /// watch probes (see [`recovery_probe`]).
    probe_key: Arc<parking_lot::Mutex<Option<String>>>,
    /// Readiness: the outcomes of the last seconds' calls (see [`health`]).
    health: health::Health,
}

/// Longest pause between two reconnection attempts of a standalone connection (plus up to as
/// much again of jitter): a Redis that accepts connections again is reconnected to within
/// about this long. A dead Redis gets one connection attempt per 50 to 100 ms from each
/// process.
pub const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(50);

/// Pause between two recovery `PING`s that failed at once.
const RECOVERY_PING_PAUSE: Duration = Duration::from_millis(10);

/// Most often a readiness probe ([`RedisStore::readiness`]) asks Redis (`INFO stats`): once a
/// second.
pub const READINESS_PING_INTERVAL: Duration = Duration::from_secs(1);

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

/// What [`RedisStore::startup_check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCheck {
    /// `maxmemory-policy` of each node that answered (one for standalone Redis).
    pub maxmemory_policies: Vec<String>,
    /// `true` when some node may evict limiter keys (see [`policy_may_evict`]).
    pub may_evict: bool,
}

/// Whether Redis' `maxmemory-policy` may evict limiter keys when memory runs out.
///
/// Only `noeviction` is safe: then a full Redis refuses writes (an error, handled by the failure
/// mode) instead of silently deleting a counter, which would reset a limited key
/// (over-admission with no error). `allkeys-*` evict any key. `volatile-*` evict keys that
/// have a TTL, and every Floodgate key has one, so they evict ours too.
pub fn policy_may_evict(policy: &str) -> bool {
    !policy.eq_ignore_ascii_case("noeviction")
}

/// A breaker permit whose outcome is not yet recorded; abandoned if dropped before
/// [`take`](Self::take).
struct PendingPermit<'a> {
    breaker: &'a Breaker,
    permit: Option<breaker::Permit>,
}

impl PendingPermit<'_> {
    fn take(mut self) -> breaker::Permit {
        self.permit.take().expect("taken once")
    }
}

impl Drop for PendingPermit<'_> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.breaker.abandon(permit);
        }
    }
}

/// One slot group of a batch: the keys it touches and the batch items it decides.
#[derive(Clone)]
struct Group {
    /// Distinct key names, in first-use order.
    keys: Vec<String>,
    /// Batch indices of the items in this group, in batch order.
    items: Vec<usize>,
    /// For each entry of `items`: its key's 1-based index into `keys` (Lua's KEYS[i]).
    key_index: Vec<usize>,
}

/// One item's answer from the batch script.
#[derive(Debug, Clone, Copy)]
struct ItemReply {
    peek: Decision,
    consumed: Decision,
    mark: u64,
}

/// One group's answer from the batch script.
struct GroupReply {
    all_allowed: bool,
    items: Vec<ItemReply>,
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
        let urls: Vec<&str> = match &config.target {
            RedisTarget::Standalone(url) => vec![url.as_str()],
            RedisTarget::Cluster(nodes) => nodes.iter().map(String::as_str).collect(),
            RedisTarget::Sentinel { sentinels, .. } => {
                sentinels.iter().map(String::as_str).collect()
            }
        };
        let tls = urls.iter().any(|u| is_tls_url(u));
        if tls && !urls.iter().all(|u| is_tls_url(u)) {
            return Err(StoreError::Unavailable {
                reason: "redis cluster nodes mix rediss:// (TLS) and plain URLs".into(),
            });
        }
        if !tls && !config.tls.is_empty() {
            return Err(StoreError::Unavailable {
                reason: "redis TLS files (CA, client certificate) are given, but the URL is not \
                         rediss://"
                    .into(),
            });
        }
        if tls && matches!(config.target, RedisTarget::Sentinel { .. }) {
            return Err(StoreError::Unavailable {
                reason: "redis sentinel with TLS (rediss://) is not supported".into(),
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
        let mut standalone_client = None;
        let conn = match &config.target {
            RedisTarget::Standalone(url) => {
                let client = if tls && !config.tls.is_empty() {
                    redis::Client::build_with_tls(url.as_str(), config.tls.certificates())
                } else {
                    redis::Client::open(url.as_str())
                }
                .map_err(unavailable)?;
                standalone_client = Some(client.clone());
                Conn::Single(
                    ConnectionManager::new_lazy_with_config(client, manager_config(&config))
                        .map_err(unavailable)?,
                )
            }
            RedisTarget::Sentinel {
                sentinels,
                master_name,
            } => {
                let sentinel =
                    redis::sentinel::Sentinel::build(sentinels.clone()).map_err(unavailable)?;
                let link = Arc::new(SentinelLink {
                    sentinel: tokio::sync::Mutex::new(sentinel),
                    master_name: master_name.clone(),
                    // Finite retries: a connection to a master replaced by a failover stops
                    // trying (the next call on a live one reconnects anew).
                    manager_config: manager_config(&config).set_number_of_retries(40),
                    current: parking_lot::Mutex::new(None),
                });
                spawn_sentinel_poll(Arc::downgrade(&link));
                Conn::Sentinel(link)
            }
            RedisTarget::Cluster(nodes) => {
                let mut builder = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(config.connect_timeout)
                    .response_timeout(config.timeout.max(Duration::from_millis(1)))
                    // An ASK redirect takes one (and now succeeds at once, see `asking.rs`):
                    // two are left for MOVED, TRYAGAIN and reconnections, as before.
                    .retries(3);
                if tls && !config.tls.is_empty() {
                    builder = builder.certs(config.tls.certificates());
                }
                let client = builder.build().map_err(unavailable)?;
                Conn::Cluster(Arc::new(ClusterLink {
                    client,
                    conn: OnceCell::new(),
                }))
            }
        };
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
        metrics::gauge!("floodgate_store_breaker_open").set(0.0);
        metrics::counter!("floodgate_store_redis_evicted_keys_total").increment(0);
        if config.deny_cache {
            metrics::counter!("floodgate_store_deny_cache_hits_total").increment(0);
        }
        let deny_cache = (config.deny_cache && !matches!(config.target, RedisTarget::Cluster(_)))
            .then(deny_cache::DenyCache::default);
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
        Ok(Self {
            conn,
            client: standalone_client,
            coalescer,
            config,
            clock,
            breaker,
            ping_at: std::sync::atomic::AtomicU64::new(0),
            ping_failed: std::sync::atomic::AtomicBool::new(false),
            evictions: evictions::Evictions::default(),
            instance_id,
            live_instances,
            deny_cache,
            probe_key: Arc::default(),
            health: health::Health::default(),
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

    /// The configuration in force.
    pub fn config(&self) -> &RedisStoreConfig {
        &self.config
    }

    /// `true` for a Redis Cluster target.
    pub fn is_cluster(&self) -> bool {
        matches!(self.config.target, RedisTarget::Cluster(_))
    }

    /// The Redis key holding the state of `key` under rule `rule` and policy `policy` (see
    /// [`keys`]; the arguments of [`Store::inspect`]): the way for an operator to find a key,
    /// since names are hashes (`prefix` + 11 base64url characters).
    pub fn key_name(&self, rule: &str, policy: &Policy, key: &str) -> String {
        keys::state_key(&self.config.prefix, rule, policy, key)
    }

    /// [`Store::check`] at a caller-supplied `now` (microseconds since the epoch), whatever the
    /// configured [`TimeSource`].
    ///
    /// # Errors
    /// As [`Store::check`].
    pub async fn check_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreError> {
        self.run(items, Some(now), true).await
    }

    /// [`Store::peek`] at a caller-supplied `now`.
    ///
    /// # Errors
    /// As [`Store::peek`].
    pub async fn peek_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreError> {
        self.run(items, Some(now), false).await
    }

    /// `PING`, bounded by the timeout (readiness probes).
    ///
    /// # Errors
    /// [`StoreError::Timeout`] / [`StoreError::Unavailable`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.guarded(async {
            let _: String = self.conn.query(&redis::cmd("PING")).await?;
            Ok(())
        })
        .await
    }

    /// Whether Redis can decide now, for a readiness probe: `Err` while the circuit breaker is
    /// open, while at least [`health::MAX_FAILED_PERCENT`] % of the calls of the last
    /// [`health::WINDOW_SECONDS`] s failed (of at least [`health::MIN_CALLS`]: a partial
    /// outage, e.g. one cluster master dead, that neither opens the breaker nor fails the
    /// probe), or when the last readiness probe failed. The probe is `INFO stats` (on every
    /// master of a cluster): it answers like a `PING`, and its `evicted_keys` show whether
    /// Redis evicted keys since the last probe (counted and logged, see [`evictions`]). At most
    /// one probe (bounded by the timeout) per [`READINESS_PING_INTERVAL`] of the store's clock,
    /// however often this is called; concurrent callers in between get the cached answer. The
    /// probe goes around the breaker and the error counters: it neither opens the breaker nor
    /// shows up in `floodgate_store_redis_errors_total` (which counts decision calls only, see
    /// `docs/redis.md`).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] (breaker open, or the probe failed or timed out), naming
    /// the cause.
    pub async fn readiness(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        if self.breaker.is_open() {
            return Err(StoreError::Unavailable {
                reason: "redis circuit breaker open: calls fail fast".into(),
            });
        }
        let now = self.clock.now();
        if let Some((failed, calls)) = self.health.failing(now) {
            return Err(StoreError::Unavailable {
                reason: format!(
                    "redis: {failed} of the {calls} calls of the last {} s failed (not ready \
                     from {} %)",
                    health::WINDOW_SECONDS,
                    health::MAX_FAILED_PERCENT
                ),
            });
        }
        let last = self.ping_at.load(Ordering::Acquire);
        let interval = u64::try_from(READINESS_PING_INTERVAL.as_micros()).unwrap_or(u64::MAX);
        let due = last == 0 || now.saturating_sub(last) >= interval;
        if due
            && self
                .ping_at
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let mut info = redis::cmd("INFO");
            info.arg("stats");
            let probe = self.conn.query_all_masters(&info);
            let failed = match tokio::time::timeout(self.config.timeout, probe).await {
                Ok(Ok(info)) => {
                    self.evictions.observe(&info, now);
                    None
                }
                Ok(Err(e)) => Some(to_store_error(e, self.config.timeout).to_string()),
                Err(_) => Some(format!(
                    "timed out after {} ms",
                    duration_ms(self.config.timeout)
                )),
            };
            self.ping_failed.store(failed.is_some(), Ordering::Release);
            return match failed {
                None => Ok(()),
                Some(reason) => Err(StoreError::Unavailable {
                    reason: format!("redis readiness probe (INFO stats) failed: {reason}"),
                }),
            };
        }
        if self.ping_failed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable {
                reason: "redis readiness probe (INFO stats) failed within the last second".into(),
            });
        }
        Ok(())
    }

    /// Checks the server once at startup: reads `maxmemory-policy` (every master in a cluster)
    /// and logs a warning when it may evict limiter keys (see [`policy_may_evict`]), and loads
    /// the scripts (`SCRIPT LOAD`). Waits up to `connect_timeout + timeout` per command, not
    /// only `timeout`.
    ///
    /// # Errors
    /// [`StoreError::Timeout`] / [`StoreError::Unavailable`] when Redis cannot be asked.
    pub async fn startup_check(&self) -> Result<ServerCheck, StoreError> {
        let wait = self.config.connect_timeout + self.config.timeout;
        if let Some(client) = &self.client {
            // A connection of its own, dropped at once: a connection error (refused, a TLS
            // certificate not trusted, a client certificate missing) is reported as itself,
            // where the shared connection, which retries in the background, only times out.
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.config.connect_timeout))
                .set_response_timeout(Some(wait));
            let attempt = async {
                let mut con = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                redis::cmd("PING").query_async::<String>(&mut con).await
            };
            tokio::time::timeout(wait, attempt)
                .await
                .map_err(|_| StoreError::Timeout {
                    after_ms: duration_ms(wait),
                })?
                .map_err(|e| to_store_error(e, wait))?;
        }
        let reply: Value = tokio::time::timeout(
            wait,
            self.conn
                .query_all_masters(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy")),
        )
        .await
        .map_err(|_| StoreError::Timeout {
            after_ms: duration_ms(wait),
        })?
        .map_err(|e| to_store_error(e, wait))?;
        // Load every script now, so that the first burst of checks does not all meet NOSCRIPT
        // and fall back to sending the full source at once.
        let sources = scripts::BATCH_SINGLE_SOURCES
            .iter()
            .chain(&scripts::MULTI_SINGLE_SOURCES)
            .chain([
                &scripts::BATCH_SOURCE,
                &scripts::MULTI_SOURCE,
                &scripts::REFUND_SOURCE,
                &scripts::RESERVE_SOURCE,
                &scripts::SETTLE_SOURCE,
                &scripts::PEEK_OOM_SOURCE,
            ]);
        for source in sources {
            let _: Value = tokio::time::timeout(
                wait,
                self.conn
                    .query_all_masters(redis::cmd("SCRIPT").arg("LOAD").arg(*source)),
            )
            .await
            .map_err(|_| StoreError::Timeout {
                after_ms: duration_ms(wait),
            })?
            .map_err(|e| to_store_error(e, wait))?;
        }
        let mut maxmemory_policies = Vec::new();
        collect_policies(&reply, &mut maxmemory_policies);
        let may_evict = maxmemory_policies.iter().any(|p| policy_may_evict(p));
        if may_evict {
            tracing::warn!(
                policies = ?maxmemory_policies,
                "redis maxmemory-policy may evict rate-limit keys when memory is full: an evicted \
                 counter silently resets a limited key. Use a dedicated Redis with \
                 maxmemory-policy noeviction"
            );
        }
        Ok(ServerCheck {
            maxmemory_policies,
            may_evict,
        })
    }

    /// Runs `fut` (one store operation, possibly several round trips) through the circuit
    /// breaker and the timeout, mapping errors.
    async fn guarded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        let permit = self.breaker.permit(&*self.clock).inspect_err(|_| {
            metrics::counter!("floodgate_store_redis_errors_total", "reason" => "circuit_open")
                .increment(1);
        })?;
        // Until the outcome is recorded: if this future is dropped mid-call, the breaker
        // forgets the permit (a dropped probe would otherwise block every later probe).
        let pending = PendingPermit {
            breaker: &self.breaker,
            permit: Some(permit),
        };
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
        self.breaker
            .record(pending.take(), result.is_ok(), &*self.clock);
        if self.breaker.start_watch() {
            self.watch_recovery();
        }
        result
    }

    /// Starts the recovery watch of an open breaker (`breaker.rs`): a task that sends `PING`
    /// (on a cluster: `EXISTS` on a key of the last failed call, see [`recovery_probe`])
    /// after `PING` (each waiting up to `connect_timeout + timeout`, which includes waiting
    /// for the background reconnection) until one succeeds, which closes the breaker, or
    /// until the breaker closed otherwise or the store is dropped. So decisions return to
    /// Redis one reconnection after Redis accepts connections again (the reconnection is
    /// retried every 10 to [`RECONNECT_MAX_DELAY`], twice that with jitter), not at the next
    /// cool-down. The `PING`s count in no error metric.
    fn watch_recovery(&self) {
        let breaker = Arc::downgrade(&self.breaker);
        let conn = self.conn.clone();
        let clock = Arc::clone(&self.clock);
        let wait = self.config.connect_timeout + self.config.timeout;
        let probe_key = Arc::clone(&self.probe_key);
        tokio::spawn(async move {
            loop {
                let probe = recovery_probe(probe_key.lock().as_deref());
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

    fn now_arg(&self, now: Option<Timestamp>) -> Option<Timestamp> {
        now.or(match self.config.time_source {
            TimeSource::Server => None,
            TimeSource::Caller => Some(self.clock.now()),
        })
    }

    /// Splits a batch into slot groups (one group on standalone Redis).
    fn groups(&self, items: &[CheckItem<'_>]) -> Vec<Group> {
        let cluster = self.is_cluster();
        // Standalone: one group, slot `None`.
        let mut groups: Vec<(Option<Slot>, Group)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let name = keys::state_key(&self.config.prefix, item.rule, item.policy, item.key);
            let slot = cluster.then(|| keys::slot(name.as_bytes()));
            let g = match groups.iter().position(|(s, _)| *s == slot) {
                Some(g) => g,
                None => {
                    groups.push((
                        slot,
                        Group {
                            keys: Vec::new(),
                            items: Vec::new(),
                            key_index: Vec::new(),
                        },
                    ));
                    groups.len() - 1
                }
            };
            let group = &mut groups[g].1;
            let k = match group.keys.iter().position(|k| *k == name) {
                Some(k) => k,
                None => {
                    group.keys.push(name);
                    group.keys.len() - 1
                }
            };
            group.items.push(i);
            group.key_index.push(k + 1);
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    async fn run(
        &self,
        items: &[CheckItem<'_>],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<BatchDecision, StoreError> {
        crate::validate_batch(items)?;
        if items.is_empty() {
            return Ok(BatchDecision {
                allowed: true,
                decisions: Vec::new(),
                store_full: None,
            });
        }
        let now = self.now_arg(now);
        if let (Some(cache), false) = (
            &self.deny_cache,
            commit && items.len() == 1 && items[0].cost == 1,
        ) {
            cache.observe(now.unwrap_or_else(|| self.clock.now()));
        }
        // The key names (one SHA-256 each), also the deny cache's.
        let groups = self.groups(items);
        // The deny cache: one cost-1 check, on the decision clock (the store's clock at
        // sending time for Redis' clock, see `deny_cache`).
        let cached = match &self.deny_cache {
            Some(cache) if commit && items.len() == 1 && items[0].cost == 1 => {
                let name = groups[0].keys[0].clone();
                let at = now.unwrap_or_else(|| self.clock.now());
                match cache.lookup(&name, at) {
                    Ok(d) => {
                        metrics::counter!("floodgate_store_deny_cache_hits_total").increment(1);
                        return Ok(BatchDecision {
                            allowed: false,
                            decisions: vec![d],
                            store_full: None,
                        });
                    }
                    Err(generation) => Some((cache, name, at, generation)),
                }
            }
            _ => None,
        };
        let result = self
            .guarded(async {
                let result = match &self.coalescer {
                    // Standalone: always one group.
                    Some(c) if groups.len() == 1 => {
                        self.decide_coalesced(c, items, groups[0].clone(), now, commit)
                            .await
                    }
                    _ => self.decide_groups(items, &groups, now, commit).await,
                };
                match result {
                    Err(e) if is_out_of_memory(&e) => {
                        self.decide_out_of_memory(items, &groups, now, commit, e)
                            .await
                    }
                    other => other,
                }
            })
            .await;
        let result = match result {
            Err(e) if self.is_cluster() => {
                note_probe_key(&self.probe_key, &groups[0].keys[0]);
                Err(name_slots(e, &groups))
            }
            other => other,
        };
        if let (Some((cache, name, at, generation)), Ok(batch)) = (cached, &result) {
            if !batch.allowed {
                cache.insert(&name, at, batch.decisions[0], generation);
            }
        }
        result
    }

    /// Redis refused the batch with `OOM` (over `maxmemory` with `noeviction`): peek it with
    /// [`scripts::PEEK_OOM`], which Redis runs even then. A peek, or a check that is denied
    /// anyway (a denial writes nothing), is answered; a check that would be admitted needs a
    /// write and fails with the `OOM` error, into the failure mode.
    async fn decide_out_of_memory(
        &self,
        items: &[CheckItem<'_>],
        groups: &[Group],
        now: Option<Timestamp>,
        commit: bool,
        error: RedisError,
    ) -> Result<BatchDecision, RedisError> {
        let replies = futures_util::future::join_all(groups.iter().map(|g| {
            self.run_group_script(
                items,
                g,
                now,
                false,
                (&scripts::PEEK_OOM, scripts::PEEK_OOM_SOURCE),
            )
        }))
        .await;
        let Ok(replies) = replies.into_iter().collect::<Result<Vec<_>, _>>() else {
            return Err(error);
        };
        if commit && replies.iter().all(|r| r.all_allowed) {
            return Err(error);
        }
        metrics::counter!("floodgate_store_redis_out_of_memory_answers_total").increment(1);
        Ok(assemble(items, groups, replies, commit))
    }

    /// One batch (one group) through the [`coalesce`] queue.
    async fn decide_coalesced(
        &self,
        coalescer: &Arc<coalesce::Coalescer>,
        items: &[CheckItem<'_>],
        group: Group,
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<BatchDecision, RedisError> {
        let mut item_args = Vec::with_capacity(8 * group.items.len());
        for (&i, &k) in group.items.iter().zip(&group.key_index) {
            push_item_args(&mut item_args, k, &items[i]);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        coalescer
            .submit(coalesce::Pending {
                keys: group.keys.clone(),
                item_args,
                commit,
                now,
                kind: single_kind(items, &group),
                tx,
            })
            .await;
        let reply = rx.await.map_err(|_| {
            RedisError::from(std::io::Error::other(
                "redis store: the coalesced call was dropped",
            ))
        })??;
        let reply = if reply.first() == Some(&-1) {
            // This batch raised an error inside the coalesced script (nothing of it was
            // written): run it alone, so that its caller gets its own error.
            self.run_group(items, &group, now, commit).await?
        } else {
            parse_group_reply(&reply, &group, items)?
        };
        Ok(assemble(items, &[group], vec![reply], commit))
    }

    /// The batch protocol of the module docs: one script per group, all sent at once; refunds
    /// when a multi-group check is not admitted everywhere.
    async fn decide_groups(
        &self,
        items: &[CheckItem<'_>],
        groups: &[Group],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<BatchDecision, RedisError> {
        let replies = futures_util::future::join_all(
            groups.iter().map(|g| self.run_group(items, g, now, commit)),
        )
        .await;
        let all_allowed = replies
            .iter()
            .all(|r| matches!(r, Ok(reply) if reply.all_allowed));
        if groups.len() > 1 && commit && !all_allowed {
            // Cross-slot batch not admitted everywhere: refund the groups that committed.
            let committed: Vec<(&Group, &GroupReply)> = groups
                .iter()
                .zip(&replies)
                .filter_map(|(g, r)| match r {
                    Ok(reply) if reply.all_allowed => Some((g, reply)),
                    _ => None,
                })
                .collect();
            if !committed.is_empty() {
                metrics::counter!("floodgate_store_redis_refunds_total")
                    .increment(committed.len() as u64);
                let refunds = futures_util::future::join_all(
                    committed
                        .iter()
                        .map(|(g, reply)| self.refund_group(items, g, reply, now)),
                )
                .await;
                for r in refunds {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "redis store: refund of a cross-slot batch failed; \
                            its units stay consumed until the keys expire");
                    }
                }
            }
        }
        let replies = replies.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(assemble(items, groups, replies, commit))
    }

    async fn run_group(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<GroupReply, RedisError> {
        let script = scripts::batch_script(single_kind(items, group));
        self.run_group_script(items, group, now, commit, script)
            .await
    }

    /// [`run_group`](Self::run_group) with another batch script (same arguments and reply).
    async fn run_group_script(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        now: Option<Timestamp>,
        commit: bool,
        (script, source): (&redis::Script, &'static str),
    ) -> Result<GroupReply, RedisError> {
        let mut args = Vec::with_capacity(2 + 8 * group.items.len());
        args.push(u64::from(commit));
        args.push(duration_ms(self.config.ttl_extra));
        for (&i, &k) in group.items.iter().zip(&group.key_index) {
            push_item_args(&mut args, k, &items[i]);
        }
        let call = ScriptCall {
            script,
            source,
            keys: &group.keys,
            args,
            now,
        };
        let reply: Vec<i64> = self.conn.invoke(&call).await?;
        parse_group_reply(&reply, group, items)
    }

    async fn refund_group(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        reply: &GroupReply,
        now: Option<Timestamp>,
    ) -> Result<i64, RedisError> {
        let mut args = Vec::with_capacity(9 * group.items.len());
        for ((&i, &k), r) in group.items.iter().zip(&group.key_index).zip(&reply.items) {
            // Only what was consumed is refunded (cost 0 consumed nothing).
            let cost = if r.peek.allowed { items[i].cost } else { 0 };
            push_item_args(&mut args, k, &CheckItem { cost, ..items[i] });
            args.push(r.mark);
        }
        let call = ScriptCall {
            script: &scripts::REFUND,
            source: scripts::REFUND_SOURCE,
            keys: &group.keys,
            args,
            now,
        };
        self.conn.invoke(&call).await
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

/// A cluster call's failure names the slot(s) of its keys ("slot 2513"), so that an operator
/// can tell which shard fails (`CLUSTER SHARDS` maps a slot to its nodes); the key names are
/// hashes, never a client's key. Timeouts carry no text and stay as they are.
fn name_slots(e: StoreError, groups: &[Group]) -> StoreError {
    match e {
        StoreError::Unavailable { reason } => {
            let slots: Vec<String> = groups
                .iter()
                .map(|g| slot_number(g.keys[0].as_bytes()).to_string())
                .collect();
            let s = if slots.len() == 1 { "" } else { "s" };
            StoreError::Unavailable {
                reason: format!("{reason} (cluster slot{s} {})", slots.join(", ")),
            }
        }
        other => other,
    }
}

/// The cluster slot of a key name without braces (ours never have any): CRC16-XMODEM of the
/// whole name mod 16384, the number behind [`keys::slot`] (the `redis` crate does not show it).
fn slot_number(name: &[u8]) -> u16 {
    let crc = name.iter().fold(0u16, |crc, &b| {
        (0..8).fold(crc ^ (u16::from(b) << 8), |c, _| {
            if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            }
        })
    });
    crc % 16_384
}

/// Remembers `key` as the recovery watch's probe (allocates only when it changes).
fn note_probe_key(probe_key: &parking_lot::Mutex<Option<String>>, key: &str) {
    let mut probe = probe_key.lock();
    if probe.as_deref() != Some(key) {
        *probe = Some(key.to_string());
    }
}

/// The standalone connection's settings (also each Sentinel master's).
fn manager_config(config: &RedisStoreConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.timeout.max(Duration::from_millis(1))))
        // Reconnect quickly and keep trying: a restarted Redis is picked up within about
        // 100 ms.
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(RECONNECT_MAX_DELAY)
        .set_number_of_retries(usize::MAX >> 1)
}

/// The arguments of one `instances.lua` call but `now`.
struct AnnounceCall {
    keys: [String; 1],
    id: String,
    now: Option<Timestamp>,
    ttl_us: u64,
    expire_ms: u64,
}

fn announce_call_parts(config: &RedisStoreConfig, id: &str) -> AnnounceCall {
    let ttl = instances::ANNOUNCE_TTL;
    AnnounceCall {
        keys: [format!("{}instances", config.prefix)],
        id: id.to_string(),
        now: None,
        ttl_us: u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX),
        expire_ms: duration_ms(ttl + config.ttl_extra),
    }
}

impl AnnounceCall {
    async fn send(&self, conn: &Conn) -> Result<u64, RedisError> {
        let cmd = |full: bool| {
            let mut c = if full {
                let mut c = redis::cmd("EVAL");
                c.arg(instances::SOURCE);
                c
            } else {
                let mut c = redis::cmd("EVALSHA");
                c.arg(instances::SCRIPT.get_hash());
                c
            };
            c.arg(1).arg(&self.keys[0]);
            match self.now {
                Some(now) => c.arg(now),
                None => c.arg(""),
            };
            c.arg(&self.id).arg(self.ttl_us).arg(self.expire_ms);
            c
        };
        match conn.query(&cmd(false)).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                conn.query(&cmd(true)).await
            }
            other => other,
        }
    }
}

fn publish_live(live: &std::sync::atomic::AtomicU64, n: u64) {
    live.store(n, std::sync::atomic::Ordering::Release);
    metrics::gauge!("floodgate_store_redis_live_instances").set(n as f64);
}

/// The background announcement of [`RedisStoreConfig::announce`]: every
/// [`instances::ANNOUNCE_INTERVAL`] until the store (its count) is dropped. A failed
/// announcement keeps the count last seen.
fn spawn_announcer(
    conn: Conn,
    call: AnnounceCall,
    live: std::sync::Weak<std::sync::atomic::AtomicU64>,
    wait: Duration,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(instances::ANNOUNCE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(live) = live.upgrade() else {
                return;
            };
            if let Ok(Ok(n)) = tokio::time::timeout(wait, call.send(&conn)).await {
                publish_live(&live, n);
            }
        }
    });
}

/// The one algorithm of every item of `group`, if they share one (a smaller script then).
fn single_kind(items: &[CheckItem<'_>], group: &Group) -> Option<AlgorithmKind> {
    let first = items[group.items[0]].policy.kind();
    group
        .items
        .iter()
        .all(|&i| items[i].policy.kind() == first)
        .then_some(first)
}

/// The batch's decision from its groups' replies: admitted when every group admitted; then
/// each item's decision after consumption (for a check), else each item's peek.
fn assemble(
    items: &[CheckItem<'_>],
    groups: &[Group],
    replies: Vec<GroupReply>,
    commit: bool,
) -> BatchDecision {
    let all_allowed = replies.iter().all(|r| r.all_allowed);
    let mut decisions = vec![None; items.len()];
    for (group, reply) in groups.iter().zip(replies) {
        for (&i, r) in group.items.iter().zip(reply.items) {
            decisions[i] = Some(if all_allowed && commit {
                r.consumed
            } else {
                r.peek
            });
        }
    }
    BatchDecision {
        allowed: all_allowed,
        decisions: decisions
            .into_iter()
            .map(|d| d.expect("every item belongs to one group"))
            .collect(),
        store_full: None,
    }
}

/// The 8 per-item arguments of `batch.lua` (and the first 8 of `refund.lua`).
fn push_item_args(args: &mut Vec<u64>, key_index: usize, item: &CheckItem<'_>) {
    let quota = item.policy.quota();
    let (num, den) = quota.emission_interval();
    args.extend([
        key_index as u64,
        u64::from(scripts::algorithm_code(item.policy.kind())),
        quota.limit(),
        quota.period(),
        quota.burst(),
        num,
        den,
        item.cost,
    ]);
}

fn parse_group_reply(
    reply: &[i64],
    group: &Group,
    items: &[CheckItem<'_>],
) -> Result<GroupReply, RedisError> {
    const PER_ITEM: usize = 9;
    if reply.len() != 2 + PER_ITEM * group.items.len() {
        return Err(RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected reply length from the batch script",
        )));
    }
    let decision = |limit: u64, v: &[i64]| Decision {
        allowed: v[0] == 1,
        limit,
        remaining: v[1].max(0) as u64,
        reset_after: v[2].max(0) as u64,
        retry_after: (v[3] >= 0).then_some(v[3] as u64),
    };
    let items = group
        .items
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let v = &reply[2 + j * PER_ITEM..2 + (j + 1) * PER_ITEM];
            let limit = items[i].policy.capacity();
            ItemReply {
                peek: decision(limit, &v[0..4]),
                consumed: decision(limit, &v[4..8]),
                mark: v[8].max(0) as u64,
            }
        })
        .collect();
    Ok(GroupReply {
        all_allowed: reply[0] == 1,
        items,
    })
}

fn collect_policies(v: &Value, out: &mut Vec<String>) {
    // CONFIG GET answers [name, value] (RESP2) or {name: value} (RESP3); a cluster may answer
    // per node. Collect every value that is not the parameter's own name.
    match v {
        Value::BulkString(b) => {
            let s = String::from_utf8_lossy(b).into_owned();
            if s != "maxmemory-policy" {
                out.push(s);
            }
        }
        Value::SimpleString(s) if s != "maxmemory-policy" => out.push(s.clone()),
        Value::Array(vs) | Value::Set(vs) => vs.iter().for_each(|v| collect_policies(v, out)),
        Value::Map(kvs) => kvs.iter().for_each(|(_, v)| collect_policies(v, out)),
        _ => {}
    }
}

/// Redis refused a command for lack of memory (`OOM command not allowed when used memory >
/// 'maxmemory'`).
fn is_out_of_memory(e: &RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("OOM command not allowed")
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable {
        reason: e.to_string(),
    }
}

/// The client's own response timeout (set to the same bound) reports as a timeout too.
fn to_store_error(e: RedisError, timeout: Duration) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout {
            after_ms: duration_ms(timeout),
        }
    } else {
        unavailable(e)
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
        self.guarded(async { Ok(self.conn.query::<u64>(&cmd).await? > 0) })
            .await
    }
}

impl Store for RedisStore {
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
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&name);
        async move {
            let deleted = self
                .guarded(async { Ok(self.conn.query::<u64>(&cmd).await? > 0) })
                .await;
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
            self.guarded(async {
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

#[cfg(test)]
mod slot_tests {
    use super::*;

    #[test]
    fn slot_number_is_the_slot_of_the_key() {
        // CRC16-XMODEM's check value: "123456789" -> 0x31C3.
        assert_eq!(slot_number(b"123456789"), 0x31C3);
        for name in ["fg:UL7fKu3wove", "fg:claim:x", "", "a"] {
            assert_eq!(
                Slot::new(slot_number(name.as_bytes())),
                Some(keys::slot(name.as_bytes())),
                "{name:?}"
            );
        }
    }
}
