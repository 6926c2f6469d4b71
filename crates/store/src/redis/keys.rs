//! Redis key names and cluster slots.
//!
//! One Redis key per `(rule, policy, partition key)`, the same identity as the memory store's,
//! named by a hash only:
//!
//! ```text
//! <prefix><11 base64url characters>        fg:TVAw8orauko
//! ```
//!
//! - The 11 characters are the first 66 bits of SHA-256 over
//!
//!   ```text
//!   len(rule) as u64 LE || rule || algorithm byte || limit as u64 LE
//!       || period (us) as u64 LE || burst as u64 LE || key
//!   ```
//!
//!   in the URL-safe base64 alphabet (`A-Z a-z 0-9 - _`, no padding). The algorithm byte is
//!   the scripts' algorithm number ([`algorithm_code`](super::scripts::algorithm_code), 1 to
//!   6). Every field before `key` has a fixed width or a length prefix, so the input is
//!   injective: `("ab", "c")` and `("a", "bc")` differ, and so do two policies.
//! - **Why the policy is in the name.** A state is read with the parameters of the policy it
//!   is read under (GCRA's arrival time is one integer in ticks of the quota's denominator, a
//!   fixed window's count is packed with `limit + 1`, ...). A rule whose quota changes under the
//!   same name (say `7/s` to `10/s`) would otherwise read its old value with the new
//!   denominator: an arrival time 7 times too far ahead, the key denied until its TTL ends (or
//!   forgiven, the other way round). With the algorithm, limit, period and burst in the hashed
//!   input, a rule given a new algorithm or quota starts from fresh keys, and the old keys
//!   expire on their TTLs, exactly as in [`MemoryStore`](crate::MemoryStore), which keeps
//!   one table per `(rule, algorithm, quota)`. The numbers are hashed rather than the quota's
//!   text (`10/10s burst 5`): two quotas are the same exactly when these three numbers are
//!   equal (`Quota`'s equality, which the memory store uses), whatever their spelling.
//! - **Why so short**: Redis 7 charges every key a 24-byte dict entry, a 16-byte object header
//!   and its name in a jemalloc size class (`1 + len + 1` bytes). A name of 7 to 14 bytes fits
//!   the 16-byte class, so with the default 3-byte prefix a key whose value is one integer
//!   costs `MEMORY USAGE` 56 bytes (the old readable names, about 43 bytes, cost 136 to 152).
//! - **Collisions**: two `(rule, policy, key)` triples share state only if their 66-bit digests
//!   are equal. By chance (birthday bound) that is about `n^2 / 2^67` for `n` live keys: 1e-6
//!   at 10 million keys, 0.007 at a billion (old keys of a changed policy count among the `n`
//!   until they expire). On purpose, a client who controls its own key and wants to land on a
//!   *given* victim's name must find a second preimage of a truncated SHA-256: about `2^66`
//!   hash evaluations (years of a large GPU farm), for one victim key whose TTL is seconds to
//!   hours. Shorter names would save nothing before 6 bytes (the 8-byte class, 48 B per key),
//!   which leaves 48 bits: a targeted collision in hours on one GPU and chance collisions at
//!   tens of millions of keys; we do not go there.
//! - **Redis Cluster**: the names hold no braces (base64url has none, and the prefix may not
//!   contain any), so a key's slot is CRC16 of its whole name, uniformly spread and out of the
//!   user's reach: no `{...}` in a rule or key can choose the slot or split a decision's key.
//!   The keys of one batch may land in several slots; the store groups them by slot (see the
//!   cross-slot protocol in the [module docs](super)).
//! - **Operators**: names are not readable. [`state_key`] (and
//!   [`RedisStore::key_name`](super::RedisStore::key_name)) gives the name of
//!   `(rule, policy, key)`, and the store logs `redis_key` at debug level on `reset`. Under
//!   `floodgate serve` the rule string is the rule's name (the policy is hashed in beside it,
//!   so a changed quota is a new name).
//!
//! The prefix is configurable (default `fg:`) so that several deployments can share a Redis;
//! every byte of it beyond 3 moves the name out of the 16-byte class sooner.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use floodgate_core::Policy;
use redis::cluster_routing::Slot;
use sha2::{Digest, Sha256};

