//! The settings of a [`RedisStore`](super::RedisStore): where Redis is, TLS, timeouts, the
//! breaker, and which clock decides.

use std::fmt;
use std::time::Duration;

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
    /// (`redis://host:26379` each, or all `rediss://` for TLS to the sentinels and the
    /// master, with [`RedisTls`]). The store follows a failover (see [`SENTINEL_POLL`]).
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

    pub(super) fn certificates(&self) -> redis::TlsCertificates {
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
pub(super) fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://")
}

/// Which clock decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// Redis' `TIME` inside the script: one clock for every process (the default).
    #[default]
    Server,
    /// The store's [`Clock`](floodgate_core::Clock), passed to the script (tests, simulations).
    Caller,
}

/// Most keys a deny cache holds: the default and the largest
/// [`RedisStoreConfig::deny_cache_keys`] (also `deny_cache::CAPACITY`).
pub const DENY_CACHE_KEYS: usize = 10_000;

/// The most memory one deny cache entry takes, in bytes, with a prefix of up to 64 bytes (the
/// service's bound): the name (at most 75 bytes, its allocation and `String`), the entry (64
/// bytes) and the hash table's slot and control byte at its lowest load. `deny_cache_keys`
/// entries take at most `deny_cache_keys * DENY_CACHE_ENTRY_BYTES` (2.56 MB at
/// [`DENY_CACHE_KEYS`]; also `deny_cache::ENTRY_BYTES`).
pub const DENY_CACHE_ENTRY_BYTES: usize = 256;

/// Settings of a [`RedisStore`](super::RedisStore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// The server or cluster.
    pub target: RedisTarget,
    /// Prepended to every key name. Default `"fg:"` (3 bytes: the name then has 14 bytes, the
    /// most that fits Redis' smallest key allocation; see [`keys`](super::keys)). Must not contain `{` or
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
    /// `retry_after`, without a round trip (see the `deny_cache` module). Exact
    /// across processes: every reset, settle and reservation that can end a denial early
    /// publishes the key's name, every store with the cache subscribes, and the cache is off
    /// while its subscription is not live. Standalone Redis and Sentinel only (off on a
    /// cluster). Default `false` (the service turns it on: `[store] deny_cache`).
    pub deny_cache: bool,
    /// Most keys the deny cache holds (clamped to 1 ..= [`DENY_CACHE_KEYS`], each at most
    /// [`DENY_CACHE_ENTRY_BYTES`]). Default [`DENY_CACHE_KEYS`].
    pub deny_cache_keys: usize,
    /// Announce this process in Redis every [`instances::ANNOUNCE_INTERVAL`](super::instances::ANNOUNCE_INTERVAL) (a background
    /// task), so that [`RedisStore::live_instances`](super::RedisStore::live_instances) counts the processes sharing this Redis
    /// (see [`instances`](super::instances)). Default `false`.
    pub announce: bool,
    /// TLS settings for `rediss://` URLs (CA, client certificate). Default: none (system
    /// roots, no client certificate). Setting any of them requires `rediss://` URLs.
    pub tls: RedisTls,
    /// Coalescing (standalone Redis): at most this many script calls in flight; checks that
    /// arrive while all are out wait and then go together in the next call (see the
    /// [module docs](super)). Default 2. `0` turns coalescing off (one script call per batch, all pipelined).
    pub coalesce: usize,
    /// The master's credentials with [`RedisTarget::Sentinel`] (the sentinels' own are in
    /// their URLs): sent when the store asks the master for its role and on every connection
    /// to it. Default `None`: a master without a password. Ignored by the other targets,
    /// whose URLs carry their credentials.
    pub master_auth: Option<super::MasterAuth>,
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
            deny_cache_keys: DENY_CACHE_KEYS,
            coalesce: 2,
            master_auth: None,
        }
    }
}
