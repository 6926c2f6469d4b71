//! Reverse-proxy mode (`--upstream http://host:port`): every request on `--listen` goes through
//! the floodgate-tower rate-limit layer, then to the upstream, streaming both bodies through
//! unchanged (nothing is buffered).
//!
//! Per RFC 9110 section 7.6.1 the hop-by-hop headers (`Connection` and the headers it names,
//! `Keep-Alive`, `Proxy-Connection`, `Proxy-Authenticate`, `Proxy-Authorization`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`) are removed in both directions. An unreachable
//! upstream is a 502 problem+json; the upstream client's connection cap and timeouts (504,
//! 408) are in [`upstream`].
//!
//! Forwarding headers tell the upstream who the client is, so a client must not be able to
//! write them. When the TCP peer is in `[server] trusted_proxies` (a proxy in front of us), the
//! peer is appended to its `X-Forwarded-For`, and its `X-Forwarded-Host`, `X-Forwarded-Proto`,
//! `X-Real-IP` and `Forwarded` are passed on (the two `X-Forwarded-*` set from what we saw when
//! absent). When the peer is not trusted, every client-supplied forwarding header
//! ([`CLIENT_FORWARDING_HEADERS`]) is dropped and the upstream gets `X-Forwarded-For` = the
//! peer, `X-Forwarded-Proto` = `http` (the listener speaks plain HTTP) and `X-Forwarded-Host`
//! = the request's `Host`.
//!
//! [`rewrite`] holds what else is changed or refused: before the rate-limit layer the request
//! gets one normalised authority as its `Host` (host rules match what is forwarded) and its
//! framing is checked; client-address headers from untrusted peers are dropped; the upstream's
//! framing and rate-limit fields are rewritten on the way back. `docs/proxies.md` lists it all.

mod rewrite;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use floodgate_tower::RateLimitLayer;
use http::header::{HeaderName, CONNECTION, CONTENT_LENGTH, HOST};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Uri};
use http_body_util::BodyExt;

use crate::state::AppState;

pub(crate) use rewrite::client_address_header;

mod upstream;

/// State of the proxy handler.
#[derive(Debug, Clone)]
struct Proxy {
    upstream: Uri,
    client: upstream::Upstream,
    /// For the trusted proxies in force (they follow reloads).
    state: Arc<AppState>,
}

/// Forwarding headers dropped from a request whose peer is not a trusted proxy: a client could
/// otherwise tell the upstream it is someone else, or came over HTTPS.
const CLIENT_FORWARDING_HEADERS: [HeaderName; 8] = [
    HeaderName::from_static("x-forwarded-for"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-proto"),
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-forwarded-prefix"),
    HeaderName::from_static("x-forwarded-server"),
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("forwarded"),
];

// Names made once (a `&str` name is parsed and validated on every look-up).
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The proxy router: rate-limit layer around a forwarding handler for every path and method.
///
/// # Panics
/// When called without an upstream (the caller only builds it in proxy mode).
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let upstream = state
        .upstream
        .clone()
        .expect("the proxy router needs an upstream");
    let client = upstream::Upstream::new(&state.config_now().server.limits);
    let proxy = Proxy {
        upstream,
        client,
        state: Arc::clone(&state),
    };
    Router::new()
        .fallback(forward)
        .with_state(proxy)
        .layer(RateLimitLayer::new(state.limiter.clone()))
        .layer(axum::middleware::from_fn(edge))
}

/// Outside the rate-limit layer: gives the request its one authority and checks its framing
/// before the limiter runs (a request refused here is not charged), and puts an upstream
/// 429's own rate-limit fields back after it.
async fn edge(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Err(refused) = rewrite::one_authority(&mut parts) {
        return refused;
    }
    if let Err(refused) = rewrite::request_framing(&mut parts.headers) {
        return refused;
    }
    let mut response = next.run(Request::from_parts(parts, body)).await;
    rewrite::restore_upstream_denial(&mut response);
    response
}

