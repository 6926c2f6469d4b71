//! Errors of the core: an invalid [`Quota`](crate::Quota) and a request that can never fit.
//!
//! A denial is not an error: it is a [`Decision`](crate::Decision) with `allowed == false`.

/// Why a [`Quota`](crate::Quota) (or an algorithm built from one) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// `limit` was 0: a quota must admit at least one unit per period.
    #[error("limit must be at least 1")]
    ZeroLimit,
    /// `period` was 0 microseconds.
    #[error("period must be at least 1 microsecond")]
    ZeroPeriod,
    /// `burst` was 0: a bucket must hold at least one unit.
    #[error("burst must be at least 1")]
    ZeroBurst,
    /// `period` is longer than [`MAX_PERIOD`](crate::quota::MAX_PERIOD) microseconds.
    #[error("period of {period} us is longer than the maximum of {max} us")]
    PeriodTooLong {
        /// The requested period in microseconds.
        period: u64,
        /// The largest accepted period in microseconds.
        max: u64,
    },
    /// A product the algorithm computes would exceed [`MAX_EXACT`](crate::quota::MAX_EXACT),
    /// the bound under which integers stay exact in a Lua double.
    #[error("{what} = {value} exceeds {max}, the largest value computed exactly in every store")]
    NotExact {
        /// Which product overflowed, e.g. `"burst x emission interval numerator"`.
        what: &'static str,
        /// The product's value.
        value: u128,
        /// The bound it exceeded.
        max: u64,
    },
    /// A bucket algorithm's rate is finer than the microsecond clock (an emission interval below
    /// 1 us) and `burst` cannot hold one microsecond's refill: decisions at whole microseconds
    /// would then admit less than the declared rate (`2000000/s burst 1` admits at most one
    /// unit per microsecond, half the rate). `min_burst` is the smallest burst that is exact:
    /// `ceil((denominator + numerator - 1) / numerator)` for the emission interval
    /// `numerator / denominator` us.
    #[error(
        "burst {burst} is too small for {limit} per {period} us: one unit every {numerator}/{denominator} us \
         is finer than the microsecond clock, and a bucket of {burst} cannot hold one microsecond's \
         refill, so it would admit less than that rate; the smallest exact burst is {min_burst}"
    )]
    BurstTooSmall {
        /// The burst given.
        burst: u64,
        /// The smallest burst at which the rate is exact.
        min_burst: u64,
        /// The quota's limit.
        limit: u64,
        /// The quota's period in microseconds.
        period: u64,
        /// The emission interval's numerator (microseconds x denominator).
        numerator: u64,
        /// The emission interval's denominator (ticks per microsecond).
        denominator: u64,
    },
    /// The text form of a quota could not be parsed.
    #[error("invalid quota {input:?}: {reason}")]
    Parse {
        /// The text that was given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
}

/// Why a check could not be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The request's `cost` exceeds the most the policy can ever admit at once (`capacity`), so
    /// no amount of waiting would admit it. State is left unchanged.
    #[error("cost {cost} exceeds the policy's capacity of {capacity}: it can never be admitted")]
    InsufficientCapacity {
        /// Units the request asked for.
        cost: u64,
        /// The most units one request can be admitted for (the burst or the limit).
        capacity: u64,
    },
}
