//! [`canonical_path`]: the canonical form of a request path, for matching and keys, and
//! [`prefix_matches`]: whether a request path is under a rule's `path_prefix`.

use std::borrow::Cow;

/// The canonical form of a request path (without the query), split on literal `/` only:
/// RFC 3986 section 6.2.2 normalisation of each segment, repeated `/` collapsed, `.` and `..`
/// segments removed per section 5.2.4 (never above the root).
///
/// Returns bytes (always ASCII: see below). Paths that are already canonical are borrowed, so
/// the common case does not allocate. A path that does not start with `/` (such as `*`) is
/// processed the same way without a leading `/`.
///
/// Canonical request paths: the one spelling of a path that rules match on and count by.
///
/// An upstream serves `/api/data.txt` for `/x/../api/data.txt`, `/%61pi/data.txt`,
/// `//api/data.txt` and `/./api/data.txt` alike. If a `path_prefix = "/api"` rule compared the
/// raw text, every one of those spellings would escape it, and a
/// [`KeySource::Path`](crate::KeySource::Path) key would give each spelling its own counter.
/// So [`Matcher::path_prefix`](crate::Matcher::path_prefix),
/// [`KeySource::Path`](crate::KeySource::Path) and [`KeySource::Route`](crate::KeySource::Route)
/// all use [`canonical_path`]:
///
/// 1. split the path on literal `/` only: an encoded slash (`%2F`) or backslash (`%5C`, or a
///    raw `\`) is part of a segment, never a separator, as upstreams that keep `%2F` (Express,
///    Go's `ServeMux`, Apache's `AllowEncodedSlashes NoDecode`, Envoy's default) route it;
/// 2. in each segment, decode the escapes of unreserved characters (`%41` is `A`, `%2E` is
///    `.`, `%7E` is `~`), write every other escape in upper case (`%2f` is `%2F`), and escape
///    every byte that may not stand in a path as it is (`\` is `%5C`, `é` is `%C3%A9`); a `%`
///    not followed by two hex digits is written `%25`, and `%252F` stays `%252F`;
/// 3. collapse runs of `/` into one;
/// 4. remove the segments that are exactly `.` or `..` after step 2, as RFC 3986 section 5.2.4
///    (`remove_dot_segments`) does, never climbing above the root (`/../a` is `/a`): `..%2Fx`
///    is a segment of its own, not `..`.
///
/// The query is never part of it. The configured prefix is canonicalised the same way.
///
/// **The canonical form is used only for matching and keys. The request itself is forwarded
/// unchanged**, byte for byte. [`prefix_matches`] also reads `%2F` as the upstreams that decode
/// it do; see there. Why, and what that means for an upstream that reads paths
/// differently: `docs/paths.md`.
///
/// ```
/// use floodgate_limiter::canonical_path;
/// assert_eq!(&*canonical_path("/x/../api/data.txt"), b"/api/data.txt");
/// assert_eq!(&*canonical_path("/%61pi/data%2etxt"), b"/api/data.txt");
/// assert_eq!(&*canonical_path("//api/./data.txt"), b"/api/data.txt");
/// assert_eq!(&*canonical_path("/api/..%2fx"), b"/api/..%2Fx");
/// assert_eq!(&*canonical_path("/../../etc"), b"/etc");
/// assert_eq!(&*canonical_path("/a/b/.."), b"/a/");
/// ```
pub fn canonical_path(path: &str) -> Cow<'_, [u8]> {
    let bytes = path.as_bytes();
    if bytes.first() == Some(&b'/')
        && bytes.iter().all(|&b| b != b'%' && is_pchar_or_slash(b))
        && !path.contains("//")
        && !path.contains("/.")
    {
        return Cow::Borrowed(bytes);
    }
    Cow::Owned(remove_dot_segments(&normalize_escapes(bytes)))
}

