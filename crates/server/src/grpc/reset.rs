//! `duration_until_reset` of a descriptor's status: whole seconds, as envoyproxy/ratelimit
//! answers and as Envoy reads it (its `X-RateLimit-Reset` takes the `seconds` field alone, so
//! a fraction would be cut off: 0.68 s would read 0).
//!
//! - **Fixed window** (the YAML's default): the seconds to the end of the current window,
//!   windows aligned to the Unix epoch, exactly envoyproxy/ratelimit's `CalculateReset`
//!   (`unit - now % unit` with `now` in whole seconds, which is the time to the window's end
//!   rounded up): 48 at 12.3 s into a minute, 60 at its first instant. Also for a key with
//!   nothing counted yet (a report-only `hits_addend: 0`, or a request another descriptor
//!   refused), where the decision itself has no reset.
//! - **Every other algorithm**: the seconds, rounded up, until the key is back to its full
//!   limit (the decision's `reset_after`, the same time as the `RateLimit` header's `t`); 0
//!   when it is already full. These algorithms have no window whose end could be named.

use envoy_types::pb::google::protobuf::Duration as PbDuration;
use floodgate_core::{AlgorithmKind, Micros, Timestamp, MICROS_PER_SECOND};

/// The `duration_until_reset` of a decision with `reset_after` under an `algorithm` of
/// `period` microseconds, decided at about `now` (used only by a fixed window whose decision
/// has no reset).
pub(super) fn duration_until_reset(
    algorithm: AlgorithmKind,
    period: Micros,
    reset_after: Micros,
    now: Timestamp,
) -> PbDuration {
    let micros = match algorithm {
        AlgorithmKind::FixedWindow if period > 0 => {
            if reset_after > 0 {
                // The decision's own clock (Redis' with the Redis store): its reset is the
                // window's end, or one window later when units were carried over.
                (reset_after - 1) % period + 1
            } else {
                period - now % period
            }
        }
        _ => reset_after,
    };
    PbDuration {
        seconds: i64::try_from(micros.div_ceil(MICROS_PER_SECOND)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Micros = 60_000_000;

    /// envoyproxy/ratelimit's `CalculateReset`: `unit - now % unit`, `now` in whole seconds.
    fn calculate_reset(unit_s: u64, now_us: u64) -> i64 {
        let now = now_us / 1_000_000;
        i64::try_from(unit_s - now % unit_s).unwrap()
    }

    #[test]
    fn the_fixed_window_answers_as_calculate_reset() {
        let start = 1_800_000_000_000_000; // a minute's first instant
        for offset in [0, 1, 999_999, 1_000_000, 12_300_000, 47_200_000, 59_999_999] {
            let now = start + offset;
            let to_end = MINUTE - offset;
            let expected = calculate_reset(60, now);
            for reset_after in [to_end, to_end + MINUTE, 0] {
                let d = duration_until_reset(AlgorithmKind::FixedWindow, MINUTE, reset_after, now);
                assert_eq!(
                    (d.seconds, d.nanos),
                    (expected, 0),
                    "{offset} {reset_after}"
                );
            }
        }
        let d = duration_until_reset(AlgorithmKind::FixedWindow, MINUTE, 47_700_000, start);
        assert_eq!(d.seconds, 48);
        // A second window: 0.68 s left reads 1, not 0.
        let d = duration_until_reset(AlgorithmKind::FixedWindow, 1_000_000, 680_000, start);
        assert_eq!(d.seconds, 1);
    }

    #[test]
    fn other_algorithms_round_their_reset_up() {
        for kind in [
            AlgorithmKind::Gcra,
            AlgorithmKind::TokenBucket,
            AlgorithmKind::SlidingWindow,
        ] {
            assert_eq!(duration_until_reset(kind, MINUTE, 1_250_000, 7).seconds, 2);
            assert_eq!(duration_until_reset(kind, MINUTE, 0, 7).seconds, 0);
            assert_eq!(
                duration_until_reset(kind, MINUTE, 60_000_000, 7).seconds,
                60
            );
        }
    }
}
