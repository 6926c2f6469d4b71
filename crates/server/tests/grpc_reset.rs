//! `duration_until_reset` over gRPC against the real binary on the manual clock: whole
//! seconds to the window's end for the fixed window, exactly envoyproxy/ratelimit's
//! `CalculateReset` (`unit - now % unit`, `now` in whole seconds); the time until the key is
//! full again, rounded up, for the other algorithms.

mod serve_support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use serve_support::{advance, client, Floodgate, START_US};
use tonic::transport::Channel;

const YAML: &str = "domain: edge
descriptors:
  - key: minute
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: second
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: gcra
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: gcra }
";

/// envoyproxy/ratelimit's `CalculateReset` for a unit of `unit_s` seconds at `now_us`.
fn calculate_reset(unit_s: u64, now_us: u64) -> i64 {
    i64::try_from(unit_s - (now_us / 1_000_000) % unit_s).unwrap()
}

/// `(seconds, nanos)` of the first status's `duration_until_reset` for descriptor `key`
/// (with `hits` as its `hits_addend` when given).
async fn reset(
    c: &mut RateLimitServiceClient<Channel>,
    key: &str,
    hits: Option<u64>,
) -> (i64, i32) {
    let r = c
        .should_rate_limit(RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.into(),
                    value: "k".into(),
                }],
                hits_addend: hits.map(|value| UInt64Value { value }),
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let d = r.statuses[0].duration_until_reset.unwrap();
    (d.seconds, d.nanos)
}

#[tokio::test]
async fn duration_until_reset_is_whole_seconds_as_calculate_reset() {
    let fg = Floodgate::with_files(
        &[("ratelimit.yaml", YAML)],
        "ratelimit.yaml",
        &["--grpc-listen", "127.0.0.1:0"],
    );
    let mut c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    let http = client();
    assert_eq!(
        START_US % 60_000_000,
        0,
        "the manual clock starts on a minute"
    );
    // A report-only check of a fresh key: the window's end all the same, as upstream.
    assert_eq!(reset(&mut c, "minute", Some(0)).await, (60, 0));
    // 12.3 s into the minute: 47.7 s left, 48 as upstream (not 47.7).
    advance(&http, &fg, 12_300_000).await;
    let now = START_US + 12_300_000;
    assert_eq!(calculate_reset(60, now), 48);
    assert_eq!(reset(&mut c, "minute", None).await, (48, 0));
    assert_eq!(reset(&mut c, "minute", Some(0)).await, (48, 0));
    // A second window 0.3 s in: 1, where the fraction (0.7) would read 0 in Envoy.
    assert_eq!(
        reset(&mut c, "second", None).await,
        (calculate_reset(1, now), 0)
    );
    // 59.9 s into the minute: 1 s.
    advance(&http, &fg, 47_600_000).await;
    assert_eq!(reset(&mut c, "minute", None).await, (1, 0));
    // The next window's first instant: a full minute.
    advance(&http, &fg, 100_000).await;
    assert_eq!(reset(&mut c, "minute", None).await, (60, 0));
    // GCRA, 60 per minute: one request leaves 1 s until the key is full again; two, 2 s.
    assert_eq!(reset(&mut c, "gcra", None).await, (1, 0));
    advance(&http, &fg, 300_000).await;
    assert_eq!(reset(&mut c, "gcra", None).await, (2, 0));
    // A report-only check: the same 1.7 s, rounded up.
    assert_eq!(reset(&mut c, "gcra", Some(0)).await, (2, 0));
}