/// Whether `path` (a request path) is under `prefix` (a rule's `path_prefix`), on whole
/// segments: `/api` matches `/api` and `/api/x`, not `/apix`; a prefix ending in `/` matches
/// anything below it.
///
/// Both are compared in their [`canonical_path`] form, and a second time with every encoded
/// slash (`%2F`) and backslash (`%5C`, or a raw `\`) read as `/` (runs of `/` collapsed, no
/// dot segment removed again): upstreams that decode `%2F` (nginx's `location` matching, WSGI
/// and PHP servers, Envoy's `UNESCAPE_AND_FORWARD`) serve `/api%2Fx` as `/api/x`, and Envoy's
/// `prefix` match is a plain string prefix. So `/api%2Fx` and `/api%2F..%2Fx` are under `/api`
/// either way, while an encoded slash never makes a dot segment climb: `/x/..%2Fapi/y` is under
/// `/x` and not under `/api`. A path is under the prefix as soon as one reading puts it there,
/// so a rule never misses a request the upstream serves below its prefix (when the upstream
/// splits on `/` and `%2F` alike but removes dot segments after decoding, see
/// `docs/proxies.md`).
///
/// ```
/// use floodgate_limiter::prefix_matches;
/// assert!(prefix_matches("/api", "/api/..%2Fx"));
/// assert!(prefix_matches("/api", "/api%2F..%2Fx"));
/// assert!(prefix_matches("/api", "/%61pi%2fx"));
/// assert!(!prefix_matches("/api", "/x/..%2Fapi/y"));
/// assert!(!prefix_matches("/api", "/apix"));
/// ```
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    let prefix = canonical_path(prefix);
    let path = canonical_path(path);
    if segments_under(&prefix, &path) {
        return true;
    }
    match (slashes_decoded(&prefix), slashes_decoded(&path)) {
        (None, None) => false,
        (p, q) => segments_under(
            p.as_deref().unwrap_or(&prefix),
            q.as_deref().unwrap_or(&path),
        ),
    }
}

/// Whole-segment prefix comparison of two canonical paths.
fn segments_under(prefix: &[u8], path: &[u8]) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with(b"/") || rest.is_empty() || rest.starts_with(b"/"),
        None => false,
    }
}

/// A canonical path with `%2F` and `%5C` read as `/` and runs of `/` collapsed; `None` when it
/// has neither.
fn slashes_decoded(canonical: &[u8]) -> Option<Vec<u8>> {
    let encoded = |w: &[u8]| w.eq_ignore_ascii_case(b"%2F") || w.eq_ignore_ascii_case(b"%5C");
    if !canonical.windows(3).any(encoded) {
        return None;
    }
    let mut out = Vec::with_capacity(canonical.len());
    let mut i = 0;
    while i < canonical.len() {
        let slash = if canonical[i] == b'/' {
            i += 1;
            true
        } else if canonical.get(i..i + 3).is_some_and(encoded) {
            i += 3;
            true
        } else {
            false
        };
        if slash {
            if out.last() != Some(&b'/') {
                out.push(b'/');
            }
        } else {
            out.push(canonical[i]);
            i += 1;
        }
    }
    Some(out)
}

