//! The validated configuration: the types `floodgate serve` runs on ([`Config`] and its
//! sections), their defaults and bounds, and the checks shared with the command line (admin
//! token, reservation secret, Redis URL).

use std::net::SocketAddr;

use floodgate_core::{Policy, Quota};
use floodgate_store::OnFull;
use floodgate_tower::{CostSource, FailureMode, ForwardedHeader, KeySource, Matcher};
use http::Uri;
use ipnet::IpNet;

use super::{descriptors, listen};

/// Longest accepted rule name, in bytes (names appear in metrics labels and store keys).
pub(super) const MAX_RULE_NAME_BYTES: usize = 64;

/// Largest accepted cost of one request, in units (also the largest `cost` in `POST /v1/check`).
pub(crate) const MAX_COST: u64 = 1_000_000;

/// Largest `limit` accepted for the sliding log, whose state holds one entry per admitted unit
/// (a limit of 10,000 is about 80 KB per key in memory and ~1 MB in a Redis sorted set).
pub(crate) const MAX_SLIDING_LOG_LIMIT: u64 = 10_000;

/// Most rules one configuration may hold (declared and made from limit overrides, TOML or
/// YAML): a reload compares and logs every rule, and the gRPC labels and the page list them.
pub(crate) const MAX_RULES: usize = 100_000;

/// The error of a configuration beyond [`MAX_RULES`].
pub(crate) fn too_many_rules() -> String {
    format!("too many rules: a configuration holds at most {MAX_RULES}")
}

/// Default `[store] max_keys`.
pub(super) const DEFAULT_MAX_KEYS: u64 = 100_000;

/// Largest accepted `[store] max_keys`.
pub(super) const MAX_MAX_KEYS: u64 = 100_000_000;

/// Default `[store] max_claims`: the settled reservation tokens the memory store remembers
/// (until each token's life ends) to refuse a second settle; about 100 bytes each.
pub(crate) const DEFAULT_MAX_CLAIMS: u64 = 1_000_000;

/// A validated configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The file it came from (as given), or `<embedded default>` ([`super::embedded_default`]).
    pub(crate) file: String,
    /// `[server]`.
    pub(crate) server: ServerConfig,
    /// `[store]`.
    pub(crate) store: StoreConfig,
    /// `[[rules]]`, in file order (the order decisions are reported in), then the rules of the
    /// limit overrides they allow.
    pub(crate) rules: Vec<RuleConfig>,
    /// Which rule an Envoy rate limit descriptor selects (rules with a `domain`).
    pub(crate) descriptors: descriptors::DescriptorIndex,
    /// `[envoy]`: envoyproxy/ratelimit's service-wide settings (flags for a YAML
    /// configuration).
    pub(crate) envoy: super::envoy::EnvoySettings,
}

