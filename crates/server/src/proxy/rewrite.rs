//! What the proxy changes in a request and a response, apart from talking to the upstream:
//!
//! - [`one_authority`] (before the limiter): the request names exactly one host, and the rules
//!   see the `Host` the upstream is sent;
//! - [`request_framing`] / [`response_framing`]: only the `chunked` transfer coding passes, and
//!   a `Content-Length` is one decimal number, never beside a transfer coding;
//! - [`strip_client_address`]: client-address headers from an untrusted peer are dropped;
//! - [`own_rate_limit_fields`] / [`restore_upstream_denial`]: the rate-limit fields the client
//!   sees are Floodgate's, except on the upstream's own 429.

// A refusal is the response itself, returned once per refused request (as in `crate::http`).
#![allow(clippy::result_large_err)]

use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_LENGTH, HOST, RETRY_AFTER, TRANSFER_ENCODING};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};

/// Client-address and URL-override headers that some upstreams and frameworks believe, dropped
/// from an untrusted peer's request (as the `X-Forwarded-*` family is) unless named in
/// `[server] keep_client_headers`. A header whose name equals one of these or of the
/// forwarding headers once `_` is read as `-` (`X_Forwarded_For`, which CGI and WSGI servers
/// read as `X-Forwarded-For`) is dropped too, and cannot be kept.
pub(crate) const CLIENT_ADDRESS_HEADERS: [&str; 23] = [
    "true-client-ip",
    "cf-connecting-ip",
    "cf-connecting-ipv6",
    "x-client-ip",
    "fastly-client-ip",
    "x-cluster-client-ip",
    "client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-original-forwarded-for",
    "x-forwarded",
    "forwarded-for",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-forwarded-scheme",
    "x-forwarded-ssl",
    "x-host",
    "x-original-uri",
    "x-forwarded-uri",
    "x-envoy-external-address",
    "x-proxyuser-ip",
];

/// Appends this proxy to `Via` (RFC 9110 7.6.3: a proxy sends one in each message it
/// forwards, after the earlier ones, which it keeps): `1.1 floodgate` for a message received
/// over HTTP/1.1, `2 floodgate` over HTTP/2.
pub(super) fn append_via(headers: &mut HeaderMap, received: http::Version) {
    let protocol = match received {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    };
    let mut values: Vec<&[u8]> = headers
        .get_all(http::header::VIA)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    let own = format!("{protocol} floodgate");
    values.push(own.as_bytes());
    if let Ok(v) = HeaderValue::from_bytes(&values.join(&b", "[..])) {
        headers.insert(http::header::VIA, v);
    }
}

/// `name` as a [`CLIENT_ADDRESS_HEADERS`] entry, for `[server] keep_client_headers`.
///
/// # Errors
/// A message naming the accepted names when `name` is not one of them.
pub(crate) fn client_address_header(name: &str) -> Result<HeaderName, String> {
    let lower = name.to_ascii_lowercase();
    match CLIENT_ADDRESS_HEADERS.iter().find(|&&h| h == lower) {
        Some(&h) => Ok(HeaderName::from_static(h)),
        None => Err(format!(
            "{name:?} is not a client-address header the proxy strips (X-Forwarded-* and \
             Forwarded follow trusted_proxies); one of: {}",
            CLIENT_ADDRESS_HEADERS.join(", ")
        )),
    }
}

/// Drops, from an untrusted peer's request, every header whose name (with `_` read as `-`)
/// is one of [`CLIENT_ADDRESS_HEADERS`] or `forwarding`, except the exact names in `keep`.
pub(super) fn strip_client_address(
    headers: &mut HeaderMap,
    forwarding: &[HeaderName],
    keep: &[HeaderName],
) {
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| !keep.contains(name))
        .filter(|name| {
            let n = name.as_str();
            let spelled = |h: &str| {
                h.len() == n.len()
                    && h.bytes()
                        .zip(n.bytes())
                        .all(|(a, b)| a == b || (a == b'-' && b == b'_'))
            };
            CLIENT_ADDRESS_HEADERS.iter().any(|h| spelled(h))
                || forwarding.iter().any(|h| spelled(h.as_str()))
        })
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// A 400 problem naming `field`.
fn bad_request(field: &str, detail: impl Into<String>) -> Response {
    crate::http::problem::invalid(StatusCode::BAD_REQUEST, field, detail)
}