/// RFC 3986 `unreserved`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `pchar` without `%` (unreserved, sub-delims, `:`, `@`), and `/`: the bytes a
/// canonical path holds as they are.
fn is_pchar_or_slash(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

/// Step 2 of [`canonical_path`]: unreserved escapes decoded, other escapes in upper case, bytes
/// that may not stand as they are escaped, a `%` that starts no escape kept.
///
/// The result canonicalises to itself: an inserted escape starts with `%`, never with a hex
/// digit, so it never completes a `%` that started no escape.
fn normalize_escapes(bytes: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(bytes.len());
    let escape = |out: &mut Vec<u8>, b: u8| {
        out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    };
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let pair = bytes
                .get(i + 1..i + 3)
                .and_then(|p| Some((hex(p[0])?, hex(p[1])?)));
            match pair {
                Some((hi, lo)) => {
                    let decoded = hi << 4 | lo;
                    if is_unreserved(decoded) {
                        out.push(decoded);
                    } else {
                        escape(&mut out, decoded);
                    }
                    i += 3;
                }
                None => {
                    // A `%` that starts no escape is written as one (`%25`), so that the
                    // canonical form is its own canonical form (`%%61` is `%25a`, not `%a`,
                    // which would read as an escape the second time).
                    escape(&mut out, b'%');
                    i += 1;
                }
            }
            continue;
        }
        if is_pchar_or_slash(b) {
            out.push(b);
        } else {
            escape(&mut out, b);
        }
        i += 1;
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Collapses repeated `/` and applies RFC 3986 section 5.2.4 to the segments.
///
/// Working on segments after collapsing gives the RFC's results: a `.` is dropped, a `..`
/// drops the segment before it (none at the root), and a path ending in `.` or `..` keeps a
/// trailing `/` (`/a/b/..` is `/a/`), as the RFC's rules B and C leave one.
fn remove_dot_segments(path: &[u8]) -> Vec<u8> {
    let absolute = path.first() == Some(&b'/');
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut trailing_slash = false;
    // Splitting on '/' and skipping empty pieces is what collapsing runs of '/' means.
    let pieces: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    let last = pieces.len() - 1;
    for (i, piece) in pieces.into_iter().enumerate() {
        match piece {
            b"" => {
                // Only the final empty piece matters: the path ended with '/'.
                if i == last && i > 0 {
                    trailing_slash = true;
                }
            }
            b"." | b".." => {
                if piece == b".." {
                    kept.pop();
                }
                if i == last {
                    trailing_slash = true;
                }
            }
            segment => {
                kept.push(segment);
                if i == last {
                    trailing_slash = false;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(path.len());
    if absolute {
        out.push(b'/');
    }
    for (i, segment) in kept.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(segment);
    }
    if trailing_slash && !kept.is_empty() {
        out.push(b'/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(path: &str) -> String {
        String::from_utf8(canonical_path(path).into_owned()).unwrap()
    }

    #[test]
    fn rfc_3986_remove_dot_segments_examples() {
        // Section 5.2.4's own examples, and the normal examples of section 5.4.1 whose merged
        // paths contain dot segments.
        assert_eq!(canon("/a/b/c/./../../g"), "/a/g");
        assert_eq!(canon("mid/content=5/../6"), "mid/6");
        assert_eq!(canon("/b/c/./g"), "/b/c/g");
        assert_eq!(canon("/b/c/."), "/b/c/");
        assert_eq!(canon("/b/c/./"), "/b/c/");
        assert_eq!(canon("/b/c/.."), "/b/");
        assert_eq!(canon("/b/c/../"), "/b/");
        assert_eq!(canon("/b/c/../g"), "/b/g");
        assert_eq!(canon("/b/c/../.."), "/");
        assert_eq!(canon("/b/c/../../g"), "/g");
        // Abnormal examples (section 5.4.2): never above the root.
        assert_eq!(canon("/b/c/../../../g"), "/g");
        assert_eq!(canon("/b/c/../../../../g"), "/g");
        assert_eq!(canon("/./g"), "/g");
        assert_eq!(canon("/../g"), "/g");
        assert_eq!(canon("/b/c/g."), "/b/c/g.");
        assert_eq!(canon("/b/c/.g"), "/b/c/.g");
        assert_eq!(canon("/b/c/g.."), "/b/c/g..");
        assert_eq!(canon("/b/c/..g"), "/b/c/..g");
        assert_eq!(canon("/b/c/./../g"), "/b/g");
        assert_eq!(canon("/b/c/./g/."), "/b/c/g/");
        assert_eq!(canon("/b/c/g/./h"), "/b/c/g/h");
        assert_eq!(canon("/b/c/g/../h"), "/b/c/h");
    }

    #[test]
    fn walkthrough_bypass_spellings_are_canonical_api_paths() {
        for spelling in [
            "/x/../api/data.txt",
            "/%61pi/data.txt",
            "//api/data.txt",
            "/./api/data.txt",
            "/%2E/api/data.txt",
            "/x/%2e%2e/api/data.txt",
            "/api/data%2Etxt",
            "///api///data.txt",
            "/../../api/data.txt",
        ] {
            assert_eq!(canon(spelling), "/api/data.txt", "{spelling}");
        }
    }

    #[test]
    fn only_unreserved_escapes_are_decoded_and_a_stray_percent_is_escaped() {
        assert_eq!(canon("/api%252Fdata"), "/api%252Fdata");
        assert_eq!(canon("/a%zz/b%4"), "/a%25zz/b%254");
        assert_eq!(canon("/a%"), "/a%25");
        assert_eq!(canon("/a%4"), "/a%254");
        assert_eq!(canon("/a%41%7e%2D%5f"), "/aA~-_");
        assert_eq!(canon("/%ff%00%3b%3F%23"), "/%FF%00%3B%3F%23");
        // Bytes that may not stand in a path as they are get their one escaped spelling.
        assert_eq!(
            canon("/a\\b/caf\u{e9}/<x> \"y\""),
            "/a%5Cb/caf%C3%A9/%3Cx%3E%20%22y%22"
        );
        assert_eq!(canon("/a%5cb"), canon("/a\\b"));
        // Idempotent.
        for path in ["/a%zz%5C", "/%4%5C", "/%%41", "/%%61api", "/x/..%2f/y"] {
            let once = canon(path);
            assert_eq!(canon(&once), once, "{path}");
        }
    }

    /// The review's examples: an encoded slash or backslash is never a separator and never
    /// takes part in dot-segment removal.
    #[test]
    fn encoded_slashes_are_part_of_their_segment() {
        assert_eq!(canon("/api/..%2Fx"), "/api/..%2Fx");
        assert_eq!(canon("/x/..%2Fapi/y"), "/x/..%2Fapi/y");
        assert_eq!(canon("/api%2F..%2Fx"), "/api%2F..%2Fx");
        assert_eq!(canon("/api%2fx"), "/api%2Fx");
        assert_eq!(canon("/api/..%5Cx"), "/api/..%5Cx");
        assert_eq!(canon("/api/..\\x"), "/api/..%5Cx");
        assert_eq!(canon("/x%2F..%2Fapi/data.txt"), "/x%2F..%2Fapi/data.txt");
        // `%2E%2E` is `..` (unreserved), so it still climbs, as on every upstream.
        assert_eq!(canon("/api/%2E%2E/x"), "/x");
    }

    #[test]
    fn prefixes_match_whole_segments_with_encoded_slashes_read_both_ways() {
        for path in [
            "/api",
            "/api/",
            "/api/x",
            "/api/..%2Fx",
            "/api/..%5Cx",
            "/api%2F..%2Fx",
            "/api%2fx",
            "/api%5Cx",
            "/api\\x",
            "/%61pi%2Fx",
            "/%2Fapi/x",
            "/x/../api/y",
        ] {
            assert!(prefix_matches("/api", path), "{path}");
        }
        for path in [
            "/apix",
            "/",
            "/x/..%2Fapi/y",
            "/x%2F..%2Fapi/y",
            "/x/..%5Capi",
            "/api/../x",
            "/api/%2e%2e/x",
            "/%2561pi/x",
        ] {
            assert!(!prefix_matches("/api", path), "{path}");
        }
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(prefix_matches("/api/", "/api%2Fx"));
        assert!(prefix_matches("/v1/api", "/v1%2Fapi/x"));
        assert!(prefix_matches("/", "/anything"));
        assert!(prefix_matches("/api%2Fv1", "/api/v1/x"));
    }

    #[test]
    fn canonical_paths_are_borrowed_and_unchanged() {
        for path in [
            "/",
            "/api",
            "/api/",
            "/api/v1/items.json",
            "/a.b/c",
            "/a;b=c/d@e:f!",
        ] {
            assert!(matches!(canonical_path(path), Cow::Borrowed(_)), "{path}");
            assert_eq!(canon(path), path);
        }
        assert_eq!(canon(""), "");
        assert_eq!(canon("*"), "*");
        assert_eq!(canon("/.."), "/");
        assert_eq!(canon("//"), "/");
        assert_eq!(canon("/.well-known/x"), "/.well-known/x");
    }
}
