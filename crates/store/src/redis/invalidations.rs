//! The deny cache's subscription to the invalidations of every process (see
//! [`deny_cache`](super::deny_cache)): a background task per store holding one `SUBSCRIBE` connection to
//! `<prefix>deny-cache` on the master, dropping each key named there, and turning the cache
//! off (emptied) whenever it cannot prove the subscription live.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::Value;

use super::connection::SentinelLink;
use super::deny_cache::DenyCache;

/// How often the subscription's connection is asked `PING`. The cache goes off when a `PING`
/// goes unanswered for the store's timeout: a connection that stops answering (a partition, a
/// master stopped without closing it) is found within this long plus the timeout.
pub const PING_INTERVAL: Duration = Duration::from_millis(100);

/// Longest pause between two subscription attempts (they start at 10 ms and double).
const RETRY_MAX_PAUSE: Duration = Duration::from_millis(200);

/// Where to subscribe: the one server, or the master the sentinels name now.
pub(super) enum Source {
    Standalone(Box<redis::Client>),
    Sentinel(Weak<SentinelLink>),
}

impl Source {
    /// The client of the server to subscribe on and its address (`None`: no master known yet).
    fn client(&self) -> Option<(String, redis::Client)> {
        match self {
            Source::Standalone(client) => Some((String::new(), (**client).clone())),
            Source::Sentinel(link) => link.upgrade()?.master_client(),
        }
    }

    /// Whether the sentinels now name another master than `addr` (a failover).
    fn moved(&self, addr: &str) -> bool {
        match self {
            Source::Standalone(_) => false,
            Source::Sentinel(link) => link
                .upgrade()
                .and_then(|l| l.master_client())
                .is_some_and(|(now, _)| now != addr),
        }
    }
}

/// How a subscription ended.
enum Ended {
    /// The store (its cache) was dropped: the task ends.
    Dropped,
    /// It failed, or never started: the cache is off until the next one is confirmed.
    Failed(String),
}

/// Starts the subscription task of `cache` for `channel`; it ends when the cache is dropped.
/// `connect_timeout` bounds connecting and subscribing, `timeout` each `PING`.
pub(super) fn spawn(
    cache: &Arc<DenyCache>,
    source: Source,
    channel: String,
    connect_timeout: Duration,
    timeout: Duration,
) {
    let cache = Arc::downgrade(cache);
    tokio::spawn(async move {
        let mut pause = Duration::from_millis(10);
        loop {
            let reason = match source.client() {
                None => "no master known yet".to_string(),
                Some((addr, client)) => {
                    match session(
                        &cache,
                        &source,
                        &addr,
                        &client,
                        &channel,
                        connect_timeout,
                        timeout,
                    )
                    .await
                    {
                        Ended::Dropped => return,
                        Ended::Failed(reason) => reason,
                    }
                }
            };
            let Some(c) = cache.upgrade() else {
                return;
            };
            let live = c.is_live();
            c.set_live(false);
            drop(c);
            metrics::gauge!("floodgate_store_deny_cache_live").set(0.0);
            if live {
                pause = Duration::from_millis(10);
                tracing::warn!(
                    %channel,
                    %reason,
                    "redis deny cache off: its subscription to the invalidations failed; every \
                     check asks redis until it is back"
                );
            } else {
                tracing::debug!(%channel, %reason, "redis deny cache: subscription not made");
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX_PAUSE);
        }
    });
}

/// One subscription: connect, `SUBSCRIBE`, turn the cache on, then drop every key named on the
/// channel and `PING` every [`PING_INTERVAL`] until something fails.
async fn session(
    cache: &Weak<DenyCache>,
    source: &Source,
    addr: &str,
    client: &redis::Client,
    channel: &str,
    connect_timeout: Duration,
    timeout: Duration,
) -> Ended {
    let failed = |what: &str, e: &dyn std::fmt::Display| Ended::Failed(format!("{what}: {e}"));
    let pubsub = match tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return failed("connect", &e),
        Err(_) => return Ended::Failed("connect: timed out".into()),
    };
    let (mut sink, mut stream) = pubsub.split();
    match tokio::time::timeout(connect_timeout + timeout, sink.subscribe(channel)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return failed("SUBSCRIBE", &e),
        Err(_) => return Ended::Failed("SUBSCRIBE: timed out".into()),
    }
    {
        let Some(c) = cache.upgrade() else {
            return Ended::Dropped;
        };
        // Confirmed: every write from now on is published to us. Nothing cached before
        // survives (the cache was off, or is emptied here).
        c.set_live(true);
    }
    metrics::gauge!("floodgate_store_deny_cache_live").set(1.0);
    tracing::debug!(%channel, "redis deny cache on: subscribed to the invalidations");
    let mut tick = tokio::time::interval(PING_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else {
                    return Ended::Failed("the subscription's connection closed".into());
                };
                let Some(c) = cache.upgrade() else {
                    return Ended::Dropped;
                };
                match message.get_payload::<String>() {
                    Ok(name) => c.invalidate_received(&name),
                    // Not a key name (nothing of ours sends one): drop everything.
                    Err(_) => {
                        c.set_live(false);
                        c.set_live(true);
                    }
                }
            }
            _ = tick.tick() => {
                if cache.strong_count() == 0 {
                    return Ended::Dropped;
                }
                if source.moved(addr) {
                    return Ended::Failed(format!("the sentinels name another master than {addr}"));
                }
                match tokio::time::timeout(timeout, sink.ping::<Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return failed("PING", &e),
                    Err(_) => return Ended::Failed(format!("PING unanswered for {} ms", timeout.as_millis())),
                }
            }
        }
    }
}
