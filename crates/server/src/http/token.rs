//! Reservation tokens: what `POST /v1/check` with `"reserve": true` hands out and `POST
//! /v1/settle` takes back (see [`super::settle`]).
//!
//! # The token
//! `v2.<key id>.<payload>.<mac>`: `key id` is 8 base64url characters naming the secret
//! (a truncated SHA-256 of it, which reveals nothing of it); `payload` is base64url (no
//! padding) of a JSON object holding a random 128-bit `id`, the expiry `exp` (microseconds
//! since the Unix epoch, on the server's clock) and per reserved item the rule name, the
//! policy as reserved (`algorithm`, `limit`, `period_us`, `burst`), the client's `key`, the
//! reserved `cost` and the scheduled time `at`; `mac` is base64url of HMAC-SHA256 over
//! `v2.<key id>.<payload>`. The payload is readable by the client (nothing in it is secret:
//! it is what the client asked for) but not changeable: any edit breaks the MAC, which is
//! checked (in constant time) before the payload is read. (`v1.<payload>.<mac>` tokens,
//! made before key ids, are still opened.)
//!
//! - **Signed with another secret** (another key id: another instance's, or one from before
//!   a rotation): 400 naming `reservation` and both key ids.
//! - **Forged or edited** (our key id, wrong MAC): 400 naming `reservation`, counted in
//!   `floodgate_requests_rejected_total{reason="reservation_invalid"}`, as is a malformed
//!   token and one of another secret.
//! - **Replayed**: the limiter claims the token's id in the store ([`floodgate_store::Store::claim`],
//!   shared by every process on one Redis) before settling; a second settle is 409
//!   (counted `floodgate_settles_total{outcome="replayed"}`).
//! - **Expired** (`[server] reservation_ttl` after the check, default 5 minutes): 410,
//!   counted in `floodgate_requests_rejected_total{reason="reservation_expired"}`. A
//!   reservation never settled is simply spent.
//! - **The rule changed** by a reload in between: the token's policy is what was reserved, and
//!   the settle goes to that state (`"current": false` in the answer); the rule's keys under
//!   its new policy are untouched. A rule removed since is settled the same way.
//!
//! # The secret
//! `[server] reservation_secret` when set. Without it, on a Redis store every process uses
//! one secret shared through the store (`<prefix>secret:reservation`, created once with
//! `SET NX` and read by every process at start), so a token made by one instance settles on
//! any other; on the memory store each process signs with a random secret made at start
//! (logged at info level): its tokens settle only on that process and not after a restart.
//! Whatever the secret, on the memory store (whose claims live in the process) a token
//! carries the making process's random instance id (`inst`) and settles only there
//! ([`TokenError::OtherInstance`], 409).

use std::sync::Arc;

use axum::response::Response;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use floodgate_core::{AlgorithmKind, Micros, Policy, Quota, Timestamp};
use floodgate_tower::{Claim, Reservation, ReservedItem};
use hmac::{Hmac, Mac};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::body::client_key;
use super::problem::problem;

/// The token's version prefix.
const VERSION: &str = "v2";

/// How much longer than the token's remaining life its claim is kept, in microseconds: room
/// for processes whose clocks differ a little (a token one process still accepts must still
/// be claimed).
const CLAIM_MARGIN: Micros = 60_000_000;

/// The token's version prefix before key ids: `v1.<payload>.<mac>` (still opened, with this
/// process's key, for tokens signed before an upgrade).
const VERSION_1: &str = "v1";

/// Signs and opens reservation tokens with an HMAC-SHA256 key: `[server] reservation_secret`,
/// a secret shared through a Redis store, or a random per-process one.
#[derive(Clone)]
pub(crate) struct Signer {
    /// Set at creation, or when the secret shared through the store has been read; that one
    /// changes when the store's does (see [`Signer::share`]).
    key: Arc<arc_swap::ArcSwapOption<Keys>>,
    ttl: Micros,
    source: SecretSource,
    /// With a store whose claims live in this process (the memory store): a random id of this
    /// process, signed into every token and required of every token it settles, so that a
    /// token made by another process or a previous run (which may share the secret) settles
    /// nothing here: its claim is not in this process's table, and settling it would give back
    /// units this process never reserved.
    instance: Option<Arc<str>>,
}

