//! # floodgate-tower
//!
//! Rate limiting as a tower middleware for any axum or hyper (http 1.x) application, as
//! tower-governor is for governor: [`RateLimitLayer`] / [`RateLimit`] put a
//! [`RateLimiter`] (the engine, `floodgate-limiter`, re-exported here) in front of a service,
//! and [`response`] maps its [`Verdict`] to HTTP. Denied requests get `429`, `Retry-After`,
//! `RateLimit-Policy` / `RateLimit` headers and a problem+json body; admitted ones go on with
//! the `RateLimit` headers added. Rules, keys, client addresses and paths are the engine's
//! ([`Rule`], [`KeySource`], [`ClientIpConfig`], [`canonical_path`]).
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::{AlgorithmKind, ManualClock, Policy};
//! use floodgate_store::MemoryStore;
//! use floodgate_tower::{KeySource, PeerAddr, RateLimitLayer, RateLimiter, Rule, RuleSet};
//! use http::{Request, Response, StatusCode};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = ManualClock::new(1_700_000_000_000_000);
//! let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
//! let policy = Policy::new(AlgorithmKind::Gcra, "2/10s".parse().unwrap()).unwrap();
//! let rules = RuleSet::new(vec![Rule::new("per-ip", policy, KeySource::ClientIp)]);
//! let layer = RateLimitLayer::new(RateLimiter::new(store, rules));
//! let app = layer.layer(service_fn(|_req: Request<String>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
//! }));
//!
//! let request = || {
//!     let mut r = Request::new(String::new());
//!     r.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse().unwrap()));
//!     r
//! };
//! let ok = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(ok.headers()["ratelimit"], "\"per-ip\";r=1;t=5");
//! app.clone().oneshot(request()).await.unwrap();
//! let denied = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(denied.headers()["retry-after"], "5");
//! # });
//! ```

mod future;
mod layer;
pub mod response;
mod service;

pub use future::{ResponseBody, ResponseFuture};
pub use layer::RateLimitLayer;
pub use service::RateLimit;

// The engine the layer runs (`floodgate-limiter`), so that one dependency suffices for an app.
pub use floodgate_limiter::{
    canonical_ip, canonical_path, encode_key, normalize_authority, parse_cost, prefix_matches,
    request_host, strip_path_parameters, Action, Authority, Claim, Client, ClientIpConfig,
    CostError, CostSource, DenialObserver, FailureMode, FindError, ForwardedHeader, HeaderMatch,
    HostError, KeyContext, KeySource, Matcher, Mode, Outcome, PathParameters, PeerAddr, Plan,
    RateLimiter, Reservation, ReservedItem, RouteCost, Rule, RuleOutcome, RuleSet, Scope,
    SettleError, SettledItem, Traffic, Verdict, DEFAULT_MAX_DELAYED, MAX_COMPONENT_LEN,
    MAX_HOST_LEN,
};

// What a rule and a store are made of, so that one dependency suffices.
pub use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota, SystemClock};
pub use floodgate_store::MemoryStore;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
