//! One gRPC connection cannot take the listener's whole request budget (the attacker's
//! review: one client filled the 16 MiB and Envoy then failed open for everyone): each
//! connection's calls hold at most 2 MiB. And a `ShouldRateLimit` message of empty descriptor
//! entries (2 bytes each on the wire, about 48 decoded) ends as soon as it holds too many,
//! before it is complete and decoded.

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

const CONFIG: &str = r#"
[server]
header_read_timeout = "60s"

[[rules]]
name = "edge"
limit = "100000/s"
domain = "edge"
descriptors = [{ key = "remote_address" }]
"#;

type Sender = hyper::client::conn::http2::SendRequest<Body>;
type Body = StreamBody<
    futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>,
>;

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
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender.ready().await.unwrap();
    sender
}

/// A call whose body is `bytes` and then nothing (the stream stays open).
fn stalled(bytes: Vec<u8>) -> http::Request<Body> {
    let frames = futures_util::stream::iter([Ok(Frame::data(Bytes::from(bytes)))])
        .chain(futures_util::stream::pending())
        .boxed();
    http::Request::post(format!("http://localhost{METHOD}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(StreamBody::new(frames))
        .unwrap()
}

/// The 5-byte gRPC prefix announcing `len` bytes.
fn prefix(len: u32) -> Vec<u8> {
    let mut data = vec![0u8];
    data.extend_from_slice(&len.to_be_bytes());
    data
}

fn grpc_status(response: &http::Response<hyper::body::Incoming>) -> (Option<String>, String) {
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let message = header("grpc-message").unwrap_or_default();
    (header("grpc-status"), percent_decoded(&message))
}

/// `grpc-message` is percent-encoded (the gRPC HTTP/2 protocol).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
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

#[tokio::test]
async fn one_connection_holding_its_share_leaves_the_budget_to_the_others() {
    let fg = Floodgate::with_config(CONFIG, &["--grpc-listen", "127.0.0.1:0"]);
    let mut hog = connect(&fg).await;
    // 258 calls of 65,000 announced bytes: the whole 16 MiB, had one connection been let.
    let calls: Vec<_> = (0..258)
        .map(|_| hog.send_request(stalled(prefix(65_000))))
        .collect();
    let mut calls: futures_util::stream::FuturesUnordered<_> = calls.into_iter().collect();
    // Its share (2 MiB) holds 32; the other 226 are refused at once.
    for _ in 0..226 {
        let answer = timeout(Duration::from_secs(10), calls.next())
            .await
            .expect("the connection holds more than its share")
            .unwrap()
            .unwrap();
        let (code, message) = grpc_status(&answer);
        assert_eq!(code.as_deref(), Some("8"), "{message}");
        assert!(message.contains("this connection"), "{message}");
    }
    assert!(timeout(Duration::from_millis(200), calls.next())
        .await
        .is_err());
    // A second connection from the same address gets no share of its own (an attacker's
    // nine connections took the whole budget when the share was per connection).
    let mut again = connect(&fg).await;
    let answer = timeout(
        Duration::from_secs(10),
        again.send_request(stalled(prefix(65_000))),
    )
    .await
    .expect("a second connection of the same address was let hold more")
    .unwrap();
    let (code, message) = grpc_status(&answer);
    assert_eq!(code.as_deref(), Some("8"), "{message}");
    // Another client's largest message is still answered.
    let mut other = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    let answer = other
        .should_rate_limit(request(&"a".repeat(60_000)))
        .await
        .expect("another connection is served while one holds its share");
    assert_eq!(answer.into_inner().overall_code, 1, "OK");
    drop(calls);
}

#[tokio::test]
async fn a_message_of_empty_entries_ends_before_it_is_complete() {
    let fg = Floodgate::with_config(CONFIG, &["--grpc-listen", "127.0.0.1:0"]);
    let mut sender = connect(&fg).await;
    // domain "edge", then one descriptor of 30,000 empty entries (60,000 bytes): 60,010 bytes
    // announced, the first 1,000 of them sent, the rest never.
    let mut message = vec![0x0a, 0x04];
    message.extend_from_slice(b"edge");
    message.extend([0x12, 0xe0, 0xd4, 0x03]);
    message.extend([0x0a, 0x00].repeat(30_000));
    let mut body = prefix(u32::try_from(message.len()).unwrap());
    body.extend_from_slice(&message[..1_000]);
    let answer = timeout(Duration::from_secs(10), sender.send_request(stalled(body)))
        .await
        .expect("the call waited for the rest of the message")
        .unwrap();
    let (code, message) = grpc_status(&answer);
    // INVALID_ARGUMENT, as the decoded request's check says it.
    assert_eq!(code.as_deref(), Some("3"), "{message}");
    assert_eq!(
        message,
        "descriptors[0].entries: must hold at most 32 entries"
    );
    // The whole message through tonic's client: the same answer.
    let mut c = RateLimitServiceClient::connect(fg.grpc.clone().unwrap())
        .await
        .unwrap();
    let mut empty = request("x");
    empty.descriptors[0].entries = vec![Entry::default(); 30_000];
    let e = c.should_rate_limit(empty).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "descriptors[0].entries: must hold at most 32 entries"
    );
    c.should_rate_limit(request("203.0.113.7")).await.unwrap();
}
