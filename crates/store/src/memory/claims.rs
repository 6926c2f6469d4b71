//! [`Claims`]: the memory store's [`Store::claim`](crate::Store::claim), a table of claimed ids
//! and the time each claim ends.
//!
//! One lock over one map: a claim is made once per settle of a reservation token, far rarer
//! than a check. Expired claims are dropped when the table has doubled since the last sweep,
//! so the work per claim stays constant and the table holds about twice the live claims at
//! most. The live claims are bounded by the reservations settled within their TTL; the table
//! also has a hard cap of its own (`MemoryStoreConfig::max_claims`, apart from `max_keys`:
//! claims outlive the keys they settle). When it is full, expired claims are dropped first;
//! when it is full of live claims, a new claim is [`StoreError::ClaimsFull`] with the time
//! until the earliest claim ends: the claim is not made, so the settle changes nothing and
//! can be made again then (never let through twice, never half done). Until that time a full
//! table refuses at once, without sweeping again.

use std::collections::HashMap;

use floodgate_core::{Micros, Timestamp};
use parking_lot::Mutex;

use crate::StoreError;

/// Sweeps start once the table holds this many claims.
const FIRST_SWEEP: usize = 1024;

/// Claimed ids with the time (microseconds since the Unix epoch) their claims end.
#[derive(Debug)]
pub(crate) struct Claims {
    table: Mutex<Table>,
    max: usize,
}

#[derive(Debug)]
struct Table {
    ends: HashMap<Box<str>, Timestamp>,
    /// Sweep the expired claims when the table reaches this size.
    sweep_at: usize,
    /// Set when the table was found full of live claims: the earliest of their ends (no
    /// room before it).
    full_until: Timestamp,
}

impl Claims {
    /// An empty table holding at most `max` live claims.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            table: Mutex::new(Table {
                ends: HashMap::new(),
                sweep_at: FIRST_SWEEP,
                full_until: 0,
            }),
            max: max.max(1),
        }
    }

    /// Claims `id` at `now` for `ttl` microseconds (0 read as 1): `true` unless a claim of
    /// `id` stands at `now`.
    ///
    /// # Errors
    /// [`StoreError::ClaimsFull`] when the table holds `max` live claims (the claim is not
    /// made).
    pub(crate) fn claim(&self, id: &str, now: Timestamp, ttl: Micros) -> Result<bool, StoreError> {
        let ends = now.saturating_add(ttl.max(1));
        let mut table = self.table.lock();
        if let Some(end) = table.ends.get_mut(id) {
            if *end > now {
                return Ok(false);
            }
            *end = ends;
            return Ok(true);
        }
        let full = |max: usize, until: Timestamp| StoreError::ClaimsFull {
            max,
            retry_after: until.saturating_sub(now).max(1),
        };
        if table.ends.len() >= self.max && now < table.full_until {
            return Err(full(self.max, table.full_until));
        }
        if table.ends.len() >= table.sweep_at.min(self.max) {
            table.ends.retain(|_, end| *end > now);
            table.sweep_at = (table.ends.len() * 2).max(FIRST_SWEEP);
            if table.ends.len() >= self.max {
                table.full_until = table.ends.values().copied().min().unwrap_or(now);
                return Err(full(self.max, table.full_until));
            }
        }
        table.ends.insert(id.into(), ends);
        Ok(true)
    }

    /// Live and expired claims held (expired ones until the next sweep).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.lock().ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = 1_700_000_000_000_000;

    #[test]
    fn an_id_is_claimed_once_until_its_ttl_ends() {
        let claims = Claims::new(100);
        assert_eq!(claims.claim("a", T0, 1_000), Ok(true));
        assert_eq!(claims.claim("a", T0, 1_000), Ok(false));
        assert_eq!(claims.claim("b", T0, 1_000), Ok(true));
        assert_eq!(claims.claim("a", T0 + 999, 1_000), Ok(false));
        // At the end of its TTL the claim is gone: the id may be claimed again.
        assert_eq!(claims.claim("a", T0 + 1_000, 1_000), Ok(true));
        assert_eq!(claims.claim("a", T0 + 1_500, 1_000), Ok(false));
        // A TTL of 0 still holds for the microsecond of the claim.
        assert_eq!(claims.claim("z", T0, 0), Ok(true));
        assert_eq!(claims.claim("z", T0, 0), Ok(false));
        assert_eq!(claims.claim("z", T0 + 1, 0), Ok(true));
    }

    #[test]
    fn expired_claims_are_swept_and_live_ones_are_capped() {
        let claims = Claims::new(3);
        for id in ["a", "b", "c"] {
            assert_eq!(claims.claim(id, T0, 10), Ok(true));
        }
        // Full of live claims: refused, not let through, with the time until room is made.
        assert_eq!(
            claims.claim("d", T0 + 5, 10),
            Err(StoreError::ClaimsFull {
                max: 3,
                retry_after: 5
            })
        );
        assert_eq!(
            claims.claim("e", T0 + 9, 10),
            Err(StoreError::ClaimsFull {
                max: 3,
                retry_after: 1
            })
        );
        assert_eq!(claims.claim("a", T0 + 5, 10), Ok(false));
        // Once they expire they are swept to make room.
        assert_eq!(claims.claim("d", T0 + 10, 10), Ok(true));
        assert_eq!(claims.len(), 1);
    }

    #[test]
    fn the_table_is_swept_when_it_doubles() {
        let claims = Claims::new(1_000_000);
        for i in 0..FIRST_SWEEP {
            assert_eq!(claims.claim(&i.to_string(), T0, 10), Ok(true));
        }
        assert_eq!(claims.len(), FIRST_SWEEP);
        // Every claim so far has expired; the next one sweeps them.
        assert_eq!(claims.claim("new", T0 + 10, 10), Ok(true));
        assert_eq!(claims.len(), 1);
    }
}
