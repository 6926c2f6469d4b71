//! The original request's URI as a proxy forwards it to forward-auth (`X-Forwarded-Uri`,
//! `X-Original-URI`): the proxy's bytes, read so that the rules see the path the upstream is
//! sent, canonicalised as in proxy mode ([`floodgate_tower::canonical_path`]).
//!
//! Proxies pass on more than `http::Uri` holds: nginx forwards `"`, `<`, `>`, `` ` ``, `\`,
//! `{`, `}` and non-ASCII bytes as the client sent them, and Caddy sends the raw request target
//! (an absolute URI when the client sent one). Reading such a value must never widen to `/`,
//! which would skip every `path_prefix` rule and route cost. So [`read`]:
//!
//! - keeps an origin-form target (`/path?query`), and reduces an absolute URI
//!   (`scheme://authority/path?query`) to its path and query (`/` when the path is empty);
//! - percent-encodes every byte outside RFC 3986's `pchar`, `/` and `?` (`%` is kept as it is).
//!   [`canonical_path`](floodgate_tower::canonical_path) escapes the same bytes the same way
//!   (and decodes only unreserved escapes), so the result's canonical path is the canonical path
//!   of the proxy's bytes, and a `%` the proxy sent decodes (or not) as before, because an
//!   inserted escape starts with `%`, never with a hex digit;
//! - refuses, naming why: an empty value; one that is neither of those forms (a relative path,
//!   `*`, `host:port`); a `#`, which proxies read in two ways (nginx ends the path there and
//!   passes the raw `#` on, Caddy forwards it to the upstream as `%23`), so one value would name
//!   two paths, and no client sends a fragment; and a target too long for a `Uri` once encoded.

use std::fmt::Write as _;

use http::Uri;

/// Why a forwarded URI cannot be read (the problem's `detail`, after the header's name).
pub(super) type Unreadable = &'static str;

/// The URI the rules see for a forwarded request target `raw` (a header's bytes): see the
/// [module documentation](self).
///
/// # Errors
/// [`Unreadable`] for an empty value, a value that is neither a path starting with `/` nor an
/// absolute URI, a value containing `#`, or one longer than a `Uri` holds once encoded (65,534
/// bytes).
pub(super) fn read(raw: &[u8]) -> Result<Uri, Unreadable> {
    let raw = raw.trim_ascii();
    if raw.is_empty() {
        return Err("is empty");
    }
    let target = if raw[0] == b'/' {
        raw
    } else {
        after_authority(raw).ok_or(
            "must be a path starting with / or an absolute URI (scheme://host/path), as a \
             proxy sends",
        )?
    };
    if target.contains(&b'#') {
        return Err(
            "contains #, which proxies read in two ways (nginx ends the path there, \
                    Caddy forwards it as %23), so the path is not known",
        );
    }
    let mut text = String::with_capacity(target.len() + 8);
    if target.first() != Some(&b'/') {
        // An absolute URI with an empty path (`http://host?q`) asks for `/` (RFC 9112 3.2.1).
        text.push('/');
    }
    for &byte in target {
        if is_kept(byte) {
            text.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(text, "%{byte:02X}");
        }
    }
    Uri::try_from(text).map_err(|_| "is longer than the 65534 bytes a URI may have once encoded")
}

/// The path, query and fragment of an absolute URI (`scheme://authority...`): what follows the
/// authority. `None` when `raw` is not an absolute URI with an authority.
fn after_authority(raw: &[u8]) -> Option<&[u8]> {
    let colon = raw.iter().position(|&b| b == b':')?;
    let (scheme, rest) = raw.split_at(colon);
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    let rest = rest.strip_prefix(b"://".as_slice())?;
    if !scheme_ok {
        return None;
    }
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    Some(&rest[end..])
}

/// RFC 3986 `pchar` (unreserved, sub-delims, `:`, `@`), `/`, `?` and `%`: the bytes passed as
/// they are. Every one is accepted by `http::Uri` in a path and in a query.
fn is_kept(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
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
                | b'?'
                | b'%'
        )
}

