//! `SHADOW_MODE`, `QUOTA_MODE`, `MERGE_DOMAIN_CONFIG` and `RESPONSE_DYNAMIC_METADATA`:
//! envoyproxy/ratelimit's service-wide switches, which are Floodgate's `[envoy]` settings (and
//! `floodgate serve` flags) `shadow_mode`, `quota_mode`, `merge_domain_config` and
//! `response_dynamic_metadata`.

use super::reader::Reader;
use crate::config::envoy::EnvoyArgs;

/// The switches as the environment sets them (each upstream's default `false`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ServiceModes {
    /// `SHADOW_MODE`: every answer `OK`, decisions still made and counted.
    pub(crate) shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor in quota mode (`[envoy] quota_mode`).
    pub(crate) quota_mode: bool,
    /// `MERGE_DOMAIN_CONFIG`: files sharing a domain are merged.
    pub(crate) merge_domain_config: bool,
    /// `RESPONSE_DYNAMIC_METADATA`: answers carry `dynamic_metadata`.
    pub(crate) response_dynamic_metadata: bool,
}

impl ServiceModes {
    /// Turns on the flags of the switches set, so that they apply at start and on every
    /// reload of the runtime directory (the flags are applied to each configuration read).
    pub(crate) fn apply(self, flags: &mut EnvoyArgs) {
        flags.envoy_shadow_mode |= self.shadow_mode;
        flags.envoy_quota_mode |= self.quota_mode;
        flags.envoy_merge_domains |= self.merge_domain_config;
        flags.envoy_response_dynamic_metadata |= self.response_dynamic_metadata;
    }
}

/// Reads the switches (Go `strconv.ParseBool` values).
pub(super) fn service_modes(r: &mut Reader<'_>) -> ServiceModes {
    ServiceModes {
        shadow_mode: r.bool("SHADOW_MODE", false),
        quota_mode: r.bool("QUOTA_MODE", false),
        merge_domain_config: r.bool("MERGE_DOMAIN_CONFIG", false),
        response_dynamic_metadata: r.bool("RESPONSE_DYNAMIC_METADATA", false),
    }
}