async fn forward(
    State(proxy): State<Proxy>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let mut uri = proxy.upstream.clone().into_parts();
    // The request's own path and query (a shared buffer, not a copy).
    uri.path_and_query = Some(
        parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    parts.uri = match Uri::from_parts(uri) {
        Ok(u) => u,
        Err(_) => return upstream::bad_gateway("cannot build the upstream URI"),
    };
    remove_hop_by_hop(&mut parts.headers);
    // One snapshot for both: the trusted proxies and the headers kept follow reloads together.
    let config = proxy.state.config_now();
    let ip = floodgate_tower::canonical_ip(peer.ip());
    let trusted = config
        .server
        .trusted_proxies
        .iter()
        .any(|net| net.contains(&ip));
    if !trusted {
        rewrite::strip_client_address(
            &mut parts.headers,
            &CLIENT_FORWARDING_HEADERS,
            &config.server.keep_client_headers,
        );
    }
    // Not held across the upstream call.
    drop(config);
    add_forwarded(&mut parts.headers, peer, trusted);
    rewrite::append_via(&mut parts.headers, parts.version);
    // The upstream speaks HTTP/1.1 (or h2c through ALPN-less prior knowledge, not used here).
    parts.version = http::Version::HTTP_11;
    // A client body that fails to read (malformed chunking) fails the upstream request too:
    // remembered, so that it is answered as the client's error.
    let unreadable = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&unreadable);
    let body = Body::new(body.map_err(move |e| {
        flag.store(true, Ordering::Relaxed);
        e
    }));
    let upstream_request = http::Request::from_parts(parts, body);
    match proxy.client.send(upstream_request, &unreadable).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            // Before the hop-by-hop headers go: the framing is read from Transfer-Encoding.
            if let Err(why) = rewrite::response_framing(&mut parts.headers) {
                tracing::warn!(upstream = %proxy.upstream, "{why}");
                return upstream::bad_gateway(why);
            }
            remove_hop_by_hop(&mut parts.headers);
            rewrite::append_via(&mut parts.headers, parts.version);
            // Answer in our own protocol version (an HTTP/1.0 upstream must not downgrade the
            // client's connection); hyper adapts it to the client's request.
            parts.version = http::Version::HTTP_11;
            let mut response = Response::from_parts(parts, body);
            rewrite::own_rate_limit_fields(&mut response);
            response
        }
        Err(answer) => answer,
    }
}

const HOP_BY_HOP: [HeaderName; 8] = [
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
    HeaderName::from_static("proxy-authorization"),
    HeaderName::from_static("te"),
    HeaderName::from_static("trailer"),
    HeaderName::from_static("transfer-encoding"),
    HeaderName::from_static("upgrade"),
];

/// Removes the hop-by-hop headers, including those the `Connection` header lists, except the
/// ones no `Connection` may remove: `Host`, `Content-Length` and the forwarding headers.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .filter(|name| {
                name != HOST && name != CONTENT_LENGTH && !CLIENT_FORWARDING_HEADERS.contains(name)
            })
            .collect();
        for name in named {
            headers.remove(name);
        }
        headers.remove(CONNECTION);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Sets the forwarding headers for the upstream. From a `trusted` peer: appends the peer to
/// `X-Forwarded-For` (joining earlier lines into one) and sets `X-Forwarded-Host` /
/// `X-Forwarded-Proto` when absent. From any other peer: first drops every client-supplied
/// [`CLIENT_FORWARDING_HEADERS`], so the upstream sees only what this proxy saw.
fn add_forwarded(headers: &mut HeaderMap, peer: SocketAddr, trusted: bool) {
    if !trusted {
        for name in &CLIENT_FORWARDING_HEADERS {
            headers.remove(name);
        }
    }
    let ip = floodgate_tower::canonical_ip(peer.ip()).to_string();
    let earlier: Vec<String> = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let value = if earlier.is_empty() {
        ip
    } else {
        format!("{}, {ip}", earlier.join(", "))
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    if !headers.contains_key(&X_FORWARDED_HOST) {
        if let Some(host) = headers.get(http::header::HOST).cloned() {
            headers.insert(X_FORWARDED_HOST, host);
        }
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "1");
    }

    #[test]
    fn a_trusted_peer_is_appended_and_its_headers_kept() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        h.insert("host", HeaderValue::from_static("example.com"));
        h.insert("x-real-ip", HeaderValue::from_static("198.51.100.1"));
        add_forwarded(&mut h, "[::ffff:127.0.0.1]:5000".parse().unwrap(), true);
        assert_eq!(h["x-forwarded-for"], "198.51.100.1, 10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-host"], "example.com");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-real-ip"], "198.51.100.1");
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        h.insert(
            "x-forwarded-host",
            HeaderValue::from_static("public.example"),
        );
        add_forwarded(&mut h, "127.0.0.2:1".parse().unwrap(), true);
        assert_eq!(h["x-forwarded-for"], "127.0.0.2");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "public.example");
    }

    #[test]
    fn an_untrusted_peer_cannot_write_forwarding_headers() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example.com"));
        h.insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        h.insert(
            "x-forwarded-host",
            HeaderValue::from_static("admin.internal"),
        );
        h.insert("x-forwarded-port", HeaderValue::from_static("443"));
        h.insert("x-real-ip", HeaderValue::from_static("10.0.0.1"));
        h.insert(
            "forwarded",
            HeaderValue::from_static("for=10.0.0.1;proto=https"),
        );
        h.insert("x-kept", HeaderValue::from_static("1"));
        add_forwarded(&mut h, "203.0.113.5:4000".parse().unwrap(), false);
        assert_eq!(h["x-forwarded-for"], "203.0.113.5");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com");
        for gone in ["x-forwarded-port", "x-real-ip", "forwarded"] {
            assert!(h.get(gone).is_none(), "{gone} passed through");
        }
        assert_eq!(h["x-kept"], "1");
        assert_eq!(h.len(), 5, "{h:?}");
    }
}
