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
//!
//! `GET|POST /v1/forward-auth/<original path>`: Envoy's `ext_authz` filter (`http_service`)
//! appends the original request's path and query to its `path_prefix`, so the suffix is the
//! original URI when no forwarding header names one; its query is the original request's, so
//! `deny_status` is not read there (a denial is 429, which Envoy passes to the client).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use floodgate_tower::{Mode, PeerAddr};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};

use crate::state::AppState;

/// The handler. Query parameter `deny_status`: the status of a denial, 429 (default) or 403.
/// nginx's `auth_request` treats every status but 2xx, 401 and 403 as an error (500), so its
/// snippet asks for 403 and maps it back to 429 with `error_page`.
pub(super) async fn forward_auth(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    query: super::QueryParams,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let deny_status = match query.u16("deny_status") {
        Err(problem) => return problem,
        Ok(None | Some(429)) => StatusCode::TOO_MANY_REQUESTS,
        Ok(Some(403)) => StatusCode::FORBIDDEN,
        Ok(Some(other)) => {
            return super::invalid(
                StatusCode::BAD_REQUEST,
                "deny_status",
                format!("must be 429 or 403, got {other}"),
            )
        }
    };
    decide(&state, peer, deny_status, method, headers, None).await
}

/// `/v1/forward-auth/<original path>` (Envoy `ext_authz`): the suffix is the original path and
/// query when no `X-Forwarded-Uri` / `X-Original-URI` is present.
pub(super) async fn forward_auth_suffix(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let suffix = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .and_then(|pq| pq.strip_prefix("/v1/forward-auth"))
        .unwrap_or("/");
    // A part of a URI that parsed parses too; kept total without widening to `/`.
    let Ok(original) = suffix.parse::<Uri>() else {
        return super::invalid(
            StatusCode::BAD_REQUEST,
            "path",
            "the path after /v1/forward-auth is not a URI path",
        );
    };
    decide(
        &state,
        peer,
        StatusCode::TOO_MANY_REQUESTS,
        method,
        headers,
        Some(original),
    )
    .await
}

/// Evaluates the original request and answers; `fallback` is its URI when no forwarding
/// header names one.
async fn decide(
    state: &AppState,
    peer: SocketAddr,
    deny_status: StatusCode,
    method: Method,
    mut headers: HeaderMap,
    fallback: Option<Uri>,
) -> Response {
    let (method, uri) = original_request(&method, &mut headers, fallback);
    let mut extensions = http::Extensions::new();
    extensions.insert(PeerAddr(peer));
    let plan = state.limiter.plan(&method, &uri, &headers, &extensions);
    let verdict = state.limiter.evaluate(plan, Mode::Check).await;
    match verdict.response() {
        Some(denied) => {
            if denied.status() == StatusCode::TOO_MANY_REQUESTS {
                super::from_tower(with_status(denied, deny_status))
            } else {
                super::from_tower(denied)
            }
        }
        None => {
            let mut response = StatusCode::OK.into_response();
            verdict.apply_headers(response.headers_mut());
            response
        }
    }
}

/// `response` with `status`, also in its problem+json body's `status` and `title` members,
/// which RFC 9457 (section 3.1.4) wants to agree with the HTTP status. A body that is not a JSON object is kept.
fn with_status(
    response: http::Response<bytes::Bytes>,
    status: StatusCode,
) -> http::Response<bytes::Bytes> {
    let (mut parts, body) = response.into_parts();
    parts.status = status;
    let body = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(mut problem) if problem.is_object() => {
            problem["status"] = status.as_u16().into();
            // The title names the status sent (RFC 9457 section 3.1.3: the same for every
            // occurrence of the problem type; the type still says rate-limited).
            if let Some(title) = status.canonical_reason() {
                problem["title"] = title.into();
            }
            problem.to_string().into()
        }
        _ => body,
    };
    // The length changed; the server computes it again from the body.
    parts.headers.remove(http::header::CONTENT_LENGTH);
    http::Response::from_parts(parts, body)
}

/// The original method and URI from the forwarding headers; also points `Host` at the
/// original host so host matchers see it.
fn original_request(
    own_method: &Method,
    headers: &mut HeaderMap,
    fallback: Option<Uri>,
) -> (Method, Uri) {
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
        .unwrap_or_else(|| fallback.unwrap_or_else(|| Uri::from_static("/")));
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
        let (m, u) = original_request(&Method::GET, &mut h, None);
        assert_eq!(m, Method::POST);
        assert_eq!(u, "/api/search?q=1");
        assert_eq!(h["host"], "api.example.com");
    }

    #[test]
    fn a_denial_sent_as_403_says_403_in_its_body_too() {
        let denied = http::Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("content-type", "application/problem+json")
            .header("retry-after", "3")
            .header("content-length", "43")
            .body(bytes::Bytes::from_static(
                br#"{"status":429,"title":"Too Many Requests"}"#,
            ))
            .unwrap();
        let r = with_status(denied, StatusCode::FORBIDDEN);
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(r.headers()["retry-after"], "3");
        assert!(r.headers().get("content-length").is_none());
        let body: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"status": 403, "title": "Forbidden"})
        );
    }

    #[test]
    fn nginx_headers_and_fallbacks() {
        let mut h = headers(&[("x-original-uri", "/login"), ("x-original-method", "PUT")]);
        let (m, u) = original_request(&Method::GET, &mut h, None);
        assert_eq!((m, u.path()), (Method::PUT, "/login"));
        let mut h = headers(&[]);
        let (m, u) = original_request(&Method::GET, &mut h, None);
        assert_eq!((m, u.path()), (Method::GET, "/"));
        let mut h = headers(&[("x-forwarded-uri", "http://example.com/a?b")]);
        assert_eq!(original_request(&Method::GET, &mut h, None).1, "/a?b");
    }

    /// Envoy ext_authz appends the original path to the path prefix: without a forwarding
    /// header the suffix is the original URI; a forwarding header still wins.
    #[test]
    fn envoy_ext_authz_path_suffix_is_the_original_uri() {
        let mut h = headers(&[]);
        let (_, u) = original_request(&Method::GET, &mut h, Some("/api/x?q=1".parse().unwrap()));
        assert_eq!(u, "/api/x?q=1");
        let mut h = headers(&[("x-forwarded-uri", "/other")]);
        let (_, u) = original_request(&Method::GET, &mut h, Some("/api/x".parse().unwrap()));
        assert_eq!(u, "/other");
    }
}