/// Where the signing secret comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretSource {
    /// `[server] reservation_secret` (or the flag, or the environment).
    Configured,
    /// Random, made at start: tokens settle only on this process.
    Process,
    /// Shared by every process on one Redis store (`<prefix>secret:reservation`).
    Store,
}

/// The keys a signer opens tokens with.
struct Keys {
    /// Signs, and opens its tokens.
    current: Key,
    /// The secret of `current` when it is shared through the store (written back when the
    /// store lost it).
    shared: Option<String>,
    /// The key before the store's secret changed, and until when its tokens may still be
    /// opened (one token lifetime after the change: none of its tokens lives longer).
    previous: Option<(Key, Timestamp)>,
}

impl Keys {
    fn new(current: Key) -> Self {
        Self {
            current,
            shared: None,
            previous: None,
        }
    }

    /// The key named `id` at `now`: the current one, or the previous one within its time.
    fn named(&self, id: &str, now: Timestamp) -> Option<&Key> {
        if id == self.current.id {
            return Some(&self.current);
        }
        self.previous
            .as_ref()
            .filter(|(key, until)| key.id == id && now < *until)
            .map(|(key, _)| key)
    }
}

/// An HMAC key and its key id.
#[derive(Clone)]
struct Key {
    mac: Hmac<Sha256>,
    /// 8 base64url characters of SHA-256 over a label and the secret (48 bits): names the
    /// secret in tokens and errors without revealing it.
    id: String,
}

impl Key {
    fn new(secret: &[u8]) -> Self {
        use sha2::Digest as _;
        let mut h = Sha256::new();
        h.update(b"floodgate reservation key id\0");
        h.update(secret);
        let digest: [u8; 32] = h.finalize().into();
        let mut id = URL_SAFE_NO_PAD.encode(&digest[..6]);
        id.truncate(8);
        // HMAC takes a key of any length: this cannot fail.
        let mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
        Self { mac, id }
    }
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("ttl", &self.ttl)
            .field("source", &self.source)
            .field("key_id", &self.key_id())
            .finish_non_exhaustive()
    }
}

/// The token's payload (JSON), in a stable field order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    /// Random id (base64url of 16 bytes): what the claim is made on.
    id: String,
    /// Expiry, microseconds since the Unix epoch (server clock).
    exp: Timestamp,
    /// The process that made the token, when its claims live in that process (see
    /// `Signer::instance`); absent with a shared store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inst: Option<String>,
    items: Vec<PayloadItem>,
}

/// One reserved item of a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PayloadItem {
    /// Rule name.
    pub(crate) rule: String,
    /// The policy as reserved: algorithm (snake_case), limit, period (us), burst.
    pub(crate) algorithm: String,
    /// See `algorithm`.
    pub(crate) limit: u64,
    /// See `algorithm`.
    pub(crate) period_us: u64,
    /// See `algorithm`.
    pub(crate) burst: u64,
    /// The client's key (as sent to `/v1/check`; the store key is `key=<it>`).
    pub(crate) key: String,
    /// Units reserved.
    pub(crate) cost: u64,
    /// The scheduled time, microseconds since the Unix epoch.
    pub(crate) at: Timestamp,
}

impl PayloadItem {
    /// The item for `cost` units reserved on the client's `key` of rule `rule` under `policy`
    /// for `at`.
    pub(crate) fn new(rule: &str, policy: &Policy, key: &str, cost: u64, at: Timestamp) -> Self {
        let q = policy.quota();
        Self {
            rule: rule.to_string(),
            algorithm: policy.kind().as_str().to_string(),
            limit: q.limit(),
            period_us: q.period(),
            burst: q.burst(),
            key: key.to_string(),
            cost,
            at,
        }
    }
}

/// A token that was opened: the reservation (with its claim) and the raw keys, in order.
#[derive(Debug)]
pub(crate) struct Opened {
    /// What [`floodgate_tower::RateLimiter::settle`] takes.
    pub(crate) reservation: Reservation,
    /// The client's keys of the items, in order (for the answer).
    pub(crate) keys: Vec<String>,
    /// Microseconds until the token expires.
    pub(crate) expires_in: Micros,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// Not a token of this format (or unreadable after a valid MAC).
    Malformed(String),
    /// The key id is ours but the MAC does not match: forged or edited.
    Forged,
    /// Signed with another secret (another key id): another instance's, or one before a
    /// rotation.
    OtherSecret {
        /// The token's key id.
        theirs: String,
        /// This process's key id.
        ours: String,
    },
    /// The secret shared through the store has not been read yet (the store did not answer).
    NotReady,
    /// Made by another process or a previous run of this one, whose claims this process does
    /// not hold (the memory store): settling it could give back what this process never
    /// reserved.
    OtherInstance,
    /// Past its expiry.
    Expired {
        /// How long ago, in microseconds.
        ago: Micros,
    },
}

