//! Per-route costs (`[[rules.route_costs]]`, e.g. a search route costs 100 units).
//!
//! floodgate-tower reads a request's cost from headers; it cannot see the route. So for a rule
//! with route costs the server computes the cost of a matching route itself, before the
//! rate-limit layer runs, and passes it in an internal header `x-floodgate-cost-<rule>` that the
//! rule's [`CostSource::Computed`] reads first. Clients cannot set it: every
//! `x-floodgate-cost-*` header a client sends is removed first, and the proxy never forwards
//! them upstream.
//!
//! The cost of a request under such a rule: the first route whose path prefix (whole segments,
//! as in `[rules.match]`) and method match; else the `cost_header` value when present (read by
//! floodgate-tower: a positive whole number, clamped to the rule's capacity; anything else is
//! answered 400, see [`floodgate_tower::rule::parse_cost`]); else `cost`.

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
        CostSource::Computed {
            computed: internal_header(&rule.name),
            header: rule.cost.header.clone(),
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
/// route costs whose routes match the request.
pub fn inject(config: &Config, method: &Method, uri: &Uri, headers: &mut HeaderMap) {
    strip_internal(headers);
    for rule in config.rules.iter().filter(|r| !r.cost.routes.is_empty()) {
        if let Some(cost) = route_cost(rule, method, uri, headers) {
            headers.insert(internal_header(&rule.name), HeaderValue::from(cost));
        }
    }
}

/// The cost of the first matching route, if any.
fn route_cost(rule: &RuleConfig, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<u64> {
    let route = rule.cost.routes.iter().find(|route| {
        Matcher {
            path_prefix: Some(route.path_prefix.clone()),
            methods: route.method.iter().cloned().collect(),
            ..Matcher::default()
        }
        .matches(method, uri, headers)
    });
    route.map(|route| route.cost)
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

    /// The cost the rule `api` charges, after `inject`.
    fn cost_of(method: Method, uri: &str, extra: &[(&str, &str)]) -> Result<u64, String> {
        let h = headers_of(method.clone(), uri, extra);
        cost_source(&config().rules[0])
            .cost(&h)
            .map_err(|e| e.header.to_string())
    }

    fn headers_of(method: Method, uri: &str, extra: &[(&str, &str)]) -> HeaderMap {
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
        assert_eq!(cost_of(Method::GET, "/search?q=x", &[]), Ok(100));
        assert_eq!(
            cost_of(Method::GET, "/search", &[("x-cost", "abc")]),
            Ok(100),
            "a matching route wins over the header"
        );
        assert_eq!(cost_of(Method::POST, "/search", &[]), Ok(2), "method");
        assert_eq!(cost_of(Method::GET, "/searchx", &[]), Ok(2), "segments");
        assert_eq!(cost_of(Method::POST, "/export/all", &[]), Ok(500));
        assert_eq!(cost_of(Method::GET, "/other", &[("x-cost", "7")]), Ok(7));
        assert_eq!(
            cost_of(Method::GET, "/other", &[("x-cost", "99999")]),
            Ok(1000)
        );
        assert_eq!(
            cost_of(Method::GET, "/other", &[("x-cost", "-1")]),
            Err("x-cost".to_string()),
            "refused, naming the client's header"
        );
    }

    #[test]
    fn client_sent_internal_headers_are_replaced_or_removed() {
        let h = headers_of(
            Method::GET,
            "/other",
            &[
                ("x-floodgate-cost-api", "0"),
                ("x-floodgate-cost-plain", "9"),
            ],
        );
        assert!(h.get("x-floodgate-cost-api").is_none(), "no route matched");
        assert!(h.get("x-floodgate-cost-plain").is_none());
        let h = headers_of(Method::GET, "/search", &[("x-floodgate-cost-api", "1")]);
        assert_eq!(h["x-floodgate-cost-api"], "100");
        let c = config();
        assert_eq!(cost_source(&c.rules[1]), CostSource::Fixed(1));
        assert!(matches!(
            cost_source(&c.rules[0]),
            CostSource::Computed { max: 1000, .. }
        ));
    }
}
