//! The store `floodgate serve` decides on: memory, Redis, or Redis with the local fallback, and
//! its housekeeping.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::Clock;
use floodgate_store::fallback::FallbackStore;
use floodgate_store::redis::{RedisStore, RedisStoreConfig, TimeSource};
use floodgate_store::{AnyStore, Store as _};
use floodgate_store::{MemoryStore, MemoryStoreConfig};
use tokio::sync::watch;

use crate::config;
use crate::state::AppState;

/// The `[store]` file settings that also apply when `--store redis://...` names the server:
/// timeout, breaker window, key prefix, deny cache and TLS files.
fn apply_redis_settings(redis: &mut RedisStoreConfig, file: &config::RedisConfig) {
    redis.timeout = Duration::from_millis(file.timeout_ms);
    redis.breaker_window = Duration::from_millis(file.breaker_window_ms);
    redis.prefix.clone_from(&file.prefix);
    redis.deny_cache = file.deny_cache;
    redis.deny_cache_keys = file.deny_cache_keys;
    redis.tls.clone_from(&file.tls);
    redis.master_auth.clone_from(&file.master_auth);
}

/// The store `[store]` (or `--store`) asks for. A Redis store connects lazily: when Redis is
/// down at startup the service still starts (its rules' failure modes apply) and uses Redis as
/// soon as it answers.
pub(super) async fn build_store(
    config: &config::StoreConfig,
    flag: Option<&str>,
    clock: &Arc<dyn Clock>,
    manual_clock: bool,
) -> anyhow::Result<AnyStore> {
    let redis = match flag {
        Some("memory") => None,
        Some(url) if config::is_redis_url(url) => {
            let mut redis = RedisStoreConfig::standalone(url);
            if let Some(r) = &config.redis {
                apply_redis_settings(&mut redis, r);
            }
            Some(redis)
        }
        Some(other) => {
            anyhow::bail!("--store: expected memory or a redis:// or rediss:// URL, got {other:?}")
        }
        None => config.redis.as_ref().map(|r| {
            let mut redis = RedisStoreConfig::with_target(r.target.clone());
            apply_redis_settings(&mut redis, r);
            redis
        }),
    };
    let Some(mut redis) = redis else {
        return Ok(AnyStore::Memory(Arc::new(MemoryStore::new(
            MemoryStoreConfig {
                max_keys: usize::try_from(config.max_keys).unwrap_or(usize::MAX),
                on_full: config.on_full,
                max_claims: usize::try_from(config.max_claims).unwrap_or(usize::MAX),
                ..MemoryStoreConfig::default()
            },
            Arc::clone(clock),
        ))));
    };
    if manual_clock {
        // Test only: decide on the manual clock, so tests control time on Redis too.
        redis.time_source = TimeSource::Caller;
    }
    let local_fallback = config.redis.as_ref().filter(|r| r.local_fallback);
    // With the local fallback, every process announces itself, so the count is discovered.
    redis.announce = local_fallback.is_some();
    let template = redis.clone();
    let store = RedisStore::new(redis, Arc::clone(clock))
        .map_err(|e| anyhow::anyhow!("redis store: {e}"))?;
    match store.startup_check().await {
        Ok(check) if check.cluster_node => anyhow::bail!(
            "redis store: the Redis at [store] url is a node of a Redis Cluster \
             (cluster_enabled:1), asked as one Redis every key of another node's slots would \
             fail with MOVED: list the cluster's nodes in [store] nodes = [\"redis://...\", ...] \
             instead of url (or --store)"
        ),
        Ok(check) => tracing::info!(
            maxmemory_policy = ?check.maxmemory_policies,
            "redis store ready"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "redis is not reachable yet; the rules' failure modes apply until it answers"
        ),
    }
    if let Some((file, fast)) = config
        .redis
        .as_ref()
        .and_then(|r| Some((r, r.per_second.as_deref()?)))
    {
        return super::store_per_second::join(store, file, fast, &template, clock).await;
    }
    Ok(match local_fallback.map(|r| r.local_fallback_instances) {
        Some(Some(instances)) => {
            tracing::info!(
                instances,
                "while redis fails, limits are enforced locally, divided by the instance count"
            );
            AnyStore::RedisWithFallback(Arc::new(FallbackStore::new(
                store,
                instances,
                Arc::clone(clock),
            )))
        }
        Some(None) => {
            tracing::info!(
                "while redis fails, limits are enforced locally, divided by the live instance \
                 count last seen in redis"
            );
            let live = store.live_instances();
            AnyStore::RedisWithFallback(Arc::new(FallbackStore::discovered(
                store,
                live,
                1,
                Arc::clone(clock),
            )))
        }
        None => AnyStore::Redis(Arc::new(store)),
    })
}

/// Drops expired keys a little at a time and publishes the store's size.
pub(super) async fn housekeeping(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        // The memory store sweeps; Redis expires keys by their TTL (nothing to do).
        state.store().sweep_some(state.clock.now());
        n += 1;
        if n.is_multiple_of(10) {
            // Publishes floodgate_store_keys (the memory store's; Redis counts none).
            let _ = state.store().stats();
            state.prometheus.run_upkeep();
        }
    }
}
