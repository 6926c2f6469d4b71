//! envoyproxy/ratelimit's `quota_mode` (per descriptor in YAML, `--envoy-quota-mode` for all:
//! `QUOTA_MODE`) against the real `floodgate serve --grpc-listen`: the cases of upstream's
//! `test/service/ratelimit_test.go` (`TestServiceGlobalQuotaMode`,
//! `TestMetadataReturnedForPassedDescriptors`, `TestServicePerDescriptorQuotaMode`,
//! `TestServiceMixedPerDescriptorModes`, `...UnderLimit`, `TestServiceQuotaModeOnlyAllOverTheLimit`,
//! `...OnlySomeOverTheLimit`, `TestServiceQuotaModeWithShadowMode`,
//! `TestServiceMixedModeWithShadowMode`), each limit brought over by real requests instead of a
//! mocked cache. The clock is manual, so no window ends during a test.

mod serve_support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serve_support::{client, metric, Floodgate};

/// `regular` allows 2 a minute and `quota` 1, `quota2` 3; the `quota*` ones in quota mode.
const YAML: &str = "\
domain: quota-domain
descriptors:
  - key: regular
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {name: service_1}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {name: service_2}
  - key: quota2
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
";

/// The same limits with no descriptor in quota mode (for `--envoy-quota-mode`).
fn plain_yaml() -> String {
    YAML.replace("    quota_mode: true\n", "")
}

