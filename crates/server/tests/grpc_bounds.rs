//! The gRPC listener's request bounds against the real binary (docs/security.md, "Listeners and
//! connections"): a request message above 64 KiB is refused, one that does not arrive within
//! `header_read_timeout` ends the call, and the calls together hold at most 16 MiB (one
//! connection's at most 2 MiB: `grpc_connection_share`).

mod serve_support;

use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use futures_util::StreamExt as _;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serve_support::Floodgate;
use tokio::time::timeout;

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn config(header_read_timeout: &str) -> String {
    format!(
        r#"
[server]
header_read_timeout = "{header_read_timeout}"

[[rules]]
name = "edge"
limit = "100000/s"
domain = "edge"
descriptors = [{{ key = "remote_address" }}]
"#
    )
}

fn request(value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

type Sender = hyper::client::conn::http2::SendRequest<Body>;
type Body = StreamBody<
    futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>,
>;

/// An HTTP/2 connection to the gRPC listener.
async fn connect(fg: &Floodgate) -> Sender {
    connect_from(fg, 2).await
}

/// An HTTP/2 connection from 127.0.0.`host` (a loopback address of its own: the listener
/// shares its budget by client address).
async fn connect_from(fg: &Floodgate, host: u8) -> Sender {
    let addr = fg.grpc.as_deref().unwrap().trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, host], 0)))
        .unwrap();
    let tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// A call whose body is the 5-byte prefix announcing `announced` bytes, then `sent` of them,
/// and then nothing (the stream stays open).
fn stalled_call(announced: u32, sent: usize) -> http::Request<Body> {
    let mut data = vec![0u8];
    data.extend_from_slice(&announced.to_be_bytes());
    data.extend(std::iter::repeat_n(b'a', sent));
    let frames = futures_util::stream::iter([Ok(Frame::data(Bytes::from(data)))])
        .chain(futures_util::stream::pending())
        .boxed();
    http::Request::post(format!("http://localhost{METHOD}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(StreamBody::new(frames))
        .unwrap()
}

/// The `grpc-status` of a trailers-only answer (an error before any message).
fn status(response: &http::Response<hyper::body::Incoming>) -> Option<String> {
    response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_request_message_above_64_kib_is_refused() {
    let fg = Floodgate::with_config(&config("10s"), &["--grpc-listen", "127.0.0.1:0"]);
    let mut c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    // Under the bound: answered.
    c.should_rate_limit(request(&"a".repeat(60_000)))
        .await
        .unwrap();
    // Above it (tonic's default let 4 MiB through).
    let err = c
        .should_rate_limit(request(&"a".repeat(70_000)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
    c.should_rate_limit(request("203.0.113.7")).await.unwrap();
}

#[tokio::test]
async fn an_unfinished_request_message_ends_at_the_header_read_timeout() {
    let fg = Floodgate::with_config(&config("300ms"), &["--grpc-listen", "127.0.0.1:0"]);
    let mut sender = connect(&fg).await;
    sender.ready().await.unwrap();
    // 32 calls on one connection, each announcing 60,000 bytes and sending 50,000.
    let calls: Vec<_> = (0..32)
        .map(|_| sender.send_request(stalled_call(60_000, 50_000)))
        .collect();
    let answers = timeout(
        Duration::from_secs(10),
        futures_util::future::join_all(calls),
    )
    .await
    .expect("the stalled calls were held past the header_read_timeout");
    for answer in answers {
        // DEADLINE_EXCEEDED
        assert_eq!(status(&answer.unwrap()).as_deref(), Some("4"));
    }
}

#[tokio::test]
async fn the_calls_together_hold_at_most_16_mib_of_request_messages() {
    let fg = Floodgate::with_config(&config("60s"), &["--grpc-listen", "127.0.0.1:0"]);
    // 9 clients of 32 calls, each announcing 65,000 bytes: a client address's 2 MiB share
    // holds its 32, the 16 MiB of the listener 258 of the 288; the others are refused at once
    // instead of reserving their buffers.
    let mut senders = Vec::new();
    for host in 0..9 {
        // From nine addresses: one address's connections share 2 MiB.
        let mut sender = connect_from(&fg, 10 + host).await;
        sender.ready().await.unwrap();
        senders.push(sender);
    }
    let calls: Vec<_> = senders
        .iter_mut()
        .flat_map(|sender| {
            (0..32)
                .map(|_| sender.send_request(stalled_call(65_000, 0)))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut calls: futures_util::stream::FuturesUnordered<_> = calls.into_iter().collect();
    let mut refused = 0;
    while refused < 30 {
        let answer = timeout(Duration::from_secs(10), calls.next())
            .await
            .expect("no call was refused: the calls hold more than the budget")
            .unwrap()
            .unwrap();
        // RESOURCE_EXHAUSTED
        assert_eq!(status(&answer).as_deref(), Some("8"));
        refused += 1;
    }
    // The held calls are still waiting for their bytes.
    assert!(timeout(Duration::from_millis(200), calls.next())
        .await
        .is_err());
    // Once they are gone (the connection closes), the budget is free again.
    drop(calls);
    drop(senders);
    let mut c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    // The server sees the close a moment later: retried until it has.
    let freed = timeout(Duration::from_secs(5), async {
        while c
            .should_rate_limit(request(&"a".repeat(60_000)))
            .await
            .is_err()
        {}
    })
    .await;
    assert!(freed.is_ok(), "the budget was not given back");
}
