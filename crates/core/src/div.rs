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
//!
//! The product is formed as `(n * 2^11) * m`, whose high 64 bits are `floor(n * m / 2^53)`
//! (`n * 2^11 < 2^64`), so the quotient is that high half shifted right by `l < 64`: one
//! multiply and two constant-free shifts, with no 128-bit shift (which x86-64 does in four
//! instructions when the count is not a constant).
//!
//! Divisibility (Granlund and Montgomery, section 9; Warren, "Hacker's Delight", 2nd ed.,
//! section 10-17): with `d = d_odd x 2^s`, `d_odd` odd and `inv` its inverse modulo 2^64, `n` is
//! a multiple of `d` exactly when `(n x inv mod 2^64)` rotated right by `s` is at most
//! `floor((2^64 - 1) / d)`, for every `u64` `n`: multiplying by `inv` maps the multiples of
//! `d_odd` one-to-one onto `0..=floor((2^64 - 1) / d_odd)`, and the rotation moves any of the
//! low `s` bits that are set to the top.

/// A divisor `d >= 1` with its reciprocal; [`Divisor::div`] equals `n / d` for every `n`.
///
/// `d` is a [`NonZeroU64`] so that the fallback division cannot panic: a division whose result
/// is unused (a [`Decision`](crate::Decision) field the caller never reads) is then free of side
/// effects and the compiler removes it entirely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    d: NonZeroU64,
    m: u64,
    /// `l = ceil(log2 d)`: the shift after taking the product's high half.
    l: u32,
    /// Inverse of the odd part of `d` modulo 2^64, the power of two in `d`, and
    /// `floor((2^64 - 1) / d)`: the divisibility test.
    inv: u64,
    twos: u32,
    max_quotient: u64,
}

use std::num::NonZeroU64;

/// Dividends below `2^EXACT_BITS` take the multiply path.
const EXACT_BITS: u32 = 53;

impl Divisor {
    /// Prepares division by `d` (`d = 0` is treated as 1; no caller passes it).
    pub(crate) fn new(d: u64) -> Self {
        let d = NonZeroU64::new(d).unwrap_or(NonZeroU64::MIN);
        let l = u64::BITS - (d.get() - 1).leading_zeros(); // ceil(log2 d); 0 for d = 1
        let k = EXACT_BITS + l;
        let m = (1u128 << k).div_ceil(u128::from(d.get()));
        // Above 2^53 every dividend of the multiply path gives 0: m = 0 does, and keeps the
        // shift below 64.
        let (m, l) = if l > EXACT_BITS { (0, 0) } else { (m, l) };
        let twos = d.trailing_zeros();
        let odd = d.get() >> twos;
        // Newton's iteration doubles the correct low bits: `odd` is its own inverse modulo 2^3,
        // and five steps reach 2^96 > 2^64.
        let mut inv = odd;
        for _ in 0..5 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inv)));
        }
        Self {
            d,
            m: m as u64,
            l,
            inv,
            twos,
            max_quotient: u64::MAX / d.get(),
        }
    }

    /// `n / d`, rounded down.
    #[inline]
    pub(crate) fn div(self, n: u64) -> u64 {
        if n >> EXACT_BITS == 0 {
            let high = (u128::from(n << (64 - EXACT_BITS)) * u128::from(self.m)) >> 64;
            (high as u64) >> self.l
        } else {
            n / self.d
        }
    }

    /// `n % d == 0`, without a division.
    #[inline]
    pub(crate) fn divides(self, n: u64) -> bool {
        n.wrapping_mul(self.inv).rotate_right(self.twos) <= self.max_quotient
    }

    /// `(n / d, n % d)`.
    #[inline]
    pub(crate) fn div_rem(self, n: u64) -> (u64, u64) {
        let q = self.div(n);
        (q, n - q * self.d.get())
    }

    /// `n % d`.
    #[inline]
    pub(crate) fn rem(self, n: u64) -> u64 {
        self.div_rem(n).1
    }

    /// The divisor `d`.
    #[inline]
    pub(crate) fn get(self) -> u64 {
        self.d.get()
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
        assert_eq!(v.rem(n), n % d, "{n} % {d}");
        assert_eq!(v.get(), d);
        assert_eq!(v.divides(n), n.is_multiple_of(d), "{d} divides {n}");
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

    #[test]
    fn divisibility_of_every_multiple_and_neighbour() {
        for d in (1..=64).chain([1_000, 1 << 20, 3 << 40, 60_000_000, u64::MAX / 3, u64::MAX]) {
            let v = Divisor::new(d);
            for q in [0u64, 1, 2, 3, 1_000, u64::MAX / d] {
                let Some(n) = q.checked_mul(d) else { continue };
                for n in [n, n.wrapping_sub(1), n.wrapping_add(1)] {
                    assert_eq!(v.divides(n), n % d == 0, "{d} divides {n}");
                }
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