/// `[server]`: settings read once at start (a reload that changes them is logged and ignored,
/// except `admin_token` and `trusted_proxies`, which take effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerConfig {
    /// Address to listen on; `--listen` overrides it.
    pub(crate) listen: Option<SocketAddr>,
    /// Address of the gRPC listener (Envoy's rate limit service); `--grpc-listen` overrides
    /// it. `None`: no gRPC listener.
    pub(crate) grpc_listen: Option<SocketAddr>,
    /// `[server.grpc_tls]`: TLS (and mutual TLS) on the gRPC listener; `None`: plain HTTP/2.
    pub(crate) grpc_tls: Option<crate::grpc::tls::GrpcTlsSettings>,
    /// Bearer token that guards the admin API; `None` disables it.
    pub(crate) admin_token: Option<String>,
    /// `api_token`: when set, `/v1/check`, `/v1/peek`, `/v1/settle`, `/v1/simulate` and
    /// `/v1/ui/live` need `Authorization: Bearer <it>`
    /// (`--api-token` / `FLOODGATE_API_TOKEN` override it); the same rule as `admin_token`.
    pub(crate) api_token: Option<String>,
    /// TCP peers whose `X-Forwarded-For` is believed (counted from the right).
    pub(crate) trusted_proxies: Vec<IpNet>,
    /// Reverse-proxy upstream (`http://host:port`); `--upstream` overrides it.
    pub(crate) upstream: Option<Uri>,
    /// `keep_client_headers`: client-address headers the proxy passes on from untrusted peers
    /// too (each one
    /// [`crate::proxy::client_address_header`] accepts; default none, all stripped).
    pub(crate) keep_client_headers: Vec<http::HeaderName>,
    /// The header trusted proxies set: `"x-forwarded-for"` (default) or `"forwarded"` (RFC 7239).
    pub(crate) forwarded_header: ForwardedHeader,
    /// `path_parameters`: `"strip"` (default) matches request paths without their
    /// `;parameters`, as servlet containers route them; `"keep"` as RFC 3986 reads them.
    pub(crate) path_parameters: floodgate_tower::PathParameters,
    /// IPv6 clients are counted per prefix of this length (default 64, what one subscriber
    /// usually holds).
    pub(crate) ipv6_prefix: u8,
    /// Serve the web page at `/ui/` on the API listener (default true); `--no-ui` overrides.
    pub(crate) ui: bool,
    /// `ui_denied_keys`: how many of the busiest denied keys the web page's live view shows
    /// (0, the default: none; keys can be personal data, so the list is opt-in; at most 1,000).
    pub(crate) ui_denied_keys: usize,
    /// `max_delayed`: at most this many requests are held at once in the delay mode (rules
    /// with `delay`); one more that would wait is refused as without a delay. Default
    /// [`floodgate_tower::DEFAULT_MAX_DELAYED`], at most [`MAX_MAX_DELAYED`]; 0: none waits.
    pub(crate) max_delayed: usize,
    /// `reservation_secret`: the HMAC-SHA256 key that signs reservation tokens
    /// (`/v1/check` with `"reserve": true`, `/v1/settle`); at least 32 printable ASCII
    /// characters without spaces. `None`: a random secret per process (tokens then settle only
    /// on the process that made them). Every instance sharing a store must share it.
    pub(crate) reservation_secret: Option<String>,
    /// `reservation_ttl`: how long a reservation token can be settled, in microseconds
    /// (default 5 minutes; 1 second to 7 days). A token not settled by then is spent.
    pub(crate) reservation_ttl: u64,
    /// Connection bounds and timeouts of the listeners and the proxy's upstream client.
    pub(crate) limits: listen::ConnectionLimits,
}

/// The default `[server] reservation_ttl`: 5 minutes, in microseconds.
pub(crate) const DEFAULT_RESERVATION_TTL: u64 = 300_000_000;

/// The bounds of `[server] reservation_ttl`, in microseconds: 1 second to 7 days.
pub(crate) const RESERVATION_TTL_RANGE: std::ops::RangeInclusive<u64> = 1_000_000..=604_800_000_000;

/// A reservation secret must be at least this many characters.
pub(crate) const MIN_RESERVATION_SECRET: usize = 32;

/// `[server] reservation_secret` (and `FLOODGATE_RESERVATION_SECRET`): at least
/// [`MIN_RESERVATION_SECRET`] printable ASCII characters without spaces.
///
/// # Errors
/// What is wrong with it, for the error message.
pub(crate) fn check_reservation_secret(secret: &str) -> Result<(), String> {
    if secret.len() < MIN_RESERVATION_SECRET || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "must be at least {MIN_RESERVATION_SECRET} printable ASCII characters without \
             spaces (e.g. 32 random bytes in base64: openssl rand -base64 32)"
        ));
    }
    Ok(())
}

/// Largest accepted `[server] max_delayed`.
pub(crate) const MAX_MAX_DELAYED: usize = 1_000_000;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: None,
            grpc_listen: None,
            grpc_tls: None,
            admin_token: None,
            api_token: None,
            trusted_proxies: Vec::new(),
            upstream: None,
            keep_client_headers: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            path_parameters: floodgate_tower::PathParameters::Strip,
            ipv6_prefix: 64,
            ui: true,
            ui_denied_keys: 0,
            max_delayed: floodgate_tower::DEFAULT_MAX_DELAYED,
            reservation_secret: None,
            reservation_ttl: DEFAULT_RESERVATION_TTL,
            limits: listen::ConnectionLimits::default(),
        }
    }
}