#[cfg(test)]
mod tests {
    use floodgate_tower::canonical_path;
    use proptest::prelude::*;

    use super::*;

    fn canon(uri: &Uri) -> Vec<u8> {
        canonical_path(uri.path()).into_owned()
    }

    #[test]
    fn the_issue_reproduction_keeps_its_api_path() {
        let uri = read(b"/api/login?q=<x>").unwrap();
        assert_eq!(uri.path(), "/api/login");
        assert_eq!(uri.query(), Some("q=%3Cx%3E"));
    }

    #[test]
    fn quotes_and_angle_brackets_in_the_query_keep_the_path() {
        for raw in [
            &b"/api/login?q=\"x\""[..],
            b"/api/login?q=<script>",
            b"/api/login?a=1&b=>",
            b"/api/login?q=`{}|^\\",
            b"/api/login??q=%zz",
        ] {
            assert_eq!(read(raw).unwrap().path(), "/api/login", "{raw:?}");
        }
    }

    #[test]
    fn angle_brackets_backquotes_and_spaces_in_the_path_are_read_as_bytes() {
        for (raw, canonical) in [
            (&b"/api/<x>"[..], &b"/api/%3Cx%3E"[..]),
            (b"/api/a`b", b"/api/a%60b"),
            (b"/api/a b", b"/api/a%20b"),
            (b"/api/x/../<y>/../login", b"/api/login"),
            (b"/<x>/../api/login", b"/api/login"),
            (b"/a\\b/{c}|d^e[f]", b"/a%5Cb/%7Bc%7D%7Cd%5Ee%5Bf%5D"),
            (b"/a\tb", b"/a%09b"),
        ] {
            assert_eq!(canon(&read(raw).unwrap()), canonical, "{raw:?}");
        }
    }

    #[test]
    fn non_ascii_bytes_are_read_as_bytes() {
        let uri = read("/api/caf\u{e9}".as_bytes()).unwrap();
        assert_eq!(uri.path(), "/api/caf%C3%A9");
        assert_eq!(canon(&uri), b"/api/caf%C3%A9");
        // Not UTF-8 (Latin-1 from an old client): still its bytes.
        assert_eq!(canon(&read(b"/api/caf\xe9").unwrap()), b"/api/caf%E9");
        assert_eq!(canon(&read(b"/\xff/../api/x").unwrap()), b"/api/x");
    }

    #[test]
    fn an_absolute_uri_keeps_its_path() {
        for (raw, path, query) in [
            (
                &b"http://example.com/api/login?q=1"[..],
                "/api/login",
                Some("q=1"),
            ),
            (b"https://example.com:8443/api/<x>", "/api/%3Cx%3E", None),
            (b"HTTP://example.com/api", "/api", None),
            (b"http://user@example.com/api/x", "/api/x", None),
            (b"http://example.com", "/", None),
            (b"http://example.com?q=<", "/", Some("q=%3C")),
            (b"h2c+x.y-z://[::1]:80/api", "/api", None),
        ] {
            let uri = read(raw).unwrap();
            assert_eq!((uri.path(), uri.query()), (path, query), "{raw:?}");
        }
    }

    #[test]
    fn a_uri_not_starting_with_a_slash_is_refused_not_widened() {
        for raw in [
            &b"api/login"[..],
            b"*",
            b"example.com:443",
            b"?q=1",
            b"http:/api",
            b"http:api/login",
            b"1http://example.com/api",
            b"://example.com/api",
            b"\xff/api",
        ] {
            let err = read(raw).unwrap_err();
            assert!(
                err.starts_with("must be a path starting with /"),
                "{raw:?}: {err}"
            );
        }
    }

    #[test]
    fn empty_values_and_fragments_are_refused() {
        assert_eq!(read(b"").unwrap_err(), "is empty");
        assert_eq!(read(b" \t ").unwrap_err(), "is empty");
        for raw in [
            &b"/x#/../api/login"[..],
            b"/api/login#x",
            b"/api?q=#x",
            b"http://example.com#x",
        ] {
            assert!(read(raw).unwrap_err().starts_with("contains #"), "{raw:?}");
        }
    }

