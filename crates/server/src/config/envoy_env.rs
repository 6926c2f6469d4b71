//! envoyproxy/ratelimit's environment variables (its `src/settings/settings.go`), read by
//! `floodgate serve --envoy-ratelimit-env`: where to listen, where the runtime directory is,
//! which Redis, how to log.
//!
//! Every variable of `settings.go` is known here. A variable Floodgate maps is mapped; one that
//! has no equivalent is accepted only with upstream's default value (or where upstream itself
//! ignores it: the memcache variables without `BACKEND_TYPE=memcache`, the tracing variables
//! without `TRACING_ENABLED=true`, ...) and otherwise refused at start with an error
//! naming the variable and its value. Nothing is silently ignored. The table is in
//! `docs/envoy.md`, "envoyproxy/ratelimit's environment".
//!
//! [`from_vars`] is a pure function of the variables (tests give it a map), and collects every
//! problem at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::RedisConfig;
use crate::grpc::tls::GrpcTlsSettings;

mod grpc_tls;
mod limit_headers;
mod reader;
mod redis;
mod service;

use reader::{go_duration, Reader};
pub(crate) use service::ServiceModes;

/// What envoyproxy/ratelimit's environment asks of `floodgate serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvoyEnv {
    /// `HOST:PORT`: the HTTP listener (`/json`, `/healthcheck`, and Floodgate's API).
    pub(crate) http: SocketAddr,
    /// `GRPC_HOST:GRPC_PORT`: the rate limit service.
    pub(crate) grpc: SocketAddr,
    /// `DEBUG_HOST:DEBUG_PORT`: the debug listener (`/metrics`, and `/` listing it).
    pub(crate) debug: SocketAddr,
    /// `USE_PROMETHEUS=true`: `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`.
    pub(crate) prometheus: Option<(SocketAddr, String)>,
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`: the YAML files.
    pub(crate) config_dir: PathBuf,
    /// `RUNTIME_IGNOREDOTFILES`: skip files whose name starts with a dot.
    pub(crate) ignore_dot_files: bool,
    /// The Redis store (`REDIS_*`, `CACHE_KEY_PREFIX`), with its per-second Redis
    /// (`REDIS_PERSECOND_*`).
    pub(crate) redis: RedisConfig,
    /// `SHADOW_MODE`, `MERGE_DOMAIN_CONFIG`, `RESPONSE_DYNAMIC_METADATA`: `[envoy]` settings.
    pub(crate) service: ServiceModes,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED=true`: the names of upstream's three headers.
    pub(crate) limit_headers: Option<crate::config::envoy::LimitHeaders>,
    /// `LOG_LEVEL` as a `tracing` filter (`RUST_LOG`, when set, wins).
    pub(crate) log_filter: String,
    /// `LOG_FORMAT=json`.
    pub(crate) log_json: bool,
    /// `GRPC_MAX_CONNECTION_AGE` (upstream's default 24h).
    pub(crate) grpc_max_connection_age: Duration,
    /// `GRPC_SERVER_USE_TLS=true`: TLS (with `GRPC_CLIENT_TLS_CACERT`, mutual TLS) on the
    /// gRPC listener.
    pub(crate) grpc_tls: Option<GrpcTlsSettings>,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: `/healthcheck` fails while no rule is loaded.
    pub(crate) healthy_needs_config: bool,
    /// Variables accepted with a value that changes nothing in Floodgate (tuning of
    /// upstream's connection pool), each `NAME=value: why`, logged at start.
    pub(crate) notes: Vec<String>,
}

impl EnvoyEnv {
    /// Puts the settings of the environment that live in the configuration into `config`:
    /// the store, the gRPC connection age and TLS, the `LIMIT_RESPONSE_HEADERS_ENABLED`
    /// headers (a YAML runtime directory has none of
    /// them). Applied to the configuration read at start and to every reload's, so that a
    /// reload finds them unchanged.
    pub(crate) fn apply_to(&self, config: &mut super::Config) {
        config.store.redis = Some(self.redis.clone());
        config.server.limits.grpc_max_connection_age = self.grpc_max_connection_age;
        config.server.grpc_tls.clone_from(&self.grpc_tls);
        config.envoy.limit_headers.clone_from(&self.limit_headers);
        // LIMIT_RESPONSE_HEADERS_ENABLED asks for headers on every answer, as upstream sends
        // them: Floodgate's own RateLimit-Policy/RateLimit then ride on OK answers too.
        config.envoy.ok_response_headers |= self.limit_headers.is_some();
    }
}

