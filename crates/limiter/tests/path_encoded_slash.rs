//! A `path_prefix = "/api"` rule matches every path the upstream serves under `/api`, the way
//! an upstream that keeps `%2F` sees it: the raw path split on literal `/` only, unreserved
//! escapes decoded, dot segments removed. An encoded slash (`%2F`, `%5C`) inside a segment,
//! even around `..`, never moves a request out from under the prefix.

use floodgate_limiter::{canonical_path, prefix_matches, Matcher};
use http::{HeaderMap, Method, Uri};
use proptest::prelude::*;

/// A spelling of `api` with some letters percent-encoded (upper- or lower-case hex).
fn api_spelling() -> impl Strategy<Value = String> {
    proptest::collection::vec(0u8..3, 3).prop_map(|how| {
        "api"
            .bytes()
            .zip(how)
            .map(|(b, h)| match h {
                1 => format!("%{b:02X}"),
                2 => format!("%{b:02x}"),
                _ => char::from(b).to_string(),
            })
            .collect()
    })
}

/// One raw segment (no literal `/`): hostile pieces, encoded slashes and backslashes, dots.
fn segment() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec![
            "..", ".", "%2F", "%2f", "%5C", "%5c", "\\", "%2E", "%2e", "%25", "%", "x", "api",
            "%61", ";", "=", "~", "%00", "%3F",
        ]),
        1..6,
    )
    .prop_map(|pieces| pieces.concat())
}

/// Whether a raw segment is a dot segment for the upstream: `.` or `..` once its unreserved
/// escapes (here `%2E`) are decoded.
fn is_dot_segment(segment: &str) -> bool {
    let decoded = segment.replace("%2E", ".").replace("%2e", ".");
    decoded == "." || decoded == ".."
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// `/api` + segments, with detours (`/zz/..`, `/.`, `//`) between them: the upstream
    /// resolves the detours and still serves the request under `/api`.
    #[test]
    fn a_path_under_api_as_the_upstream_splits_it_is_always_matched(
        first in api_spelling(),
        rest in proptest::collection::vec(segment(), 0..5),
        detours in proptest::collection::vec(0u8..4, 0..6),
        trailing in any::<bool>(),
    ) {
        let mut raw = format!("/{first}");
        for (i, segment) in rest.iter().filter(|s| !is_dot_segment(s)).enumerate() {
            match detours.get(i).copied().unwrap_or(0) {
                1 => raw.push_str("/zz/.."),
                2 => raw.push_str("/."),
                3 => raw.push('/'),
                _ => {}
            }
            raw.push('/');
            raw.push_str(segment);
        }
        if trailing {
            raw.push('/');
        }
        prop_assert!(prefix_matches("/api", &raw), "{}", raw);
        if let Ok(uri) = raw.parse::<Uri>() {
            let m = Matcher { path_prefix: Some("/api".into()), ..Matcher::default() };
            prop_assert!(m.matches(&Method::GET, &uri, &HeaderMap::new()), "{}", raw);
        }
        // The canonical form keeps the first segment `api` and is its own canonical form.
        let canonical = canonical_path(&raw).into_owned();
        prop_assert!(canonical == b"/api" || canonical.starts_with(b"/api/"), "{}", raw);
        let text = String::from_utf8(canonical).unwrap();
        prop_assert_eq!(&*canonical_path(&text), text.as_bytes());
    }

    /// Under `/x`, a segment that hides `..%2Fapi` is still under `/x`, never under `/api`.
    #[test]
    fn an_encoded_slash_never_climbs_into_api(
        rest in proptest::collection::vec(segment(), 0..4),
    ) {
        let mut raw = String::from("/x/..%2Fapi");
        for segment in rest.iter().filter(|s| !is_dot_segment(s)) {
            raw.push('/');
            raw.push_str(segment);
        }
        prop_assert!(prefix_matches("/x", &raw), "{}", raw);
        prop_assert!(!prefix_matches("/api", &raw), "{}", raw);
    }

    /// Any text: a canonical form that is ASCII and its own canonical form, never a panic.
    #[test]
    fn canonical_paths_are_ascii_and_idempotent(raw in "\\PC{0,40}") {
        let once = canonical_path(&raw).into_owned();
        prop_assert!(once.is_ascii());
        let text = String::from_utf8(once).unwrap();
        prop_assert_eq!(&*canonical_path(&text), text.as_bytes());
        let _ = prefix_matches("/api", &raw);
    }
}