    #[test]
    fn a_target_too_long_once_encoded_is_refused() {
        let mut raw = b"/api/".to_vec();
        raw.extend(std::iter::repeat_n(b'<', 30_000));
        assert!(read(&raw).unwrap_err().starts_with("is longer"));
        let mut fits = b"/api/".to_vec();
        fits.extend(std::iter::repeat_n(b'a', 60_000));
        assert_eq!(read(&fits).unwrap().path().len(), 60_005);
    }

    #[test]
    fn what_http_uri_already_reads_is_unchanged() {
        for raw in [
            "/",
            "/api/login?q=1",
            "/%61pi/data.txt",
            "//api/./data.txt",
            "/api%2Fdata",
            "/a%zz/b%4",
            "/a:b@c!$&'()*+,;=/d?e=f/g?h",
        ] {
            let uri = read(raw.as_bytes()).unwrap();
            assert_eq!(uri, raw.parse::<Uri>().unwrap(), "{raw}");
        }
    }

    /// Bytes a hostile client could get a proxy to forward: every octet, with the ones that
    /// make paths interesting (`/`, `.`, `%`, hex digits, `?`) weighted up.
    fn hostile_byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            3 => prop::sample::select(b"/.%?aAfF09".to_vec()),
            2 => prop::sample::select(b" \"<>`\\{}|^[]\t".to_vec()),
            2 => any::<u8>().prop_filter("no #", |b| *b != b'#'),
        ]
    }

    /// The reference: the proxy's path bytes (up to the first `?`), canonicalised by the same
    /// function proxy mode uses, applied to the raw text itself.
    fn reference(raw: &str) -> Vec<u8> {
        // HTTP strips the whitespace around a header value.
        let raw = raw.trim_end_matches(|c: char| c.is_ascii_whitespace());
        let path = raw.split('?').next().unwrap_or_default();
        canonical_path(path).into_owned()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// For any forwarded text starting with `/` (any Unicode, the hostile ASCII bytes), the
        /// path the rules see is the canonical path of the raw text itself: never `/` unless
        /// the text's own canonical path is `/`.
        #[test]
        fn the_canonical_path_is_the_proxys_bytes_canonicalised(
            rest in "[/.%?aAfF09 \"<>`\\\\{}|^\\[\\]\t\u{0}-\u{7f}\u{80}-\u{10ffff}]{0,40}"
                .prop_filter("no #", |s| !s.contains('#'))
        ) {
            let raw = format!("/{rest}");
            let uri = read(raw.as_bytes()).unwrap();
            prop_assert_eq!(canon(&uri), reference(&raw));
            // And the same through an absolute URI.
            let absolute = read(format!("http://example.com{raw}").as_bytes()).unwrap();
            prop_assert_eq!(absolute, uri);
        }

        /// Any bytes at all: read or refused, never a panic; what is read starts with `/`, is
        /// ASCII, and decodes back to the bytes that were sent.
        #[test]
        fn any_bytes_are_read_or_refused(raw in prop::collection::vec(hostile_byte(), 0..60)) {
            let mut with_slash = vec![b'/'];
            with_slash.extend_from_slice(&raw);
            let uri = read(&with_slash).unwrap();
            let text = uri.path_and_query().unwrap().as_str();
            prop_assert!(text.starts_with('/') && text.is_ascii());
            prop_assert_eq!(decode_inserted(text.as_bytes(), &with_slash), with_slash.trim_ascii());
            let _ = read(&raw);
        }
    }

    /// Undoes [`read`]'s encoding only (the escapes it inserted, not the client's own `%`),
    /// walking both texts: an escape is inserted where the sent byte is not kept.
    fn decode_inserted(read: &[u8], sent: &[u8]) -> Vec<u8> {
        let sent = sent.trim_ascii();
        let mut out = Vec::new();
        let mut i = 0;
        for &byte in sent {
            if is_kept(byte) {
                out.push(read[i]);
                i += 1;
            } else {
                let hex = std::str::from_utf8(&read[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
        }
        assert_eq!(i, read.len());
        out
    }
}