/// The problems found, one line each, every one naming its variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvErrors(pub(crate) Vec<String>);

impl std::fmt::Display for EnvErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "envoyproxy/ratelimit environment (--envoy-ratelimit-env):"
        )?;
        for line in &self.0 {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EnvErrors {}

/// Longest `REDIS_TIMEOUT` Floodgate waits per call (the `[store] timeout_ms` bound).
const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(60);

/// Floodgate's own default per-call Redis timeout, kept when `REDIS_TIMEOUT` is unset
/// (upstream's 10 s default would hold Envoy's calls far beyond its filter timeout).
const DEFAULT_REDIS_TIMEOUT_MS: u64 = 50;

/// Floodgate's default circuit breaker window (`[store] breaker_window_ms`).
const DEFAULT_BREAKER_WINDOW_MS: u64 = 250;

/// Set once at start by `--envoy-ratelimit-env` from `RUNTIME_IGNOREDOTFILES`: the runtime
/// directory's reader then skips dot files, on every reload too.
static IGNORE_DOT_FILES: AtomicBool = AtomicBool::new(false);

/// Makes [`ignored`] skip dot files (`RUNTIME_IGNOREDOTFILES=true`).
pub(crate) fn set_ignore_dot_files(on: bool) {
    IGNORE_DOT_FILES.store(on, Ordering::Relaxed);
}

/// `true` for a file of a configuration directory that `RUNTIME_IGNOREDOTFILES` leaves out.
pub(crate) fn ignored(path: &Path) -> bool {
    IGNORE_DOT_FILES.load(Ordering::Relaxed) && is_dot_file(path)
}

/// `true` when the file's name starts with a dot (goruntime's `IgnoreDotFiles`).
fn is_dot_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// Variables accepted only when they hold upstream's default, with what Floodgate does
/// instead (the error's explanation).
const DEFAULT_ONLY: &[(&str, &str, &str)] = &[
    ("GRPC_UDS", "", "Floodgate's gRPC listener is TCP only (GRPC_HOST, GRPC_PORT)"),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", "1h", "Floodgate lets a connection's calls finish after GOAWAY without a separate grace period"),
    ("CONFIG_TYPE", "FILE", "Floodgate reads the runtime directory; xDS (GRPC_XDS_SOTW) is not supported"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "Floodgate needs a valid configuration to start"),
    ("USE_DOG_STATSD", "false", "Floodgate exports Prometheus metrics only (USE_PROMETHEUS)"),
    ("USE_DOG_STATSD_MOGRIFIERS", "", "Floodgate exports Prometheus metrics only (USE_PROMETHEUS)"),
    ("EXTRA_TAGS", "", "Floodgate's metrics carry no extra tags"),
    ("STATS_FLUSH_INTERVAL", "10s", "Prometheus is scraped; nothing is flushed"),
    ("DISABLE_STATS", "false", "Floodgate always keeps its metrics (/metrics)"),
    ("PROMETHEUS_MAPPER_YAML", "", "Floodgate's series have their own names (docs/metrics.md); no statsd mapping"),
    ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", "floodgate_grpc_request_duration_seconds is in seconds"),
    ("EXPIRATION_JITTER_MAX_SECONDS", "300", "Floodgate's keys expire exactly when forgetting them changes nothing (docs/redis.md); there is no jitter"),
    ("NEAR_LIMIT_RATIO", "0.8", "Floodgate has no near-limit statistic"),
    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "Floodgate always verifies the Redis server's name"),
    ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", "Floodgate's health does not follow Redis (the rules' failure modes apply; /readyz reports the store)"),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "Floodgate multiplexes calls on one connection per node; it has no pool to run empty"),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", "0", "Floodgate starts without waiting for Redis (the failure modes apply until it answers)"),
    ("REDIS_STARTUP_INITIAL_INTERVAL", "1s", "Floodgate starts without waiting for Redis (the failure modes apply until it answers)"),
    ("REDIS_STARTUP_MAX_INTERVAL", "30s", "Floodgate starts without waiting for Redis (the failure modes apply until it answers)"),
    ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "Floodgate multiplexes calls on one connection per node; it has no pool to run empty"),
    ("TRACING_ENABLED", "false", "Floodgate exports no OpenTelemetry traces"),
];

