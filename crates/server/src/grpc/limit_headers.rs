//! The headers of `LIMIT_RESPONSE_HEADERS_ENABLED` ([`LimitHeaders`]), chosen as
//! envoyproxy/ratelimit's `service.go` chooses them: of the statuses with a limit, the one
//! with the least `limit_remaining`, and the last one over its limit when any is.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

use crate::config::envoy::LimitHeaders;

/// Adds the three headers of the chosen status to `response` (nothing when no status has a
/// limit).
pub(super) fn add(response: &mut RateLimitResponse, names: &LimitHeaders) {
    let Some(status) = chosen(&response.statuses) else {
        return;
    };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status.duration_until_reset.map_or(0, |d| d.seconds.max(0));
    let values = [
        (&names.limit, limit.to_string()),
        (&names.remaining, status.limit_remaining.to_string()),
        (&names.reset, reset.to_string()),
    ];
    for (name, value) in values {
        response.response_headers_to_add.push(HeaderValue {
            key: name.as_str().to_string(),
            value,
            ..HeaderValue::default()
        });
    }
}

/// upstream's `minimumDescriptor`.
fn chosen(statuses: &[DescriptorStatus]) -> Option<&DescriptorStatus> {
    let mut chosen = None;
    let mut least = u32::MAX;
    for status in statuses {
        if status.current_limit.is_some() && status.limit_remaining < least {
            chosen = Some(status);
            least = status.limit_remaining;
        }
        if status.code == Code::OverLimit as i32 {
            chosen = Some(status);
            least = 0;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;

    use super::*;

    fn status(code: Code, rpu: u32, remaining: u32) -> DescriptorStatus {
        DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                requests_per_unit: rpu,
                ..RateLimit::default()
            }),
            limit_remaining: remaining,
            ..DescriptorStatus::default()
        }
    }

    #[test]
    fn the_least_remaining_is_chosen_and_an_over_limit_status_wins() {
        let no_limit = DescriptorStatus::default();
        let list = [
            status(Code::Ok, 20, 7),
            no_limit.clone(),
            status(Code::Ok, 10, 3),
        ];
        assert_eq!(chosen(&list).map(|s| s.limit_remaining), Some(3));
        let list = [
            status(Code::OverLimit, 5, 0),
            status(Code::Ok, 10, 0),
            status(Code::OverLimit, 7, 0),
        ];
        let rpu = |s: Option<&DescriptorStatus>| {
            s.and_then(|s| s.current_limit.clone())
                .map(|l| l.requests_per_unit)
        };
        assert_eq!(rpu(chosen(&list)), Some(7));
        assert!(chosen(&[no_limit]).is_none());
    }
}