/// `[store]`: `kind = "memory"` (the default) or `kind = "redis"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreConfig {
    /// Most keys held at once (all rules together; memory store).
    pub(crate) max_keys: u64,
    /// What happens when `max_keys` live keys are held and a new key arrives: `"reject"`
    /// (default: deny the new key, so a flood of keys cannot switch limiting off) or
    /// `"admit_untracked"` (admit it without counting).
    pub(crate) on_full: OnFull,
    /// Most live reservation claims held at once (memory store; a Redis store keeps each
    /// claim as a key with a TTL).
    pub(crate) max_claims: u64,
    /// `Some` for `kind = "redis"`.
    pub(crate) redis: Option<RedisConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            max_claims: DEFAULT_MAX_CLAIMS,
            on_full: OnFull::Reject,
            redis: None,
        }
    }
}

/// `[store] kind = "redis"`: where Redis is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedisConfig {
    /// `url = "redis://host:port/db"` (one server) or `nodes = [...]` (a Redis Cluster).
    pub(crate) target: floodgate_store::redis::RedisTarget,
    /// `timeout_ms`: longest wait for one store call, 1 to 60,000 ms. Default 50 (see
    /// [`DEFAULT_REDIS_TIMEOUT_MS`] for the trade-off).
    pub(crate) timeout_ms: u64,
    /// `breaker_window_ms`: the circuit breaker opens only when Redis has failed every call
    /// for this long, counted from the first failed call since the last success (and at least
    /// 5 calls failed), 0 to 60,000 ms.
    /// Default 250; 0 opens after 5 consecutive failures whatever the time (see
    /// `docs/redis.md`, "Failures").
    pub(crate) breaker_window_ms: u64,
    /// `prefix` of every key (default `"fg:"`, at most 64 bytes, no braces).
    pub(crate) prefix: String,
    /// `fallback = "local"`: while Redis fails, decide in this process with every limit divided
    /// by the number of instances. `false` (`fallback = "none"`, the default): a failure
    /// follows each rule's `failure_mode`.
    pub(crate) local_fallback: bool,
    /// `instances = N` with `fallback = "local"`: divide by `N` (`Some(N)`), an override of
    /// the count discovered in Redis (`None`: every process announces itself there and the
    /// fallback divides by the live count it last saw).
    pub(crate) local_fallback_instances: Option<u64>,
    /// `tls_ca_file`, `tls_cert_file`, `tls_key_file` (PEM; relative paths are relative to the
    /// configuration file's folder), read when the file is loaded. Only with `rediss://`.
    pub(crate) tls: floodgate_store::redis::RedisTls,
    /// The master's credentials with Redis Sentinel (`REDIS_AUTH` with `REDIS_TYPE=sentinel`
    /// in `--envoy-ratelimit-env`); `None` for a master without a password.
    pub(crate) master_auth: Option<floodgate_store::redis::MasterAuth>,
    /// `deny_cache = true|false`: answer repeated checks of a key Redis just denied in this
    /// process until its `retry_after`, without a round trip (the store's deny cache, exact
    /// across processes: `docs/redis.md`, "Deny cache"). Default `false`; not on a cluster.
    pub(crate) deny_cache: bool,
    /// Most keys the deny cache holds: `floodgate_store::redis::deny_cache::CAPACITY`, or
    /// fewer from `LOCAL_CACHE_SIZE_IN_BYTES` in `--envoy-ratelimit-env`.
    pub(crate) deny_cache_keys: usize,
    /// A second Redis for the rules whose period is a second or less (envoyproxy/ratelimit's
    /// `REDIS_PERSECOND`; `[store.per_second]`); `None`: this one holds every rule.
    pub(crate) per_second: Option<Box<RedisConfig>>,
}

/// Default `[store] breaker_window_ms`: 250 ms, the store's own default
/// (`RedisStoreConfig::breaker_window`).
pub(super) const DEFAULT_BREAKER_WINDOW_MS: u64 = 250;

/// Default `[store] timeout_ms`: 50 ms. Longer delays a decision while Redis is slow; shorter
/// sends healthy but momentarily slow calls to the failure mode (10 ms timed out hundreds of
/// calls within seconds against a healthy Redis on a loaded 2-core host). Envoy's rate-limit
/// filter waits 20 ms. See `docs/redis.md`, "Failures".
pub(super) const DEFAULT_REDIS_TIMEOUT_MS: u64 = 50;

