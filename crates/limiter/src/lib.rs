//! # floodgate-limiter
//!
//! Floodgate's rate-limit engine: the one place a request is decided, counted and logged,
//! whatever front end it came through (the tower middleware `floodgate-tower`, and in the
//! `floodgate` service the JSON decision API, forward-auth, the reverse proxy and the gRPC
//! rate limit service). Front ends translate their wire format into a [`Plan`] and the
//! [`Verdict`] back; the engine returns values and never builds an HTTP answer.
//!
//! - A [`Rule`] says which traffic it applies to ([`Scope`]: HTTP requests, decision calls
//!   naming it, gRPC descriptors), which requests ([`Matcher`]), what is counted
//!   ([`KeySource`]: user, API key, client IP, route, a constant, or combinations), how much each
//!   request costs ([`CostSource`]), whether it only observes (`shadow`) and what to do when the
//!   store fails ([`FailureMode`]).
//! - A [`RateLimiter`] holds a hot-swappable [`RuleSet`] and a [`Store`](floodgate_store::Store);
//!   every request's matching rules are checked as one all-or-nothing batch
//!   ([`RateLimiter::evaluate`]), held in the delay mode ([`RateLimiter::admit`]) and settled
//!   once the actual cost is known ([`RateLimiter::settle`]).
//! - Client IPs come from the socket peer ([`PeerAddr`]) unless it is a trusted proxy
//!   ([`ClientIpConfig`]); keys are encoded injectively and safely ([`encode_key`]). Path
//!   prefixes and path/route keys use the canonical path ([`canonical_path`],
//!   [`prefix_matches`]), read without `;parameters` unless told otherwise ([`PathParameters`]).
//!
//! ```
//! use std::sync::Arc;
//! use floodgate_core::{AlgorithmKind, ManualClock, Policy};
//! use floodgate_limiter::{Action, KeySource, Mode, PeerAddr, RateLimiter, Rule, RuleSet};
//! use floodgate_store::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = ManualClock::new(1_700_000_000_000_000);
//! let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
//! let policy = Policy::new(AlgorithmKind::Gcra, "2/10s".parse().unwrap()).unwrap();
//! let limiter = RateLimiter::new(store, RuleSet::new(vec![
//!     Rule::new("per-ip", policy, KeySource::ClientIp),
//! ]));
//!
//! let mut request = http::Request::new(());
//! request.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse().unwrap()));
//! for _ in 0..2 {
//!     let verdict = limiter.evaluate(&limiter.plan_request(&request), Mode::Check).await;
//!     assert!(verdict.is_admitted());
//! }
//! let verdict = limiter.evaluate(&limiter.plan_request(&request), Mode::Check).await;
//! assert_eq!(verdict.action, Action::Deny);
//! assert_eq!(verdict.outcomes[0].decision.retry_after, Some(5_000_000));
//! # });
//! ```

mod answer_modes;
mod delay;
mod evaluate;
mod header;
mod host;
mod ip;
mod key;
mod lease;
mod lease_api;
mod limiter;
mod metrics;
mod modes;
mod path;
mod path_params;
mod plan;
mod reservation;
mod rule;
mod scope;
mod scope_find;
mod small_list;
mod store_errors;
mod verdict;

pub use delay::DEFAULT_MAX_DELAYED;
pub use evaluate::DenialObserver;
pub use header::{policy_item, push_policy_item, push_sf_string};
pub use host::{normalize_authority, request_host, Authority, HostError, MAX_HOST_LEN};
pub use ip::{canonical as canonical_ip, Client, ClientIpConfig, ForwardedHeader, PeerAddr};
pub use key::{encode_key, KeyContext, KeySource, MAX_COMPONENT_LEN};
pub use lease::{Lease, LeaseError, DEFAULT_LEASE_SHARE, DEFAULT_MAX_LEASED_KEYS};
pub use limiter::RateLimiter;
pub use metrics::Outcome;
pub use path::{canonical_path, prefix_matches};
pub use path_params::{strip_path_parameters, PathParameters};
pub use plan::{ItemOptions, Plan};
pub use reservation::{Claim, Reservation, ReservedItem, SettleError, SettledItem};
pub use rule::{
    parse_cost, CostError, CostSource, FailureMode, HeaderMatch, Matcher, RouteCost, Rule, RuleSet,
};
pub use scope::{FindError, Scope, Traffic};
pub use small_list::SmallList;
pub use verdict::{
    enforced_quota, most_restrictive, most_restrictive_of, retry_after_secs, Action, Mode,
    RuleOutcome, Verdict,
};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
