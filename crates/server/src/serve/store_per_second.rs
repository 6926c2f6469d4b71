//! The per-second Redis of a Redis store ([`crate::config::RedisConfig::per_second`],
//! envoyproxy/ratelimit's `REDIS_PERSECOND`): built like the main one, and the two joined in
//! a [`PerSecondStore`] that routes each rule by its period.

use std::sync::Arc;

use floodgate_core::Clock;
use floodgate_store::per_second::PerSecondStore;
use floodgate_store::redis::{RedisStore, RedisStoreConfig};
use floodgate_store::AnyStore;

use crate::config;

/// `main` with the per-second store of `file` (which has one), built from `template` (the
/// main store's settings) with its own target, timeouts, prefix, TLS and credentials.
///
/// # Errors
/// A per-second store with the local fallback (which divides one store's limits; not
/// supported with two), or a per-second store that cannot be built.
pub(super) async fn join(
    main: RedisStore,
    file: &config::RedisConfig,
    fast: &config::RedisConfig,
    template: &RedisStoreConfig,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<AnyStore> {
    if file.local_fallback {
        anyhow::bail!(
            "a per-second Redis (REDIS_PERSECOND) cannot be combined with the local fallback"
        );
    }
    let mut config = template.clone();
    config.target = fast.target.clone();
    config.timeout = std::time::Duration::from_millis(fast.timeout_ms);
    config.breaker_window = std::time::Duration::from_millis(fast.breaker_window_ms);
    config.prefix.clone_from(&fast.prefix);
    config.tls.clone_from(&fast.tls);
    config.master_auth.clone_from(&fast.master_auth);
    config.deny_cache = fast.deny_cache;
    config.deny_cache_keys = fast.deny_cache_keys;
    config.announce = false;
    let per_second = RedisStore::new(config, Arc::clone(clock))
        .map_err(|e| anyhow::anyhow!("per-second redis store: {e}"))?;
    match per_second.startup_check().await {
        Ok(_) => tracing::info!("per-second redis store ready"),
        Err(e) => tracing::warn!(
            error = %e,
            "the per-second redis is not reachable yet; the rules' failure modes apply until \
             it answers"
        ),
    }
    Ok(AnyStore::RedisPerSecond(Arc::new(PerSecondStore::new(
        main, per_second,
    ))))
}