/// `true` for the URL schemes the Redis client accepts (`rediss://` is TLS).
pub(crate) fn is_redis_url(url: &str) -> bool {
    ["redis://", "rediss://", "redis+unix://", "unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
}

/// The one rule for an admin token, wherever it comes from (`[server] admin_token`,
/// `--admin-token`, `FLOODGATE_ADMIN_TOKEN`): at least 16 printable ASCII characters without
/// spaces.
///
/// # Errors
/// What is wrong with it.
pub(crate) fn check_admin_token(token: &str) -> Result<(), String> {
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be at least 16 printable ASCII characters without spaces".into());
    }
    Ok(())
}

/// One validated `[[rules]]` entry.
#[derive(Debug, Clone)]
pub(crate) struct RuleConfig {
    /// Unique name (`[A-Za-z0-9_.-]`, 1..=64 bytes).
    pub(crate) name: String,
    /// Which HTTP requests it applies to (forward-auth, proxy): `[rules.match]`.
    pub(crate) matcher: Matcher,
    /// What it counts separately (the grammar of `key = ...`: [`super::key`]).
    pub(crate) key: KeySource,
    /// The algorithm and quota.
    pub(crate) policy: Policy,
    /// The cost of a request: `cost`, `cost_header` and `[[rules.route_costs]]` (the first
    /// matching route, then the header, then `cost`).
    pub(crate) cost: CostSource,
    /// Shadow mode: decide and count, report in metrics and logs, but never deny.
    pub(crate) shadow: bool,
    /// What to answer when the store fails: `"open"` (default: admit, count `error_open`) or
    /// `"closed"` (503, count `error_closed`).
    pub(crate) failure_mode: FailureMode,
    /// `delay = "500ms"`: the delay mode in microseconds (forward-auth and the proxy hold a
    /// request that fits within it until its slot instead of answering 429; see
    /// `docs/reservations.md`, "Delay mode"). Within the algorithm's horizon
    /// ([`Policy::max_wait`]); `None`: refused at once.
    pub(crate) delay: Option<floodgate_core::Micros>,
    /// `lease = "20ms"` and `lease_share`: quota leases (`docs/spec/leases.md`); `None`: every
    /// decision asks the store.
    pub(crate) lease: Option<floodgate_limiter::Lease>,
    /// `domain` and `descriptors`: the rule answers Envoy's rate limit requests for these
    /// descriptors (gRPC and `/v1/check` only; never applied to forward-auth or proxied
    /// requests).
    pub(crate) descriptor: Option<descriptors::DescriptorRule>,
    /// For the rule of a limit override: the position of the rule it overrides.
    pub(crate) override_of: Option<usize>,
    /// `max_keys`: most keys the memory store holds for this rule at once (inside
    /// `[store] max_keys`), so that a flood of new keys on one rule (e.g. junk keys sent to
    /// `POST /v1/check`) cannot take the other rules' room. `None`: only the store's cap. A
    /// limit override's rule has the same cap, counted separately.
    pub(crate) max_keys: Option<u64>,
    /// `applies_to`: which traffic the rule applies to (HTTP requests, `/v1/check` calls
    /// naming it, gRPC requests of its domain). Default: HTTP and the API; with a `domain`,
    /// gRPC and the API.
    pub(crate) applies_to: floodgate_tower::Scope,
}

impl RuleConfig {
    /// Whether a reloaded `other` keeps this rule's counters: the same name, algorithm and
    /// quota (the stores identify state by rule name, policy and key); any change starts it
    /// fresh.
    pub(crate) fn same_state(&self, other: &RuleConfig) -> bool {
        self.name == other.name
            && self.policy.kind() == other.policy.kind()
            && self.policy.quota() == other.policy.quota()
            && self.policy.calendar() == other.policy.calendar()
    }
}

/// The rule deciding limit override `quota` of `base`: the same rule under its own name
/// (`<name>@<limit>/<period>`) and quota, so its counters never mix with the base quota's.
pub(crate) fn override_rule(base: &RuleConfig, quota: &Quota) -> RuleConfig {
    let policy = Policy::new(base.policy.kind(), *quota).unwrap_or_else(|_| base.policy.clone());
    let policy = super::validate::keep_calendar(&base.policy, policy);
    RuleConfig {
        name: format!("{}@{}", base.name, quota),
        policy,
        ..base.clone()
    }
}