/// Variables that tune upstream's Redis pool and pipelining: any valid value is accepted,
/// since Floodgate multiplexes its calls on one connection per node (coalescing them) and
/// the value cannot change a decision; each one given is logged.
const POOL_TUNING: &[&str] = &[
    "REDIS_POOL_SIZE",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
];

/// The variables this module maps (the rest of `settings.go` is in [`DEFAULT_ONLY`],
/// [`POOL_TUNING`] and [`INERT_WITHOUT_THEIR_MODE`]).
#[cfg(test)]
const MAPPED: &[&str] = &[
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "USE_STATSD",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_PATH",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "CACHE_KEY_PREFIX",
    "BACKEND_TYPE",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TIMEOUT",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_TIMEOUT",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "MERGE_DOMAIN_CONFIG",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
];

/// Variables upstream reads only in a mode Floodgate refuses above (memcache, xDS, statsd,
/// tracing, response headers): without that mode upstream ignores them too, so
/// they are accepted whatever they hold.
#[cfg(test)]
const INERT_WITHOUT_THEIR_MODE: &[&str] = &[
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "STATSD_HOST",
    "STATSD_PORT",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_MAX_IDLE_CONNS",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
];

/// Reads the process environment (see [`from_vars`]).
///
/// # Errors
/// As [`from_vars`].
pub(crate) fn from_process_env() -> Result<EnvoyEnv, EnvErrors> {
    from_vars(
        &std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    )
}

/// Maps envoyproxy/ratelimit's environment `vars` onto Floodgate's settings.
///
/// # Errors
/// [`EnvErrors`]: every variable whose value Floodgate cannot honour, each naming the variable
/// and the value, with why and what to do instead.
pub(crate) fn from_vars(vars: &BTreeMap<String, String>) -> Result<EnvoyEnv, EnvErrors> {
    let mut r = Reader {
        vars,
        errors: Vec::new(),
    };
    // Listeners.
    let (host, port) = (r.text("HOST", "0.0.0.0"), r.port("PORT", 8080));
    let http = r.addr("HOST", &host, port);
    let (grpc_host, grpc_port) = (r.text("GRPC_HOST", "0.0.0.0"), r.port("GRPC_PORT", 8081));
    let grpc = r.addr("GRPC_HOST", &grpc_host, grpc_port);
    let (debug_host, debug_port) = (r.text("DEBUG_HOST", "0.0.0.0"), r.port("DEBUG_PORT", 6070));
    let debug = r.addr("DEBUG_HOST", &debug_host, debug_port);
    let grpc_max_connection_age = connection_age(&mut r);
    let grpc_tls = grpc_tls::grpc_tls(&mut r);

    // Metrics.
    let use_statsd = r.bool("USE_STATSD", true);
    if use_statsd && vars.contains_key("USE_STATSD") {
        r.fail(
            "USE_STATSD",
            "true",
            "Floodgate sends no statsd; set USE_STATSD=false (and USE_PROMETHEUS=true for \
             Prometheus on PROMETHEUS_ADDR)",
        );
    }
    let prometheus = prometheus(&mut r);

    // Logs.
    let (log_filter, log_json) = logging(&mut r);

    // The runtime directory, as upstream's file provider finds it: with RUNTIME_WATCH_ROOT
    // the keys under `<root>/<subdirectory>` that start with `<appdirectory>.`, without it
    // the files of `<root>/<subdirectory>/<appdirectory>`: the same folder either way.
    let root = r.text("RUNTIME_ROOT", "/srv/runtime_data/current");
    let sub = r.text("RUNTIME_SUBDIRECTORY", "");
    let app = r.text("RUNTIME_APPDIRECTORY", "config");
    let _watch_root = r.bool("RUNTIME_WATCH_ROOT", true);
    let ignore_dot_files = r.bool("RUNTIME_IGNOREDOTFILES", false);
    let config_dir = Path::new(&root).join(&sub).join(&app);

    // Backend.
    let backend = r.text("BACKEND_TYPE", "redis");
    if !backend.eq_ignore_ascii_case("redis") {
        r.fail(
            "BACKEND_TYPE",
            &backend,
            "Floodgate keeps shared limits in Redis only (memcache is not supported); \
             use BACKEND_TYPE=redis",
        );
    }
    let redis = redis::redis_config(&mut r);
    let service = service::service_modes(&mut r);
    let limit_headers = limit_headers::limit_headers(&mut r);
    let _stop_increment = r.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false);
    let healthy_needs_config = r.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false);

    for (name, default, why) in DEFAULT_ONLY {
        let Some(v) = vars.get(*name) else { continue };
        let same = if matches!(*default, "true" | "false") {
            let parsed = r.bool(name, *default == "true");
            parsed == (*default == "true")
        } else if name.ends_with("INTERVAL") || name.ends_with("TIME") || name.ends_with("GRACE") {
            go_duration(v).ok() == go_duration(default).ok()
        } else if *name == "NEAR_LIMIT_RATIO" {
            v.trim().parse::<f64>().ok() == Some(0.8)
        } else {
            v.trim().eq_ignore_ascii_case(default)
        };
        if !same {
            let v = v.clone();
            r.fail(
                name,
                &v,
                format!("{why} (only {default:?}, upstream's default, is accepted)"),
            );
        }
    }
    let mut notes = Vec::new();
    for name in POOL_TUNING {
        if let Some(v) = vars.get(*name) {
            if name.ends_with("WINDOW") {
                let v = v.clone();
                if let Err(why) = go_duration(&v) {
                    r.fail(name, &v, why);
                }
            } else {
                r.positive(name, "0");
            }
            notes.push(format!(
                "{name}={v}: accepted; Floodgate multiplexes its Redis calls on one connection \
                 per node, so there is no pool or pipeline window to size"
            ));
        }
    }
    let errors = r.errors;
    match (http, grpc, debug) {
        (Some(http), Some(grpc), Some(debug)) if errors.is_empty() => Ok(EnvoyEnv {
            http,
            grpc,
            debug,
            prometheus,
            config_dir,
            ignore_dot_files,
            redis,
            service,
            limit_headers,
            log_filter,
            log_json,
            grpc_max_connection_age,
            grpc_tls,
            healthy_needs_config,
            notes,
        }),
        _ => Err(EnvErrors(errors)),
    }
}

