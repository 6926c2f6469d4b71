//! [`FpTable`]: an open-addressing (linear probing) table of `(fingerprint, slot)` buckets, with
//! the fingerprint itself as the occupancy tag.
//!
//! Why not `hashbrown`: its control bytes live in a separate array, so a look-up at a million
//! keys misses the cache twice (the control group, then the bucket), and each bucket costs a
//! ninth byte. Here the bucket index is the fingerprint's low bits and the bucket holds the
//! full fingerprint, so a look-up reads one bucket (one cache miss, usually no probe) and
//! compares one word; 64-bit fingerprints are uniformly distributed secret hashes, so linear
//! probing's clustering stays at its random-hash expectation and no further hashing is needed.
//!
//! - Fingerprint 0 marks an empty bucket, 1 a deleted one (a tombstone, so probe chains stay
//!   intact); [`tag`] moves a key hash of 0 or 1 to 2 or 3 (two more colliding values in
//!   2^64: negligible beside the fingerprint's own collisions).
//! - At most 3/4 of the buckets are in use (live or tombstone); passing it, the table doubles
//!   when more than half the buckets would be live, and is otherwise rebuilt at the same size
//!   (dropping the tombstones). Live load is therefore between 1/4 and 3/4 after the first
//!   growth: an expected probe length of at most 2.5 buckets for a hit, 8.5 for a miss (Knuth,
//!   TAOCP vol. 3, 6.4).
//! - A removed bucket becomes empty rather than a tombstone when the next bucket is empty (no
//!   chain runs through it), so tables whose keys come and go keep few tombstones.

/// An empty bucket's tag.
const EMPTY: u64 = 0;
/// A deleted bucket's tag.
const TOMBSTONE: u64 = 1;

/// The fingerprint stored for a key hash: never [`EMPTY`] or [`TOMBSTONE`].
#[inline]
pub(crate) fn tag(hash: u64) -> u64 {
    hash | (u64::from(hash < 2) << 1)
}

/// A value to leave in an unused bucket (never read as a state).
pub(crate) trait Vacant {
    fn vacant() -> Self;
}

/// See the module docs. `S` is a slot: a state, with its expiry for the sliding log.
pub(crate) struct FpTable<S> {
    buckets: Box<[(u64, S)]>,
    /// Live entries.
    len: usize,
    /// Live entries plus tombstones.
    used: usize,
}

impl<S> std::fmt::Debug for FpTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FpTable")
            .field("len", &self.len)
            .field("tombstones", &(self.used - self.len))
            .field("buckets", &self.buckets.len())
            .finish()
    }
}

impl<S: Vacant> FpTable<S> {
    /// An empty table; it allocates on its first insert.
    pub(crate) fn new() -> Self {
        Self {
            buckets: Box::new([]),
            len: 0,
            used: 0,
        }
    }

