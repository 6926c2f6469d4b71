//! The grammars of the forwarding headers forward-auth reads (`X-Forwarded-Method`,
//! `X-Forwarded-Host`, `X-Forwarded-Uri`), as the regular expressions the OpenAPI document
//! gives their schemas (ECMA-262 syntax, which JSON Schema's `pattern` uses).
//!
//! No whitespace: an HTTP client cannot send it around a value, and the handler trims it.
//! Each describes values the handler accepts ([`super::forward_auth`]): the tests generate
//! values from each expression and feed them to the real parsers. They are what a client
//! should send, narrower than all the parsers take where the full grammar would be a page of
//! expression: a host's IPv6 literal is written without an embedded IPv4 address or zone, a
//! host name has at most four labels of at most 60 bytes, a port has no leading zeros.

/// An RFC 9110 method token (matched case-sensitively).
pub(crate) const METHOD: &str = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";

/// A host name or IPv6 literal with an optional port from 1 to 65535.
pub(crate) const HOST: &str = concat!(
    r"^([0-9A-Za-z_-]{1,60}(\.[0-9A-Za-z_-]{1,60}){0,3}\.?",
    r"|\[(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:",
    r"|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}",
    r"|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}",
    r"|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}",
    r"|:((:[0-9a-fA-F]{1,4}){1,7}|:))\])",
    r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?",
    r"$",
);

/// A path starting with `/` or an absolute URI (`scheme://authority` and an optional path or
/// query), in visible ASCII, without `#`.
pub(crate) const URI: &str = r"^(/[!\x22\x24-~]*|[A-Za-z][A-Za-z0-9+.-]*://[!\x22\x24-\x2e0-\x3e@-~]*([/?][!\x22\x24-~]*)?)$";

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue, Method};
    use proptest::prelude::*;

    /// A strategy of the strings `pattern` matches (its anchors dropped: proptest's
    /// generator takes none, and every generated string is whole).
    fn matching(pattern: &'static str) -> impl Strategy<Value = String> {
        let body = pattern.trim_start_matches('^').trim_end_matches('$');
        proptest::string::string_regex(body).unwrap()
    }

    fn read(name: &'static str, value: &str) -> Result<(Method, http::Uri), u16> {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        super::super::forward_auth::original_request(&Method::GET, &mut headers, None)
            .map_err(|refused| refused.status().as_u16())
    }

    proptest! {
        #[test]
        fn every_documented_method_is_accepted(value in matching(METHOD)) {
            prop_assert!(read("x-forwarded-method", &value).is_ok(), "{value:?}");
        }

        #[test]
        fn every_documented_host_is_accepted(value in matching(HOST)) {
            prop_assert!(read("x-forwarded-host", &value).is_ok(), "{value:?}");
        }

        #[test]
        fn every_documented_uri_is_accepted(value in matching(URI)) {
            prop_assert!(read("x-forwarded-uri", &value).is_ok(), "{value:?}");
        }
    }
}
