//! Rules: which requests are limited ([`Matcher`]), by what ([`KeySource`]), how much each
//! request costs ([`CostSource`]), and what happens when the store fails ([`FailureMode`]).

use std::sync::{Arc, OnceLock};

use floodgate_core::{Policy, Quota};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

use crate::ip::ClientIpConfig;
use crate::key::KeySource;
use crate::metrics::{MetricCache, Outcome};
use crate::path::prefix_matches;
use crate::scope::Scope;

/// One rate-limit rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Unique name, shown in headers (`RateLimit-Policy: "per-ip";...`), bodies and metric
    /// labels. Keep it to printable ASCII without `"` or `\`.
    pub name: Arc<str>,
    /// Algorithm and quota.
    pub policy: Policy,
    /// Which requests the rule applies to.
    pub matcher: Matcher,
    /// What is counted.
    pub key: KeySource,
    /// Units each request consumes.
    pub cost: CostSource,
    /// Evaluate and count (`outcome="shadow_denied"`), never deny, send no headers. For trying a
    /// new limit on live traffic.
    pub shadow: bool,
    /// What to do when the store fails.
    pub failure_mode: FailureMode,
    /// Which traffic the rule applies to ([`Scope`]; default: HTTP requests and decision
    /// calls). [`crate::RateLimiter::plan`] applies it to a request only when it holds
    /// [`Traffic::Http`](crate::Traffic::Http), and counts nothing for it otherwise; a decision
    /// call finds it by name only when it holds [`Traffic::Api`](crate::Traffic::Api)
    /// ([`RuleSet::find`]).
    pub scope: Scope,
    /// Delay mode: a request this rule would refuse but admit within this many microseconds
    /// is reserved and held until its slot, then passed on, instead of answered 429 (see
    /// `docs/reservations.md`, "Delay mode"). `None` (the default): refused at once. Clamped
    /// to the policy's horizon ([`Policy::max_wait`]). Several matching enforcing rules wait
    /// at most the smallest delay among them, and not at all when one of them has none.
    pub delay: Option<floodgate_core::Micros>,
    /// Quota leases: decide this rule's hot keys from units this instance took from the store
    /// beforehand (`docs/spec/leases.md`; the bound on how far clients may be from the exact
    /// algorithm is [`Lease::bound`](crate::Lease::bound)). `None` (the default): every
    /// decision asks the store.
    pub lease: Option<crate::lease::settings::Lease>,
}

impl Rule {
    /// A rule matching every request, cost 1, enforcing, failing open.
    pub fn new(name: impl Into<Arc<str>>, policy: Policy, key: KeySource) -> Self {
        Self {
            name: name.into(),
            policy,
            matcher: Matcher::default(),
            key,
            cost: CostSource::Fixed(1),
            shadow: false,
            failure_mode: FailureMode::Open,
            scope: Scope::default(),
            delay: None,
            lease: None,
        }
    }

    /// Replaces the matcher.
    pub fn with_matcher(mut self, matcher: Matcher) -> Self {
        self.matcher = matcher;
        self
    }

    /// Replaces the cost source.
    pub fn with_cost(mut self, cost: CostSource) -> Self {
        self.cost = cost;
        self
    }

    /// Sets shadow mode.
    pub fn with_shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Sets the failure mode.
    pub fn with_failure_mode(mut self, mode: FailureMode) -> Self {
        self.failure_mode = mode;
        self
    }

    /// Sets the delay mode: hold a request that fits within `delay` until its slot instead of
    /// refusing it (see [`Rule::delay`]; kept to whole microseconds, a zero delay is none).
    pub fn with_delay(mut self, delay: std::time::Duration) -> Self {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay = (micros > 0).then_some(micros);
        self
    }

    /// Sets quota leases ([`Rule::lease`]).
    pub fn with_lease(mut self, lease: crate::lease::settings::Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets which traffic the rule applies to (see [`Rule::scope`]).
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }
}

