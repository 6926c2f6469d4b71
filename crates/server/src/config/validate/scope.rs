//! A rule's `applies_to`: which traffic it applies to.
//!
//! `applies_to = ["http", "api", "grpc"]`, any non-empty subset: `http` is HTTP requests (the
//! tower layer, forward-auth, the proxy), matched by `[rules.match]` and keyed by `key`; `api`
//! is `/v1/check` and `/v1/peek` calls naming the rule; `grpc` is Envoy's rate limit requests
//! (gRPC and `/json`) selecting it by `domain` and `descriptors`. Left out: `["http", "api"]`,
//! or `["grpc", "api"]` for a rule with a `domain`, what rules have always applied to.

use floodgate_tower::{Scope, Traffic};

use super::validator::Validator;
use crate::config::raw::RawRule;

impl Validator<'_> {
    /// The rule's scope; on an error (pushed) the default scope.
    pub(super) fn applies_to(&mut self, at: &str, r: &RawRule) -> Scope {
        let default = match r.domain {
            Some(_) => Scope::GRPC_AND_API,
            None => Scope::HTTP_AND_API,
        };
        let Some(list) = &r.applies_to else {
            return default;
        };
        let field = format!("{at}.applies_to");
        let before = self.errors.len();
        let mut given = Vec::new();
        for (i, name) in list.get_ref().iter().enumerate() {
            match Traffic::parse(name.get_ref()) {
                Some(t) if given.contains(&t) => self.push(
                    name,
                    format!("{field}[{i}]"),
                    format!("{t:?} is named twice", t = t.as_str()),
                ),
                Some(t) => given.push(t),
                None => self.push(
                    name,
                    format!("{field}[{i}]"),
                    format!(
                        "unknown traffic {:?}; expected \"http\" (HTTP requests: forward-auth, \
                         the proxy, the tower layer), \"api\" (/v1/check calls naming the rule) \
                         or \"grpc\" (Envoy rate limit requests of its domain)",
                        name.get_ref()
                    ),
                ),
            }
        }
        if list.get_ref().is_empty() {
            self.push(
                list,
                field.clone(),
                "must name at least one of \"http\", \"api\", \"grpc\" (a rule that applies \
                 to nothing limits nothing: remove the rule)"
                    .into(),
            );
        }
        let scope = Scope::of(&given);
        match (&r.domain, scope.contains(Traffic::Grpc)) {
            (None, true) => self.push(
                list,
                field.clone(),
                "\"grpc\" needs `domain` and `descriptors`: they select the rate limit \
                 requests the rule answers"
                    .into(),
            ),
            (Some(domain), false) if !given.is_empty() => self.push(
                domain,
                format!("{at}.domain"),
                "`domain` and `descriptors` select gRPC rate limit requests, and applies_to \
                 has no \"grpc\": add it, or remove them (a rule for /v1/check only needs \
                 neither)"
                    .into(),
            ),
            _ => {}
        }
        if r.domain.is_some() && scope.contains(Traffic::Http) {
            self.push(
                list,
                field.clone(),
                "a rule with a `domain` is keyed by the descriptors' values, which HTTP \
                 requests do not carry: remove \"http\" (write a second rule for HTTP requests)"
                    .into(),
            );
        }
        if r.domain.is_none() && !given.is_empty() && !scope.contains(Traffic::Http) {
            self.http_settings_unused(at, r);
        }
        if self.errors.len() > before {
            default
        } else {
            scope
        }
    }

    /// Refuses the settings only HTTP requests use on a rule that applies to none.
    fn http_settings_unused(&mut self, at: &str, r: &RawRule) {
        let http_only = [
            r.key.as_ref().map(|k| (k.span(), "key")),
            r.matcher.path_prefix.as_ref().map(|p| (p.span(), "match")),
            r.matcher.host.as_ref().map(|p| (p.span(), "match")),
            r.matcher.methods.first().map(|p| (p.span(), "match")),
            r.matcher.header.as_ref().map(|h| (h.name.span(), "match")),
            r.cost.as_ref().map(|c| (c.span(), "cost")),
            r.cost_header.as_ref().map(|c| (c.span(), "cost_header")),
            r.route_costs
                .first()
                .map(|c| (c.path_prefix.span(), "route_costs")),
            r.delay.as_ref().map(|d| (d.span(), "delay")),
        ];
        let mut seen = Vec::new();
        for (span, field) in http_only.into_iter().flatten() {
            if seen.contains(&field) {
                continue;
            }
            seen.push(field);
            self.errors.push(self.src.error(
                span,
                format!("{at}.{field}"),
                "only HTTP requests use it, and applies_to has no \"http\": a /v1/check call \
                 names its own key and cost; remove it, or add \"http\"",
            ));
        }
    }
}
