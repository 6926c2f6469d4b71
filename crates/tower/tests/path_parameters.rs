//! `;parameters` (issue 23, item 2): servlet containers (Tomcat, Spring) serve
//! `/api/login;jsessionid=x` as `/api/login`, so the layer matches and counts paths without
//! them by default, and keeps them when the rule set says so.

mod common;

use common::{harness, request};
use floodgate_core::{AlgorithmKind, Policy};
use floodgate_tower::{KeySource, Matcher, PathParameters, Rule, RuleSet};

fn login_rules() -> RuleSet {
    let policy = Policy::new(AlgorithmKind::FixedWindow, "2/min".parse().unwrap()).unwrap();
    RuleSet::new(vec![Rule::new("login", policy, KeySource::Path)
        .with_matcher(Matcher {
            path_prefix: Some("/api/login".into()),
            ..Matcher::default()
        })])
}

const SPELLINGS: [&str; 4] = [
    "/api/login;jsessionid=a",
    "/api;v=1/login",
    "/x/..;/api/login",
    "/api/login;jsessionid=b?next=/a;b",
];

#[tokio::test]
async fn path_parameters_reach_the_same_rule_and_counter_by_default() {
    let h = harness(login_rules());
    // One counter (the key is the path): two of the four spellings admitted.
    let mut statuses = Vec::new();
    for spelling in SPELLINGS {
        statuses.push(
            h.send(request(spelling, "203.0.113.7:1", &[]))
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[tokio::test]
async fn kept_path_parameters_are_segments_of_their_own() {
    let h = harness(login_rules().with_path_parameters(PathParameters::Keep));
    for spelling in SPELLINGS {
        let reply = h.send(request(spelling, "203.0.113.7:1", &[])).await;
        assert_eq!(reply.status.as_u16(), 200, "{spelling}");
        assert!(
            reply.headers.get("ratelimit").is_none(),
            "{spelling}: no rule applies"
        );
    }
}
