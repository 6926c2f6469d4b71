//! Rules in words, for people: what `check-config` prints and what `serve` logs for every rule
//! at start-up and on each reload, so a configuration error is visible before traffic finds it
//! (a quota whose burst empties in 250 us, a rule that matches nothing, a route cost of 100).

use floodgate_core::AlgorithmKind;
use floodgate_tower::{CostSource, HeaderMatch, Matcher, Traffic};

use super::key::describe_key;
use super::schema::{Config, RuleConfig};

/// One rule described: `headline` (name, algorithm, quota) and one line per aspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleDescription {
    /// `per-user: gcra 600/min burst 200 (600 requests per minute)`.
    pub(crate) headline: String,
    /// How the algorithm spends the quota: `one unit every 100 ms; a full burst of 200 after
    /// 20 s` for the buckets, the window for the window algorithms.
    pub(crate) rate: String,
    /// `key [user:x-user-id | client_ip]`.
    pub(crate) key: String,
    /// What traffic it applies to (`applies_to`), with the matcher's conditions.
    pub(crate) applies: String,
    /// `cost 1`, plus the cost header and route costs.
    pub(crate) cost: String,
    /// `enforcing, failure_mode open` or `shadow (never denies), ...`.
    pub(crate) mode: String,
}

impl RuleDescription {
    /// Every line, the headline first.
    pub(crate) fn lines(&self) -> [&str; 6] {
        [
            &self.headline,
            &self.rate,
            &self.key,
            &self.applies,
            &self.cost,
            &self.mode,
        ]
    }
}

