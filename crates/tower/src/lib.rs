//! # floodgate-tower
//!
//! Rate limiting as a tower middleware for any axum or hyper (http 1.x) application.
//!
//! - A [`Rule`] says which requests it applies to ([`Matcher`]), what is counted
//!   ([`KeySource`]: user, API key, client IP, route, a constant, or combinations), how much each
//!   request costs ([`CostSource`]), whether it only observes (`shadow`) and what to do when the
//!   store fails ([`FailureMode`]).
//! - A [`RateLimiter`] holds a hot-swappable [`RuleSet`] and a [`Store`](floodgate_store::Store);
//!   every request's matching rules are checked as one all-or-nothing batch.
//! - [`RateLimitLayer`] / [`RateLimit`] put it in front of a service. Denied requests get
//!   `429`, `Retry-After`, `RateLimit-Policy` / `RateLimit` headers and a problem+json body from
//!   [`response`], the one module that maps decisions to HTTP.
//! - Client IPs come from the socket peer ([`PeerAddr`]) unless it is a trusted proxy
//!   ([`ClientIpConfig`]); keys are encoded injectively and safely ([`encode_key`]). Path
//!   prefixes and path/route keys use the canonical path ([`canonical_path`]: percent-decoded,
//!   `//` collapsed, `.`/`..` resolved), so a path cannot dodge a rule by being spelled
//!   differently; the request is forwarded unchanged.
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
mod host;
mod ip;
mod key;
mod layer;
mod limiter;
mod metrics;
mod path;
pub mod response;
mod rule;
mod service;

pub use future::{ResponseBody, ResponseFuture, DEFAULT_MAX_DELAYED};
pub use ip::{canonical as canonical_ip, Client, ClientIpConfig, ForwardedHeader, PeerAddr};
pub use key::{encode_key, KeyContext, KeySource, MAX_COMPONENT_LEN};
pub use layer::RateLimitLayer;
pub use limiter::{
    Action, Claim, DenialObserver, Mode, Plan, RateLimiter, Reservation, ReservedItem, RuleOutcome,
    SettleError, SettledItem, Verdict,
};
pub use metrics::Outcome;
pub use path::canonical_path;
// The host rules' spelling of a host (apart from the ip line, which moves often).
pub use host::{normalize_authority, request_host, Authority, HostError, MAX_HOST_LEN};
pub use rule::{
    parse_cost, CostError, CostSource, FailureMode, HeaderMatch, Matcher, RouteCost, Rule, RuleSet,
};
pub use service::RateLimit;

// What a rule and a store are made of, so that one dependency suffices.
pub use floodgate_core::{AlgorithmKind, ManualClock, Policy, Quota, SystemClock};
pub use floodgate_store::MemoryStore;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
