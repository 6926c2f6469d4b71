//! `GET|POST /v1/forward-auth`: the rules applied to a request a reverse proxy asks about.
//!
//! The proxy sends a sub-request carrying the original request's headers plus where it was
//! going:
//! - Traefik `ForwardAuth` and Caddy `forward_auth`: `X-Forwarded-Method`, `X-Forwarded-Host`,
//!   `X-Forwarded-Uri`, `X-Forwarded-For`;
//! - nginx `auth_request`: what its configuration sets; the one in `docs/proxies/` sets the
//!   same four `X-Forwarded-*` headers (others use `X-Original-URI` / `X-Original-Method`).
//!
//! The original method, URI and host are rebuilt from these (the method and host falling back
//! to the sub-request's own, the URI to `/` when neither header is sent), and the rules are
//! evaluated by floodgate-tower exactly as for a proxied request. The URI is the proxy's bytes,
//! never widened: see [`super::forwarded_uri`]; a value that cannot be read is a 400 naming the
//! header, counted in `floodgate_requests_rejected_total{reason="invalid"}`. The
//! client IP is the TCP peer (the proxy) unless the peer is in `[server] trusted_proxies`, in
//! which case `X-Forwarded-For` is read from the right. Answers: 200 with `RateLimit-Policy` /
//! `RateLimit` headers when admitted; 429 problem+json with `Retry-After` when denied (Traefik
//! and Caddy pass a non-2xx answer to the client as is; for nginx, `?deny_status=403`).
//!
//! `/v1/forward-auth/<path>` (Envoy `ext_authz`) is different: Envoy built that URL from the
//! original request, so its suffix is the original path and query, the sub-request's own
//! method and `Host` are the original ones, and no `X-Forwarded-*` / `X-Original-*` header is
//! read. Envoy passes client headers on (every one, unless `allowed_headers` narrows them), so
//! reading them would let a client name another path, method or host and walk around the rules.
//!
//! A rule with `delay` (the delay mode) holds the answer: a request that fits within the
//! delay is reserved and answered 200 at its slot, so the proxy forwards it then; the proxy's
//! auth timeout must be longer than the delay (`docs/proxies.md`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};

use crate::state::AppState;

/// The handler. Query parameter `deny_status`: the status of a denial, 429 (default) or 403.
/// nginx's `auth_request` treats every status but 2xx, 401 and 403 as an error (500), so its
/// snippet asks for 403 and maps it back to 429 with `error_page`.
pub(super) async fn forward_auth(
    State(state): State<Arc<AppState>>,
    query: super::query::QueryParams,
    request: Request,
) -> Response {
    let deny_status = match query.u16("deny_status") {
        Err(problem) => return problem,
        Ok(None | Some(429)) => StatusCode::TOO_MANY_REQUESTS,
        Ok(Some(403)) => StatusCode::FORBIDDEN,
        Ok(Some(other)) => {
            return super::problem::invalid(
                StatusCode::BAD_REQUEST,
                "deny_status",
                format!("must be 429 or 403, got {other}"),
            )
        }
    };
    decide(&state, deny_status, request, None).await
}

/// `/v1/forward-auth/<original path>` (Envoy `ext_authz`, which appends the original path to
/// its `path_prefix`): the suffix is the original path and query, whatever forwarding headers
/// the client sent along.
pub(super) async fn forward_auth_suffix(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> Response {
    let suffix = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str())
        .and_then(|pq| pq.strip_prefix("/v1/forward-auth"))
        .unwrap_or("/");
    // Read as a forwarded URI is (never widened to `/`).
    let original = match super::forwarded_uri::read(suffix.as_bytes()) {
        Ok(original) => original,
        Err(why) => return super::problem::invalid(StatusCode::BAD_REQUEST, "path", why),
    };
    decide(
        &state,
        StatusCode::TOO_MANY_REQUESTS,
        request,
        Some(original),
    )
    .await
}

