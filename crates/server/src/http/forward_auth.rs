//! `GET|POST /v1/forward-auth`: the rules applied to a request a reverse proxy asks about.
//!
//! The proxy sends a sub-request carrying the original request's headers plus where it was
//! going:
//! - Traefik `ForwardAuth` and Caddy `forward_auth`: `X-Forwarded-Method`, `X-Forwarded-Host`,
//!   `X-Forwarded-Uri`, `X-Forwarded-For`;
//! - nginx `auth_request`: `X-Original-URI` (and `X-Original-Method` if the snippet sets it),
//!   `X-Forwarded-For`.
//!
//! The original method, URI and host are rebuilt from these (falling back to the sub-request's
//! own), and the rules are evaluated by floodgate-tower exactly as for a proxied request. The
//! client IP is the TCP peer (the proxy) unless the peer is in `[server] trusted_proxies`, in
//! which case `X-Forwarded-For` is read from the right. Answers: 200 with `RateLimit-Policy` /
//! `RateLimit` headers when admitted; 429 problem+json with `Retry-After` when denied (Traefik
//! and Caddy pass a non-2xx answer to the client as is; for nginx, `?deny_status=403`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::response::{IntoResponse, Response};
use floodgate_tower::PeerAddr;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};

use crate::serve::AppState;

/// Query parameters of the forward-auth endpoint.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ForwardAuthQuery {
    /// Status of a denial: 429 (default) or 403. nginx's `auth_request` treats every status
    /// but 2xx, 401 and 403 as an error (500), so its snippet asks for 403 and maps it back to
    /// 429 with `error_page`.
    deny_status: Option<u16>,
}

/// The handler.
pub(super) async fn forward_auth(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<ForwardAuthQuery>,
    method: Method,
    mut headers: HeaderMap,
) -> Response {
    let deny_status = match query.deny_status {
        None | Some(429) => StatusCode::TOO_MANY_REQUESTS,
        Some(403) => StatusCode::FORBIDDEN,
        Some(other) => {
            return super::invalid(
                StatusCode::BAD_REQUEST,
                "deny_status",
                format!("must be 429 or 403, got {other}"),
            )
        }
    };
    let (method, uri) = original_request(&method, &mut headers);
    crate::serve::cost::inject(&state.config(), &method, &uri, &mut headers);
    let mut extensions = http::Extensions::new();
    extensions.insert(PeerAddr(peer));
    let plan = state.limiter.plan(&method, &uri, &headers, &extensions);
    let verdict = state.limiter.evaluate(plan).await;
    match verdict.response() {
        Some(mut denied) => {
            if denied.status() == StatusCode::TOO_MANY_REQUESTS {
                *denied.status_mut() = deny_status;
            }
            super::from_tower(denied)
        }
        None => {
            let mut response = StatusCode::OK.into_response();
            verdict.apply_headers(response.headers_mut());
            response
        }
    }
}

/// The original method and URI from the forwarding headers; also points `Host` at the
/// original host so host matchers see it.
fn original_request(own_method: &Method, headers: &mut HeaderMap) -> (Method, Uri) {
    let text = |h: &HeaderMap, name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let method = text(headers, "x-forwarded-method")
        .or_else(|| text(headers, "x-original-method"))
        .and_then(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok())
        .unwrap_or_else(|| own_method.clone());
    let uri = text(headers, "x-forwarded-uri")
        .or_else(|| text(headers, "x-original-uri"))
        .and_then(|u| u.parse::<Uri>().ok())
        // An absolute URI (some proxies send one) is reduced to its path and query.
        .map(|u| match u.path_and_query() {
            Some(pq) => pq.as_str().parse().unwrap_or(u),
            None => u,
        })
        .unwrap_or_else(|| Uri::from_static("/"));
    if let Some(host) = text(headers, "x-forwarded-host") {
        if let Ok(v) = HeaderValue::from_str(&host) {
            headers.insert(http::header::HOST, v);
        }
    }
    (method, uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn traefik_and_caddy_headers() {
        let mut h = headers(&[
            ("x-forwarded-method", "post"),
            ("x-forwarded-uri", "/api/search?q=1"),
            ("x-forwarded-host", "api.example.com"),
            ("host", "floodgate:8080"),
        ]);
        let (m, u) = original_request(&Method::GET, &mut h);
        assert_eq!(m, Method::POST);
        assert_eq!(u, "/api/search?q=1");
        assert_eq!(h["host"], "api.example.com");
    }

    #[test]
    fn nginx_headers_and_fallbacks() {
        let mut h = headers(&[("x-original-uri", "/login"), ("x-original-method", "PUT")]);
        let (m, u) = original_request(&Method::GET, &mut h);
        assert_eq!((m, u.path()), (Method::PUT, "/login"));
        let mut h = headers(&[]);
        let (m, u) = original_request(&Method::GET, &mut h);
        assert_eq!((m, u.path()), (Method::GET, "/"));
        let mut h = headers(&[("x-forwarded-uri", "http://example.com/a?b")]);
        assert_eq!(original_request(&Method::GET, &mut h).1, "/a?b");
    }
}