/// Characters of hash in a key name (6 bits each: 66 bits).
pub const HASH_CHARS: usize = 11;

/// SHA-256 of the identity of `(rule, policy, key)` (the input of the [module docs](self)).
fn identity_hash(rule: &str, policy: &Policy, key: &str) -> [u8; 32] {
    let quota = policy.quota();
    let mut h = Sha256::new();
    // The length prefix makes (rule, rest) -> bytes injective: ("ab", "c") != ("a", "bc");
    // every field after the rule has a fixed width, so the key needs no prefix.
    h.update((rule.len() as u64).to_le_bytes());
    h.update(rule.as_bytes());
    h.update([super::scripts::algorithm_code(policy.kind())]);
    h.update(quota.limit().to_le_bytes());
    h.update(quota.period().to_le_bytes());
    h.update(quota.burst().to_le_bytes());
    h.update(key.as_bytes());
    h.finalize().into()
}

/// The [`HASH_CHARS`] base64url characters naming `(rule, policy, key)`: the first 66 bits of
/// SHA-256 over `len(rule) as u64 (LE) || rule || algorithm byte || limit, period, burst as
/// u64 (LE) || key` (see the [module docs](self)).
pub fn digest(rule: &str, policy: &Policy, key: &str) -> String {
    let mut name = String::with_capacity(12);
    push_digest(&mut name, rule, policy, key);
    name
}

/// The Redis key holding the state of `key` under rule `rule` and policy `policy`: `prefix`
/// followed by [`digest`], `prefix.len() + 11` bytes.
pub fn state_key(prefix: &str, rule: &str, policy: &Policy, key: &str) -> String {
    let mut name = String::with_capacity(prefix.len() + 12);
    name.push_str(prefix);
    push_digest(&mut name, rule, policy, key);
    name
}

/// Appends the [`HASH_CHARS`] characters of [`digest`] to `name`.
fn push_digest(name: &mut String, rule: &str, policy: &Policy, key: &str) {
    let hash = identity_hash(rule, policy, key);
    let end = name.len() + HASH_CHARS;
    // 9 bytes = 72 bits -> 12 characters; the first 11 carry the first 66 bits.
    URL_SAFE_NO_PAD.encode_string(&hash[..9], name);
    name.truncate(end);
}

/// Characters of hash in a claim's key name (6 bits each: 132 bits).
pub const CLAIM_HASH_CHARS: usize = 22;

/// The Redis key of a claim of `id` ([`Store::claim`](crate::Store::claim)):
/// `<prefix>claim:` followed by the first 132 bits of SHA-256 over `id` in base64url
/// ([`CLAIM_HASH_CHARS`] characters), e.g. `fg:claim:q8Xb7Yk1m0o2r3s4t5u6vw`. Hashed like the
/// state keys, so no `id` can put braces (a hash tag) in the name or make it long; the `:`
/// keeps it apart from every state key (whose 11 characters after the prefix hold none). Its
/// slot, on a cluster, is CRC16 of the whole name.
pub fn claim_key(prefix: &str, id: &str) -> String {
    let hash: [u8; 32] = Sha256::digest(id.as_bytes()).into();
    let mut name = String::with_capacity(prefix.len() + 6 + CLAIM_HASH_CHARS + 2);
    name.push_str(prefix);
    name.push_str("claim:");
    let end = name.len() + CLAIM_HASH_CHARS;
    // 17 bytes = 136 bits -> 23 characters; the first 22 carry the first 132 bits.
    URL_SAFE_NO_PAD.encode_string(&hash[..17], &mut name);
    name.truncate(end);
    name
}

