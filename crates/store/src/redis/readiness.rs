//! What Redis is like now: `PING`, the readiness probe (`INFO stats`) and the startup check
//! (`maxmemory-policy`, loading the scripts).

use std::time::Duration;

use redis::Value;

use super::connection::{duration_ms, to_store_error};
use super::store::RedisStore;
use super::{health, scripts};
use crate::StoreError;

/// Most often a readiness probe ([`RedisStore::readiness`]) asks Redis (`INFO stats`): once a
/// second.
pub const READINESS_PING_INTERVAL: Duration = Duration::from_secs(1);

/// A probe that times out makes the store not ready only when this many in a row did: one
/// slow `INFO stats` (a busy Redis, a loaded host) flipped a whole process's `/readyz` to 503
/// for about 2 s while every decision was answered. A probe answered with an error (refused,
/// `LOADING`, a master unreachable) makes it not ready at once, and so does a timeout before
/// any probe was answered (a Redis down at startup: the shared connection retries in the
/// background, so its probe times out rather than being refused).
pub const PROBE_TIMEOUTS_IN_A_ROW: u32 = 2;

/// What [`RedisStore::startup_check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCheck {
    /// `maxmemory-policy` of each node that answered (one for standalone Redis).
    pub maxmemory_policies: Vec<String>,
    /// `true` when some node may evict limiter keys (see [`policy_may_evict`]).
    pub may_evict: bool,
    /// `true` when the standalone Redis of `url` is a node of a Redis Cluster (`INFO cluster`
    /// says `cluster_enabled:1`): asked as one Redis, every key of another node's slots fails
    /// with `MOVED`. The cluster's nodes belong in `nodes` instead.
    pub cluster_node: bool,
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