impl Signer {
    /// A signer with `secret` (already validated), or a random per-process one when `None`;
    /// tokens live `ttl` microseconds.
    pub(crate) fn new(secret: Option<&str>, ttl: Micros) -> Self {
        let (key, source) = match secret {
            Some(secret) => (Key::new(secret.as_bytes()), SecretSource::Configured),
            None => (Key::new(&random_secret()), SecretSource::Process),
        };
        Self {
            key: Arc::new(arc_swap::ArcSwapOption::from_pointee(Keys::new(key))),
            ttl,
            source,
            instance: None,
        }
    }

    /// A signer whose secret is shared through the store, set later by [`Signer::share`]:
    /// until then it signs and opens nothing ([`TokenError::NotReady`]).
    pub(crate) fn shared(ttl: Micros) -> Self {
        Self {
            key: Arc::new(arc_swap::ArcSwapOption::empty()),
            ttl,
            source: SecretSource::Store,
            instance: None,
        }
    }

    /// This signer bound to this process: its tokens carry a random id of the process, and
    /// only tokens carrying it are opened ([`TokenError::OtherInstance`] otherwise). For a
    /// store whose claims live in the process (the memory store), whatever the secret.
    pub(crate) fn bound_to_this_process(mut self) -> Self {
        let mut id = [0u8; 12];
        fill_random(&mut id);
        self.instance = Some(Arc::from(URL_SAFE_NO_PAD.encode(id)));
        self
    }

    /// Signs with the secret read from the store at `now`: its key id, and the key id it
    /// replaced when the store's secret changed (the store lost it and another instance made
    /// a new one). Tokens of the replaced secret are still opened for one token lifetime.
    pub(crate) fn share(&self, secret: &str, now: Timestamp) -> (String, Option<String>) {
        let key = Key::new(secret.as_bytes());
        let id = key.id.clone();
        let old = self.key.load_full();
        if old.as_ref().is_some_and(|k| k.current.id == id) {
            return (id, None);
        }
        let replaced = old.as_ref().map(|k| k.current.id.clone());
        let previous = old.map(|k| (k.current.clone(), now.saturating_add(self.ttl)));
        self.key.store(Some(Arc::new(Keys {
            current: key,
            shared: Some(secret.to_string()),
            previous,
        })));
        (id, replaced)
    }

    /// The secret shared through the store that this signer signs with, to write back when
    /// the store lost it (`None` before one is read, and for other sources).
    pub(crate) fn shared_secret(&self) -> Option<String> {
        self.key.load().as_ref().and_then(|k| k.shared.clone())
    }

    /// A new random secret for the store, 43 base64url characters (256 bits).
    pub(crate) fn candidate() -> String {
        URL_SAFE_NO_PAD.encode(random_secret())
    }

    /// Where the secret comes from.
    pub(crate) fn source(&self) -> SecretSource {
        self.source
    }

    /// The key id of the secret (`None` until a shared one is read).
    pub(crate) fn key_id(&self) -> Option<String> {
        self.key.load().as_ref().map(|k| k.current.id.clone())
    }

    /// Whether tokens can be signed and opened now.
    pub(crate) fn is_ready(&self) -> bool {
        self.key.load().is_some()
    }

    /// How long a token lives, in microseconds (`[server] reservation_ttl`).
    pub(crate) fn ttl(&self) -> Micros {
        self.ttl
    }