fn serve(yaml: &str, flags: &[&str]) -> Floodgate {
    let mut args = vec!["--grpc-listen", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    Floodgate::with_files(&[("rl.yaml", yaml)], "rl.yaml", &args)
}

/// One request with one descriptor `key=limit` per key.
async fn call(fg: &Floodgate, keys: &[&str]) -> RateLimitResponse {
    let mut c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    let descriptors = keys
        .iter()
        .map(|k| RateLimitDescriptor {
            entries: vec![Entry {
                key: (*k).into(),
                value: "limit".into(),
            }],
            ..RateLimitDescriptor::default()
        })
        .collect();
    c.should_rate_limit(RateLimitRequest {
        domain: "quota-domain".into(),
        descriptors,
        hits_addend: 0,
    })
    .await
    .unwrap()
    .into_inner()
}

fn codes(r: &RateLimitResponse) -> (i32, Vec<i32>) {
    (r.overall_code, r.statuses.iter().map(|s| s.code).collect())
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

async fn denied(fg: &Floodgate, rule: &str) -> Option<f64> {
    let series = format!(
        "floodgate_decisions_total{{rule=\"quota-domain.{rule}_limit\",outcome=\"denied\"}}"
    );
    metric(&client(), fg, &series).await
}

#[tokio::test]
async fn global_quota_mode_is_over_the_limit_when_every_descriptor_is() {
    let fg = serve(&plain_yaml(), &["--envoy-quota-mode"]);
    assert_eq!(codes(&call(&fg, &["quota"]).await), (OK, vec![OK]));
    assert_eq!(codes(&call(&fg, &["quota"]).await), (OVER, vec![OVER]));
    // regular is under its limit: not every quota descriptor is over, so the answer is OK,
    // and regular is charged.
    for left in [1, 0] {
        let r = call(&fg, &["regular", "quota"]).await;
        assert_eq!(codes(&r), (OK, vec![OK, OVER]));
        assert_eq!(r.statuses[0].limit_remaining, left);
    }
    // Now both are over.
    let r = call(&fg, &["regular", "quota"]).await;
    assert_eq!(codes(&r), (OVER, vec![OVER, OVER]));
}

#[tokio::test]
async fn metadata_is_that_of_the_descriptors_that_passed() {
    let fg = serve(
        &plain_yaml(),
        &["--envoy-quota-mode", "--envoy-response-dynamic-metadata"],
    );
    assert_eq!(codes(&call(&fg, &["quota"]).await), (OK, vec![OK]));
    let r = call(&fg, &["regular", "quota"]).await;
    assert_eq!(codes(&r), (OK, vec![OK, OVER]));
    let meta = r.dynamic_metadata.expect("dynamic metadata");
    let passed = meta.fields["metadata"].kind.clone();
    let text = format!("{passed:?}");
    assert!(text.contains("service_1"), "{text}");
    assert!(!text.contains("service_2"), "{text}");
}

#[tokio::test]
async fn a_regular_descriptor_over_its_limit_refuses_whatever_the_quota_ones_say() {
    let fg = serve(YAML, &[]);
    for _ in 0..2 {
        assert_eq!(codes(&call(&fg, &["regular"]).await).0, OK);
    }
    let r = call(&fg, &["regular", "quota"]).await;
    assert_eq!(codes(&r), (OVER, vec![OVER, OK]));
    // Refused as one batch: the quota descriptor was not charged.
    assert_eq!(codes(&call(&fg, &["quota"]).await), (OK, vec![OK]));
}

#[tokio::test]
async fn the_only_quota_descriptor_over_its_limit_refuses() {
    let fg = serve(YAML, &[]);
    assert_eq!(codes(&call(&fg, &["quota"]).await), (OK, vec![OK]));
    let r = call(&fg, &["regular", "quota"]).await;
    assert_eq!(codes(&r), (OVER, vec![OK, OVER]));
    // Nothing was charged to regular: it still has both.
    let r = call(&fg, &["regular"]).await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
}

#[tokio::test]
async fn every_descriptor_under_its_limit_is_ok() {
    let fg = serve(YAML, &[]);
    let r = call(&fg, &["regular", "quota"]).await;
    assert_eq!(codes(&r), (OK, vec![OK, OK]));
    assert_eq!(r.statuses[0].limit_remaining, 1);
    assert_eq!(r.statuses[1].limit_remaining, 0);
}

#[tokio::test]
async fn quota_descriptors_all_over_their_limits_refuse() {
    let fg = serve(YAML, &[]);
    for _ in 0..3 {
        assert_eq!(codes(&call(&fg, &["quota2"]).await).0, OK);
    }
    assert_eq!(codes(&call(&fg, &["quota"]).await).0, OK);
    let r = call(&fg, &["quota", "quota2"]).await;
    assert_eq!(codes(&r), (OVER, vec![OVER, OVER]));
}

#[tokio::test]
async fn quota_descriptors_some_over_their_limits_pass_and_charge_the_others() {
    let fg = serve(YAML, &[]);
    assert_eq!(codes(&call(&fg, &["quota"]).await).0, OK);
    let before = denied(&fg, "quota").await.unwrap_or(0.0);
    let r = call(&fg, &["quota", "quota2"]).await;
    assert_eq!(codes(&r), (OK, vec![OVER, OK]));
    assert_eq!(r.statuses[1].limit_remaining, 2, "quota2 was charged");
    // The over one is counted as a denial, as upstream counts its over_limit.
    assert_eq!(denied(&fg, "quota").await, Some(before + 1.0));
    let r = call(&fg, &["quota", "quota2"]).await;
    assert_eq!(r.statuses[1].limit_remaining, 1);
}

#[tokio::test]
async fn global_shadow_mode_turns_an_all_over_quota_answer_ok() {
    let fg = serve(YAML, &["--envoy-shadow-mode"]);
    assert_eq!(codes(&call(&fg, &["quota"]).await).0, OK);
    let r = call(&fg, &["quota"]).await;
    assert_eq!(codes(&r), (OK, vec![OVER]));
    assert_eq!(
        metric(&client(), &fg, "floodgate_grpc_global_shadow_mode_total").await,
        Some(1.0)
    );
}

#[tokio::test]
async fn global_shadow_mode_turns_a_mixed_over_answer_ok() {
    let fg = serve(YAML, &["--envoy-shadow-mode"]);
    for _ in 0..2 {
        assert_eq!(codes(&call(&fg, &["regular"]).await).0, OK);
    }
    assert_eq!(codes(&call(&fg, &["quota"]).await).0, OK);
    let r = call(&fg, &["regular", "quota"]).await;
    assert_eq!(codes(&r), (OK, vec![OVER, OVER]));
    assert_eq!(
        metric(&client(), &fg, "floodgate_grpc_global_shadow_mode_total").await,
        Some(1.0)
    );
}

#[tokio::test]
async fn global_quota_mode_counts_a_descriptor_without_a_limit_as_one_not_over() {
    // As upstream: with QUOTA_MODE a descriptor that selects no limit is a quota descriptor
    // that passed, so the other's being over does not refuse the request.
    let fg = serve(&plain_yaml(), &["--envoy-quota-mode"]);
    assert_eq!(codes(&call(&fg, &["quota"]).await).0, OK);
    let r = call(&fg, &["quota", "unknown"]).await;
    assert_eq!(codes(&r), (OK, vec![OVER, OK]));
}