/// `GRPC_MAX_CONNECTION_AGE`, within the bounds of `[server] grpc_max_connection_age`.
fn connection_age(r: &mut Reader<'_>) -> Duration {
    let age = r.duration("GRPC_MAX_CONNECTION_AGE", "24h");
    if !(Duration::from_secs(1)..=Duration::from_secs(7 * 86_400)).contains(&age) {
        let v = r.text("GRPC_MAX_CONNECTION_AGE", "24h");
        r.fail(
            "GRPC_MAX_CONNECTION_AGE",
            &v,
            "must be between 1s and 168h (7 days)",
        );
    }
    age
}

/// `USE_PROMETHEUS`, `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`: the Prometheus listener.
fn prometheus(r: &mut Reader<'_>) -> Option<(SocketAddr, String)> {
    if r.bool("USE_PROMETHEUS", false) {
        let addr_text = r.text("PROMETHEUS_ADDR", ":9090");
        let path = r.text("PROMETHEUS_PATH", "/metrics");
        if !path.starts_with('/') {
            r.fail("PROMETHEUS_PATH", &path, "must start with /");
        }
        match addr_text.rsplit_once(':') {
            Some((h, p)) => {
                let host = if h.is_empty() { "0.0.0.0" } else { h };
                match p.parse::<u16>() {
                    Ok(p) => r.addr("PROMETHEUS_ADDR", host, p).map(|a| (a, path)),
                    Err(_) => {
                        r.fail("PROMETHEUS_ADDR", &addr_text, "expected [HOST]:PORT");
                        None
                    }
                }
            }
            None => {
                r.fail("PROMETHEUS_ADDR", &addr_text, "expected [HOST]:PORT");
                None
            }
        }
    } else {
        None
    }
}

/// `LOG_LEVEL` as a `tracing` filter, and `LOG_FORMAT=json`.
fn logging(r: &mut Reader<'_>) -> (String, bool) {
    let level = r.text("LOG_LEVEL", "WARN");
    let log_filter = match level.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        _ => {
            r.fail(
                "LOG_LEVEL",
                &level,
                "expected trace, debug, info, warn, error, fatal or panic",
            );
            "warn"
        }
    }
    .to_string();
    let format = r.text("LOG_FORMAT", "text");
    let log_json = match format.to_ascii_lowercase().as_str() {
        "text" => false,
        "json" => true,
        _ => {
            r.fail("LOG_FORMAT", &format, "expected text or json");
            false
        }
    };
    (log_filter, log_json)
}

#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod tests;
