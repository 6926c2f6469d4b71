//! [`FpMap`]: one shard's `(fingerprint, slot)` entries in a `hashbrown::HashTable`, hashed by
//! the fingerprint itself.
//!
//! The fingerprint is already a uniformly distributed secret 64-bit hash (SipHash-1-3 under
//! the store's key), so it is passed to the table as the hash unchanged: hashbrown takes the
//! bucket index from its low bits and the 7-bit control tag from its top 7 bits, and an entry
//! is recognised by comparing the stored fingerprint (one word). No second hash is computed,
//! and no key bytes are stored.
//!
//! What this adds to the table is the store's memory policy: after a sweep
//! ([`FpMap::retain`]) an emptied table frees its allocation and a sparse one (at most 1/8 of
//! its buckets live) shrinks so that it can double before growing again. hashbrown keeps a
//! table at most 7/8 full and doubles past it; deleted entries leave tombstones that its next
//! growth or in-place rehash clears.

use hashbrown::HashTable;

/// See the module docs. `S` is a slot: a state, with its expiry for the sliding log.
pub(crate) struct FpMap<S> {
    table: HashTable<(u64, S)>,
}

/// The hash hashbrown asks of a stored entry when it moves it: its fingerprint.
#[inline]
fn fingerprint<S>(entry: &(u64, S)) -> u64 {
    entry.0
}

impl<S> std::fmt::Debug for FpMap<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Sizes only: a shard can hold millions of entries.
        f.debug_struct("FpMap")
            .field("len", &self.table.len())
            .field("buckets", &self.buckets())
            .finish()
    }
}

impl<S> FpMap<S> {
    /// An empty map; it allocates on its first insert.
    pub(crate) fn new() -> Self {
        Self {
            table: HashTable::new(),
        }
    }

    /// Live entries.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    #[inline]
    pub(crate) fn find(&self, fp: u64) -> Option<&S> {
        self.table.find(fp, |e| e.0 == fp).map(|e| &e.1)
    }

    #[inline]
    pub(crate) fn find_mut(&mut self, fp: u64) -> Option<&mut S> {
        self.table.find_mut(fp, |e| e.0 == fp).map(|e| &mut e.1)
    }

    /// Removes `fp`; returns its slot when it was held.
    pub(crate) fn remove(&mut self, fp: u64) -> Option<S> {
        let entry = self.table.find_entry(fp, |e| e.0 == fp).ok()?;
        Some(entry.remove().0 .1)
    }

    /// Stores `slot` under `fp`, which must not be held (callers look it up first).
    pub(crate) fn insert_new(&mut self, fp: u64, slot: S) {
        debug_assert!(self.find(fp).is_none(), "fingerprint already held");
        self.table.insert_unique(fp, (fp, slot), fingerprint);
    }

    /// Removes every entry for which `keep` is false, then gives memory back when at most 1/8
    /// of the buckets are left live: an empty table frees its allocation, a sparse one is
    /// moved to the smallest table with room for twice its entries. (A rule whose keys all
    /// expired, say an old version of a reloaded rule, then holds no buckets; the move's cost
    /// is paid by the sweep, never by a check.)
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&S) -> bool) {
        self.table.retain(|e| keep(&e.1));
        let (len, buckets) = (self.table.len(), self.buckets());
        if len == 0 {
            // Frees the allocation (a no-op on a table that never allocated).
            self.table.shrink_to(0, fingerprint);
        } else if buckets > 8 && len * 8 <= buckets {
            self.table.shrink_to(2 * len, fingerprint);
        }
    }

    /// Buckets allocated (live, deleted or empty); 0 when nothing is allocated.
    pub(crate) fn buckets(&self) -> usize {
        // An unallocated table reports hashbrown's shared empty singleton as one bucket.
        if self.table.allocation_size() == 0 {
            0
        } else {
            self.table.num_buckets()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a std map, with fingerprints that share their low bits (hashbrown's bucket
    /// index) or their top 7 bits (its control tag), removals, retains and growths.
    #[test]
    fn behaves_like_a_map() {
        let mut map: FpMap<u64> = FpMap::new();
        let mut model = std::collections::HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys: 300 values in bits 40 and up, 7 in the low bits.
            let fp = (x % 300) << 40 | (x % 7);
            match x % 5 {
                0 | 1 => {
                    if map.find(fp).is_none() {
                        map.insert_new(fp, step);
                        model.insert(fp, step);
                    }
                }
                2 => assert_eq!(map.remove(fp), model.remove(&fp), "step {step}"),
                3 => {
                    if let Some(v) = map.find_mut(fp) {
                        *v += 1;
                        *model.get_mut(&fp).unwrap() += 1;
                    }
                }
                _ => {
                    if step % 50 == 0 {
                        map.retain(|v| v % 3 != 0);
                        model.retain(|_, v| *v % 3 != 0);
                    }
                }
            }
            assert_eq!(map.len(), model.len(), "step {step}");
            // hashbrown's bound: at most 7/8 of the buckets live (all but one below 8).
            assert!(map.len() * 8 <= map.buckets() * 7 || map.buckets() <= 8);
        }
        for (fp, v) in &model {
            assert_eq!(map.find(*fp), Some(v));
        }
        assert!(map.len() > 10);
    }

    #[test]
    fn retain_gives_memory_back() {
        let fp = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut map: FpMap<u64> = FpMap::new();
        assert_eq!(map.buckets(), 0);
        for i in 0..1_000u64 {
            map.insert_new(fp(i), i);
        }
        // 1,000 live need 2,048 buckets (at most 7/8 used: 1,024 hold 896).
        assert_eq!(map.buckets(), 2_048);
        // 100 left (1/20 of the buckets): moved to 256 buckets (room for 224 >= 200), every
        // survivor still found.
        map.retain(|v| v % 10 == 0);
        assert_eq!((map.len(), map.buckets()), (100, 256));
        for i in (0..1_000u64).step_by(10) {
            assert_eq!(map.find(fp(i)), Some(&i));
        }
        // 50 of 256 (more than 1/8): kept as is.
        map.retain(|v| v % 20 == 0);
        assert_eq!((map.len(), map.buckets()), (50, 256));
        // 25 of 256 (at most 1/8): moved to 64 (room for 56 >= 50).
        map.retain(|v| v % 40 == 0);
        assert_eq!((map.len(), map.buckets()), (25, 64));
        assert_eq!(map.find(fp(40)), Some(&40));
        map.retain(|_| false);
        assert_eq!((map.len(), map.buckets()), (0, 0));
        map.insert_new(7, 7);
        assert_eq!(map.find(7), Some(&7));
    }
}
