//! Sends N `ShouldRateLimit` calls, one after another on one HTTP/2 connection, to the gRPC
//! listener at ADDR (the requests of `floodgate bench --what grpc`: domain `bench`, one
//! descriptor `user` over 1,000 keys), and fails unless every answer is `OK`. The client
//! `scripts/callgrind-grpc` drives a server under callgrind with.
//!
//! ```sh
//! cargo run -p floodgate-bench --example grpc_calls -- 127.0.0.1:8081 1000
//! ```

use anyhow::Context;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

fn request(i: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: format!("user:{:06}", i % 1_000),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().context("usage: grpc_calls ADDR N")?;
    let n: u64 = args.next().context("usage: grpc_calls ADDR N")?.parse()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}")).await?;
        let mut headers = 0;
        for i in 0..n {
            let answer = client.should_rate_limit(request(i)).await?.into_inner();
            anyhow::ensure!(
                answer.overall_code == Code::Ok as i32,
                "call {i} answered {:?}",
                answer.overall_code
            );
            headers = answer.response_headers_to_add.len();
        }
        println!("{n} calls OK; the last answer had {headers} response_headers_to_add");
        Ok(())
    })
}