/// Which requests a rule applies to. Every condition that is set must hold; the default (no
/// condition) matches every request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    /// Path prefix, matched on whole segments: `/api` matches `/api` and `/api/x`, not
    /// `/apix`; a prefix ending in `/` matches anything below it.
    ///
    /// Both the request path and the prefix are compared in their canonical form
    /// ([`canonical_path`](crate::canonical_path): split on literal `/` only, unreserved
    /// escapes decoded, repeated `/` collapsed, `.` and `..` resolved), and again with `%2F`
    /// read as `/` ([`prefix_matches`](crate::prefix_matches)), so `/x/../api/a`, `/%61pi/a`,
    /// `//api/a`, `/api/..%2Fa` and `/api%2Fa` all match `/api`, while `/x/..%2Fapi/a` does
    /// not. The canonical form is only used for matching; the request is passed on unchanged.
    /// [`RateLimiter::plan`](crate::RateLimiter::plan) reads the request path without its
    /// `;parameters` first, unless [`RuleSet::path_parameters`] keeps them.
    pub path_prefix: Option<String>,
    /// Methods; empty = any.
    pub methods: Vec<Method>,
    /// Host, compared without the port, ASCII case-insensitively and without a trailing dot,
    /// against the request's one authority ([`request_host`](crate::request_host): the URI's
    /// authority, else its one `Host` header).
    pub host: Option<String>,
    /// Header conditions; all must hold.
    pub headers: Vec<HeaderMatch>,
}

/// A header condition of a [`Matcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatch {
    /// The header is present (with any value).
    Present(HeaderName),
    /// Some value of the header equals this one exactly.
    Equals(HeaderName, HeaderValue),
}

impl Matcher {
    /// A matcher for every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Whether a request with this method, URI and headers matches.
    pub fn matches(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
        if !self.methods.is_empty() && !self.methods.contains(method) {
            return false;
        }
        if let Some(prefix) = &self.path_prefix {
            if !prefix_matches(prefix, uri.path()) {
                return false;
            }
        }
        if let Some(host) = &self.host {
            // One spelling for every front end (crate::host): `API.example.com.:80` is
            // `api.example.com`; a request without one readable host matches no host rule.
            let Some(actual) = crate::request_host(uri, headers) else {
                return false;
            };
            let want = host.strip_suffix('.').unwrap_or(host);
            if !actual.host().eq_ignore_ascii_case(want) {
                return false;
            }
        }
        self.headers.iter().all(|cond| match cond {
            HeaderMatch::Present(name) => headers.contains_key(name),
            HeaderMatch::Equals(name, value) => headers.get_all(name).iter().any(|v| v == value),
        })
    }
}

/// Units one request consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostSource {
    /// The same cost for every request (1 for plain request counting). A cost of 0 only
    /// reports the remaining allowance and never denies; configuration should refuse it.
    Fixed(u64),
    /// A whole number from a header (e.g. set by an upstream that knows the operation's
    /// weight); see [`parse_cost`] for what is accepted. Absent: `default`. Above `max` (the
    /// policy's capacity; a number too large for a `u64` is above it too): refused with
    /// [`CostError::ExceedsCapacity`], as a request that asks for more than the policy can ever
    /// grant must be a clear error, never charged less than it asked. Anything else (empty,
    /// `0`, negative, signed, not a whole number) is refused with [`CostError::Invalid`]: the
    /// request is answered 400, because charging a guessed cost would silently misprice it.
    Header {
        /// The header to read.
        name: HeaderName,
        /// Cost when the header is absent.
        default: u64,
        /// The most one request may cost (the policy's capacity): a header above it is refused.
        max: u64,
    },
    /// Per-route costs, e.g. a search route costs 100 units: the cost of the first route whose
    /// [`Matcher`] matches the request (taken as it is: keep it at or below the policy's
    /// capacity); when no route matches, as [`CostSource::Header`] with `header` (if any),
    /// else `default`.
    Routes {
        /// The routes, in order: the first match wins.
        routes: Vec<RouteCost>,
        /// The cost header read when no route matches.
        header: Option<HeaderName>,
        /// Cost when no route matches and the header is absent.
        default: u64,
        /// The most one request may cost through the header (the policy's capacity).
        max: u64,
    },
}

/// One route of [`CostSource::Routes`]: requests matching `matcher` cost `cost` units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCost {
    /// Which requests (usually a path prefix and a method).
    pub matcher: Matcher,
    /// Their cost.
    pub cost: u64,
}

