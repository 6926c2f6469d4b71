//! The configuration's rules as the floodgate-tower [`RuleSet`] the limiter decides with.

use floodgate_tower::{ClientIpConfig, Rule, RuleSet, Traffic};

use crate::config::{Config, RuleConfig};

/// The floodgate-tower rule set for a configuration.
pub(crate) fn rule_set(config: &Config) -> RuleSet {
    let rules = config.rules.iter().map(tower_rule).collect();
    RuleSet::new(rules)
        .with_path_parameters(config.server.path_parameters)
        .with_client_ip(ClientIpConfig {
            trusted_proxies: config.server.trusted_proxies.clone(),
            header: config.server.forwarded_header,
            ipv6_prefix: config.server.ipv6_prefix,
            ..ClientIpConfig::default()
        })
}

fn tower_rule(r: &RuleConfig) -> Rule {
    let rule = Rule::new(r.name.as_str(), r.policy.clone(), r.key.clone());
    let rule = match r.lease {
        Some(lease) => rule.with_lease(lease),
        None => rule,
    };
    rule.with_matcher(r.matcher.clone())
        .with_cost(r.cost.clone())
        .with_shadow(r.shadow)
        .with_failure_mode(r.failure_mode)
        .with_delay(std::time::Duration::from_micros(r.delay.unwrap_or(0)))
        // A limit override's rule is chosen by a gRPC request's own limit, never by HTTP.
        .with_scope(match r.override_of {
            Some(_) => r.applies_to.without(Traffic::Http),
            None => r.applies_to,
        })
}
