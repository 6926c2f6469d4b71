//! [`Lease`]: a rule's lease settings, and the bound `D` of `docs/spec/leases.md`.

use floodgate_core::{AlgorithmKind, Micros, Policy};

/// The default share of the capacity one lease may hold (`lease_share`): a tenth.
pub const DEFAULT_LEASE_SHARE: f64 = 0.1;

/// A rule's lease settings ([`Rule::lease`](crate::Rule::lease)): requests of a key are
/// decided from units this instance took from the store beforehand, in one reservation of up
/// to [`Lease::max_units`] units, spent for at most [`Lease::lifetime`] microseconds.
///
/// ```
/// use floodgate_core::Policy;
/// use floodgate_limiter::Lease;
///
/// let policy = Policy::parse(floodgate_core::AlgorithmKind::TokenBucket, "50000/s").unwrap();
/// let lease = Lease::new(20_000, &policy, 0.1).unwrap();
/// assert_eq!(lease.max_units, 5_000);
/// // Beyond the exact algorithm: a lease's units (one instance), or the refill over 20 ms.
/// assert_eq!(lease.bound(&policy, 1), 1_000);
/// assert_eq!(lease.bound(&policy, 4), 1_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The longest a lease is spent, microseconds (`1 <= lifetime < period`).
    pub lifetime: Micros,
    /// The most units one lease holds (`s` in `docs/spec/leases.md`): `1..=capacity`.
    pub max_units: u64,
}

/// Why [`Lease::new`] refused its settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LeaseError {
    /// The lifetime is 0 or not shorter than the policy's period.
    #[error(
        "a lease must live at least 1 us and less than the period ({period} us); got {lifetime} us"
    )]
    Lifetime {
        /// The lifetime asked for.
        lifetime: Micros,
        /// The policy's period.
        period: Micros,
    },
    /// The share is not a number in `(0, 1]`.
    #[error("the lease share must be a number above 0 and at most 1; got {share}")]
    Share {
        /// The share asked for.
        share: f64,
    },
}

impl Lease {
    /// A lease of at most `lifetime` microseconds holding at most `share` of `policy`'s
    /// capacity (`max(1, floor(capacity x share))` units).
    ///
    /// # Errors
    /// [`LeaseError::Lifetime`] when `lifetime` is 0 or at least the period (the bound of the
    /// windows needs a lease shorter than a window); [`LeaseError::Share`] when `share` is not
    /// in `(0, 1]`.
    pub fn new(lifetime: Micros, policy: &Policy, share: f64) -> Result<Self, LeaseError> {
        let period = policy.quota().period();
        if lifetime == 0 || lifetime >= period {
            return Err(LeaseError::Lifetime { lifetime, period });
        }
        if !(share > 0.0 && share <= 1.0) {
            return Err(LeaseError::Share { share });
        }
        let capacity = policy.capacity();
        // Settings, not a decision: the float only sizes the lease once.
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        #[allow(clippy::cast_sign_loss)]
        let units = ((capacity as f64) * share).floor() as u64;
        Ok(Self {
            lifetime,
            max_units: units.clamp(1, capacity),
        })
    }

    /// `D` of `docs/spec/leases.md`: the most units clients of `instances` instances may be
    /// admitted beyond the exact algorithm (in any span for the buckets and GCRA, per window
    /// for the windows, per trailing period for the sliding log). `instances = 1` gives the
    /// per-instance term.
    pub fn bound(&self, policy: &Policy, instances: u64) -> u64 {
        let held = instances.saturating_mul(self.max_units);
        let quota = policy.quota();
        match policy.kind() {
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra => {
                // ceil(L x limit / period), in u128: L < period <= 2^45, limit <= 2^51.
                let refill = (u128::from(self.lifetime) * u128::from(quota.limit()))
                    .div_ceil(u128::from(quota.period()));
                held.min(u64::try_from(refill).unwrap_or(u64::MAX))
            }
            _ => held.min(quota.limit()),
        }
    }