    /// A token for `items` reserved at `now`: the token and its expiry; `None` until a
    /// secret shared through the store is read ([`Signer::is_ready`]).
    pub(crate) fn sign(
        &self,
        items: Vec<PayloadItem>,
        now: Timestamp,
    ) -> Option<(String, Timestamp)> {
        let keys = self.key.load_full()?;
        let key = &keys.current;
        let mut id = [0u8; 16];
        fill_random(&mut id);
        let exp = now.saturating_add(self.ttl);
        let payload = Payload {
            id: URL_SAFE_NO_PAD.encode(id),
            exp,
            inst: self.instance.as_deref().map(str::to_string),
            items,
        };
        // Serializing numbers and strings into a Vec cannot fail.
        let json = serde_json::to_vec(&payload).unwrap_or_default();
        let mut token = String::with_capacity(json.len() * 4 / 3 + 60);
        token.push_str(VERSION);
        token.push('.');
        token.push_str(&key.id);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(&json, &mut token);
        let mut mac = key.mac.clone();
        mac.update(token.as_bytes());
        let tag = mac.finalize().into_bytes();
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(tag, &mut token);
        Some((token, exp))
    }

    /// Opens `token` at `now`: checks its MAC first (constant time), then reads it, then its
    /// expiry; the reservation carries a claim on the token's id that outlives the token.
    ///
    /// # Errors
    /// [`TokenError`].
    pub(crate) fn open(&self, token: &str, now: Timestamp) -> Result<Opened, TokenError> {
        let malformed = |why: &str| TokenError::Malformed(why.to_string());
        let shape = "not a reservation token (expected v2.<key id>.<payload>.<mac>)";
        let keys = self.key.load_full().ok_or(TokenError::NotReady)?;
        let mut key = &keys.current;
        let (signed, tag) = token.rsplit_once('.').ok_or_else(|| malformed(shape))?;
        let (version, rest) = signed.split_once('.').ok_or_else(|| malformed(shape))?;
        // The MAC's shape first: HMAC-SHA256, 32 bytes, 43 base64url characters. Another is
        // not a token of this format (a 400, whatever its key id), where a MAC of the right
        // shape that does not match is a forgery (404) or another secret's (409).
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| malformed("the MAC is not base64url"))?;
        if tag.len() != 32 {
            return Err(malformed("the MAC is not 43 base64url characters"));
        }
        let payload = match version {
            VERSION => {
                let (id, payload) = rest.split_once('.').ok_or_else(|| malformed(shape))?;
                if let Some(named) = keys.named(id, now) {
                    key = named;
                } else {
                    let valid = id.len() == key.id.len()
                        && id
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                    if !valid {
                        return Err(malformed("the key id is not 8 base64url characters"));
                    }
                    return Err(TokenError::OtherSecret {
                        theirs: id.to_string(),
                        ours: key.id.clone(),
                    });
                }
                payload
            }
            VERSION_1 => rest,
            _ => {
                return Err(malformed(
                    "unknown token version (expected a token starting with v2.)",
                ))
            }
        };
        let mut mac = key.mac.clone();
        mac.update(signed.as_bytes());
        mac.verify_slice(&tag).map_err(|_| TokenError::Forged)?;
        let json = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| malformed("the payload is not base64url"))?;
        let payload: Payload = serde_json::from_slice(&json)
            .map_err(|e| TokenError::Malformed(format!("unreadable payload: {e}")))?;
        if now >= payload.exp {
            return Err(TokenError::Expired {
                ago: now - payload.exp,
            });
        }
        if let Some(ours) = &self.instance {
            if payload.inst.as_deref() != Some(&**ours) {
                return Err(TokenError::OtherInstance);
            }
        }
        let mut items = Vec::with_capacity(payload.items.len());
        let mut keys = Vec::with_capacity(payload.items.len());
        for item in payload.items {
            let kind: AlgorithmKind = item.algorithm.parse().map_err(TokenError::Malformed)?;
            let policy = Quota::with_burst(item.limit, item.period_us, item.burst)
                .and_then(|quota| Policy::new(kind, quota))
                .map_err(|e| TokenError::Malformed(format!("policy: {e}")))?;
            items.push(ReservedItem {
                rule: Arc::from(item.rule.as_str()),
                policy,
                key: client_key(&item.key),
                cost: item.cost,
                scheduled_at: item.at,
            });
            keys.push(item.key);
        }
        if items.is_empty() {
            return Err(malformed("the token reserves nothing"));
        }
        let claim = Claim {
            id: payload.id,
            ttl: (payload.exp - now).saturating_add(CLAIM_MARGIN),
        };
        Ok(Opened {
            reservation: Reservation::new(items).with_claim(claim),
            keys,
            expires_in: payload.exp - now,
        })
    }
}

/// 32 bytes from the operating system's generator.
fn random_secret() -> [u8; 32] {
    let mut key = [0u8; 32];
    fill_random(&mut key);
    key
}

