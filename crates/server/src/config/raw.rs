//! The configuration file exactly as written: serde structs that reject unknown fields and keep
//! the byte span of every value that is checked after parsing, so errors can name its line.

use serde::Deserialize;
use toml::Spanned;

/// The whole document.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub rules: Vec<RawRule>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub listen: Option<Spanned<String>>,
    pub admin_token: Option<Spanned<String>>,
    pub api_token: Option<Spanned<String>>,
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
    pub upstream: Option<Spanned<String>>,
    pub forwarded_header: Option<Spanned<String>>,
    pub ipv6_prefix: Option<Spanned<i64>>,
    pub ui: Option<bool>,
    pub ui_denied_keys: Option<Spanned<i64>>,
    pub grpc_listen: Option<Spanned<String>>,
    pub reservation_secret: Option<Spanned<String>>,
    pub reservation_ttl: Option<Spanned<String>>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub kind: Option<Spanned<String>>,
    pub max_keys: Option<Spanned<i64>>,
    pub on_full: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    #[serde(default)]
    pub nodes: Vec<Spanned<String>>,
    pub timeout_ms: Option<Spanned<i64>>,
    pub breaker_window_ms: Option<Spanned<i64>>,
    pub prefix: Option<Spanned<String>>,
    pub fallback: Option<Spanned<String>>,
    pub instances: Option<Spanned<i64>>,
    #[serde(default)]
    pub sentinels: Vec<Spanned<String>>,
    pub master_name: Option<Spanned<String>>,
    pub tls_ca_file: Option<Spanned<String>>,
    pub tls_cert_file: Option<Spanned<String>>,
    pub tls_key_file: Option<Spanned<String>>,
}

/// One `[[rules]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub name: Spanned<String>,
    #[serde(rename = "match", default)]
    pub matcher: RawMatch,
    /// A key source string, or a list of them (all together).
    pub key: Option<Spanned<toml::Value>>,
    pub algorithm: Option<Spanned<String>>,
    /// `"10/10s"` (quota text) or a whole number (then `period` is required).
    pub limit: Spanned<toml::Value>,
    pub period: Option<Spanned<String>>,
    pub burst: Option<Spanned<i64>>,
    pub cost: Option<Spanned<i64>>,
    pub cost_header: Option<Spanned<String>>,
    #[serde(default)]
    pub route_costs: Vec<RawRouteCost>,
    #[serde(default)]
    pub shadow: bool,
    pub failure_mode: Option<Spanned<String>>,
    /// The Envoy rate limit domain whose descriptors the rule answers.
    pub domain: Option<Spanned<String>>,
    #[serde(default)]
    pub descriptors: Vec<RawDescriptorEntry>,
    #[serde(default)]
    pub replaces: Vec<Spanned<String>>,
    #[serde(default)]
    pub limit_overrides: Vec<Spanned<String>>,
}

/// One entry of a rule's `descriptors`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDescriptorEntry {
    pub key: Spanned<String>,
    pub value: Option<Spanned<String>>,
}

/// `[rules.match]`: every given condition must hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch {
    pub path_prefix: Option<Spanned<String>>,
    #[serde(default)]
    pub methods: Vec<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub header: Option<RawHeaderMatch>,
}

/// `[rules.match.header]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHeaderMatch {
    pub name: Spanned<String>,
    pub value: Option<Spanned<String>>,
}

/// One `[[rules.route_costs]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouteCost {
    pub path_prefix: Spanned<String>,
    pub method: Option<Spanned<String>>,
    pub cost: Spanned<i64>,
}
