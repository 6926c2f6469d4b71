//! Path prefixes match however a path is spelled: dot segments, percent-encoding and repeated
//! slashes reach the same rules ([`Matcher`], [`canonical_path`]). Through the layer, with the
//! counters shared by every spelling: `floodgate-tower`'s `path_canonical` tests.

use floodgate_core::{AlgorithmKind, Policy};
use floodgate_limiter::{canonical_path, KeySource, Matcher, Rule};
use http::{HeaderMap, Method, Uri};
use proptest::prelude::*;

fn fixed(quota: &str) -> Policy {
    Policy::new(AlgorithmKind::FixedWindow, quota.parse().unwrap()).unwrap()
}

fn prefix_rule(name: &str, prefix: &str, key: KeySource) -> Rule {
    Rule::new(name, fixed("2/min"), key).with_matcher(Matcher {
        path_prefix: Some(prefix.into()),
        ..Matcher::default()
    })
}

/// Forward-auth hands the limiter the URI from `X-Forwarded-Uri`: `/api/../search/x` is a
/// search request, not an API one.
#[test]
fn forward_auth_uri_with_dot_segments_matches_the_resolved_rule() {
    let api = prefix_rule("api", "/api", KeySource::Constant("all".into()));
    let search = prefix_rule("search", "/search", KeySource::Constant("all".into()));
    let headers = HeaderMap::new();
    let uri: Uri = "/api/../search/x".parse().unwrap();
    assert!(!api.matcher.matches(&Method::GET, &uri, &headers));
    assert!(search.matcher.matches(&Method::GET, &uri, &headers));
}

#[test]
fn configured_prefixes_are_canonicalised_too() {
    let m = Matcher {
        path_prefix: Some("/v1/./%61pi/".into()),
        ..Matcher::default()
    };
    let h = HeaderMap::new();
    assert!(m.matches(&Method::GET, &"/v1/api/x".parse().unwrap(), &h));
    assert!(!m.matches(&Method::GET, &"/v1/apix".parse().unwrap(), &h));
}

/// A path spelled differently: dot segments and doubled slashes inserted between segments,
/// then some bytes other than `/` percent-encoded (after the insertion, so `%2E%2E` occurs too).
#[derive(Debug, Clone)]
struct Variant {
    /// Per gap between segments: what extra to insert (`0` nothing, `1` `./`, `2` `x/../`,
    /// `3` an extra `/`).
    inserts: Vec<u8>,
    /// Per byte of the spelled path: percent-encode it (upper- or lowercase hex)?
    encode: Vec<u8>,
}

fn spell(segments: &[String], v: &Variant) -> String {
    let mut raw = String::new();
    for (i, segment) in segments.iter().enumerate() {
        raw.push('/');
        match v.inserts.get(i).copied().unwrap_or(0) % 4 {
            1 => raw.push_str("./"),
            2 => raw.push_str("zz/../"),
            3 => raw.push('/'),
            _ => {}
        }
        raw.push_str(segment);
    }
    if segments.is_empty() {
        raw.push('/');
    }
    let mut out = String::new();
    for (i, b) in raw.bytes().enumerate() {
        // Never encode a '/': `%2F` is part of a segment, not a separator.
        match v.encode.get(i).copied().unwrap_or(0) % 4 {
            1 if b != b'/' => out.push_str(&format!("%{b:02X}")),
            2 if b != b'/' => out.push_str(&format!("%{b:02x}")),
            _ => out.push(b as char),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_path_and_its_variants_match_the_same_rules(
        segments in proptest::collection::vec("[a-c0-9_.~-]{1,4}", 0..5),
        prefixes in proptest::collection::vec(
            proptest::collection::vec("[a-c]{1,2}", 0..3), 1..5),
        trailing in any::<bool>(),
        inserts in proptest::collection::vec(any::<u8>(), 0..6),
        encode in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        // Base segments are never `.` or `..` themselves (those are what variants add).
        let segments: Vec<String> = segments
            .into_iter()
            .map(|s| if s == "." || s == ".." { format!("{s}q") } else { s })
            .collect();
        let mut base = format!("/{}", segments.join("/"));
        if trailing && !segments.is_empty() {
            base.push('/');
        }
        let mut variant = spell(&segments, &Variant { inserts, encode });
        if trailing && !segments.is_empty() {
            variant.push('/');
        }
        prop_assert_eq!(&*canonical_path(&base), base.as_bytes());
        prop_assert_eq!(&*canonical_path(&variant), base.as_bytes(), "{}", variant);

        let base_uri: Uri = base.parse().unwrap();
        let variant_uri: Uri = variant.parse().unwrap();
        let headers = HeaderMap::new();
        // Random prefixes, and every leading run of the path's own segments (which match).
        let own = (0..=segments.len()).map(|k| segments[..k].to_vec());
        for prefix in prefixes.into_iter().chain(own) {
            let prefix = format!("/{}", prefix.join("/"));
            let m = Matcher { path_prefix: Some(prefix.clone()), ..Matcher::default() };
            prop_assert_eq!(
                m.matches(&Method::GET, &base_uri, &headers),
                m.matches(&Method::GET, &variant_uri, &headers),
                "prefix {} base {} variant {}", prefix, base, variant
            );
        }
    }
}
