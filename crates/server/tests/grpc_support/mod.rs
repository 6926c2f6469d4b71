//! Harness for the gRPC tests (`grpc_rls`, `grpc_service`): floodgate with a gRPC listener and
//! a tonic client, descriptors, requests and what to read from an answer.

#![allow(dead_code)]

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

use crate::serve_support::Floodgate;

pub type Client = RateLimitServiceClient<Channel>;

/// Starts floodgate with `files` written to its directory, `--config <config>` and a gRPC
/// listener, and connects a client.
pub async fn start(files: &[(&str, &str)], config: &str, args: &[&str]) -> (Floodgate, Client) {
    let mut all = vec!["--grpc-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let fg = Floodgate::with_files(files, config, &all);
    let c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    (fg, c)
}

pub async fn yaml(text: &str) -> (Floodgate, Client) {
    start(&[("ratelimit.yaml", text)], "ratelimit.yaml", &[]).await
}

/// [`yaml`] with `--envoy-ok-response-headers`: `OK` answers carry the `RateLimit` headers too.
pub async fn ok_headers_yaml(text: &str) -> (Floodgate, Client) {
    let args = ["--envoy-ok-response-headers"];
    start(&[("ratelimit.yaml", text)], "ratelimit.yaml", &args).await
}

/// A descriptor of `(key, value)` entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

pub fn with_hits(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: hits,
    }
}

pub async fn call(c: &mut Client, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r).await.unwrap().into_inner()
}

pub async fn one(c: &mut Client, domain: &str, entries: &[(&str, &str)]) -> RateLimitResponse {
    call(c, request(domain, vec![desc(entries)], 0)).await
}

pub fn code(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).unwrap()
}

pub fn codes(r: &RateLimitResponse) -> Vec<Code> {
    r.statuses
        .iter()
        .map(|s| Code::try_from(s.code).unwrap())
        .collect()
}

pub fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

pub fn remaining(s: &DescriptorStatus) -> u32 {
    s.limit_remaining
}

pub const FIVE_PER_MINUTE: &str = "\
domain: rl
descriptors:
  - key: generic_key
    value: five
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: generic_key
    value: big
    rate_limit:
      name: big
      unit: minute
      requests_per_unit: 10
";
