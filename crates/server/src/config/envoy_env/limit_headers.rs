//! `LIMIT_RESPONSE_HEADERS_ENABLED` with `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER` and
//! `LIMIT_RESET_HEADER` (upstream's defaults `RateLimit-Limit`, `RateLimit-Remaining`,
//! `RateLimit-Reset`).

use http::HeaderName;

use super::reader::Reader;
use crate::config::envoy::LimitHeaders;

/// The three names when `LIMIT_RESPONSE_HEADERS_ENABLED=true` (each a valid header name, or
/// an error naming its variable); `None` otherwise (the names are then unused, as upstream).
pub(super) fn limit_headers(r: &mut Reader<'_>) -> Option<LimitHeaders> {
    if !r.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
        return None;
    }
    let mut name = |var: &str, default: &str| {
        let text = r.text(var, default);
        HeaderName::from_bytes(text.trim().as_bytes()).unwrap_or_else(|_| {
            r.fail(var, &text, "not a valid HTTP header name");
            HeaderName::from_static("invalid")
        })
    };
    Some(LimitHeaders {
        limit: name("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
        remaining: name("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
        reset: name("LIMIT_RESET_HEADER", "RateLimit-Reset"),
    })
}