/// Gives the request one authority before the limiter runs (RFC 9112 3.2.2, RFC 9113 8.3.1):
/// the absolute form's or HTTP/2's `:authority` when there is one, else the one `Host`; it is
/// normalised ([`floodgate_tower::normalize_authority`]), becomes the `Host` the upstream is
/// sent, and the URI keeps only its path and query, so host rules match exactly what is
/// forwarded.
///
/// # Errors
/// A 400 problem naming `host` (or `:authority`) when there is no host, `Host` is sent more
/// than once, a `Host` disagrees with the URI's authority, or the value cannot be a host.
pub(super) fn one_authority(parts: &mut Parts) -> Result<(), Response> {
    let mut hosts = parts.headers.get_all(HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(bad_request("host", "is sent more than once"));
    }
    let authority = match (parts.uri.authority(), host) {
        (Some(a), host) => {
            let field = if parts.version == http::Version::HTTP_2 {
                ":authority"
            } else {
                "request-target"
            };
            let from_uri = floodgate_tower::normalize_authority(a.as_str().as_bytes())
                .map_err(|why| bad_request(field, format!("authority {why}")))?;
            if let Some(host) = host {
                match floodgate_tower::normalize_authority(host.as_bytes()) {
                    Ok(h) if h == from_uri => {}
                    _ => {
                        return Err(bad_request(
                            "host",
                            format!("disagrees with the request's {field} authority"),
                        ))
                    }
                }
            }
            from_uri
        }
        (None, Some(host)) => floodgate_tower::normalize_authority(host.as_bytes())
            .map_err(|why| bad_request("host", why))?,
        (None, None) => return Err(bad_request("host", "is missing: a request names its host")),
    };
    // Validated: letters, digits, `-_.:[]` only.
    let value = HeaderValue::from_str(authority.as_str())
        .map_err(|_| bad_request("host", "is not a header value"))?;
    parts.headers.insert(HOST, value);
    if parts.uri.authority().is_some() {
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        parts.uri = Uri::from(path);
    }
    Ok(())
}

/// One decimal `Content-Length` (leading zeros dropped; repeated equal values joined), or
/// `None` when the values are not one number.
fn one_length(headers: &HeaderMap) -> Option<Option<HeaderValue>> {
    let mut length: Option<u64> = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n = std::str::from_utf8(part).ok()?.parse::<u64>().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        }
    }
    Some(length.map(HeaderValue::from))
}

/// Checks and normalises a request's framing headers (hyper has read the framing already):
/// a transfer coding other than `chunked` is refused with 501 (RFC 9112 6.1), a
/// `Content-Length` beside a transfer coding is dropped (the chunked framing is what was read),
/// and a `Content-Length` is rewritten as one decimal number.
///
/// # Errors
/// The 501 problem naming `transfer-encoding`, or a 400 naming `content-length`.
pub(super) fn request_framing(headers: &mut HeaderMap) -> Result<(), Response> {
    if headers.contains_key(TRANSFER_ENCODING) {
        if !crate::http::body::only_chunked(headers) {
            return Err(crate::http::body::unsupported_coding());
        }
        headers.remove(CONTENT_LENGTH);
        return Ok(());
    }
    match one_length(headers) {
        Some(Some(v)) => {
            headers.insert(CONTENT_LENGTH, v);
        }
        Some(None) => {}
        None => return Err(bad_request("content-length", "is not one decimal length")),
    }
    Ok(())
}

/// Checks and normalises an upstream response's framing headers as [`request_framing`] does
/// for a request.
///
/// # Errors
/// Why the response cannot be passed on (the 502's detail).
pub(super) fn response_framing(headers: &mut HeaderMap) -> Result<(), &'static str> {
    if headers.contains_key(TRANSFER_ENCODING) {
        if !crate::http::body::only_chunked(headers) {
            return Err("the upstream sent a transfer coding other than chunked");
        }
        headers.remove(CONTENT_LENGTH);
        return Ok(());
    }
    match one_length(headers) {
        Some(Some(v)) => {
            headers.insert(CONTENT_LENGTH, v);
            Ok(())
        }
        Some(None) => Ok(()),
        None => Err("the upstream sent a Content-Length that is not one decimal length"),
    }
}

/// Whether `name` is a rate-limit field: `RateLimit`, `RateLimit-*` (the IETF draft's, old and
/// new), `X-RateLimit-*` and `X-Rate-Limit-*`.
fn is_rate_limit_field(name: &HeaderName) -> bool {
    let n = name.as_str();
    n == "ratelimit"
        || n.starts_with("ratelimit-")
        || n.starts_with("x-ratelimit-")
        || n.starts_with("x-rate-limit-")
}

/// The upstream's own 429 with its rate-limit fields and `Retry-After`, carried on the
/// response past the rate-limit layer, which adds Floodgate's fields to every admitted
/// response; [`restore_upstream_denial`] puts the upstream's back.
#[derive(Debug, Clone)]
pub(super) struct UpstreamDenial(HeaderMap);