/// Describes `rule`.
pub(crate) fn describe_rule(rule: &RuleConfig) -> RuleDescription {
    let quota = rule.policy.quota();
    let kind = rule.policy.kind();
    let (headline, rate) = super::describe_calendar::describe(rule).unwrap_or_else(|| {
        let headline = format!("{}: {kind} {quota} ({})", rule.name, quota.describe());
        (headline, describe_rate(kind, quota))
    });
    RuleDescription {
        headline,
        rate,
        key: match &rule.descriptor {
            Some(d) => format!(
                "domain {}, descriptor {}",
                d.domain,
                d.entries
                    .iter()
                    .map(|e| format!(
                        "{}={}",
                        e.key,
                        e.value.text().unwrap_or_else(|| "(any)".into())
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("key {}", describe_key(&rule.key)),
        } + &rule
            .max_keys
            .map(|n| format!(", at most {n} keys held (max_keys)"))
            .unwrap_or_default(),
        applies: describe_scope(rule),
        cost: describe_cost(&rule.cost),
        mode: format!(
            "{}, failure_mode {}{}",
            if rule.shadow {
                "shadow (counted, never denies)"
            } else {
                "enforcing"
            },
            match rule.failure_mode {
                floodgate_tower::FailureMode::Open => "open",
                floodgate_tower::FailureMode::Closed => "closed",
            },
            match rule.delay {
                Some(d) => format!(
                    ", delay {} (holds a request that fits within it, then passes it)",
                    human(u128::from(d), 1)
                ),
                None => String::new(),
            }
        ) + &rule
            .lease
            .map(|l| format!("; {}", l.describe_bound(&rule.policy)))
            .unwrap_or_default(),
    }
}

fn describe_rate(kind: AlgorithmKind, quota: &floodgate_core::Quota) -> String {
    let window = human(u128::from(quota.period()), 1);
    match kind {
        AlgorithmKind::FixedWindow => format!(
            "at most {} per clock-aligned window of {window} (up to 2x across a window edge)",
            quota.limit()
        ),
        AlgorithmKind::SlidingWindow => format!(
            "at most about {} per sliding window of {window} (the previous window weighted)",
            quota.limit()
        ),
        AlgorithmKind::SlidingLog => format!(
            "at most {} in any window of {window} (one entry kept per admitted unit)",
            quota.limit()
        ),
        AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra => {
            let (num, den) = quota.emission_interval();
            let full = u128::from(num) * u128::from(quota.burst());
            format!(
                "one unit every {}; a full burst of {} after {} idle",
                human(u128::from(num), u128::from(den)),
                quota.burst(),
                human(full, u128::from(den))
            )
        }
    }
}

/// What `applies_to` means for this rule, every kind of traffic named: `applies to HTTP
/// requests (forward-auth, proxy) matching path /api; and to /v1/check calls naming it; not to
/// gRPC`.
fn describe_scope(rule: &RuleConfig) -> String {
    let scope = rule.applies_to;
    let mut parts = Vec::new();
    if scope.contains(Traffic::Http) {
        parts.push(match describe_matcher(&rule.matcher) {
            None => "every HTTP request (forward-auth, proxy)".into(),
            Some(conditions) => {
                format!("HTTP requests (forward-auth, proxy) matching {conditions}")
            }
        });
    }
    if let (true, Some(d)) = (scope.contains(Traffic::Grpc), &rule.descriptor) {
        parts.push(format!("gRPC rate limit requests of domain {}", d.domain));
    }
    if scope.contains(Traffic::Api) {
        parts.push("/v1/check calls naming it".into());
    }
    let not: Vec<&str> = [
        (Traffic::Http, "HTTP requests"),
        (Traffic::Api, "/v1/check"),
        (Traffic::Grpc, "gRPC"),
    ]
    .into_iter()
    .filter(|(t, _)| !scope.contains(*t))
    .map(|(_, name)| name)
    .collect();
    let mut text = format!("applies to {}", parts.join("; and to "));
    if !not.is_empty() {
        text.push_str(&format!("; not to {}", not.join(" or ")));
    }
    text
}

/// The matcher's conditions; `None` when it matches every request.
fn describe_matcher(m: &Matcher) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(prefix) = &m.path_prefix {
        parts.push(format!("path {prefix} (whole segments)"));
    }
    if !m.methods.is_empty() {
        let methods: Vec<&str> = m.methods.iter().map(http::Method::as_str).collect();
        parts.push(format!("methods {}", methods.join(" ")));
    }
    if let Some(host) = &m.host {
        parts.push(format!("host {host}"));
    }
    for h in &m.headers {
        parts.push(match h {
            HeaderMatch::Present(name) => format!("header {name} present"),
            HeaderMatch::Equals(name, value) => format!(
                "header {name} = {}",
                String::from_utf8_lossy(value.as_bytes())
            ),
        });
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn describe_cost(cost: &CostSource) -> String {
    match cost {
        CostSource::Fixed(n) => format!("cost {n}"),
        CostSource::Header { name, default, max } => {
            format!("cost {default}, or header {name} (1 to {max})")
        }
        CostSource::Routes {
            routes,
            header,
            default,
            max,
        } => {
            let routes: Vec<String> = routes
                .iter()
                .map(|r| {
                    let methods: Vec<&str> =
                        r.matcher.methods.iter().map(http::Method::as_str).collect();
                    format!(
                        "{}{}{} = {}",
                        r.matcher.path_prefix.as_deref().unwrap_or("/"),
                        if methods.is_empty() { "" } else { " " },
                        methods.join(" "),
                        r.cost
                    )
                })
                .collect();
            let header = match header {
                Some(name) => format!(", else header {name} (1 to {max})"),
                None => String::new(),
            };
            format!(
                "cost by route: {} (first match){header}, else {default}",
                routes.join("; ")
            )
        }
        other => format!("cost {other:?}"),
    }
}

/// `num / den` microseconds for people: `250 us`, `1.5 ms`, `100 ms`, `2 s`, `1.5 min`,
/// `36 h`.
fn human(num: u128, den: u128) -> String {
    // Display only: an f64 is exact enough for three significant decimals.
    let us = num as f64 / den.max(1) as f64;
    let (value, unit) = if us < 1_000.0 {
        (us, "us")
    } else if us < 1_000_000.0 {
        (us / 1_000.0, "ms")
    } else if us < 60_000_000.0 {
        (us / 1_000_000.0, "s")
    } else if us < 3_600_000_000.0 {
        (us / 60_000_000.0, "min")
    } else {
        (us / 3_600_000_000.0, "h")
    };
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} {unit}")
}

/// Logs every rule of `config` at `info`, one line each with its fields (at start-up and after
/// each reload).
pub(crate) fn log_rules(config: &Config) {
    for rule in &config.rules {
        let d = describe_rule(rule);
        tracing::info!(
            rule = %rule.name,
            algorithm = %rule.policy.kind(),
            quota = %rule.policy.quota(),
            in_words = %rule.policy.quota().describe(),
            rate = %d.rate,
            burst = rule.policy.quota().burst(),
            key = %d.key,
            applies = %d.applies,
            cost = %d.cost,
            mode = %d.mode,
            "rule"
        );
    }
    if config.rules.is_empty() {
        tracing::warn!("0 rules: nothing is limited");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> RuleDescription {
        let config = super::super::parse("t", text).unwrap();
        describe_rule(&config.rules[0])
    }

    #[test]
    fn a_bucket_says_its_emission_interval_and_when_it_is_full() {
        let d = rule("[[rules]]\nname = \"fast\"\nalgorithm = \"gcra\"\nlimit = \"4000/s\"\n");
        assert_eq!(d.headline, "fast: gcra 4000/s (4000 requests per second)");
        assert_eq!(
            d.rate,
            "one unit every 250 us; a full burst of 4000 after 1 s idle"
        );
        let d = rule("[[rules]]\nname = \"b\"\nlimit = \"600/min burst 200\"\n");
        assert_eq!(
            d.rate,
            "one unit every 100 ms; a full burst of 200 after 20 s idle"
        );
        let d = rule("[[rules]]\nname = \"odd\"\nlimit = \"3/10s\"\n");
        assert_eq!(
            d.rate,
            "one unit every 3.333 s; a full burst of 3 after 10 s idle"
        );
    }

    #[test]
    fn matchers_route_costs_and_modes_are_spelled_out() {
        let d = rule(
            r#"
[[rules]]
name = "api"
limit = "1000/min"
algorithm = "sliding_window"
key = "user:x-user | client_ip"
cost_header = "x-cost"
shadow = true
failure_mode = "closed"
[rules.match]
path_prefix = "/api"
methods = ["GET", "POST"]
header = { name = "x-tier", value = "free" }
[[rules.route_costs]]
path_prefix = "/api/search"
method = "GET"
cost = 100
"#,
        );
        assert_eq!(
            d.rate,
            "at most about 1000 per sliding window of 1 min (the previous window weighted)"
        );
        assert_eq!(d.key, "key user:x-user | client_ip");
        assert_eq!(
            d.applies,
            "applies to HTTP requests (forward-auth, proxy) matching path /api (whole segments), \
             methods GET POST, header x-tier = free; and to /v1/check calls naming it; not to gRPC"
        );
        assert_eq!(
            d.cost,
            "cost by route: /api/search GET = 100 (first match), else header x-cost (1 to \
             1000), else 1"
        );
        assert_eq!(
            d.mode,
            "shadow (counted, never denies), failure_mode closed"
        );
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(250, 1), "250 us");
        assert_eq!(human(1_500, 1), "1.5 ms");
        assert_eq!(human(20_000_000, 1), "20 s");
        assert_eq!(human(90_000_000, 1), "1.5 min");
        assert_eq!(human(129_600_000_000, 1), "36 h");
        assert_eq!(human(1, 2), "0.5 us");
    }
}