/// Why a request's cost header was refused (answered 400; nothing is charged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostError {
    /// The header holds something that is not a positive whole number.
    Invalid {
        /// The header.
        header: HeaderName,
    },
    /// The header asks for more than the rule can ever admit at once.
    ExceedsCapacity {
        /// The header.
        header: HeaderName,
        /// The cost asked for (`u64::MAX` for a number too large for a `u64`).
        cost: u64,
        /// The most the rule admits at once.
        capacity: u64,
    },
}

/// Parses a cost header value: ASCII digits only (surrounding spaces and tabs, which HTTP
/// strips anyway, are ignored), at least 1; a number too large for a `u64` is still a number,
/// above any capacity, and reads as `u64::MAX`. `None` for anything else: empty, `0`, `-1`,
/// `+2`, `1.5`, `abc`.
pub fn parse_cost(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut cost: u64 = 0;
    for &digit in value {
        cost = match cost
            .checked_mul(10)
            .and_then(|c| c.checked_add(u64::from(digit - b'0')))
        {
            Some(c) => c,
            // Too many digits for a u64: above any capacity.
            None => return Some(u64::MAX),
        };
    }
    (cost > 0).then_some(cost)
}

impl CostSource {
    /// The cost of a request with this method, URI and headers.
    ///
    /// # Errors
    /// [`CostError`] naming the header when a cost header is read and is not a positive whole
    /// number (see [`parse_cost`]) or asks for more than `max`.
    pub fn cost(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<u64, CostError> {
        let from_header = |name: &HeaderName, default: u64, max: u64| match headers.get(name) {
            None => Ok(default),
            // Sent twice: which cost the request has would be a guess.
            Some(_) if headers.get_all(name).iter().nth(1).is_some() => Err(CostError::Invalid {
                header: name.clone(),
            }),
            Some(value) => match parse_cost(value.as_bytes()) {
                None => Err(CostError::Invalid {
                    header: name.clone(),
                }),
                Some(cost) if cost > max => Err(CostError::ExceedsCapacity {
                    header: name.clone(),
                    cost,
                    capacity: max,
                }),
                Some(cost) => Ok(cost),
            },
        };
        match self {
            CostSource::Fixed(cost) => Ok(*cost),
            CostSource::Header { name, default, max } => from_header(name, *default, *max),
            CostSource::Routes {
                routes,
                header,
                default,
                max,
            } => match routes
                .iter()
                .find(|r| r.matcher.matches(method, uri, headers))
            {
                Some(route) => Ok(route.cost),
                None => match header {
                    Some(name) => from_header(name, *default, *max),
                    None => Ok(*default),
                },
            },
        }
    }
}

/// What a rule does when the store fails (unreachable, timed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Admit the request and count `outcome="error_open"`: availability first, the usual choice
    /// for limits that protect fairness rather than safety. The default.
    #[default]
    Open,
    /// Answer 503 with `Retry-After` and count `outcome="error_closed"`: for limits that
    /// protect something that must not be overrun (paid APIs, brute-force guards).
    Closed,
}

/// Everything the middleware evaluates: the rules and how client IPs are found. Swapped as one
/// value on reload (see [`crate::RateLimiter::replace_rules`]); store state is keyed by rule
/// name and key, so it survives a reload.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Rules, in the order they are reported.
    pub rules: Vec<Rule>,
    /// Client IP resolution.
    pub client_ip: ClientIpConfig,
    /// Whether request paths are matched and counted without their `;parameters` (the
    /// default, [`PathParameters::Strip`](crate::PathParameters::Strip): as servlet containers route them).
    pub path_parameters: crate::PathParameters,
    /// Metric handles, taken on first use (see the `metrics` module).
    metrics: MetricCache,
    /// Each rule's `RateLimit-Policy` member, made on first use.
    policy_items: PolicyItems,
}

/// The `RateLimit-Policy` member of each rule, with the name and quota it was made from.
#[derive(Debug, Default)]
struct PolicyItems(OnceLock<Box<[PolicyItem]>>);

/// A rule's name and quota, and the `RateLimit-Policy` member made from them.
type PolicyItem = (Arc<str>, Quota, HeaderValue);

