//! One `[[rules]]` entry: its name, quota, key, matcher, cost, delay and key cap.

use floodgate_core::{AlgorithmKind, Policy, Quota, QuotaError};
use floodgate_tower::{CostSource, FailureMode, HeaderMatch, KeySource, Matcher, RouteCost};
use http::{HeaderName, HeaderValue, Method};
use toml::Spanned;

use super::validator::Validator;
use crate::config::key::parse_key_value;
use crate::config::raw::RawRule;
use crate::config::schema::{RuleConfig, MAX_COST, MAX_RULE_NAME_BYTES, MAX_SLIDING_LOG_LIMIT};
use crate::config::units::format_micros;

impl Validator<'_> {
    /// Validates one rule; `None` when it has errors (already pushed).
    pub(super) fn rule(&mut self, at: &str, r: &RawRule) -> Option<RuleConfig> {
        let before = self.errors.len();
        let name = r.name.get_ref();
        if name.is_empty()
            || name.len() > MAX_RULE_NAME_BYTES
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            self.push(
                &r.name,
                format!("{at}.name"),
                format!(
                    "invalid rule name {name:?}: use 1 to {MAX_RULE_NAME_BYTES} characters from \
                     A-Z a-z 0-9 _ - ."
                ),
            );
        }
        let kind = match &r.algorithm {
            None => AlgorithmKind::TokenBucket,
            Some(a) => match a.get_ref().parse::<AlgorithmKind>() {
                Ok(k) => k,
                Err(msg) => {
                    self.push(a, format!("{at}.algorithm"), msg);
                    AlgorithmKind::TokenBucket
                }
            },
        };
        self.calendar_stray(at, r);
        // A calendar rule's limit is "N/day|week|month" (validate/calendar.rs).
        let plain = r.calendar.is_none().then(|| self.quota(at, r)).flatten();
        let policy = plain.and_then(|quota| {
            if kind == AlgorithmKind::SlidingLog && quota.limit() > MAX_SLIDING_LOG_LIMIT {
                self.push(
                    &r.limit,
                    format!("{at}.limit"),
                    format!(
                        "the sliding log keeps one entry per admitted unit; its limit must be at \
                         most {MAX_SLIDING_LOG_LIMIT}, got {} (use sliding_window for large limits)",
                        quota.limit()
                    ),
                );
                return None;
            }
            match Policy::new(kind, quota) {
                Ok(p) => Some(p),
                // A burst too small for a sub-microsecond rate names the burst (where it was
                // given on its own).
                Err(e @ QuotaError::BurstTooSmall { .. }) => {
                    match &r.burst {
                        Some(b) => self.push(b, format!("{at}.burst"), e.to_string()),
                        None => self.push(&r.limit, format!("{at}.burst"), e.to_string()),
                    }
                    None
                }
                Err(e) => {
                    self.push(&r.limit, format!("{at}.limit"), e.to_string());
                    None
                }
            }
        });
        let policy = policy.or_else(|| self.calendar_policy(at, r, kind));
        let key = match &r.key {
            None => KeySource::ClientIp,
            Some(k) => match parse_key_value(k.get_ref()) {
                Ok(key) => key,
                Err(msg) => {
                    self.push(k, format!("{at}.key"), msg);
                    KeySource::ClientIp
                }
            },
        };
        let matcher = self.matcher(at, r);
        let cost = self.cost(at, r, policy.as_ref().map(Policy::capacity));
        let descriptor = self.descriptor_rule(at, r);
        let failure_mode = match &r.failure_mode {
            None => FailureMode::Open,
            Some(f) => match f.get_ref().as_str() {
                "open" => FailureMode::Open,
                "closed" => FailureMode::Closed,
                other => {
                    self.push(
                        f,
                        format!("{at}.failure_mode"),
                        format!("unknown value {other:?}; expected \"open\" or \"closed\""),
                    );
                    FailureMode::Open
                }
            },
        };
        let delay = self.delay(at, r, policy.as_ref().filter(|p| p.calendar().is_none()));
        let lease = self.lease(at, r, policy.as_ref());
        let applies_to = self.applies_to(at, r);
        if self.errors.len() > before {
            return None;
        }
        Some(RuleConfig {
            name: name.clone(),
            matcher,
            key,
            policy: policy?,
            cost,
            shadow: r.shadow,
            failure_mode,
            delay,
            lease,
            descriptor,
            override_of: None,
            max_keys: self.rule_max_keys(at, r),
            applies_to,
        })
    }

    /// `delay = "500ms"`: more than 0, within what the policy can ever schedule (its horizon,
    /// [`Policy::max_wait`]), on a rule that forward-auth and the proxy apply.
    fn delay(&mut self, at: &str, r: &RawRule, policy: Option<&Policy>) -> Option<u64> {
        let d = r.delay.as_ref()?;
        let field = format!("{at}.delay");
        // A bare "0" is the zero the next arm refuses, not a unit missing.
        let text = match d.get_ref().trim() {
            "0" => "0s",
            text => text,
        };
        let micros = match floodgate_core::quota::parse_period(text) {
            Ok(0) => {
                self.push(
                    d,
                    field,
                    "must be more than 0 (leave `delay` out to refuse at once)".into(),
                );
                return None;
            }
            Ok(micros) => micros,
            Err(msg) => {
                let text = d.get_ref().trim();
                let msg = if text.starts_with(|c: char| c.is_ascii_digit()) {
                    msg.replacen("period", "delay", 1)
                } else {
                    format!(
                        "must be a whole number and a unit, such as \"500ms\" or \"2s\", got {text:?}"
                    )
                };
                self.push(d, field, msg);
                return None;
            }
        };
        if r.shadow {
            self.push(
                d,
                field,
                "a shadow rule never refuses a request, so it never holds one: remove `delay` \
                 or `shadow`"
                    .into(),
            );
            return None;
        }
        if r.domain.is_some() {
            self.push(
                d,
                field,
                "a rule with a `domain` answers only Envoy descriptors and /v1/check, never \
                 forward-auth or proxied requests, so it holds none: remove `delay`"
                    .into(),
            );
            return None;
        }
        let policy = policy?;
        let horizon = policy.max_wait();
        if micros > horizon {
            let (why, remedy) = match policy.kind() {
                AlgorithmKind::FixedWindow
                | AlgorithmKind::SlidingWindow
                | AlgorithmKind::SlidingLog => (
                    "one period".to_string(),
                    "lower the delay or lengthen the period (a window's burst does not move it)",
                ),
                _ => (
                    format!("the time its burst of {} refills", policy.quota().burst()),
                    "lower the delay or raise the burst",
                ),
            };
            self.push(
                d,
                field,
                format!(
                    "{} can never be reached: this rule schedules a request at most {} ahead \
                     ({why}); {remedy}",
                    d.get_ref().trim(),
                    format_micros(horizon)
                ),
            );
            return None;
        }
        Some(micros)
    }

    /// A rule's `max_keys`: 1 to `[store] max_keys`, memory store only (errors pushed).
    fn rule_max_keys(&mut self, at: &str, r: &RawRule) -> Option<u64> {
        let max = r.max_keys.as_ref()?;
        let n = *max.get_ref();
        let field = format!("{at}.max_keys");
        if self.store_kind_redis {
            self.push(
                max,
                field,
                "only for the memory store ([store] kind = \"memory\"): Redis holds keys until \
                 their TTL and has no key cap"
                    .into(),
            );
            return None;
        }
        if n < 1 || n as u64 > self.store_max_keys {
            self.push(
                max,
                field,
                format!(
                    "must be a whole number between 1 and [store] max_keys ({}), got {n}",
                    self.store_max_keys
                ),
            );
            return None;
        }
        Some(n as u64)
    }

    /// `limit = "10/10s"`, or `limit = 10` with `period = "10s"`; `burst` in either form.
    fn quota(&mut self, at: &str, r: &RawRule) -> Option<Quota> {
        let field = format!("{at}.limit");
        let burst = match &r.burst {
            None => None,
            Some(b) if *b.get_ref() >= 1 => Some(*b.get_ref() as u64),
            Some(b) => {
                self.push(
                    b,
                    format!("{at}.burst"),
                    format!("must be a whole number of at least 1, got {}", b.get_ref()),
                );
                return None;
            }
        };
        let quota = match r.limit.get_ref() {
            toml::Value::String(text) => {
                if let Some(p) = &r.period {
                    self.push(
                        p,
                        format!("{at}.period"),
                        format!(
                            "`period` is only used with a numeric limit; the quota text {text:?} \
                             already gives the period"
                        ),
                    );
                    return None;
                }
                let q = match text.parse::<Quota>() {
                    Ok(q) => q,
                    Err(e) => {
                        self.push(&r.limit, field, e.to_string());
                        return None;
                    }
                };
                match burst {
                    None => Ok(q),
                    Some(_) if q.burst() != q.limit() || text.contains("burst") => {
                        let b = r.burst.as_ref().expect("burst is set");
                        self.push(
                            b,
                            format!("{at}.burst"),
                            format!("the quota text {text:?} already gives a burst; give it once"),
                        );
                        return None;
                    }
                    Some(b) => q.burst_of(b),
                }
            }
            toml::Value::Integer(n) => {
                let Some(p) = &r.period else {
                    self.push(
                        &r.limit,
                        field,
                        format!(
                            "a numeric limit needs `period` (e.g. period = \"10s\"), or write \
                             limit = \"{n}/10s\""
                        ),
                    );
                    return None;
                };
                if *n < 1 {
                    self.push(
                        &r.limit,
                        field,
                        format!("limit must be a whole number of at least 1, got {n}"),
                    );
                    return None;
                }
                let period = match floodgate_core::quota::parse_period(p.get_ref()) {
                    Ok(period) => period,
                    Err(msg) => {
                        self.push(p, format!("{at}.period"), msg);
                        return None;
                    }
                };
                Quota::with_burst(*n as u64, period, burst.unwrap_or(*n as u64))
            }
            other => {
                self.push(
                    &r.limit,
                    field,
                    format!(
                        "expected quota text like \"10/10s\" or a whole number with `period`, \
                         got a {}",
                        other.type_str()
                    ),
                );
                return None;
            }
        };
        match quota {
            Ok(q) => Some(q),
            Err(e) => {
                self.push(&r.limit, format!("{at}.limit"), e.to_string());
                None
            }
        }
    }

    fn matcher(&mut self, at: &str, r: &RawRule) -> Matcher {
        let m = &r.matcher;
        let mut out = Matcher::default();
        if let Some(p) = &m.path_prefix {
            if p.get_ref().starts_with('/') {
                out.path_prefix = Some(p.get_ref().clone());
            } else {
                self.push(
                    p,
                    format!("{at}.match.path_prefix"),
                    format!("must start with '/', got {:?}", p.get_ref()),
                );
            }
        }
        for (i, method) in m.methods.iter().enumerate() {
            match parse_method(method.get_ref()) {
                Ok(me) => out.methods.push(me),
                Err(msg) => self.push(method, format!("{at}.match.methods[{i}]"), msg),
            }
        }
        if let Some(h) = &m.host {
            let host = h.get_ref().to_ascii_lowercase();
            if host.is_empty() || host.contains(['/', ' ', ':']) {
                self.push(
                    h,
                    format!("{at}.match.host"),
                    format!("expected a host name without port, got {:?}", h.get_ref()),
                );
            } else {
                out.host = Some(host);
            }
        }
        if let Some(h) = &m.header {
            let name = match HeaderName::from_bytes(h.name.get_ref().as_bytes()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.push(
                        &h.name,
                        format!("{at}.match.header.name"),
                        format!("invalid header name {:?}", h.name.get_ref()),
                    );
                    None
                }
            };
            let value = match &h.value {
                None => Some(None),
                Some(v) => match HeaderValue::from_str(v.get_ref()) {
                    Ok(v) => Some(Some(v)),
                    Err(_) => {
                        self.push(
                            v,
                            format!("{at}.match.header.value"),
                            format!("invalid header value {:?}", v.get_ref()),
                        );
                        None
                    }
                },
            };
            match (name, value) {
                (Some(n), Some(Some(v))) => out.headers.push(HeaderMatch::Equals(n, v)),
                (Some(n), Some(None)) => out.headers.push(HeaderMatch::Present(n)),
                _ => {}
            }
        }
        out
    }

    /// `cost`, `cost_header`, `[[rules.route_costs]]`; costs above the policy's capacity are
    /// errors here, not silent forever-denials at run time.
    fn cost(&mut self, at: &str, r: &RawRule, capacity: Option<u64>) -> CostSource {
        let mut default = 1;
        let mut header = None;
        let mut routes = Vec::new();
        if let Some(c) = &r.cost {
            match self.one_cost(format!("{at}.cost"), c, capacity) {
                // A rule whose requests cost nothing never limits anything.
                Some(0) => self.push(
                    c,
                    format!("{at}.cost"),
                    "must be at least 1: a rule whose requests cost 0 never limits (remove the \
                     rule, or make it shadow = true to only observe)"
                        .to_string(),
                ),
                Some(cost) => default = cost,
                None => {}
            }
        }
        if let Some(h) = &r.cost_header {
            match HeaderName::from_bytes(h.get_ref().as_bytes()) {
                Ok(n) => header = Some(n),
                Err(_) => self.push(
                    h,
                    format!("{at}.cost_header"),
                    format!("invalid header name {:?}", h.get_ref()),
                ),
            }
        }
        for (i, rc) in r.route_costs.iter().enumerate() {
            let base = format!("{at}.route_costs[{i}]");
            if !rc.path_prefix.get_ref().starts_with('/') {
                self.push(
                    &rc.path_prefix,
                    format!("{base}.path_prefix"),
                    format!("must start with '/', got {:?}", rc.path_prefix.get_ref()),
                );
                continue;
            }
            let method = match &rc.method {
                None => None,
                Some(m) => match parse_method(m.get_ref()) {
                    Ok(m) => Some(m),
                    Err(msg) => {
                        self.push(m, format!("{base}.method"), msg);
                        continue;
                    }
                },
            };
            if *rc.cost.get_ref() == 0 {
                self.push(
                    &rc.cost,
                    format!("{base}.cost"),
                    "a route cost must be at least 1 (exclude free routes with [rules.match])"
                        .into(),
                );
                continue;
            }
            if let Some(cost) = self.one_cost(format!("{base}.cost"), &rc.cost, capacity) {
                routes.push(RouteCost {
                    matcher: Matcher {
                        path_prefix: Some(rc.path_prefix.get_ref().clone()),
                        methods: method.into_iter().collect(),
                        ..Matcher::default()
                    },
                    cost,
                });
            }
        }
        // A header cost is at most what the rule can ever admit (an invalid quota has no
        // capacity; its error is reported already).
        let max = capacity.unwrap_or(MAX_COST);
        match (routes.is_empty(), header) {
            (false, header) => CostSource::Routes {
                routes,
                header,
                default,
                max,
            },
            (true, Some(name)) => CostSource::Header { name, default, max },
            (true, None) => CostSource::Fixed(default),
        }
    }

    fn one_cost(&mut self, field: String, c: &Spanned<i64>, capacity: Option<u64>) -> Option<u64> {
        let n = *c.get_ref();
        if n < 0 || n as u64 > MAX_COST {
            self.push(
                c,
                field,
                format!("must be a whole number between 0 and {MAX_COST}, got {n}"),
            );
            return None;
        }
        let n = n as u64;
        if let Some(cap) = capacity {
            if n > cap {
                self.push(
                    c,
                    field,
                    format!(
                        "cost {n} exceeds the rule's capacity of {cap} units: such a request \
                         could never be admitted (raise the limit or burst)"
                    ),
                );
                return None;
            }
        }
        Some(n)
    }
}

fn parse_method(text: &str) -> Result<Method, String> {
    let upper = text.to_ascii_uppercase();
    if upper.is_empty() || !upper.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("invalid HTTP method {text:?}"));
    }
    Method::from_bytes(upper.as_bytes()).map_err(|_| format!("invalid HTTP method {text:?}"))
}
