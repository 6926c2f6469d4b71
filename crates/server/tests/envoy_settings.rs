//! envoyproxy/ratelimit's service-wide settings in Floodgate (`[envoy]` in TOML, `--envoy-*`
//! flags for YAML) against the real `floodgate serve --grpc-listen`: the bounded descriptor
//! labels of `detailed_metric` and the global shadow mode.

mod serve_support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serve_support::{client, metric, Floodgate};

async fn call(fg: &Floodgate, domain: &str, key: &str, value: &str) -> RateLimitResponse {
    let mut c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    c.should_rate_limit(RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test]
async fn detailed_metric_labels_are_capped_per_rule_the_rest_other() {
    let yaml = "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
    let fg = Floodgate::with_files(
        &[("rl.yaml", yaml)],
        "rl.yaml",
        &[
            "--grpc-listen",
            "127.0.0.1:0",
            "--envoy-metric-values-per-rule",
            "2",
        ],
    );
    for user in ["a", "b", "c", "d", "a"] {
        assert_eq!(
            call(&fg, "d", "user", user).await.overall_code,
            Code::Ok as i32
        );
    }
    let http = client();
    let series = |descriptor: &str| {
        format!(
            "floodgate_descriptor_decisions_total{{rule=\"d.user\",descriptor=\"{descriptor}\",outcome=\"allowed\"}}"
        )
    };
    assert_eq!(metric(&http, &fg, &series("d.user_a")).await, Some(2.0));
    assert_eq!(metric(&http, &fg, &series("d.user_b")).await, Some(1.0));
    assert_eq!(metric(&http, &fg, &series("d.user_c")).await, None);
    assert_eq!(metric(&http, &fg, &series("other")).await, Some(2.0));
}

#[tokio::test]
async fn global_shadow_mode_from_toml_answers_ok_and_counts() {
    let toml = r#"
[envoy]
shadow_mode = true

[[rules]]
name = "one-per-minute"
algorithm = "fixed_window"
limit = "1/min"
domain = "d"
descriptors = [{ key = "user" }]
"#;
    let fg = Floodgate::with_config(toml, &["--grpc-listen", "127.0.0.1:0"]);
    let first = call(&fg, "d", "user", "u").await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let second = call(&fg, "d", "user", "u").await;
    assert_eq!(
        second.overall_code,
        Code::Ok as i32,
        "shadow mode answers OK"
    );
    assert_eq!(
        second.statuses[0].code,
        Code::OverLimit as i32,
        "the descriptor's own status still says over"
    );
    let http = client();
    assert_eq!(
        metric(&http, &fg, "floodgate_grpc_global_shadow_mode_total").await,
        Some(1.0)
    );
    assert_eq!(
        metric(
            &http,
            &fg,
            "floodgate_decisions_total{rule=\"one-per-minute\",outcome=\"denied\"}"
        )
        .await,
        Some(1.0)
    );
}