impl Clone for PolicyItems {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl RuleSet {
    /// A rule set with default client IP settings.
    pub fn new(rules: Vec<Rule>) -> Self {
        Self {
            rules,
            client_ip: ClientIpConfig::default(),
            path_parameters: crate::PathParameters::default(),
            metrics: MetricCache::default(),
            policy_items: PolicyItems::default(),
        }
    }

    /// The `RateLimit-Policy` list member of rule `index` (a position in [`RuleSet::rules`]),
    /// as [`crate::policy_item`] makes it; made once per rule set and then cloned (a
    /// reference count).
    ///
    /// # Panics
    /// When `index` is not a position in [`RuleSet::rules`].
    pub fn policy_item(&self, index: usize) -> HeaderValue {
        let rule = &self.rules[index];
        let items = self.policy_items.0.get_or_init(|| {
            self.rules
                .iter()
                .map(|r| {
                    let quota = *r.policy.quota();
                    let item = crate::header::policy_item(&r.name, &quota);
                    (Arc::clone(&r.name), quota, item)
                })
                .collect()
        });
        match items.get(index) {
            // The rules of a set in use never change; the checks keep a set whose public
            // fields were edited after its first use correct anyway.
            Some((name, quota, item))
                if Arc::ptr_eq(name, &rule.name) && quota == rule.policy.quota() =>
            {
                item.clone()
            }
            _ => crate::header::policy_item(&rule.name, rule.policy.quota()),
        }
    }

    /// Adds 1 to `floodgate_decisions_total{rule, outcome}` for rule `index` (a position in
    /// [`RuleSet::rules`]), through a counter handle kept after its first use.
    ///
    /// # Panics
    /// When `index` is not a position in [`RuleSet::rules`].
    pub fn count(&self, index: usize, outcome: Outcome) {
        let rules = &self.rules;
        self.metrics
            .count(rules.len(), |i| &rules[i].name, index, outcome);
    }

    /// Records one store round trip in the `floodgate_decision_duration_seconds` histogram
    /// (seconds), through a handle kept after its first use.
    pub fn record_decision_duration(&self, elapsed: std::time::Duration) {
        self.metrics.record_duration(elapsed);
    }

    /// Sets what matching does with path parameters (see [`RuleSet::path_parameters`]).
    pub fn with_path_parameters(mut self, path_parameters: crate::PathParameters) -> Self {
        self.path_parameters = path_parameters;
        self
    }

    /// Replaces the client IP settings.
    pub fn with_client_ip(mut self, client_ip: ClientIpConfig) -> Self {
        self.client_ip = client_ip;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_prefix_matches_whole_segments() {
        assert!(prefix_matches("/api", "/api"));
        assert!(prefix_matches("/api", "/api/items"));
        assert!(!prefix_matches("/api", "/apix"));
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(prefix_matches("/", "/anything"));
        assert!(!prefix_matches("/api", "/"));
    }

    #[test]
    fn matcher_checks_every_condition() {
        let m = Matcher {
            path_prefix: Some("/api".into()),
            methods: vec![Method::POST],
            host: Some("example.com".into()),
            headers: vec![HeaderMatch::Equals(
                HeaderName::from_static("x-tier"),
                HeaderValue::from_static("free"),
            )],
        };
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("Example.com:8080"));
        h.insert("x-tier", HeaderValue::from_static("free"));
        let uri: Uri = "/api/x".parse().unwrap();
        assert!(m.matches(&Method::POST, &uri, &h));
        assert!(!m.matches(&Method::GET, &uri, &h));
        assert!(!m.matches(&Method::POST, &"/other".parse().unwrap(), &h));
        h.insert("x-tier", HeaderValue::from_static("paid"));
        assert!(!m.matches(&Method::POST, &uri, &h));
        assert!(Matcher::any().matches(&Method::GET, &uri, &HeaderMap::new()));
    }