/// The Redis key holding the reservation secret shared by every process on one store:
/// `<prefix>secret:reservation` (no state or claim name holds `secret:`).
pub fn secret_key(prefix: &str) -> String {
    format!("{prefix}secret:reservation")
}

/// The Redis Cluster slot of a key name: CRC16-XMODEM of its hash tag (or of the whole name
/// when it has none, as ours) modulo 16,384, as the cluster specification defines it; computed
/// by the `redis` client, which routes commands by the same function.
pub fn slot(name: &[u8]) -> Slot {
    Slot::for_key(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::AlgorithmKind;

    fn policy(kind: AlgorithmKind, quota: &str) -> Policy {
        Policy::new(kind, quota.parse().unwrap()).unwrap()
    }

    fn at(slot: u16) -> Slot {
        Slot::new(slot).unwrap()
    }

    #[test]
    fn slots_match_the_cluster_specification() {
        // Examples from the Redis Cluster specification and redis-cli CLUSTER KEYSLOT
        // (CRC16-XMODEM of "123456789" is 0x31c3).
        assert_eq!(slot(b"123456789"), at(0x31c3));
        assert_eq!(slot(b"foo"), at(12_182));
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar")); // empty tag: whole name hashed
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn names_are_short_hashed_and_brace_free() {
        let gcra = policy(AlgorithmKind::Gcra, "2/s");
        // Checked with Python's hashlib and base64: SHA-256 of
        // 01 00.. 'r' 06 | 02 00.. | 40 42 0f 00.. | 02 00.. | 'k' (u64 LE: limit 2, period
        // 1,000,000 us, burst 2) begins 4d 50 30 f2 8a da ba 4a 2e, whose base64url is
        // "TVAw8oraukou"; 11 characters kept.
        assert_eq!(state_key("fg:", "r", &gcra, "k"), "fg:TVAw8orauko");
        assert_eq!(digest("r", &gcra, "k"), "TVAw8orauko");
        // Token bucket 10/10s (the docs' example): Python gives "dvhMTTFzSBj".
        assert_eq!(
            state_key(
                "fg:",
                "per-client-ip",
                &policy(AlgorithmKind::TokenBucket, "10/10s"),
                "key=alice"
            ),
            "fg:dvhMTTFzSBj"
        );
        // A rule string holding `|` and the quota is hashed as any other string.
        assert_eq!(
            state_key(
                "fg:",
                "per-client-ip|token_bucket|10/10s",
                &policy(AlgorithmKind::TokenBucket, "10/10s"),
                "key=alice"
            ),
            "fg:TcL7-dMApvB"
        );
        let hostile = state_key("fg:", "r{x}", &gcra, "{victim}");
        assert_eq!(hostile.len(), 3 + HASH_CHARS);
        assert!(hostile[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        // The slot is the whole name's: no user byte reaches it (the name as its own hash tag
        // lands in the same slot).
        assert_eq!(
            slot(hostile.as_bytes()),
            slot(format!("{{{hostile}}}").as_bytes())
        );
        // Injective input: a shifted boundary is another name.
        assert_ne!(digest("ab", &gcra, "c"), digest("a", &gcra, "bc"));
    }

    #[test]
    fn every_part_of_the_policy_is_part_of_the_name() {
        let names: std::collections::HashSet<String> = [
            "7/s",
            "10/s",
            "7/s burst 3",
            "7/2s",
            "14/2s", // the same rate as 7/s, another period (and burst): another policy
            "1/min",
            "60/min",
        ]
        .iter()
        .flat_map(|q| AlgorithmKind::ALL.iter().map(move |&k| (k, *q)))
        .map(|(k, q)| digest("r", &policy(k, q), "k"))
        .collect();
        assert_eq!(names.len(), 7 * 6);
        // One policy is one name however its quota is spelled.
        assert_eq!(
            digest("r", &policy(AlgorithmKind::Gcra, "60/min"), "k"),
            digest("r", &policy(AlgorithmKind::Gcra, "60/60s burst 60"), "k")
        );
    }
}
