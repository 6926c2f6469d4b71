//! Instances discovered: every Floodgate process sharing a Redis announces itself there, so
//! that the `local` fallback ([`FallbackStore`](crate::fallback::FallbackStore)) divides each
//! limit by the number of processes actually running instead of a configured guess.
//!
//! The announcement is one member of one sorted set, `<prefix>instances`, scored with the time
//! it expires ([`ANNOUNCE_TTL`] after it was made, on the decision clock: Redis' `TIME` by
//! default); `lua/instances.lua` drops the expired members, (re)adds this process and returns
//! how many are live, in one atomic call. With [`RedisStoreConfig::announce`](super::RedisStoreConfig)
//! a background task repeats it every [`ANNOUNCE_INTERVAL`]; the count it last saw is
//! [`RedisStore::live_instances`](super::RedisStore::live_instances) and the gauge
//! `floodgate_store_redis_live_instances`.
//!
//! When Redis dies between two refreshes, the count stays at what was last seen (nobody can
//! refresh or expire anything): the fallback divides by the fleet as it was. A process started
//! while Redis is down has seen nothing (count 0): it divides by its configured override, or 1.
//! A process that stops is forgotten [`ANNOUNCE_TTL`] after its last refresh.

use std::sync::LazyLock;
use std::time::Duration;

/// How often the background task announces this process.
pub const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(1);

/// How long one announcement counts: three missed refreshes and a process is no longer live.
pub const ANNOUNCE_TTL: Duration = Duration::from_secs(3);

/// The source of `lua/instances.lua`.
pub const SOURCE: &str = include_str!("../../lua/instances.lua");

/// The script.
pub static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE));

/// An id for this store: host name (when known), process id, start time and a number for each
/// store of the process, unique among the stores sharing a Redis.
pub fn process_id(now: floodgate_core::Timestamp) -> String {
    static STORES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = STORES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}:{}:{now}:{n}", std::process::id())
}