impl RedisStore {
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
    /// open, while one shard of a cluster is not ready (its recent calls failed, its last
    /// [`FAILED_IN_A_ROW`](super::shards::FAILED_IN_A_ROW) calls failed, or the background
    /// probe of a master without calls failed, see [`shard_readiness`](Self::shard_readiness)
    /// and [`SHARD_PROBE_INTERVAL`](super::SHARD_PROBE_INTERVAL)), while at least [`health::MAX_FAILED_PERCENT`] % of the calls of the last
    /// [`health::WINDOW_SECONDS`] s failed (of at least [`health::MIN_CALLS`]: a partial
    /// outage, e.g. one cluster master dead, that neither opens the breaker nor fails the
    /// probe), or when the last readiness probe was answered with an error, or the last
    /// `PROBE_TIMEOUTS_IN_A_ROW` (2) timed out. The probe is `INFO stats` (on every
    /// master of a cluster): it answers like a `PING`, and its `evicted_keys` show whether
    /// Redis evicted keys since the last probe (counted and logged, see
    /// [`evictions`](super::evictions)). At most one probe (bounded by the timeout) per
    /// [`READINESS_PING_INTERVAL`] of the store's clock, however often this is called;
    /// concurrent callers in between get the cached answer. The
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
            let cause = self.breaker.cause();
            let cause = cause.map(|c| format!("; the last failure: {c}"));
            return Err(StoreError::Unavailable {
                reason: format!(
                    "redis circuit breaker open: calls fail fast{}",
                    cause.unwrap_or_default()
                ),
            });
        }
        let now = self.clock.now();
        let shard = self.failing_shards();
        if let Some((failed, calls)) = self.health.failing(now) {
            let shard = shard.map(|s| format!("; shard not ready: {s}"));
            return Err(StoreError::Unavailable {
                reason: format!(
                    "redis: {failed} of the {calls} calls of the last {} s failed (not ready \
                     from {} %){}",
                    health::WINDOW_SECONDS,
                    health::MAX_FAILED_PERCENT,
                    shard.unwrap_or_default()
                ),
            });
        }
        if let Some(shard) = shard {
            return Err(StoreError::Unavailable {
                reason: format!("redis cluster shard not ready: {shard}"),
            });
        }
        // After the shards' counts, which name the same master with its calls.
        if let Some(open) = self.open_shard_breaker() {
            return Err(open);
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
            let timed_out = |e: &StoreError| matches!(e, StoreError::Timeout { .. });
            let failed = match tokio::time::timeout(self.config.timeout, probe).await {
                Ok(Ok(info)) => {
                    self.evictions.observe(&info, now);
                    None
                }
                Ok(Err(e)) => Some(to_store_error(e, self.config.timeout)),
                Err(_) => Some(StoreError::Timeout {
                    after_ms: duration_ms(self.config.timeout),
                }),
            };
            let reason = match failed {
                None => {
                    self.probe_timeouts.store(0, Ordering::Release);
                    self.probe_answered.store(true, Ordering::Release);
                    self.ping_failed.store(false, Ordering::Release);
                    return Ok(());
                }
                Some(e) if timed_out(&e) => {
                    let row = self.probe_timeouts.fetch_add(1, Ordering::AcqRel) + 1;
                    let forgiven = row < PROBE_TIMEOUTS_IN_A_ROW
                        && self.probe_answered.load(Ordering::Acquire)
                        && !self.ping_failed.load(Ordering::Acquire);
                    // Slow or dead? A Redis that stopped refuses a new connection (its port
                    // closed): not ready now, not one probe later.
                    let refused = if forgiven {
                        self.refuses_connections().await
                    } else {
                        None
                    };
                    if let Some(why) = refused {
                        self.probe_timeouts.store(0, Ordering::Release);
                        self.probe_answered.store(false, Ordering::Release);
                        self.ping_failed.store(true, Ordering::Release);
                        return Err(StoreError::Unavailable {
                            reason: format!(
                                "redis readiness probe (INFO stats) failed: {e}, and a new \
                                 connection failed: {why}"
                            ),
                        });
                    }
                    if forgiven {
                        tracing::debug!(
                            "redis readiness probe (INFO stats) {e}; still ready until \
                             {PROBE_TIMEOUTS_IN_A_ROW} in a row time out"
                        );
                        return Ok(());
                    }
                    format!("{e} ({row} probes in a row)")
                }
                Some(e) => {
                    self.probe_timeouts.store(0, Ordering::Release);
                    self.probe_answered.store(false, Ordering::Release);
                    e.to_string()
                }
            };
            self.ping_failed.store(true, Ordering::Release);
            return Err(StoreError::Unavailable {
                reason: format!("redis readiness probe (INFO stats) failed: {reason}"),
            });
        }
        if self.ping_failed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable {
                reason: "redis readiness probe (INFO stats) failed within the last second".into(),
            });
        }
        Ok(())
    }

    /// Cluster: the not-ready error of the first master whose breaker is open, if one is.
    fn open_shard_breaker(&self) -> Option<StoreError> {
        let (node, cause) = self.shard_breakers.as_ref()?.first_open()?;
        let cause = cause.map(|c| format!("; the last failure: {c}"));
        Some(StoreError::Unavailable {
            reason: format!(
                "redis circuit breaker open for cluster master {node}: calls to its slots fail \
                 fast{}",
                cause.unwrap_or_default()
            ),
        })
    }

    /// Standalone Redis: why a new TCP (or Unix socket) connection to it fails within
    /// `connect_timeout`, or `None` when one opens (a Redis paused or slow still accepts
    /// connections; one that stopped refuses them) or on Sentinel. Opens no Redis session:
    /// connected, it is closed at once.
    async fn refuses_connections(&self) -> Option<String> {
        let addr = self.client.as_ref()?.get_connection_info().addr().clone();
        let wait = self.config.connect_timeout;
        let connect = async {
            match addr {
                redis::ConnectionAddr::Tcp(host, port)
                | redis::ConnectionAddr::TcpTls { host, port, .. } => {
                    tokio::net::TcpStream::connect((host.as_str(), port))
                        .await
                        .map(drop)
                }
                #[cfg(unix)]
                redis::ConnectionAddr::Unix(path) => {
                    tokio::net::UnixStream::connect(path).await.map(drop)
                }
                #[allow(unreachable_patterns)]
                _ => Ok(()),
            }
        };
        match tokio::time::timeout(wait, connect).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no connection within {} ms", duration_ms(wait))),
        }
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
        let mut cluster_node = false;
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
                redis::cmd("PING").query_async::<String>(&mut con).await?;
                redis::cmd("INFO")
                    .arg("cluster")
                    .query_async::<String>(&mut con)
                    .await
            };
            let info = tokio::time::timeout(wait, attempt)
                .await
                .map_err(|_| StoreError::Timeout {
                    after_ms: duration_ms(wait),
                })?
                .map_err(|e| to_store_error(e, wait))?;
            cluster_node = info.lines().any(|l| l.trim() == "cluster_enabled:1");
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
            cluster_node,
        })
    }
}

impl RedisStore {
    /// A cluster's shards as readiness sees them (see [`shards`](super::shards)): each
    /// master of the client's slot map and each that had calls in the last
    /// [`WINDOW_SECONDS`](health::WINDOW_SECONDS) or whose probe failed, with its calls,
    /// failures and whether it is ready (and why not). Empty on standalone Redis and Sentinel. Reads no Redis.
    pub fn shard_readiness(&self) -> Vec<super::shards::ShardReport> {
        self.shards
            .as_ref()
            .map(|s| s.report(self.clock.now()))
            .unwrap_or_default()
    }

    /// The shards that are not ready (`node 10.0.0.1:7000 (slots 0-5460): its last 4 calls
    /// failed (not ready from 3 in a row)`, joined by `; `), for readiness' reason.
    pub(super) fn failing_shards(&self) -> Option<String> {
        let shards = self.shard_readiness();
        let failing: Vec<String> = shards
            .iter()
            .filter(|s| !s.ready)
            .map(|s| {
                format!(
                    "node {} (slots {}): {}",
                    s.node,
                    s.slot_text(),
                    s.reason.as_deref().unwrap_or("not ready"),
                )
            })
            .collect();
        (!failing.is_empty()).then(|| failing.join("; "))
    }
}

pub(super) fn collect_policies(v: &Value, out: &mut Vec<String>) {
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
