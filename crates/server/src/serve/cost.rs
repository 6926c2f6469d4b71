//! Per-route costs (`[[rules.route_costs]]`, e.g. a search route costs 100 units).
//!
//! floodgate-tower reads a request's cost from a header ([`CostSource::Header`]); it cannot see
//! the route. So for a rule with route costs the server computes the cost itself, before the
//! rate-limit layer runs, and passes it in an internal header `x-floodgate-cost-<rule>` that the
//! rule's `CostSource::Header` reads. Clients cannot set it: every `x-floodgate-cost-*` header
//! a client sends is removed first, and the proxy never forwards them upstream.
//!
//! The cost of a request under such a rule: the first route whose path prefix (whole segments,
//! as in `[rules.match]`) and method match; else the `cost_header` value when present (a whole
//! number, clamped to the rule's capacity); else `cost`.

use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

use floodgate_tower::{CostSource, Matcher};

use crate::config::{Config, RuleConfig};

/// Prefix of the internal cost headers.
pub const INTERNAL_COST_PREFIX: &str = "x-floodgate-cost-";

/// The internal header carrying `rule`'s cost.
pub fn internal_header(rule: &str) -> HeaderName {
    HeaderName::from_bytes(format!("{INTERNAL_COST_PREFIX}{rule}").as_bytes())
        .expect("rule names are valid header name characters")
}

/// The floodgate-tower cost source of a rule.
pub fn cost_source(rule: &RuleConfig) -> CostSource {
    let max = rule.policy.capacity();
    if !rule.cost.routes.is_empty() {
        CostSource::Header {
            name: internal_header(&rule.name),
            default: rule.cost.default,
            max,
        }
    } else if let Some(name) = &rule.cost.header {
        CostSource::Header {
            name: name.clone(),
            default: rule.cost.default,
            max,
        }
    } else {
        CostSource::Fixed(rule.cost.default)
    }
}

/// Removes client-sent internal cost headers.
pub fn strip_internal(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|n| n.as_str().starts_with(INTERNAL_COST_PREFIX))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

/// Strips client-sent internal headers, then sets the internal cost header of every rule with
/// route costs.
pub fn inject(config: &Config, method: &Method, uri: &Uri, headers: &mut HeaderMap) {
    strip_internal(headers);
    for rule in config.rules.iter().filter(|r| !r.cost.routes.is_empty()) {
        let cost = route_cost(rule, method, uri, headers);
        headers.insert(internal_header(&rule.name), HeaderValue::from(cost));
    }
}

fn route_cost(rule: &RuleConfig, method: &Method, uri: &Uri, headers: &HeaderMap) -> u64 {
    let route = rule.cost.routes.iter().find(|route| {
        Matcher {
            path_prefix: Some(route.path_prefix.clone()),
            methods: route.method.iter().cloned().collect(),
            ..Matcher::default()
        }
        .matches(method, uri, headers)
    });
    if let Some(route) = route {
        return route.cost;
    }
    let from_header = rule.cost.header.as_ref().and_then(|name| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&c| c > 0)
    });
    from_header.map_or(rule.cost.default, |c| c.min(rule.policy.capacity()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        crate::config::parse(
            "t",
            r#"
[[rules]]
name = "api"
limit = "1000/min"
cost = 2
cost_header = "x-cost"
[[rules.route_costs]]
path_prefix = "/search"
method = "GET"
cost = 100
[[rules.route_costs]]
path_prefix = "/export"
cost = 500

[[rules]]
name = "plain"
limit = "10/s"
"#,
        )
        .unwrap()
    }

    fn cost_of(method: Method, uri: &str, extra: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in extra {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        inject(&config(), &method, &uri.parse().unwrap(), &mut h);
        h
    }

    #[test]
    fn first_matching_route_then_header_then_default() {
        let key = "x-floodgate-cost-api";
        assert_eq!(cost_of(Method::GET, "/search?q=x", &[])[key], "100");
        assert_eq!(
            cost_of(Method::POST, "/search", &[])[key],
            "2",
            "method must match"
        );
        assert_eq!(
            cost_of(Method::GET, "/searchx", &[])[key],
            "2",
            "whole segments only"
        );
        assert_eq!(cost_of(Method::POST, "/export/all", &[])[key], "500");
        assert_eq!(cost_of(Method::GET, "/other", &[("x-cost", "7")])[key], "7");
        assert_eq!(
            cost_of(Method::GET, "/other", &[("x-cost", "99999")])[key],
            "1000"
        );
        assert_eq!(
            cost_of(Method::GET, "/other", &[("x-cost", "-1")])[key],
            "2"
        );
    }

    #[test]
    fn client_sent_internal_headers_are_replaced_or_removed() {
        let h = cost_of(
            Method::GET,
            "/other",
            &[
                ("x-floodgate-cost-api", "0"),
                ("x-floodgate-cost-plain", "9"),
            ],
        );
        assert_eq!(h["x-floodgate-cost-api"], "2");
        assert!(h.get("x-floodgate-cost-plain").is_none());
        let c = config();
        assert_eq!(cost_source(&c.rules[1]), CostSource::Fixed(1));
        assert!(matches!(
            cost_source(&c.rules[0]),
            CostSource::Header { max: 1000, .. }
        ));
    }
}
