//! The command line of `floodgate serve`: [`ServeArgs`] and its value parsers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config;

/// Default address of the main listener.
pub(super) const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Default address of the API listener in reverse-proxy mode.
pub(super) const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9090";

/// Arguments of `floodgate serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// TOML configuration file, or envoyproxy/ratelimit YAML (a `.yaml`/`.yml` file or a
    /// directory of them, one domain per file; see `floodgate check-config`). Without it the
    /// embedded default runs: one rule, 10 requests per 10 seconds per client IP (token
    /// bucket).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Address to listen on [default: `[server] listen`, else 127.0.0.1:8080]. Port 0 picks a
    /// free port; the chosen address is printed on stdout.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,

    /// Serve Envoy's rate limit service (gRPC RLS v3), gRPC health and reflection on this
    /// address [default: `[server] grpc_listen`, else no gRPC listener]. Port 0 picks a free
    /// port, printed on stdout.
    #[arg(long, value_name = "ADDR")]
    pub(crate) grpc_listen: Option<SocketAddr>,

    #[command(flatten)]
    pub(crate) envoy: config::envoy::EnvoyArgs,

    /// Reverse-proxy mode: forward every request on --listen to this `http://host:port` after
    /// applying the rules [default: `[server] upstream`].
    #[arg(long, value_name = "URL")]
    pub(crate) upstream: Option<String>,

    /// Where the API, metrics and health endpoints listen in reverse-proxy mode [default:
    /// 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR")]
    pub(crate) admin_listen: Option<SocketAddr>,

    /// Bearer token for the admin API (`/v1/keys/...`); overrides `[server] admin_token`.
    /// At least 16 printable ASCII characters without spaces (as in the file); an empty value
    /// counts as none. Without any token the admin API is disabled.
    #[arg(
        long,
        env = "FLOODGATE_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        value_parser = parse_admin_token
    )]
    pub(crate) admin_token: Option<String>,

    /// Bearer token `/v1/check`, `/v1/peek`, `/v1/settle`, `/v1/simulate` and `/v1/ui/live`
    /// then require; overrides `[server] api_token`. The same rule as the admin token; empty
    /// counts as none. Without any, whoever reaches the API listener may decide (and create keys).
    #[arg(
        long,
        env = "FLOODGATE_API_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        value_parser = parse_admin_token
    )]
    pub(crate) api_token: Option<String>,

    /// The secret that signs reservation tokens (`/v1/check` with `"reserve": true`,
    /// `/v1/settle`); overrides `[server] reservation_secret`. At least 32 printable ASCII
    /// characters without spaces; empty counts as none. Without any, a random secret per
    /// process: every instance sharing a store must be given the same one.
    #[arg(
        long,
        env = "FLOODGATE_RESERVATION_SECRET",
        hide_env_values = true,
        value_name = "SECRET",
        value_parser = parse_reservation_secret
    )]
    pub(crate) reservation_secret: Option<String>,

    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,

    /// How often the config file is checked for changes: a duration such as `1s`, `500ms`,
    /// `2min`, or a bare number of seconds (0: only reload on SIGHUP).
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) watch_interval: Duration,

    /// How long in-flight requests may finish after the listeners close: a duration such as
    /// `10s` or `500ms`, or a bare number of seconds.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) drain_timeout: Duration,

    /// After SIGTERM/SIGINT, keep serving this long with `/readyz` answering 503, so load
    /// balancers stop sending before the listeners close (a second signal ends the wait).
    /// Default 0: the listeners close at once.
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) shutdown_delay: Duration,

    /// Where rate-limit state lives: `memory` (this process only) or a Redis URL
    /// (`redis://host:port`, shared by every process using it) [default: `[store]`].
    #[arg(long, value_name = "memory|URL")]
    pub(crate) store: Option<String>,

    /// TEST ONLY, never for production: run on a manual clock starting at START_US
    /// (microseconds since the Unix epoch) and enable `POST /v1/debug/clock/advance`, so tests
    /// can move time deterministically instead of sleeping.
    #[arg(long, hide = true, value_name = "START_US")]
    pub(crate) manual_clock: Option<u64>,

    /// Do not serve the web page (`/ui/`, `/v1/ui/live`) [default: `[server] ui`, on].
    #[arg(long)]
    pub(crate) no_ui: bool,

    /// BENCH ONLY: also serve `POST /v1/bench/bare`, a bare axum handler behind the same
    /// server stack (see [`crate::http::bare`]): the baseline of `floodgate bench --what http`.
    #[arg(long, hide = true)]
    pub(crate) bench_baseline: bool,

    /// Run as envoyproxy/ratelimit: read its environment variables (RUNTIME_ROOT, PORT,
    /// GRPC_PORT, REDIS_URL, ...; docs/envoy.md) instead of --config, --listen, --grpc-listen
    /// and --store. Also on when the binary is called `ratelimit`.
    #[arg(
        long,
        env = "FLOODGATE_ENVOY_RATELIMIT_ENV",
        conflicts_with_all = ["config", "listen", "grpc_listen", "store", "upstream", "admin_listen"]
    )]
    pub(crate) envoy_ratelimit_env: bool,

    /// What `--envoy-ratelimit-env` read (see [`super::envoy_env`]).
    #[arg(skip)]
    pub(crate) envoy_env: Option<Box<crate::config::envoy_env::EnvoyEnv>>,

    /// The log filter when `RUST_LOG` is unset [default: info] (`LOG_LEVEL` in that mode).
    #[arg(skip)]
    pub(crate) log_filter: Option<String>,
}

/// Parses a command-line duration: a bare number of seconds (`10`) or a count with a unit as
/// in quotas (`500ms`, `1s`, `2min`, `1h`; see [`floodgate_core::quota::parse_period`]).
///
/// # Errors
/// A reason naming the accepted forms when `text` is neither.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("{text:?} is too large"));
    }
    floodgate_core::quota::parse_period(text)
        .map(Duration::from_micros)
        .map_err(|e| format!("{e}; give e.g. 1s, 500ms, 2min or a number of seconds"))
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `--admin-token` / `FLOODGATE_ADMIN_TOKEN`: the file's rule ([`config::check_admin_token`]);
/// empty means unset.
fn parse_admin_token(text: &str) -> Result<String, String> {
    if !text.is_empty() {
        config::check_admin_token(text).map_err(|msg| {
            format!(
                "{msg} (the rule of [server] admin_token and api_token, also from the environment)"
            )
        })?;
    }
    Ok(text.to_string())
}

/// `--reservation-secret` / `FLOODGATE_RESERVATION_SECRET`: the file's rule
/// ([`config::check_reservation_secret`]); empty means unset.
fn parse_reservation_secret(text: &str) -> Result<String, String> {
    if !text.is_empty() {
        config::check_reservation_secret(text)?;
    }
    Ok(text.to_string())
}
