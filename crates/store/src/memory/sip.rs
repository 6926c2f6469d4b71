//! SipHash-1-3 over one byte string, computed in one pass: the store's key fingerprint.
//!
//! The same function as `siphasher::sip::SipHasher13::new_with_keys(k0, k1)` fed the bytes with
//! one `write` and read with `finish` (a unit test checks every length from 0 to 64 against
//! it), without the streaming hasher's buffering: whole 8-byte words are read straight from
//! the input and the last 0 to 7 bytes with at most two overlapping loads. For an 11-byte key
//! that is 2 compression rounds and 3 finalisation rounds.
//!
//! SipHash is a keyed pseudo-random function (Aumasson and Bernstein, 2012): without the key,
//! an attacker cannot find inputs whose outputs collide faster than by chance, which is what
//! the store's identity-by-fingerprint rests on.

/// A 128-bit SipHash key.
#[derive(Clone, Copy)]
pub(crate) struct SipKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for SipKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never print it.
        f.write_str("SipKey(..)")
    }
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// The last `tail.len()` (0 to 7) bytes as a little-endian integer.
#[inline(always)]
fn load_tail(tail: &[u8]) -> u64 {
    let n = tail.len();
    if n >= 4 {
        // Two overlapping 4-byte loads; the overlapping bytes are equal, so OR keeps them.
        let lo = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        let hi = u64::from(u32::from_le_bytes([
            tail[n - 4],
            tail[n - 3],
            tail[n - 2],
            tail[n - 1],
        ]));
        lo | hi << (8 * (n - 4))
    } else if n > 0 {
        // Bytes 0, n/2 and n-1 cover every byte for n = 1, 2, 3.
        u64::from(tail[0])
            | u64::from(tail[n / 2]) << (8 * (n / 2))
            | u64::from(tail[n - 1]) << (8 * (n - 1))
    } else {
        0
    }
}

impl SipKey {
    pub(crate) fn new(k0: u64, k1: u64) -> Self {
        Self { k0, k1 }
    }

    /// SipHash-1-3 of `bytes` under this key.
    #[inline]
    pub(crate) fn hash(&self, bytes: &[u8]) -> u64 {
        let mut v = [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ];
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let m = u64::from_le_bytes(word.try_into().expect("chunks of 8"));
            v[3] ^= m;
            round(&mut v);
            v[0] ^= m;
        }
        // The length's low byte goes into the top byte of the last word, as SipHash specifies.
        let last = (bytes.len() as u64) << 56 | load_tail(words.remainder());
        v[3] ^= last;
        round(&mut v);
        v[0] ^= last;
        v[2] ^= 0xff;
        round(&mut v);
        round(&mut v);
        round(&mut v);
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use siphasher::sip::SipHasher13;
    use std::hash::Hasher;

    #[test]
    fn equals_the_reference_siphash_1_3_for_every_length() {
        let bytes: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        for (k0, k1) in [
            (0, 0),
            (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908),
            (u64::MAX, 1),
        ] {
            let key = SipKey::new(k0, k1);
            for len in 0..=bytes.len() {
                let mut h = SipHasher13::new_with_keys(k0, k1);
                h.write(&bytes[..len]);
                assert_eq!(key.hash(&bytes[..len]), h.finish(), "length {len}");
            }
        }
    }

    #[test]
    fn tail_loads_are_little_endian() {
        assert_eq!(load_tail(&[]), 0);
        assert_eq!(load_tail(&[1]), 0x01);
        assert_eq!(load_tail(&[1, 2]), 0x0201);
        assert_eq!(load_tail(&[1, 2, 3]), 0x03_0201);
        assert_eq!(load_tail(&[1, 2, 3, 4, 5, 6, 7]), 0x07_0605_0403_0201);
    }
}