/// Evaluates the original request and answers; `suffix` is its URI as Envoy put it in the
/// URL (then no forwarding header is read), `None` on the bare endpoint. The sub-request's
/// parts are taken as they are (its headers are not copied; its extensions carry the peer
/// address, `ConnectInfo`, which the limiter reads); its body is not read.
async fn decide(
    state: &AppState,
    deny_status: StatusCode,
    request: Request,
    suffix: Option<Uri>,
) -> Response {
    let (mut parts, _body) = request.into_parts();
    let headers = &mut parts.headers;
    let (method, uri) = match original_request(&parts.method, headers, suffix) {
        Ok(original) => original,
        Err(problem) => return problem,
    };
    let headers = &parts.headers;
    let mut plan = state
        .limiter
        .plan(&method, &uri, headers, &parts.extensions);
    // Read only when the request could be held: without a delay the header means nothing
    // here, and a client's own junk value (nginx passes client headers on) must not fail it.
    if headers.contains_key(EXPECTED_TIMEOUT) && plan.delay() > 0 {
        match caller_patience(headers) {
            Ok(Some(max)) => plan.limit_delay(max),
            Ok(None) => {}
            Err(problem) => return problem,
        }
    }
    // A check, or in the delay mode a reservation held until its slot (the proxy waiting for
    // this answer holds the client's request meanwhile; if it gives up, the slot is given
    // back).
    let verdict = state.limiter.admit(plan).await;
    match floodgate_tower::response::for_verdict_denying_with(&verdict, deny_status) {
        Some(refused) => super::problem::from_tower(refused),
        None => {
            let mut response = StatusCode::OK.into_response();
            floodgate_tower::response::apply_headers(response.headers_mut(), &verdict.outcomes);
            response
        }
    }
}

/// The headers that carry the original URI, in the order they are read.
const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

const URI_HEADERS: [HeaderName; 2] = [
    HeaderName::from_static("x-forwarded-uri"),
    HeaderName::from_static("x-original-uri"),
];

/// The header Envoy announces its timeout for this call in (milliseconds).
const EXPECTED_TIMEOUT: &str = "x-envoy-expected-rq-timeout-ms";

/// Envoy's `x-envoy-expected-rq-timeout-ms` on its `ext_authz` call: how long Envoy waits for
/// this answer. The delay mode holds the request for nine tenths of it at most (the rest for
/// the answer's way back), so a request whose slot is further away gets its 429 at once
/// instead of Envoy giving up on it and failing open (forwarding it unlimited) or closed (a
/// bare 403). `None` without the header; a value that is not a whole number of milliseconds
/// is a 400 naming the header (read only for a request the delay mode could hold).
fn caller_patience(headers: &HeaderMap) -> Result<Option<u64>, Response> {
    let mut values = headers.get_all(EXPECTED_TIMEOUT).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let ms = value
        .to_str()
        .ok()
        .filter(|_| values.next().is_none())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            super::problem::invalid(
                StatusCode::BAD_REQUEST,
                EXPECTED_TIMEOUT,
                "not one whole number of milliseconds",
            )
        })?;
    Ok(Some(ms.saturating_mul(900)))
}

/// The detail of a forwarded method that is no RFC 9110 token.
const NOT_A_METHOD: &str =
    "is not an HTTP method: one RFC 9110 token (letters, digits, !#$%&'*+-.^_`|~), case-sensitive";

