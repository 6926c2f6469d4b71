//! Division by a divisor fixed when a policy is built, as one multiply and one shift.
//!
//! A 64-bit `div` costs 10 to 20 cycles on current x86-64 cores, and an algorithm's decision
//! needs two or three of them (units remaining, microseconds to reset, the new state), which is
//! most of a check's cost once the clock read is cheap. Every dividend an algorithm forms stays
//! below 2^53 ([`MAX_EXACT`](crate::quota::MAX_EXACT) is 2^51), where a multiply by a
//! precomputed reciprocal is exact.
//!
//! Method (Granlund and Montgomery, "Division by invariant integers using multiplication",
//! PLDI 1994, section 4): with `l = ceil(log2 d)`, `k = 53 + l` and `m = ceil(2^k / d)`, for
//! every `n < 2^53`, `floor(n * m / 2^k) = floor(n / d)`. Proof: `m * d = 2^k + e` with
//! `0 <= e < d <= 2^l`, so `n * m / 2^k = n / d + n * e / (d * 2^k)`, and
//! `n * e < 2^53 * 2^l = 2^k` makes the excess less than `1 / d`, too little to reach the next
//! integer. `m < 2^54` fits a `u64` and `n * m < 2^107` fits a `u128`. Larger dividends fall
//! back to the hardware division.

/// A divisor `d >= 1` with its reciprocal; [`Divisor::div`] equals `n / d` for every `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    d: u64,
    m: u64,
    k: u32,
}

/// Dividends below `2^EXACT_BITS` take the multiply path.
const EXACT_BITS: u32 = 53;

impl Divisor {
    /// Prepares division by `d` (`d = 0` is treated as 1; no caller passes it).
    pub(crate) fn new(d: u64) -> Self {
        let d = d.max(1);
        let l = u64::BITS - (d - 1).leading_zeros(); // ceil(log2 d); 0 for d = 1
        let k = EXACT_BITS + l;
        let m = (1u128 << k).div_ceil(u128::from(d));
        Self { d, m: m as u64, k }
    }

    /// `n / d`, rounded down.
    #[inline]
    pub(crate) fn div(self, n: u64) -> u64 {
        if n >> EXACT_BITS == 0 {
            ((u128::from(n) * u128::from(self.m)) >> self.k) as u64
        } else {
            n / self.d
        }
    }

    /// `(n / d, n % d)`.
    #[inline]
    pub(crate) fn div_rem(self, n: u64) -> (u64, u64) {
        let q = self.div(n);
        (q, n - q * self.d)
    }

    /// `n / d`, rounded up.
    #[inline]
    pub(crate) fn div_ceil(self, n: u64) -> u64 {
        let (q, r) = self.div_rem(n);
        q + u64::from(r != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(d: u64, n: u64) {
        let v = Divisor::new(d);
        assert_eq!(v.div(n), n / d, "{n} / {d}");
        assert_eq!(v.div_rem(n), (n / d, n % d), "{n} % {d}");
        assert_eq!(v.div_ceil(n), n.div_ceil(d), "{n} div_ceil {d}");
    }

    #[test]
    fn edges() {
        let top = (1u64 << 53) - 1;
        for d in [
            1,
            2,
            3,
            5,
            7,
            10,
            60,
            1_000,
            999_999,
            1 << 20,
            (1 << 20) + 1,
            top,
            1 << 53,
        ]
        .into_iter()
        .chain([(1u64 << 63) + 1, u64::MAX - 1, u64::MAX])
        {
            for n in [
                0,
                1,
                d - 1,
                d,
                d.saturating_add(1),
                top - 1,
                top,
                top + 1,
                u64::MAX,
            ] {
                check(d, n);
            }
            for q in [1u64, 2, 3, 1_000] {
                if let Some(n) = d.checked_mul(q) {
                    for n in [n - 1, n, n.saturating_add(1)] {
                        check(d, n);
                    }
                }
            }
        }
    }

    #[test]
    fn every_small_case() {
        for d in 1..=300 {
            for n in 0..=5_000 {
                check(d, n);
            }
        }
    }

    proptest! {
        #[test]
        fn matches_hardware_division(d in 1u64.., n in 0u64..(1 << 53)) {
            check(d, n);
        }

        #[test]
        fn matches_for_small_divisors_and_large_dividends(d in 1u64..100_000_000, n in any::<u64>()) {
            check(d, n);
        }

        #[test]
        fn near_multiples(d in 1u64..(1 << 40), q in 0u64..(1 << 12), delta in 0u64..3) {
            let n = (d * q + delta).saturating_sub(1);
            check(d, n);
        }
    }
}