    #[test]
    fn a_host_rule_matches_every_spelling_of_its_host_and_nothing_that_is_not_one() {
        let m = Matcher {
            host: Some("api.example.com".into()),
            ..Matcher::any()
        };
        let uri: Uri = "/x".parse().unwrap();
        let with = |values: &[&'static str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("host", HeaderValue::from_static(v));
            }
            h
        };
        for spelling in [
            "api.example.com.",
            "API.Example.com:080",
            "api.example.com:",
        ] {
            assert!(
                m.matches(&Method::GET, &uri, &with(&[spelling])),
                "{spelling}"
            );
        }
        for other in [
            &["api.example.com:abc"][..],
            &["api.example.com", "api.example.com"],
            &["api.example.com, other.example"],
            &[],
        ] {
            assert!(!m.matches(&Method::GET, &uri, &with(other)), "{other:?}");
        }
        // The URI's authority is the request's host, whatever Host says.
        let absolute: Uri = "http://other.example/x".parse().unwrap();
        assert!(!m.matches(&Method::GET, &absolute, &with(&["api.example.com"])));
        let absolute: Uri = "http://API.example.com./x".parse().unwrap();
        assert!(m.matches(&Method::GET, &absolute, &with(&["other.example"])));
    }

    #[test]
    fn header_cost_defaults_and_refuses() {
        let c = CostSource::Header {
            name: HeaderName::from_static("x-cost"),
            default: 1,
            max: 50,
        };
        let mut h = HeaderMap::new();
        let cost_of =
            |c: &CostSource, h: &HeaderMap| c.cost(&Method::GET, &Uri::from_static("/"), h);
        assert_eq!(cost_of(&c, &h), Ok(1));
        for (value, cost) in [("7", 7), (" 9 ", 9), ("50", 50)] {
            h.insert("x-cost", HeaderValue::from_static(value));
            assert_eq!(cost_of(&c, &h), Ok(cost), "{value}");
        }
        // Above the capacity, also when too large for a u64: refused, never clamped.
        for (value, cost) in [
            ("51", 51),
            ("900", 900),
            ("18446744073709551615", u64::MAX),
            ("99999999999999999999", u64::MAX),
        ] {
            h.insert("x-cost", HeaderValue::from_static(value));
            assert_eq!(
                cost_of(&c, &h),
                Err(CostError::ExceedsCapacity {
                    header: HeaderName::from_static("x-cost"),
                    cost,
                    capacity: 50
                }),
                "{value}"
            );
        }
        for value in ["0", "-1", "+2", "abc", "", "1.5", "2 3"] {
            h.insert("x-cost", HeaderValue::from_static(value));
            assert_eq!(
                cost_of(&c, &h),
                Err(CostError::Invalid {
                    header: HeaderName::from_static("x-cost")
                }),
                "{value:?}"
            );
        }
    }

    #[test]
    fn first_matching_route_then_header_then_default() {
        let route = |prefix: &str, method: Option<Method>, cost| RouteCost {
            matcher: Matcher {
                path_prefix: Some(prefix.into()),
                methods: method.into_iter().collect(),
                ..Matcher::default()
            },
            cost,
        };
        let c = CostSource::Routes {
            routes: vec![
                route("/search", Some(Method::GET), 100),
                route("/export", None, 500),
            ],
            header: Some(HeaderName::from_static("x-cost")),
            default: 2,
            max: 1000,
        };
        let cost = |method: Method, uri: &'static str, header: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = header {
                h.insert("x-cost", HeaderValue::from_static(v));
            }
            c.cost(&method, &Uri::from_static(uri), &h)
                .map_err(|e| match e {
                    CostError::Invalid { header } => header.to_string(),
                    CostError::ExceedsCapacity { header, .. } => format!("{header} too large"),
                })
        };
        assert_eq!(cost(Method::GET, "/search?q=x", None), Ok(100));
        assert_eq!(
            cost(Method::GET, "/search", Some("abc")),
            Ok(100),
            "a matching route wins over the header, which is not read"
        );
        assert_eq!(cost(Method::POST, "/search", None), Ok(2), "method");
        assert_eq!(cost(Method::GET, "/searchx", None), Ok(2), "whole segments");
        assert_eq!(cost(Method::POST, "/export/all", None), Ok(500));
        assert_eq!(cost(Method::GET, "/other", Some("7")), Ok(7));
        assert_eq!(
            cost(Method::GET, "/other", Some("1001")),
            Err("x-cost too large".to_string())
        );
        assert_eq!(
            cost(Method::GET, "/other", Some("-1")),
            Err("x-cost".to_string()),
            "refused, naming the client's header"
        );
    }
}
