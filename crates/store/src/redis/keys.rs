//! Redis key names and cluster slots.
//!
//! One Redis key per `(rule, partition key, algorithm)`, named by a hash only:
//!
//! ```text
//! <prefix><11 base64url characters>        fg:Tq3xV0b9kQa
//! ```
//!
//! - The 11 characters are the first 66 bits of SHA-256 over
//!   `len(rule) as u64 (LE) || rule || algorithm code (1 byte) || key`, in the URL-safe base64
//!   alphabet (`A-Z a-z 0-9 - _`). The length prefix makes the input injective (`("ab", "c")` and
//!   `("a", "bc")` differ); the algorithm byte keeps each algorithm's state apart, so changing a
//!   rule's algorithm starts fresh instead of misreading another algorithm's value.
//!   [`Store::reset`](crate::Store::reset) deletes the six names of `(rule, key)`.
//! - **Why so short**: Redis 7 charges every key a 24-byte dict entry, a 16-byte object header
//!   and its name in a jemalloc size class (`1 + len + 1` bytes). A name of 7 to 14 bytes fits the
//!   16-byte class, so with the default 3-byte prefix a key whose value is one integer costs
//!   `MEMORY USAGE` 56 bytes (the old readable names, about 43 bytes, cost 136 to 152).
//! - **Collisions**: two `(rule, key, algorithm)` triples share state only if their 66-bit
//!   digests are equal. By chance (birthday bound) that is about `n^2 / 2^67` for `n` live keys:
//!   1e-6 at 10 million keys, 0.007 at a billion. On purpose, a client who controls its own key
//!   and wants to land on a *given* victim's name must find a second preimage of a truncated
//!   SHA-256: about `2^66` hash evaluations (years of a large GPU farm), for one victim key
//!   whose TTL is seconds to hours. Shorter names would save nothing before 6 bytes (the 8-byte
//!   class, 48 B per key), which leaves 48 bits: a targeted collision in hours on one GPU and
//!   chance collisions at tens of millions of keys; we do not go there.
//! - **Redis Cluster**: the names hold no braces (base64url has none, and the prefix may not
//!   contain any), so a key's slot is CRC16 of its whole name, uniformly spread and out of the
//!   user's reach: no `{...}` in a rule or key can choose the slot or split a decision's key.
//!   The keys of one batch may land in several slots; the store groups them by slot (see the
//!   cross-slot protocol in the [module docs](super)).
//! - **Operators**: names are not readable. [`state_key`] (and
//!   [`RedisStore::key_name`](super::RedisStore::key_name)) gives the name of `(rule, key)` for
//!   an algorithm, and the store logs `redis_key` at debug level on `reset`. Under
//!   `floodgate serve` the rule string is the rule's state id `<name>|<algorithm>|<quota>`.
//!
//! The prefix is configurable (default `fg:`) so that several deployments can share a Redis;
//! every byte of it beyond 3 moves the name out of the 16-byte class sooner.

use floodgate_core::AlgorithmKind;
use sha2::{Digest, Sha256};

/// Characters of hash in a key name (6 bits each: 66 bits).
pub const HASH_CHARS: usize = 11;

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The byte that stands for `kind` in the hashed input (the scripts' algorithm number).
fn algorithm_byte(kind: AlgorithmKind) -> u8 {
    super::scripts::algorithm_code(kind)
}

/// The [`HASH_CHARS`] base64url characters naming `(rule, key, kind)`: the first 66 bits of
/// SHA-256 over `len(rule) as u64 (LE) || rule || algorithm byte || key`.
pub fn digest(rule: &str, key: &str, kind: AlgorithmKind) -> String {
    let mut h = Sha256::new();
    // The length prefix makes (rule, key) -> bytes injective: ("ab", "c") != ("a", "bc").
    h.update((rule.len() as u64).to_le_bytes());
    h.update(rule.as_bytes());
    h.update([algorithm_byte(kind)]);
    h.update(key.as_bytes());
    let out = h.finalize();
    // 9 bytes = 72 bits -> 12 characters; keep the first 11 (66 bits).
    let mut name = String::with_capacity(12);
    for chunk in out[..9].chunks(3) {
        let n = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
        for shift in [18, 12, 6, 0] {
            name.push(char::from(BASE64URL[(n >> shift & 63) as usize]));
        }
    }
    name.truncate(HASH_CHARS);
    name
}

/// The Redis key holding `(rule, key)`'s state under algorithm `kind`: `prefix` followed by
/// [`digest`].
pub fn state_key(prefix: &str, rule: &str, key: &str, kind: AlgorithmKind) -> String {
    let mut name = String::with_capacity(prefix.len() + HASH_CHARS);
    name.push_str(prefix);
    name.push_str(&digest(rule, key, kind));
    name
}

/// The Redis Cluster slot of a key name: CRC16-XMODEM of its hash tag (or of the whole name
/// when it has none, as ours) modulo 16,384, as the cluster specification defines it.
pub fn slot(name: &[u8]) -> u16 {
    let hashed = match name.iter().position(|&b| b == b'{') {
        Some(open) => match name[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &name[open + 1..open + 1 + len],
            _ => name,
        },
        None => name,
    };
    crc16_xmodem(hashed) % 16_384
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_cluster_specification() {
        // Examples from the Redis Cluster specification and redis-cli CLUSTER KEYSLOT.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12_182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}")); // empty tag: whole name hashed
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn names_are_short_hashed_and_brace_free() {
        // Checked with Python's hashlib: SHA-256 of 01 00 00 00 00 00 00 00 'r' 06 'k' begins
        // d3 da 09 ec 97 a6 d1 f3 69, whose base64url is "09oJ7Jem0fNp"; 11 characters kept.
        assert_eq!(
            state_key("fg:", "r", "k", AlgorithmKind::Gcra),
            "fg:09oJ7Jem0fN"
        );
        let hostile = state_key("fg:", "r{x}", "{victim}", AlgorithmKind::Gcra);
        assert!(!hostile[3..].contains(['{', '}']));
        assert!(hostile[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        // The slot is the whole name's: no user byte reaches it.
        assert_eq!(
            slot(hostile.as_bytes()),
            crc16_xmodem(hostile.as_bytes()) % 16_384
        );
        // Injective input: a shifted boundary or another algorithm is another name.
        assert_ne!(
            digest("ab", "c", AlgorithmKind::Gcra),
            digest("a", "bc", AlgorithmKind::Gcra)
        );
        let all: std::collections::HashSet<String> = AlgorithmKind::ALL
            .iter()
            .map(|&k| digest("r", "k", k))
            .collect();
        assert_eq!(all.len(), 6);
    }
}
