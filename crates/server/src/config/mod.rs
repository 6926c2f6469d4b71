//! The `floodgate serve` configuration file (TOML, or envoyproxy/ratelimit YAML in [`envoy`]).
//!
//! [`schema`] holds the validated types, [`load`](mod@load) reads files and directories,
//! [`validate`] checks a parsed TOML file section by section, [`key`] parses `key = ...`.
//! Every error names the file, the line and the field (see [`error::ConfigError`]). Unknown
//! fields are rejected. The full reference with examples is docs/configuration.md.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! admin_token = "change-me"            # or FLOODGATE_ADMIN_TOKEN; absent = admin API off
//! api_token = "change-me-too"          # or FLOODGATE_API_TOKEN; /v1/check and /v1/peek need it
//! trusted_proxies = ["127.0.0.1/32"]   # peers whose X-Forwarded-For is believed
//! upstream = "http://127.0.0.1:3000"   # reverse-proxy mode
//! ui = true                            # the web page at /ui/ (default; --no-ui turns it off)
//! ui_denied_keys = 20                  # its live view lists the 20 busiest denied keys (default 0: off)
//! reservation_secret = "..."           # or FLOODGATE_RESERVATION_SECRET; signs reservation tokens (32+ chars)
//! reservation_ttl = "5m"               # a reservation token not settled by then is spent (default 5m)
//!
//! [store]
//! kind = "memory"                      # or "redis", with url = "redis://..." (or nodes = [...])
//! max_keys = 100000
//! max_claims = 1000000                 # settled reservation tokens remembered (default 1000000)
//!
//! [[rules]]
//! name = "per-ip"
//! limit = "10/10s"                     # or: limit = 10, period = "10s"
//! key = "client_ip"
//! ```

pub(crate) mod check;
pub(crate) mod depth;
pub(crate) mod describe;
mod describe_calendar;
pub(crate) mod descriptors;
pub(crate) mod envoy;
pub(crate) mod envoy_env;
pub(crate) mod error;
mod key;
pub(crate) mod listen;
mod load;
pub(crate) mod pem;
mod raw;
mod schema;
mod units;
mod validate;

pub(crate) use error::ConfigErrors;
#[cfg(test)]
pub(crate) use load::parse;
pub(crate) use load::{embedded_default, load, load_with, parse_sources, read_sources};
pub(crate) use schema::{
    check_admin_token, check_reservation_secret, is_redis_url, Config, RedisConfig, RuleConfig,
    StoreConfig, MAX_COST,
};
pub(crate) use validate::parse_upstream;

#[cfg(test)]
mod tests;