    /// Live entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bucket index holding `fp` (a [`tag`]), if any.
    #[inline]
    fn position(&self, fp: u64) -> Option<usize> {
        let mask = self.buckets.len().wrapping_sub(1);
        let mut i = fp as usize & mask;
        // A table with buckets always has an empty one (at most 3/4 are used), so the loop ends.
        loop {
            let (tag, _) = self.buckets.get(i)?;
            if *tag == fp {
                return Some(i);
            }
            if *tag == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub(crate) fn find(&self, fp: u64) -> Option<&S> {
        self.position(fp).map(|i| &self.buckets[i].1)
    }

    #[inline]
    pub(crate) fn find_mut(&mut self, fp: u64) -> Option<&mut S> {
        self.position(fp).map(|i| &mut self.buckets[i].1)
    }

    /// Empties bucket `i` (a live one) and returns its slot.
    fn take(&mut self, i: usize) -> S {
        let mask = self.buckets.len() - 1;
        let next_empty = self.buckets[(i + 1) & mask].0 == EMPTY;
        let (tag, slot) = &mut self.buckets[i];
        *tag = if next_empty { EMPTY } else { TOMBSTONE };
        self.len -= 1;
        if next_empty {
            self.used -= 1;
        }
        std::mem::replace(slot, S::vacant())
    }

    /// Removes `fp`; returns its slot when it was held.
    pub(crate) fn remove(&mut self, fp: u64) -> Option<S> {
        let i = self.position(fp)?;
        Some(self.take(i))
    }

    /// Stores `slot` under `fp`, which must not be held (callers look it up first).
    pub(crate) fn insert_new(&mut self, fp: u64, slot: S) {
        debug_assert!(self.position(fp).is_none(), "fingerprint already held");
        if (self.used + 1) * 4 > self.buckets.len() * 3 {
            let buckets = if (self.len + 1) * 2 > self.buckets.len() {
                (self.buckets.len() * 2).max(8)
            } else {
                self.buckets.len()
            };
            self.rebuild(buckets);
        }
        let mask = self.buckets.len() - 1;
        let mut i = fp as usize & mask;
        while self.buckets[i].0 > TOMBSTONE {
            i = (i + 1) & mask;
        }
        if self.buckets[i].0 == EMPTY {
            self.used += 1;
        }
        self.buckets[i] = (fp, slot);
        self.len += 1;
    }

    /// Moves every live entry into a new array of `buckets` (a power of two) buckets.
    fn rebuild(&mut self, buckets: usize) {
        let fresh: Box<[(u64, S)]> = (0..buckets).map(|_| (EMPTY, S::vacant())).collect();
        let old = std::mem::replace(&mut self.buckets, fresh);
        let mask = buckets - 1;
        for (fp, slot) in old.into_vec() {
            if fp > TOMBSTONE {
                let mut i = fp as usize & mask;
                while self.buckets[i].0 != EMPTY {
                    i = (i + 1) & mask;
                }
                self.buckets[i] = (fp, slot);
            }
        }
        self.used = self.len;
    }

    /// Removes every entry for which `keep` is false, then gives memory back when at most 1/8
    /// of the buckets are left live: an empty table frees its array, a sparse one is rebuilt
    /// at the size that leaves it at most half full. (A rule whose keys all expired, say an
    /// old version of a reloaded rule, then holds no buckets; the rebuild's cost is paid by
    /// the sweep, never by a check.)
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&S) -> bool) {
        for i in 0..self.buckets.len() {
            if self.buckets[i].0 > TOMBSTONE && !keep(&self.buckets[i].1) {
                self.take(i);
            }
        }
        if self.len == 0 {
            *self = Self::new();
        } else if self.buckets.len() > 8 && self.len * 8 <= self.buckets.len() {
            self.rebuild((self.len * 2).next_power_of_two().max(8));
        }
    }

    /// Buckets allocated (live, deleted or empty).
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Vacant for u64 {
        fn vacant() -> Self {
            u64::MAX
        }
    }

    #[test]
    fn tags_are_never_empty_or_tombstone() {
        assert_eq!(
            (tag(0), tag(1), tag(2), tag(3), tag(u64::MAX)),
            (2, 3, 2, 3, u64::MAX)
        );
    }

    /// Against a std map, with colliding low bits (long probe chains), removals, retains
    /// and the growth and tombstone-clearing rebuilds.
    #[test]
    fn behaves_like_a_map() {
        let mut table: FpTable<u64> = FpTable::new();
        let mut model = std::collections::HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, many sharing their low bits.
            let fp = tag((x % 300) << 40 | (x % 7));
            match x % 5 {
                0 | 1 => {
                    if table.find(fp).is_none() {
                        table.insert_new(fp, step);
                        model.insert(fp, step);
                    }
                }
                2 => assert_eq!(table.remove(fp), model.remove(&fp), "step {step}"),
                3 => {
                    if let Some(v) = table.find_mut(fp) {
                        *v += 1;
                        *model.get_mut(&fp).unwrap() += 1;
                    }
                }
                _ => {
                    if step % 50 == 0 {
                        table.retain(|v| v % 3 != 0);
                        model.retain(|_, v| *v % 3 != 0);
                    }
                }
            }
            assert_eq!(table.len(), model.len(), "step {step}");
            assert!(table.used * 4 <= table.buckets.len() * 3);
        }
        for (fp, v) in &model {
            assert_eq!(table.find(*fp), Some(v));
        }
        assert!(table.len() > 10);
    }

    #[test]
    fn retain_gives_memory_back() {
        let mut table: FpTable<u64> = FpTable::new();
        for i in 0..1_000u64 {
            table.insert_new(tag(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)), i);
        }
        // 1,000 live need 2,048 buckets (at most 3/4 used).
        assert_eq!(table.buckets(), 2_048);
        // 100 left: rebuilt at 256 buckets, every survivor still found.
        table.retain(|v| v % 10 == 0);
        assert_eq!((table.len(), table.buckets()), (100, 256));
        for i in (0..1_000u64).step_by(10) {
            assert_eq!(
                table.find(tag(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
                Some(&i)
            );
        }
        // 25 live in 256 buckets (at most 1/8): rebuilt at 64.
        table.retain(|v| v % 40 == 0);
        assert_eq!((table.len(), table.buckets()), (25, 64));
        table.retain(|_| false);
        assert_eq!((table.len(), table.buckets()), (0, 0));
        table.insert_new(tag(7), 7);
        assert_eq!(table.find(tag(7)), Some(&7));
    }
}
