//! [`canonical_path`]: the canonical form of a request path, for matching.

use std::borrow::Cow;

/// The canonical form of a request path (without the query): the one spelling of a path
/// that rules match on ([`Matcher::path_prefix`](crate::Matcher::path_prefix)) and count by
/// ([`KeySource::Path`](crate::KeySource::Path), [`KeySource::Route`](crate::KeySource::Route)),
/// so that `/x/../api/data.txt`, `/%61pi/data.txt` or `//api/data.txt` cannot escape a `/api`
/// rule or get a counter of their own:
///
/// 1. percent-decode every `%XX` octet once, including `%2F` (`/`) and `%2E` (`.`); a `%` not
///    followed by two hex digits stays as it is, and `%252F` becomes the text `%2F`, not `/`;
/// 2. collapse runs of `/` into one;
/// 3. remove `.` and `..` segments as RFC 3986 section 5.2.4 (`remove_dot_segments`) does,
///    never climbing above the root (`/../a` is `/a`).
///
/// Returns bytes because decoding may produce any octet (including invalid UTF-8). Paths that
/// are already canonical (no `%`, no `//`, no segment starting with `.`) are borrowed, so the
/// common case does not allocate. A path that does not start with `/` (such as `*`) is
/// processed the same way without a leading `/`. Prefix comparison stays on whole segments
/// (`/api` matches `/api` and `/api/x`, not `/apix`); the configured prefix is canonicalised
/// the same way.
///
/// Only matching and keys use it: the request itself is forwarded unchanged. Why, and what
/// that means for an upstream that reads paths differently: `docs/paths.md`.
///
/// # Examples
///
/// ```
/// use floodgate_limiter::canonical_path;
/// assert_eq!(&*canonical_path("/x/../api/data.txt"), b"/api/data.txt");
/// assert_eq!(&*canonical_path("/%61pi%2Fdata.txt"), b"/api/data.txt");
/// assert_eq!(&*canonical_path("//api/./data.txt"), b"/api/data.txt");
/// assert_eq!(&*canonical_path("/../../etc"), b"/etc");
/// assert_eq!(&*canonical_path("/a/b/.."), b"/a/");
/// ```
pub fn canonical_path(path: &str) -> Cow<'_, [u8]> {
    let bytes = path.as_bytes();
    if bytes.first() == Some(&b'/')
        && !bytes.contains(&b'%')
        && !path.contains("//")
        && !path.contains("/.")
    {
        return Cow::Borrowed(bytes);
    }
    let decoded = percent_decode(bytes);
    Cow::Owned(remove_dot_segments(&decoded))
}

/// Decodes every valid `%XX` once; anything else is copied.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
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
            "/api%2Fdata.txt",
            "/api%2fdata.txt",
            "/%2E/api/data.txt",
            "/x/%2e%2e/api/data.txt",
            "/x%2F..%2Fapi/data.txt",
            "///api///data.txt",
            "/../../api/data.txt",
        ] {
            assert_eq!(canon(spelling), "/api/data.txt", "{spelling}");
        }
    }

    #[test]
    fn decoding_happens_once_and_leaves_invalid_escapes() {
        assert_eq!(canon("/api%252Fdata"), "/api%2Fdata");
        assert_eq!(canon("/a%zz/b%4"), "/a%zz/b%4");
        assert_eq!(canon("/a%"), "/a%");
        assert_eq!(canon("/a%4"), "/a%4");
        assert_eq!(canon("/a%41"), "/aA");
        assert_eq!(&*canonical_path("/%FF%00"), b"/\xff\x00");
    }

    #[test]
    fn canonical_paths_are_borrowed_and_unchanged() {
        for path in ["/", "/api", "/api/", "/api/v1/items.json", "/a.b/c"] {
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
