//! The connection to Redis (standalone, Sentinel or Cluster; multiplexed, self-healing), one
//! script call on it (`EVALSHA`, `EVAL` on `NOSCRIPT`), and the mapping of its errors.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::Timestamp;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{FromRedisValue, RedisError, Value};
use tokio::sync::OnceCell;

use super::asking;
use super::config::{RedisStoreConfig, RedisTarget, SENTINEL_POLL};
use super::sentinels::Sentinels;
use crate::StoreError;

/// The connection: multiplexed (one TCP connection pipelines every concurrent call) and
/// self-healing.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<ClusterLink>),
    Sentinel(Arc<SentinelLink>),
}

/// The master of a Sentinel-monitored set: a connection to the address the sentinels name,
/// replaced when they name another (a failover).
pub(super) struct SentinelLink {
    sentinel: tokio::sync::Mutex<Sentinels>,
    master_name: String,
    /// The master's credentials ([`RedisStoreConfig::master_auth`](super::RedisStoreConfig)).
    node_info: Option<redis::sentinel::SentinelNodeConnectionInfo>,
    manager_config: ConnectionManagerConfig,
    /// The master's address and the connection to it; `None` until first found.
    current: parking_lot::Mutex<Option<(String, ConnectionManager)>>,
    /// The master's address and its client, as last named by the sentinels (the deny cache
    /// subscribes there); `None` until first found.
    master: parking_lot::Mutex<Option<(String, redis::Client)>>,
}

impl SentinelLink {
    /// The master the sentinels named last (address and client), if any yet.
    pub(super) fn master_client(&self) -> Option<(String, redis::Client)> {
        self.master.lock().clone()
    }

    /// The connection to the current master (asking the sentinels first if none is known).
    async fn manager(&self) -> Result<ConnectionManager, RedisError> {
        if let Some((_, m)) = self.current.lock().clone() {
            return Ok(m);
        }
        // Boxed: the sentinel client's future is deep, and every call's future would
        // otherwise hold it inline (the compiler's layout depth limit in callers' tests).
        Box::pin(self.resolve()).await
    }

    /// Asks the sentinels for the master (`redis` checks it answers `ROLE` as a master) and,
    /// when it is another address than the current one, connects to it instead.
    async fn resolve(&self) -> Result<ConnectionManager, RedisError> {
        let client = self
            .sentinel
            .lock()
            .await
            .master(&self.master_name, self.node_info.as_ref())
            .await?;
        let addr = client.get_connection_info().addr().to_string();
        *self.master.lock() = Some((addr.clone(), client.clone()));
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
pub(super) struct ClusterLink {
    client: ClusterClient,
    conn: OnceCell<ClusterConnection<asking::AskingConnection>>,
}

impl Conn {
    pub(super) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, RedisError> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(link) => cmd.query_async(&mut link.connection().await?).await,
            Conn::Sentinel(link) => cmd.query_async(&mut link.manager().await?).await,
        }
    }

    /// `cmd` on every master of a cluster (a map of node to reply), or on the one server.
    pub(super) async fn query_all_masters(&self, cmd: &redis::Cmd) -> Result<Value, RedisError> {
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
    pub(super) async fn invoke<T: FromRedisValue>(
        &self,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
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
pub(super) struct ScriptCall<'a> {
    pub(super) script: &'a redis::Script,
    pub(super) source: &'static str,
    pub(super) keys: &'a [String],
    pub(super) args: Vec<u64>,
    /// ARGV[1]: `now`, or `None` for the server clock (sent as an empty string).
    pub(super) now: Option<Timestamp>,
}

impl ScriptCall<'_> {
    pub(super) fn command(&self, full_source: bool) -> redis::Cmd {
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

/// The connection for `config` (`tls`: the URLs are `rediss://`, their TLS settings checked),
/// and on standalone Redis the client too, for the startup check's own connection attempt.
/// Connects lazily: nothing here waits for Redis.
///
/// # Errors
/// [`StoreError::Unavailable`] when a URL cannot be parsed.
pub(super) fn connect(
    config: &RedisStoreConfig,
    tls: bool,
) -> Result<(Conn, Option<redis::Client>), StoreError> {
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
                ConnectionManager::new_lazy_with_config(client, manager_config(config))
                    .map_err(unavailable)?,
            )
        }
        RedisTarget::Sentinel {
            sentinels,
            master_name,
        } => {
            let sentinel = Sentinels::build(
                sentinels,
                master_name,
                tls.then_some(&config.tls),
                config.master_auth.as_ref(),
            )
            .map_err(unavailable)?;
            let link = Arc::new(SentinelLink {
                sentinel: tokio::sync::Mutex::new(sentinel),
                master_name: master_name.clone(),
                node_info: config
                    .master_auth
                    .as_ref()
                    .map(super::MasterAuth::node_info),
                // Finite retries: a connection to a master replaced by a failover stops
                // trying (the next call on a live one reconnects anew).
                manager_config: manager_config(config).set_number_of_retries(40),
                current: parking_lot::Mutex::new(None),
                master: parking_lot::Mutex::new(None),
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
                .retries(3)
                // The client waits between retries (CLUSTERDOWN, TRYAGAIN, a refused
                // connection) at least 1,280 ms by default: longer than any call's timeout, so
                // every call to a slot without a master held its client for the whole
                // timeout (20 clients, a master dead: 2,100 checks/s fell to 130). 10 to 20,
                // 40 and 80 ms instead (`RETRY_WAIT_MS`), never more than half the timeout.
                .min_retry_wait(RETRY_WAIT_MS.0)
                .max_retry_wait(retry_wait_cap(config.timeout))
                .retry_wait_formula(RETRY_WAIT_MS.1, 2);
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
    Ok((conn, standalone_client))
}

/// A cluster call's waits between its retries, in milliseconds: at least the first, and
/// `rand(first .. second x 2^retry)` (capped by [`retry_wait_cap`]).
const RETRY_WAIT_MS: (u64, u64) = (10, 10);

/// The longest wait between two retries of a cluster call: half its timeout, at least 20 ms.
fn retry_wait_cap(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis() / 2)
        .unwrap_or(u64::MAX)
        .max(2 * RETRY_WAIT_MS.0)
}

/// Longest pause between two reconnection attempts of a standalone connection (plus up to as
/// much again of jitter): a Redis that accepts connections again is reconnected to within
/// about this long. A dead Redis gets one connection attempt per 50 to 100 ms from each
/// process.
pub const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(50);

/// The standalone connection's settings (also each Sentinel master's).
pub(super) fn manager_config(config: &RedisStoreConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.timeout.max(Duration::from_millis(1))))
        // Reconnect quickly and keep trying: a restarted Redis is picked up within about
        // 100 ms.
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(RECONNECT_MAX_DELAY)
        .set_number_of_retries(usize::MAX >> 1)
}

/// Redis refused a command for lack of memory (`OOM command not allowed when used memory >
/// 'maxmemory'`).
pub(super) fn is_out_of_memory(e: &RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("OOM command not allowed")
}

pub(super) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable {
        reason: e.to_string(),
    }
}

/// The client's own response timeout (set to the same bound) reports as a timeout too.
pub(super) fn to_store_error(e: RedisError, timeout: Duration) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout {
            after_ms: duration_ms(timeout),
        }
    } else {
        unavailable(e)
    }
}
