//! The announcement of this process in the instance set (`instances.lua`, see
//! [`instances`]): one call, and the background task of
//! [`RedisStoreConfig::announce`](super::RedisStoreConfig::announce).

use std::time::Duration;

use floodgate_core::Timestamp;
use redis::RedisError;

use super::config::RedisStoreConfig;
use super::connection::{duration_ms, Conn};
use super::instances;

/// The arguments of one `instances.lua` call but `now`.
pub(super) struct AnnounceCall {
    keys: [String; 1],
    id: String,
    pub(super) now: Option<Timestamp>,
    ttl_us: u64,
    expire_ms: u64,
}

pub(super) fn announce_call_parts(config: &RedisStoreConfig, id: &str) -> AnnounceCall {
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
    pub(super) async fn send(&self, conn: &Conn) -> Result<u64, RedisError> {
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

pub(super) fn publish_live(live: &std::sync::atomic::AtomicU64, n: u64) {
    live.store(n, std::sync::atomic::Ordering::Release);
    metrics::gauge!("floodgate_store_redis_live_instances").set(n as f64);
}

/// The background announcement of [`RedisStoreConfig::announce`]: every
/// [`instances::ANNOUNCE_INTERVAL`] until the store (its count) is dropped. A failed
/// announcement keeps the count last seen.
pub(super) fn spawn_announcer(
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
