//! envoyproxy/ratelimit's service-wide settings, each a plain setting: `[envoy]` in the TOML
//! configuration, or a `floodgate serve` / `check-config` flag (a YAML configuration has no
//! TOML). Defaults are envoyproxy/ratelimit's.
//!
//! ```toml
//! [envoy]
//! merge_domain_config = false        # MERGE_DOMAIN_CONFIG: files may share a domain
//! shadow_mode = false                # SHADOW_MODE: every answer OK, decisions still counted
//! quota_mode = false                 # QUOTA_MODE: every descriptor in quota mode
//! response_dynamic_metadata = false  # RESPONSE_DYNAMIC_METADATA: dynamic_metadata in answers
//! request_limit_overrides = true     # a request's RateLimitDescriptor.limit is honoured
//! metric_values_per_rule = 100       # distinct descriptor labels per rule, the rest "other"
//! ok_response_headers = false        # OK answers carry RateLimit-Policy/RateLimit too
//! ```

use serde::Deserialize;

/// Largest accepted `metric_values_per_rule`.
pub(crate) const MAX_METRIC_VALUES_PER_RULE: usize = 10_000;

/// `[envoy]`: how the rate limit service answers, as envoyproxy/ratelimit's settings say.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct EnvoySettings {
    /// `merge_domain_config` (`MERGE_DOMAIN_CONFIG`): YAML files sharing a domain are merged
    /// (a composite key given twice is still an error); default false: refused.
    pub(crate) merge_domain_config: bool,
    /// `shadow_mode` (`SHADOW_MODE`): every answer is `OK`; decisions are made and counted as
    /// ever, and an answer turned `OK` is counted in `floodgate_grpc_global_shadow_mode_total`.
    pub(crate) shadow_mode: bool,
    /// `quota_mode` (`QUOTA_MODE`): every descriptor is in quota mode, as if its YAML said
    /// `quota_mode: true` (over its limit, it refuses a request only when every descriptor of
    /// the request is over; one that selects no limit is never over).
    pub(crate) quota_mode: bool,
    /// `response_dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`): answers carry
    /// `dynamic_metadata` (domain, descriptors, hits_addend, admitted descriptors' `metadata`).
    pub(crate) response_dynamic_metadata: bool,
    /// `request_limit_overrides`: a request's `RateLimitDescriptor.limit` is honoured on any
    /// descriptor of a known domain (envoyproxy/ratelimit's behaviour, default true), each
    /// override with counters of its own; false: only the overrides a rule lists.
    pub(crate) request_limit_overrides: bool,
    /// `metric_values_per_rule`: distinct `descriptor` labels (`detailed_metric`,
    /// `value_to_metric`) one rule may have in `floodgate_descriptor_decisions_total`; the
    /// decisions of any further value are counted under `other`. Default 100; a larger value
    /// than [`MAX_METRIC_VALUES_PER_RULE`] is read as that.
    pub(crate) metric_values_per_rule: usize,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` (set by `--envoy-ratelimit-env` only): the
    /// `RateLimit-Limit`/`-Remaining`/`-Reset` headers of upstream, under these names.
    #[serde(skip)]
    pub(crate) limit_headers: Option<super::LimitHeaders>,
    /// `ok_response_headers`: `OK` answers carry `response_headers_to_add` (`RateLimit-Policy`,
    /// `RateLimit`) as `OVER_LIMIT` answers always do (with `Retry-After`). Default false:
    /// envoyproxy/ratelimit sends no headers unless `LIMIT_RESPONSE_HEADERS_ENABLED`, and Envoy
    /// copies them into every admitted response.
    pub(crate) ok_response_headers: bool,
}

impl Default for EnvoySettings {
    fn default() -> Self {
        Self {
            merge_domain_config: false,
            shadow_mode: false,
            quota_mode: false,
            response_dynamic_metadata: false,
            request_limit_overrides: true,
            metric_values_per_rule: 100,
            limit_headers: None,
            ok_response_headers: false,
        }
    }
}

/// The flags of the same settings (`floodgate serve`, `floodgate check-config`); each given
/// flag overrides the configuration's `[envoy]` value.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct EnvoyArgs {
    /// YAML files may share a domain: their descriptors are merged (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG) [default: `[envoy] merge_domain_config`, else refused].
    #[arg(long)]
    pub(crate) envoy_merge_domains: bool,
    /// Answer every rate limit request OK, still deciding and counting (SHADOW_MODE)
    /// [default: `[envoy] shadow_mode`].
    #[arg(long)]
    pub(crate) envoy_shadow_mode: bool,
    /// Every descriptor in quota mode: over its limit, it refuses a request only when all the
    /// request's descriptors are over (QUOTA_MODE) [default: `[envoy] quota_mode`].
    #[arg(long)]
    pub(crate) envoy_quota_mode: bool,
    /// Answers carry dynamic_metadata (RESPONSE_DYNAMIC_METADATA) [default: `[envoy]
    /// response_dynamic_metadata`].
    #[arg(long)]
    pub(crate) envoy_response_dynamic_metadata: bool,
    /// Refuse a request's limit override unless its rule lists it [default: `[envoy]
    /// request_limit_overrides`, else honoured].
    #[arg(long)]
    pub(crate) envoy_no_request_limit_overrides: bool,
    /// Distinct `descriptor` metric labels per rule, the rest counted as `other` (at most
    /// 10000) [default: `[envoy] metric_values_per_rule`, else 100].
    #[arg(long, value_name = "N")]
    pub(crate) envoy_metric_values_per_rule: Option<usize>,
    /// OK answers carry RateLimit-Policy and RateLimit in response_headers_to_add, as
    /// OVER_LIMIT answers always do [default: `[envoy] ok_response_headers`, else none].
    #[arg(long)]
    pub(crate) envoy_ok_response_headers: bool,
}

impl EnvoyArgs {
    /// `settings` with the flags given applied.
    pub(crate) fn apply(&self, mut settings: EnvoySettings) -> EnvoySettings {
        settings.merge_domain_config |= self.envoy_merge_domains;
        settings.shadow_mode |= self.envoy_shadow_mode;
        settings.quota_mode |= self.envoy_quota_mode;
        settings.response_dynamic_metadata |= self.envoy_response_dynamic_metadata;
        settings.request_limit_overrides &= !self.envoy_no_request_limit_overrides;
        settings.ok_response_headers |= self.envoy_ok_response_headers;
        if let Some(n) = self.envoy_metric_values_per_rule {
            settings.metric_values_per_rule = n.min(MAX_METRIC_VALUES_PER_RULE);
        }
        settings
    }
}
