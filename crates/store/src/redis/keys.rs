//! Redis key names and cluster slots.
//!
//! One Redis key per `(rule, partition key, algorithm)`:
//!
//! ```text
//! <prefix>{<digest>}<algo>:<rule>:<key>
//! fg:{4f1c0a9e3b27d6e8}gc:per-user:user=alice
//! ```
//!
//! - `<digest>`: the first 8 bytes of SHA-256 over `len(rule) as u64 (LE) || rule || key`, as
//!   16 lowercase hex digits. It is the key's **hash tag**: Redis Cluster hashes only the text
//!   between the first `{` and the next `}`, and ours always comes first and never contains a
//!   brace, so whatever `{`, `}`, `{}` or `}{` the user-supplied rule or key contains can neither
//!   choose the slot nor split one decision's key across slots. Attacker-chosen keys spread
//!   evenly over the 16,384 slots (the digest is uniform).
//! - `<algo>`: `fw`, `sl`, `sw`, `tb`, `lb` or `gc`, so that changing a rule's algorithm
//!   starts from fresh state instead of misreading another algorithm's fields (the sliding log
//!   is a string, the others hashes). [`Store::reset`](crate::Store::reset) deletes all six.
//! - `<rule>:<key>`: the names in clear, for operators (`SCAN MATCH fg:*`). The digest already
//!   makes the name unique per `(rule, key)`; the readable part is not parsed back.
//!
//! The prefix is configurable (default `fg:`) so that several deployments can share a Redis.

use floodgate_core::AlgorithmKind;
use sha2::{Digest, Sha256};

/// The short algorithm code used in key names.
pub fn algorithm_tag(kind: AlgorithmKind) -> &'static str {
    match kind {
        AlgorithmKind::FixedWindow => "fw",
        AlgorithmKind::SlidingLog => "sl",
        AlgorithmKind::SlidingWindow => "sw",
        AlgorithmKind::TokenBucket => "tb",
        AlgorithmKind::LeakyBucket => "lb",
        AlgorithmKind::Gcra => "gc",
    }
}

/// The 16-hex-digit digest of `(rule, key)` used as the hash tag.
pub fn digest(rule: &str, key: &str) -> String {
    let mut h = Sha256::new();
    // The length prefix makes (rule, key) -> bytes injective: ("ab", "c") != ("a", "bc").
    h.update((rule.len() as u64).to_le_bytes());
    h.update(rule.as_bytes());
    h.update(key.as_bytes());
    let out = h.finalize();
    let mut hex = String::with_capacity(16);
    for b in &out[..8] {
        hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    hex
}

/// The Redis key holding `(rule, key)`'s state under algorithm `kind`.
pub fn state_key(prefix: &str, rule: &str, key: &str, kind: AlgorithmKind) -> String {
    state_key_with_digest(prefix, &digest(rule, key), rule, key, kind)
}

/// [`state_key`] with the digest already computed.
pub fn state_key_with_digest(
    prefix: &str,
    digest: &str,
    rule: &str,
    key: &str,
    kind: AlgorithmKind,
) -> String {
    let tag = algorithm_tag(kind);
    let mut name =
        String::with_capacity(prefix.len() + digest.len() + tag.len() + rule.len() + key.len() + 4);
    name.push_str(prefix);
    name.push('{');
    name.push_str(digest);
    name.push('}');
    name.push_str(tag);
    name.push(':');
    name.push_str(rule);
    name.push(':');
    name.push_str(key);
    name
}

/// The Redis Cluster slot of a key name: CRC16-XMODEM of its hash tag (or of the whole name
/// when it has none) modulo 16,384, as the cluster specification defines it.
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
    fn hostile_braces_never_steer_the_slot() {
        let d = digest("r", "{victim}");
        let name = state_key("fg:", "r", "{victim}", AlgorithmKind::Gcra);
        assert!(name.starts_with(&format!("fg:{{{d}}}gc:r:")));
        assert_eq!(slot(name.as_bytes()), slot(d.as_bytes()));
        for kind in AlgorithmKind::ALL {
            let other = state_key("fg:", "r", "{victim}", kind);
            assert_eq!(slot(other.as_bytes()), slot(name.as_bytes()));
        }
        assert_ne!(digest("ab", "c"), digest("a", "bc"));
    }
}