/// Applies the merge rule to an upstream response before the rate-limit layer adds
/// Floodgate's fields. On the upstream's 429 its fields are kept (and remembered in an
/// [`UpstreamDenial`]). On any other status the upstream's rate-limit fields are removed, and
/// its `Retry-After` too unless the status gives it another meaning (3xx, 503: RFC 9110
/// 10.2.3), so the client sees one rate limit: Floodgate's.
pub(super) fn own_rate_limit_fields(response: &mut Response) {
    let status = response.status();
    let headers = response.headers_mut();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let mut kept = HeaderMap::new();
        for (name, value) in headers.iter() {
            if is_rate_limit_field(name) || name == RETRY_AFTER {
                kept.append(name.clone(), value.clone());
            }
        }
        response.extensions_mut().insert(UpstreamDenial(kept));
        return;
    }
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_rate_limit_field(n))
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
    if !(status.is_redirection() || status == StatusCode::SERVICE_UNAVAILABLE) {
        headers.remove(RETRY_AFTER);
    }
}

/// After the rate-limit layer: an upstream 429 leaves with exactly the upstream's own
/// rate-limit fields and `Retry-After` (Floodgate admitted the request; the upstream denied
/// it, and its numbers are the ones that hold).
pub(super) fn restore_upstream_denial(response: &mut Response) {
    let Some(UpstreamDenial(kept)) = response.extensions_mut().remove::<UpstreamDenial>() else {
        return;
    };
    let headers = response.headers_mut();
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_rate_limit_field(n) || *n == RETRY_AFTER)
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
    for (name, value) in &kept {
        headers.append(name.clone(), value.clone());
    }
}

/// The answer to a request whose body could not be read (malformed chunked framing, or a body
/// that ended early): the client's 400, not the upstream's failure.
pub(super) fn unreadable_body() -> Response {
    bad_request(
        "body",
        "could not be read: its chunked framing is malformed or it ended early",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, hosts: &[&'static str], version: http::Version) -> Parts {
        let mut b = http::Request::builder().uri(uri).version(version);
        for h in hosts {
            b = b.header("host", *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_absolute_forms_authority_becomes_the_host() {
        let mut p = parts("http://Other.Example./api?q", &[], http::Version::HTTP_11);
        one_authority(&mut p).unwrap();
        assert_eq!(p.headers["host"], "other.example");
        assert_eq!(p.uri, "/api?q");
        let mut p = parts(
            "http://other.example/api",
            &["api.example.com"],
            http::Version::HTTP_11,
        );
        assert_eq!(one_authority(&mut p).unwrap_err().status(), 400);
        let mut p = parts(
            "http://api.example.com/",
            &["API.example.com."],
            http::Version::HTTP_2,
        );
        one_authority(&mut p).unwrap();
        assert_eq!(p.headers["host"], "api.example.com");
        for hosts in [
            &[][..],
            &["a, b"],
            &[""],
            &["a", "a"],
            &["api.example.com:abc"],
        ] {
            let mut p = parts("/x", hosts, http::Version::HTTP_11);
            assert_eq!(
                one_authority(&mut p).unwrap_err().status(),
                400,
                "{hosts:?}"
            );
        }
    }

    #[test]
    fn lengths_are_one_decimal_number_and_never_beside_a_coding() {
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("005"));
        response_framing(&mut h).unwrap();
        assert_eq!(h["content-length"], "5");
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        response_framing(&mut h).unwrap();
        assert!(h.get("content-length").is_none());
        h.insert(
            "transfer-encoding",
            HeaderValue::from_static("gzip, chunked"),
        );
        assert!(response_framing(&mut h).is_err());
        assert_eq!(request_framing(&mut h).unwrap_err().status(), 501);
        for twice in [&["chunked, chunked"][..], &["chunked", "chunked"], &[""]] {
            let mut t = HeaderMap::new();
            for v in twice {
                t.append("transfer-encoding", HeaderValue::from_static(v));
            }
            assert!(response_framing(&mut t).is_err(), "{twice:?}");
        }
        let mut h = HeaderMap::new();
        h.append("content-length", HeaderValue::from_static("3"));
        h.append("content-length", HeaderValue::from_static("4"));
        assert!(response_framing(&mut h).is_err());
    }

    #[test]
    fn client_address_headers_go_in_every_spelling_unless_kept() {
        let mut h = HeaderMap::new();
        for name in [
            "true-client-ip",
            "cf-connecting-ip",
            "x_forwarded_for",
            "x-original-url",
        ] {
            h.insert(HeaderName::from_static(name), HeaderValue::from_static("1"));
        }
        h.insert("x-kept", HeaderValue::from_static("1"));
        let forwarding = [HeaderName::from_static("x-forwarded-for")];
        strip_client_address(
            &mut h,
            &forwarding,
            &[HeaderName::from_static("cf-connecting-ip")],
        );
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["cf-connecting-ip", "x-kept"]);
        assert!(client_address_header("CF-Connecting-IP").is_ok());
        assert!(client_address_header("x-forwarded-for").is_err());
    }
}
