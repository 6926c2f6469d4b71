//! envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED`: the three headers it adds to an
//! answer (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` of the IETF draft 03,
//! names set by `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`), for the
//! descriptor closest to its limit. Set by `--envoy-ratelimit-env` only (a TOML `[envoy]` has
//! no such key): Floodgate's own `RateLimit-Policy`/`RateLimit` headers are sent either way.

use http::HeaderName;

/// The names of the three headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitHeaders {
    /// `requests_per_unit` of the chosen descriptor (`LIMIT_LIMIT_HEADER`).
    pub(crate) limit: HeaderName,
    /// Its `limit_remaining` (`LIMIT_REMAINING_HEADER`).
    pub(crate) remaining: HeaderName,
    /// Its `duration_until_reset` in whole seconds (`LIMIT_RESET_HEADER`).
    pub(crate) reset: HeaderName,
}
