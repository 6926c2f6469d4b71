//! The configuration file exactly as written: serde structs that reject unknown fields and keep
//! the byte span of every value that is checked after parsing, so errors can name its line.

use serde::Deserialize;
use toml::Spanned;

/// The whole document.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub(crate) server: RawServer,
    #[serde(default)]
    pub(crate) store: RawStore,
    #[serde(default)]
    pub(crate) rules: Vec<RawRule>,
    #[serde(default)]
    pub(crate) envoy: super::envoy::EnvoySettings,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub(crate) listen: Option<Spanned<String>>,
    pub(crate) admin_token: Option<Spanned<String>>,
    pub(crate) api_token: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<Spanned<String>>,
    pub(crate) upstream: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) keep_client_headers: Vec<Spanned<String>>,
    pub(crate) forwarded_header: Option<Spanned<String>>,
    pub(crate) path_parameters: Option<Spanned<String>>,
    pub(crate) ipv6_prefix: Option<Spanned<i64>>,
    pub(crate) ui: Option<bool>,
    pub(crate) ui_denied_keys: Option<Spanned<i64>>,
    pub(crate) grpc_listen: Option<Spanned<String>>,
    pub(crate) grpc_tls: Option<Spanned<RawGrpcTls>>,
    pub(crate) max_delayed: Option<Spanned<i64>>,
    pub(crate) reservation_secret: Option<Spanned<String>>,
    pub(crate) reservation_ttl: Option<Spanned<String>>,
    // Connection bounds (see `config::listen`).
    pub(crate) max_connections: Option<Spanned<i64>>,
    pub(crate) header_read_timeout: Option<Spanned<String>>,
    pub(crate) idle_timeout: Option<Spanned<String>>,
    pub(crate) body_idle_timeout: Option<Spanned<String>>,
    pub(crate) grpc_max_connection_age: Option<Spanned<String>>,
    pub(crate) grpc_max_concurrent_streams: Option<Spanned<i64>>,
    pub(crate) upstream_connect_timeout: Option<Spanned<String>>,
    pub(crate) upstream_response_timeout: Option<Spanned<String>>,
    pub(crate) upstream_idle_timeout: Option<Spanned<String>>,
    pub(crate) upstream_max_connections: Option<Spanned<i64>>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub(crate) kind: Option<Spanned<String>>,
    pub(crate) max_keys: Option<Spanned<i64>>,
    pub(crate) max_claims: Option<Spanned<i64>>,
    pub(crate) on_full: Option<Spanned<String>>,
    pub(crate) url: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) nodes: Vec<Spanned<String>>,
    pub(crate) timeout_ms: Option<Spanned<i64>>,
    pub(crate) breaker_window_ms: Option<Spanned<i64>>,
    pub(crate) prefix: Option<Spanned<String>>,
    pub(crate) fallback: Option<Spanned<String>>,
    pub(crate) instances: Option<Spanned<i64>>,
    #[serde(default)]
    pub(crate) sentinels: Vec<Spanned<String>>,
    pub(crate) master_name: Option<Spanned<String>>,
    pub(crate) tls_ca_file: Option<Spanned<String>>,
    pub(crate) tls_cert_file: Option<Spanned<String>>,
    pub(crate) tls_key_file: Option<Spanned<String>>,
    pub(crate) deny_cache: Option<Spanned<bool>>,
}

/// One `[[rules]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub(crate) name: Spanned<String>,
    #[serde(rename = "match", default)]
    pub(crate) matcher: RawMatch,
    /// A key source string, or a list of them (all together).
    pub(crate) key: Option<Spanned<toml::Value>>,
    pub(crate) algorithm: Option<Spanned<String>>,
    /// `"10/10s"` (quota text) or a whole number (then `period` is required).
    pub(crate) limit: Spanned<toml::Value>,
    pub(crate) period: Option<Spanned<String>>,
    pub(crate) burst: Option<Spanned<i64>>,
    pub(crate) cost: Option<Spanned<i64>>,
    pub(crate) cost_header: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) route_costs: Vec<RawRouteCost>,
    #[serde(default)]
    pub(crate) shadow: bool,
    pub(crate) failure_mode: Option<Spanned<String>>,
    /// Delay mode: `"500ms"`.
    pub(crate) delay: Option<Spanned<String>>,
    /// Quota leases: `"20ms"`, the longest a lease lives.
    pub(crate) lease: Option<Spanned<String>>,
    /// The most of the capacity one lease holds, `(0, 1]`.
    pub(crate) lease_share: Option<Spanned<toml::Value>>,
    /// The Envoy rate limit domain whose descriptors the rule answers.
    pub(crate) domain: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) descriptors: Vec<RawDescriptorEntry>,
    #[serde(default)]
    pub(crate) replaces: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) limit_overrides: Vec<Spanned<String>>,
    /// The rule's own key cap in the memory store.
    pub(crate) max_keys: Option<Spanned<i64>>,
    /// Calendar periods in this IANA time zone (`limit = "10000/day"`, `/week`, `/month`).
    pub(crate) calendar: Option<Spanned<String>>,
    /// The first day of a calendar week (`"monday"` when absent).
    pub(crate) week_start: Option<Spanned<String>>,
    /// Which traffic the rule applies to: `["http", "api", "grpc"]` (see `validate::scope`).
    pub(crate) applies_to: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One entry of a rule's `descriptors`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDescriptorEntry {
    pub(crate) key: Spanned<String>,
    pub(crate) value: Option<Spanned<String>>,
}

/// `[rules.match]`: every given condition must hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch {
    pub(crate) path_prefix: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) methods: Vec<Spanned<String>>,
    pub(crate) host: Option<Spanned<String>>,
    pub(crate) header: Option<RawHeaderMatch>,
}

/// `[rules.match.header]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHeaderMatch {
    pub(crate) name: Spanned<String>,
    pub(crate) value: Option<Spanned<String>>,
}

/// One `[[rules.route_costs]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouteCost {
    pub(crate) path_prefix: Spanned<String>,
    pub(crate) method: Option<Spanned<String>>,
    pub(crate) cost: Spanned<i64>,
}

/// `[server.grpc_tls]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrpcTls {
    pub(crate) cert_file: Option<Spanned<String>>,
    pub(crate) key_file: Option<Spanned<String>>,
    pub(crate) client_ca_file: Option<Spanned<String>>,
    pub(crate) client_san: Option<Spanned<String>>,
}