/// The original method and URI: with a `suffix` (Envoy), the sub-request's own method and the
/// suffix, its `Host` left as it is; else from the forwarding headers, also pointing `Host` at
/// the original host so host matchers see it.
///
/// # Errors
/// A 400 problem naming the header: `Host`, a method, host or URI header sent twice; a
/// method or host header that is empty or not visible ASCII, or no method or host; a URI
/// header that cannot be read ([`super::forwarded_uri::read`]).
pub(super) fn original_request(
    own_method: &Method,
    headers: &mut HeaderMap,
    suffix: Option<Uri>,
) -> Result<(Method, Uri), Response> {
    // Two `Host` lines could name two hosts, whichever endpoint is called.
    if headers.get_all(http::header::HOST).iter().nth(1).is_some() {
        return Err(super::problem::invalid(
            StatusCode::BAD_REQUEST,
            "host",
            "sent more than once",
        ));
    }
    if let Some(uri) = suffix {
        return Ok((own_method.clone(), uri));
    }
    // A header that is present must be read: one that is not visible ASCII (`\xff`, an IDN in
    // UTF-8), empty or blank is refused, never skipped for the sub-request's own value (which
    // would walk around host and method rules).
    // (Header names as constants: a `&str` name is parsed at every lookup.)
    fn text<'h>(h: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h str>, Response> {
        let Some(value) = h.get(name) else {
            return Ok(None);
        };
        value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(Some)
            .ok_or_else(|| {
                super::problem::invalid(
                    StatusCode::BAD_REQUEST,
                    name.as_str(),
                    "is empty or not visible ASCII",
                )
            })
    }
    // Two values of a header that says what the original request was could name two requests:
    // refused, as a repeated URI header is.
    for name in [&X_FORWARDED_METHOD, &X_ORIGINAL_METHOD, &X_FORWARDED_HOST] {
        if headers.get_all(name).iter().nth(1).is_some() {
            return Err(super::problem::invalid(
                StatusCode::BAD_REQUEST,
                name.as_str(),
                "sent more than once",
            ));
        }
    }
    // Present but unreadable is a 400 (`text`); an RFC 9110 token, case-sensitive as methods
    // are (`post` is not `POST`): never guessed.
    let (name, method) = match text(headers, &X_FORWARDED_METHOD)? {
        Some(m) => ("x-forwarded-method", Some(m)),
        None => ("x-original-method", text(headers, &X_ORIGINAL_METHOD)?),
    };
    let method = match method {
        Some(m) => Method::from_bytes(m.trim_ascii().as_bytes())
            .map_err(|_| super::problem::invalid(StatusCode::BAD_REQUEST, name, NOT_A_METHOD))?,
        None => own_method.clone(),
    };
    let uri = original_uri(headers)?;
    if let Some(host) = text(headers, &X_FORWARDED_HOST)? {
        // The spelling host rules compare (floodgate_tower::normalize_authority); what cannot
        // be a host is refused rather than matched against no host rule.
        let host = floodgate_tower::normalize_authority(host.as_bytes()).map_err(|why| {
            super::problem::invalid(StatusCode::BAD_REQUEST, "x-forwarded-host", why)
        })?;
        if let Ok(v) = HeaderValue::from_str(host.as_str()) {
            headers.insert(http::header::HOST, v);
        }
    }
    Ok((method, uri))
}