    /// The bound as the start-up log and `check-config` print it: for one instance, and as a
    /// formula in the number of instances `N`.
    pub fn describe_bound(&self, policy: &Policy) -> String {
        let one = self.bound(policy, 1);
        let cap = match policy.kind() {
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra => {
                self.bound(policy, u64::MAX)
            }
            _ => policy.quota().limit(),
        };
        let per = match policy.kind() {
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra => {
                "at once or over any span"
            }
            AlgorithmKind::SlidingLog => "per trailing period",
            _ => "per window",
        };
        let units = |n: u64| if n == 1 { "unit" } else { "units" };
        format!(
            "lease {}, at most {} {} per lease; beyond the exact count at most {one} {} \
             {per} (one instance), min(N x {}, {cap}) for N instances",
            whole(floodgate_core::quota::format_period(self.lifetime)),
            self.max_units,
            units(self.max_units),
            units(one),
            self.max_units,
        )
    }
}

/// A period as a duration: `format_period` writes one second as `s` (as in `100/s`).
fn whole(period: String) -> String {
    if period.starts_with(|c: char| c.is_ascii_digit()) {
        period
    } else {
        format!("1{period}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(kind: AlgorithmKind, quota: &str) -> Policy {
        Policy::parse(kind, quota).unwrap()
    }

    #[test]
    fn the_bound_is_the_held_units_or_the_refill_or_the_limit() {
        let gcra = policy(AlgorithmKind::Gcra, "50000/s");
        let lease = Lease::new(20_000, &gcra, 0.1).unwrap();
        assert_eq!(lease.max_units, 5_000);
        assert_eq!(lease.bound(&gcra, 1), 1_000, "the refill over 20 ms");
        let small = Lease::new(20_000, &gcra, 0.001).unwrap();
        assert_eq!(small.bound(&gcra, 1), 50);
        assert_eq!(small.bound(&gcra, 4), 200);
        assert_eq!(small.bound(&gcra, 100), 1_000);
        // 7 per 3 s over 1 us: ceil(7 / 3,000,000) = 1.
        let odd = policy(AlgorithmKind::TokenBucket, "7/3s");
        assert_eq!(Lease::new(1, &odd, 1.0).unwrap().bound(&odd, 9), 1);

        let window = policy(AlgorithmKind::FixedWindow, "100/s");
        let lease = Lease::new(20_000, &window, 0.25).unwrap();
        assert_eq!(lease.bound(&window, 1), 25);
        assert_eq!(lease.bound(&window, 3), 75);
        assert_eq!(
            lease.bound(&window, 5),
            100,
            "never more than a window's limit"
        );
        assert_eq!(lease.bound(&window, u64::MAX), 100);
    }

    #[test]
    fn settings_outside_their_range_are_refused() {
        let p = policy(AlgorithmKind::SlidingLog, "10/s");
        assert!(matches!(
            Lease::new(0, &p, 0.1),
            Err(LeaseError::Lifetime { .. })
        ));
        assert!(matches!(
            Lease::new(1_000_000, &p, 0.1),
            Err(LeaseError::Lifetime { .. })
        ));
        for share in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(Lease::new(10, &p, share), Err(LeaseError::Share { .. })),
                "{share}"
            );
        }
        // A share below one unit is one unit.
        assert_eq!(Lease::new(10, &p, 0.01).unwrap().max_units, 1);
        assert_eq!(Lease::new(10, &p, 1.0).unwrap().max_units, 10);
    }

    #[test]
    fn the_bound_is_described_with_its_formula() {
        let p = policy(AlgorithmKind::TokenBucket, "1000/1d");
        assert!(Lease::new(1_000_000, &p, 0.1)
            .unwrap()
            .describe_bound(&p)
            .starts_with("lease 1s, at most 100 units"));
        let p = policy(AlgorithmKind::FixedWindow, "50000/s");
        let lease = Lease::new(20_000, &p, 0.1).unwrap();
        assert_eq!(
            lease.describe_bound(&p),
            "lease 20ms, at most 5000 units per lease; beyond the exact count at most 5000 \
             units per window (one instance), min(N x 5000, 50000) for N instances"
        );
    }
}