/// Fills `buf` from the operating system's generator. Its failing is a broken machine; a
/// fixed key or id would let anyone forge or collide tokens, so fail loudly instead.
fn fill_random(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("the system random number generator failed: {e}");
    }
}

/// The 503 of a reservation or a settle while the secret shared through the store has not
/// been read (the store has not answered since the start).
pub(crate) fn secret_not_ready() -> Response {
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        floodgate_tower::response::PROBLEM_STORE_UNAVAILABLE,
        "store unavailable",
        "reservation: the secret that signs reservation tokens is shared through the store, \
         which has not answered since the start; nothing was reserved or settled (set \
         [server] reservation_secret to not depend on it)",
        Some(("field", "reservation".into())),
    );
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = 1_700_000_000_000_000;

    fn item() -> PayloadItem {
        let policy = Policy::new(AlgorithmKind::Gcra, "10/s".parse().unwrap()).unwrap();
        PayloadItem::new("per-second", &policy, "job-7", 5, T0 + 100_000)
    }

    fn sign(signer: &Signer, now: Timestamp) -> (String, Timestamp) {
        signer.sign(vec![item()], now).unwrap()
    }

    #[test]
    fn a_token_opens_to_what_was_signed() {
        let signer = Signer::new(Some(&"s".repeat(32)), 300_000_000);
        let (token, exp) = sign(&signer, T0);
        assert_eq!(exp, T0 + 300_000_000);
        let key_id = signer.key_id().unwrap();
        assert_eq!(key_id.len(), 8);
        assert!(token.starts_with(&format!("v2.{key_id}.")), "{token}");
        let opened = signer.open(&token, T0 + 1).unwrap();
        assert_eq!(opened.keys, vec!["job-7".to_string()]);
        let r = &opened.reservation.items()[0];
        assert_eq!(
            (&*r.rule, r.key.as_str(), r.cost),
            ("per-second", "key=job-7", 5)
        );
        assert_eq!(r.scheduled_at, T0 + 100_000);
        assert_eq!(r.policy.kind(), AlgorithmKind::Gcra);
        let claim = opened.reservation.claim().unwrap();
        assert_eq!(claim.id.len(), 22);
        assert_eq!(claim.ttl, 300_000_000 - 1 + CLAIM_MARGIN);
        assert_eq!(opened.expires_in, 300_000_000 - 1);
        // Two tokens never share an id.
        let (other, _) = sign(&signer, T0);
        let other = signer.open(&other, T0).unwrap();
        assert_ne!(other.reservation.claim().unwrap().id, claim.id);
        // The same secret gives the same key id in every process.
        assert_eq!(
            Signer::new(Some(&"s".repeat(32)), 1).key_id().unwrap(),
            key_id
        );
    }

    #[test]
    fn a_v1_token_made_before_key_ids_still_opens() {
        let signer = Signer::new(Some(&"s".repeat(32)), 300_000_000);
        let (token, _) = sign(&signer, T0);
        let mut parts = token.split('.');
        let (_, _, payload) = (parts.next(), parts.next(), parts.next().unwrap());
        let signed = format!("v1.{payload}");
        let keys = signer.key.load_full().unwrap();
        let mut mac = keys.current.mac.clone();
        mac.update(signed.as_bytes());
        let v1 = format!(
            "{signed}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(signer.open(&v1, T0).unwrap().keys, vec!["job-7"]);
        // Forged in v1 too.
        let stranger = Signer::new(Some(&"t".repeat(32)), 1_000_000);
        assert_eq!(stranger.open(&v1, T0).unwrap_err(), TokenError::Forged);
    }

    #[test]
    fn a_shared_signer_signs_nothing_until_its_secret_is_read() {
        let signer = Signer::shared(1_000_000);
        assert!(!signer.is_ready());
        assert_eq!(signer.source(), SecretSource::Store);
        assert!(signer.sign(vec![item()], T0).is_none());
        assert_eq!(
            signer.open("v2.x.y.z", T0).unwrap_err(),
            TokenError::NotReady
        );
        let secret = Signer::candidate();
        assert_eq!(secret.len(), 43);
        assert!(crate::config::check_reservation_secret(&secret).is_ok());
        let clone = signer.clone();
        let (id, replaced) = signer.share(&secret, T0);
        assert_eq!(replaced, None);
        // Clones share the key; the same secret again changes nothing.
        assert_eq!(clone.key_id().unwrap(), id);
        assert_eq!(signer.share(&secret, T0), (id.clone(), None));
        assert_eq!(signer.shared_secret().as_deref(), Some(secret.as_str()));
        let (token, _) = sign(&clone, T0);
        let other = Signer::shared(1_000_000);
        other.share(&secret, T0);
        assert!(other.open(&token, T0).is_ok());
    }

    #[test]
    fn a_changed_store_secret_signs_from_then_on_and_the_previous_opens_for_one_lifetime() {
        let signer = Signer::shared(1_000_000);
        let (first, second) = (Signer::candidate(), Signer::candidate());
        let (old_id, _) = signer.share(&first, T0);
        let (before, _) = sign(&signer, T0);
        // The store lost the secret and another instance made its own.
        let (new_id, replaced) = signer.share(&second, T0 + 10);
        assert_eq!(replaced, Some(old_id.clone()));
        assert_eq!(signer.key_id(), Some(new_id.clone()));
        assert_eq!(signer.shared_secret(), Some(second.clone()));
        let (after, _) = sign(&signer, T0 + 10);
        assert!(after.starts_with(&format!("v2.{new_id}.")));
        // Both open; the one of the previous secret until a token lifetime after the change
        // (its own expiry comes first anyway).
        assert!(signer.open(&before, T0 + 20).is_ok());
        assert!(signer.open(&after, T0 + 20).is_ok());
        assert!(matches!(
            signer.open(&before, T0 + 10 + 1_000_000),
            Err(TokenError::OtherSecret { .. })
        ));
        // A third secret forgets the first.
        let (_, replaced) = signer.share(&Signer::candidate(), T0 + 30);
        assert_eq!(replaced, Some(new_id));
        assert!(matches!(
            signer.open(&before, T0 + 40),
            Err(TokenError::OtherSecret { .. })
        ));
        assert!(signer.open(&after, T0 + 40).is_ok());
    }

    #[test]
    fn forged_edited_other_secret_and_expired_tokens_are_refused() {
        let signer = Signer::new(Some(&"s".repeat(32)), 1_000_000);
        let (token, _) = sign(&signer, T0);
        // Another secret: named by both key ids.
        let stranger = Signer::new(Some(&"t".repeat(32)), 1_000_000);
        assert_eq!(
            stranger.open(&token, T0).unwrap_err(),
            TokenError::OtherSecret {
                theirs: signer.key_id().unwrap(),
                ours: stranger.key_id().unwrap()
            }
        );
        // A random secret differs per signer.
        let (random_token, _) = sign(&Signer::new(None, 1_000_000), T0);
        assert!(matches!(
            Signer::new(None, 1_000_000).open(&random_token, T0),
            Err(TokenError::OtherSecret { .. })
        ));
        let parts: Vec<&str> = token.split('.').collect();
        let (key_id, payload, tag) = (parts[1], parts[2], parts[3]);
        // An edited payload (cost 5 -> 50), re-encoded: the MAC no longer matches.
        let json = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        let edited = json.replace("\"cost\":5", "\"cost\":50");
        assert_ne!(edited, json);
        let edited = format!("v2.{key_id}.{}.{tag}", URL_SAFE_NO_PAD.encode(edited));
        assert_eq!(signer.open(&edited, T0).unwrap_err(), TokenError::Forged);
        // The stranger's key id put on our token: forged, not "another secret".
        let relabelled = format!("v2.{}.{payload}.{tag}", stranger.key_id().unwrap());
        assert_eq!(
            stranger.open(&relabelled, T0).unwrap_err(),
            TokenError::Forged
        );
        // Malformed.
        for bad in [
            "",
            "v1",
            "v1.abc",
            "v2.abc.def",
            "v2.abc.def.ghi",
            "v3.abc.def.ghi",
            "v1.abc.!!!",
            "v1..",
            "v2...",
            "x.y.z",
        ] {
            assert!(
                matches!(
                    signer.open(bad, T0),
                    Err(TokenError::Malformed(_) | TokenError::Forged)
                ),
                "{bad:?}"
            );
        }
        // Expired at exactly its expiry.
        assert!(signer.open(&token, T0 + 999_999).is_ok());
        assert_eq!(
            signer.open(&token, T0 + 1_000_000).unwrap_err(),
            TokenError::Expired { ago: 0 }
        );
    }
}
