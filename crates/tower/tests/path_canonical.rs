//! Path prefixes and path keys cannot be dodged by spelling a path differently: dot segments,
//! percent-encoding and repeated slashes all reach the same rules and counters, while the
//! request itself reaches the service unchanged. The matching itself (any spelling, the
//! configured prefixes) is tested in `floodgate-limiter`'s `path_canonical`.

mod common;

use common::{harness, request};
use floodgate_core::{AlgorithmKind, Policy};
use floodgate_tower::{KeySource, Matcher, Rule, RuleSet};
use http::StatusCode;

fn fixed(quota: &str) -> Policy {
    Policy::new(AlgorithmKind::FixedWindow, quota.parse().unwrap()).unwrap()
}

fn prefix_rule(name: &str, prefix: &str, key: KeySource) -> Rule {
    Rule::new(name, fixed("2/min"), key).with_matcher(Matcher {
        path_prefix: Some(prefix.into()),
        ..Matcher::default()
    })
}

/// The walkthrough's bypass: a `/api` rule (fixed window 2/min per client IP) in front of an
/// upstream that normalises paths. Every spelling is the same resource and must share the
/// two requests a minute.
#[tokio::test]
async fn path_prefix_bypass_spellings_are_limited() {
    let h = harness(RuleSet::new(vec![prefix_rule(
        "api",
        "/api",
        KeySource::ClientIp,
    )]));
    let spellings = [
        "/x/../api/data.txt",
        "/%61pi/data.txt",
        "//api/data.txt",
        "/./api/data.txt",
        "/api%2Fdata.txt",
        "/api/..%2Fdata.txt",
    ];
    for spelling in spellings {
        // A fresh minute for each spelling: two admitted, the third denied.
        h.clock.advance(60_000_000);
        let from = || request(spelling, "203.0.113.7:1234", &[]);
        assert_eq!(h.admitted(3, from).await, 2, "{spelling}");
    }
    // Mixed spellings share one counter.
    h.clock.advance(60_000_000);
    assert_eq!(
        h.status("/api/data.txt", "203.0.113.7:1").await,
        StatusCode::OK
    );
    assert_eq!(
        h.status("/%61pi/data.txt", "203.0.113.7:1").await,
        StatusCode::OK
    );
    for spelling in spellings {
        let reply = h.send(request(spelling, "203.0.113.7:1", &[])).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{spelling}");
    }
    // Paths that are not under /api stay unlimited.
    for other in ["/apix/data.txt", "/api/../other", "/%2561pi/data.txt"] {
        assert_eq!(
            h.admitted(5, || request(other, "203.0.113.7:1", &[])).await,
            5,
            "{other}"
        );
    }
}

#[tokio::test]
async fn path_and_route_keys_count_every_spelling_together() {
    let h = harness(RuleSet::new(vec![
        Rule::new("per-path", fixed("2/min"), KeySource::Path),
        Rule::new("per-route", fixed("3/min"), KeySource::Route),
    ]));
    assert_eq!(h.status("/a/b", "203.0.113.7:1").await, StatusCode::OK);
    assert_eq!(
        h.status("//a/./x/../%62", "203.0.113.7:1").await,
        StatusCode::OK
    );
    let denied = h.send(request("/%61/b", "203.0.113.7:1", &[])).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["rule"], "per-path");
    // Another path has its own counter, and so has `/a%2Fb`: one segment to an upstream that
    // keeps `%2F`, not `/a/b`.
    assert_eq!(h.status("/a/c", "203.0.113.7:1").await, StatusCode::OK);
    assert_eq!(h.status("/a%2Fb", "203.0.113.7:1").await, StatusCode::OK);
}