/// The URI of the first of [`URI_HEADERS`] that is present; `/` when neither is.
fn original_uri(headers: &HeaderMap) -> Result<Uri, Response> {
    for name in &URI_HEADERS {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            continue;
        };
        if values.next().is_some() {
            // Two values could name two paths: which one the upstream serves is not known.
            return Err(super::problem::invalid(
                StatusCode::BAD_REQUEST,
                name.as_str(),
                "sent more than once",
            ));
        }
        return super::forwarded_uri::read(value.as_bytes())
            .map_err(|why| super::problem::invalid(StatusCode::BAD_REQUEST, name.as_str(), why));
    }
    Ok(Uri::from_static("/"))
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
            ("x-forwarded-method", "POST"),
            ("x-forwarded-uri", "/api/search?q=1"),
            ("x-forwarded-host", "api.example.com"),
            ("host", "floodgate:8080"),
        ]);
        let (m, u) = original_request(&Method::GET, &mut h, None).unwrap();
        assert_eq!(m, Method::POST);
        assert_eq!(u, "/api/search?q=1");
        assert_eq!(h["host"], "api.example.com");
        // Methods are case-sensitive tokens: `post` is its own method, `P OST` none.
        let mut h = headers(&[("x-forwarded-method", "post")]);
        let (m, _) = original_request(&Method::GET, &mut h, None).unwrap();
        assert_eq!(m.as_str(), "post");
        let mut h = headers(&[("x-forwarded-method", "P OST")]);
        assert!(original_request(&Method::GET, &mut h, None).is_err());
    }

    #[test]
    fn nginx_headers_and_fallbacks() {
        let mut h = headers(&[("x-original-uri", "/login"), ("x-original-method", "PUT")]);
        let (m, u) = original_request(&Method::GET, &mut h, None).unwrap();
        assert_eq!((m, u.path()), (Method::PUT, "/login"));
        let mut h = headers(&[]);
        let (m, u) = original_request(&Method::GET, &mut h, None).unwrap();
        assert_eq!((m, u.path()), (Method::GET, "/"));
        let mut h = headers(&[("x-forwarded-uri", "http://example.com/a?b")]);
        assert_eq!(
            original_request(&Method::GET, &mut h, None).unwrap().1,
            "/a?b"
        );
    }

    /// Envoy ext_authz appends the original path to the path prefix: the suffix is the
    /// original URI, and the forwarding headers a client sent along (Envoy passes client
    /// headers on) name nothing: not the path, the method or the host.
    #[test]
    fn envoy_ext_authz_path_suffix_wins_over_every_forwarding_header() {
        let mut h = headers(&[]);
        let suffix = Some("/api/x?q=1".parse().unwrap());
        let (_, u) = original_request(&Method::GET, &mut h, suffix).unwrap();
        assert_eq!(u, "/api/x?q=1");
        let mut h = headers(&[
            ("x-forwarded-uri", "/public"),
            ("x-original-uri", "/public"),
            ("x-forwarded-method", "OPTIONS"),
            ("x-original-method", "OPTIONS"),
            ("x-forwarded-host", "other.example"),
            ("host", "api.example.com"),
        ]);
        let suffix = Some("/api/x".parse().unwrap());
        let (m, u) = original_request(&Method::POST, &mut h, suffix).unwrap();
        assert_eq!((m, u), (Method::POST, "/api/x".parse::<Uri>().unwrap()));
        assert_eq!(h["host"], "api.example.com");
        // Not even a malformed or repeated one fails the request.
        let mut h = headers(&[("x-forwarded-uri", "api/login"), ("x-forwarded-uri", "/x")]);
        let suffix = Some("/api/x".parse().unwrap());
        assert!(original_request(&Method::GET, &mut h, suffix).is_ok());
    }

    #[test]
    fn x_forwarded_uri_wins_over_x_original_uri() {
        let mut h = headers(&[("x-original-uri", "/public"), ("x-forwarded-uri", "/api")]);
        assert_eq!(
            original_request(&Method::GET, &mut h, None).unwrap().1,
            "/api"
        );
    }

    async fn problem_of(response: Response) -> (StatusCode, serde_json::Value) {
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn an_unreadable_uri_is_a_400_naming_its_header() {
        for (name, value) in [
            ("x-forwarded-uri", "api/login"),
            ("x-original-uri", "/x#/../api"),
            ("x-forwarded-uri", ""),
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            let problem = original_request(&Method::GET, &mut h, None).unwrap_err();
            let (status, body) = problem_of(problem).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{value}");
            assert_eq!(body["field"], name, "{body}");
            assert!(body["detail"].as_str().unwrap().starts_with(name), "{body}");
        }
    }

    #[tokio::test]
    async fn a_uri_header_sent_twice_is_a_400() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-uri", HeaderValue::from_static("/public"));
        h.append("x-forwarded-uri", HeaderValue::from_static("/api/login"));
        let (status, body) =
            problem_of(original_request(&Method::GET, &mut h, None).unwrap_err()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["detail"], "x-forwarded-uri: sent more than once");
    }
}
