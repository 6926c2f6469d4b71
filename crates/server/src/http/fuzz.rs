//! Property tests of every parser that reads a client's bytes: the JSON bodies of
//! `/v1/check` and `/v1/peek`, `/v1/settle` and `/v1/simulate`, reservation tokens, the cost
//! header and the forwarded URI. Arbitrary bytes, mutations of valid inputs and deep nesting:
//! always an answer (a 4xx naming a field, or a value), never a panic.

use axum::body::Bytes;
use proptest::prelude::*;

use super::api::CheckRequest;
use super::body::{parse_json, read_json};
use super::settle::SettleRequest;
use super::token::{PayloadItem, Signer};

const T0: u64 = 1_700_000_000_000_000;

/// `valid` with up to 8 edits: a byte replaced, inserted or removed, a range repeated or the
/// end cut off.
fn mutated(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..5), 1..8).prop_map(
        move |edits| {
            let mut bytes = valid.clone();
            for (at, byte, kind) in edits {
                let i = at.index(bytes.len().max(1)).min(bytes.len());
                match kind {
                    0 if i < bytes.len() => bytes[i] = byte,
                    1 => bytes.insert(i, byte),
                    2 if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    3 => {
                        let end = (i + usize::from(byte % 16)).min(bytes.len());
                        let copy = bytes[i..end].to_vec();
                        bytes.splice(i..i, copy);
                    }
                    _ => bytes.truncate(i),
                }
            }
            bytes
        },
    )
}

/// JSON nested `depth` levels of arrays or objects, closed or not.
fn nested() -> impl Strategy<Value = Vec<u8>> {
    (1usize..5_000, any::<bool>(), any::<bool>()).prop_map(|(depth, arrays, closed)| {
        let (open, close) = if arrays {
            ("[", "]")
        } else {
            ("{\"rule\":", "}")
        };
        let mut text = format!("{{\"rule\": {}", open.repeat(depth));
        if closed {
            text.push_str(&close.repeat(depth));
            text.push('}');
        }
        text.into_bytes()
    })
}

fn body(valid: &str) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        mutated(valid.as_bytes().to_vec()),
        nested(),
    ]
}

const CHECK: &str = r#"{"descriptors": [{"rule": "per-second", "key": "alice", "cost": 3}, {"rule": "per-day", "key": "alice"}], "max_wait_ms": 250, "reserve": true}"#;

const SETTLE: &str = r#"{"reservation": "v2.abcdefgh.eyJpZCI6IngifQ.AAAA", "costs": [3, 120]}"#;

const SIMULATE: &str =
    r#"{"scenario": "calm-spike", "algorithm": "token_bucket", "limit": "10/10s"}"#;

fn token() -> String {
    let signer = Signer::new(Some(&"s".repeat(32)), 300_000_000);
    let policy =
        floodgate_core::Policy::new(floodgate_core::AlgorithmKind::Gcra, "10/s".parse().unwrap())
            .unwrap();
    let item = PayloadItem::new("per-second", &policy, "job-7", 5, T0);
    signer.sign(vec![item], T0).unwrap().0
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_check_or_peek_body_is_a_request_or_a_4xx(bytes in body(CHECK)) {
        // Both ways the handler reads it: the fast one, and the careful one.
        let _ = serde_json::from_slice::<CheckRequest<'_>>(&bytes);
        if let Err(response) = parse_json::<CheckRequest<'_>>(&bytes) {
            prop_assert!(response.status().is_client_error(), "{}", response.status());
        }
    }

    #[test]
    fn a_settle_body_is_a_request_or_a_4xx(bytes in body(SETTLE)) {
        if let Err(response) = read_json::<SettleRequest>(Ok(Bytes::from(bytes))) {
            prop_assert!(response.status().is_client_error(), "{}", response.status());
        }
    }

    #[test]
    fn a_token_of_random_bytes_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let signer = Signer::new(Some(&"s".repeat(32)), 300_000_000);
        prop_assert!(signer.open(&String::from_utf8_lossy(&bytes), T0).is_err());
    }

    #[test]
    fn a_mutated_token_is_refused(bytes in mutated(token_text().into_bytes())) {
        let signer = Signer::new(Some(&"s".repeat(32)), 300_000_000);
        let text = String::from_utf8_lossy(&bytes);
        let opened = signer.open(&text, T0 + 1);
        // Only the token as signed opens: any edit breaks its MAC or its shape.
        prop_assert_eq!(opened.is_ok(), text == token_text(), "{}", text);
    }

    #[test]
    fn a_cost_header_is_a_cost_or_none(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Some(cost) = floodgate_tower::parse_cost(&bytes) {
            prop_assert!(cost >= 1);
        }
    }

    #[test]
    fn a_forwarded_uri_is_a_uri_or_unreadable(bytes in body("/api/v1/items?q=1&r=%20")) {
        if let Ok(uri) = super::forwarded_uri::read(&bytes) {
            prop_assert!(uri.path().starts_with('/'));
        }
    }
}

/// The token [`token`] makes is new each time (a random id): the mutation test compares with
/// the one it mutated, made once.
fn token_text() -> String {
    use std::sync::OnceLock;
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(token).clone()
}

proptest! {
    // Each case may run a simulation: fewer of them.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_simulate_body_is_an_answer_never_a_panic(bytes in body(SIMULATE)) {
        // Ok (an answer, or None: too large to answer) or Err (a 400): never a panic.
        let _answer = crate::ui::simulate::answer_body(&bytes);
    }
}
