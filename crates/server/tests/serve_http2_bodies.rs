//! The API's request bodies over HTTP/2, with a real HTTP/2 client (hyper's), against the real
//! binary (the attacker's review: 256 streams per connection x 64 KiB held 16 MiB per
//! connection, and a body trickling a byte at a time outlived `body_idle_timeout`). Every body
//! must be whole within `header_read_timeout`, and all bodies share one budget of 16 MiB:
//! beyond it a request is a 503 problem with `Retry-After`, not buffered.

mod serve_support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serve_support::Floodgate;
use tokio::time::timeout;

type Sender = hyper::client::conn::http2::SendRequest<Body>;
type Body = StreamBody<
    futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>,
>;

fn config(header_read_timeout: &str) -> String {
    format!(
        "[server]\nheader_read_timeout = \"{header_read_timeout}\"\n\
         body_idle_timeout = \"30s\"\n\n\
         [[rules]]\nname = \"api\"\nlimit = \"1000000/s\"\n"
    )
}

async fn connect(fg: &Floodgate) -> Sender {
    let addr = fg.api.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender.ready().await.unwrap();
    sender
}

fn post(
    length: usize,
    frames: futures_util::stream::BoxStream<'static, Bytes>,
) -> http::Request<Body> {
    http::Request::post("http://localhost/v1/check")
        .header("content-type", "application/json")
        .header("content-length", length)
        .body(StreamBody::new(frames.map(|b| Ok(Frame::data(b))).boxed()))
        .unwrap()
}

async fn answer(
    response: http::Response<hyper::body::Incoming>,
) -> (u16, http::HeaderMap, serde_json::Value) {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        serde_json::from_slice(&body).unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_body_trickling_a_byte_at_a_time_ends_at_the_header_read_timeout() {
    let fg = Floodgate::with_config(&config("1s"), &[]);
    let mut sender = connect(&fg).await;
    // One byte every 100 ms of a 1,000-byte body: never idle for 30 s, never whole.
    let trickle = futures_util::stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Some((Bytes::from_static(b" "), ()))
    })
    .boxed();
    let response = timeout(
        Duration::from_secs(10),
        sender.send_request(post(1_000, trickle)),
    )
    .await
    .expect("the trickling body was held past header_read_timeout")
    .unwrap();
    let (status, headers, body) = answer(response).await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body["field"], "body", "{body}");
    assert_eq!(body["title"], "request timeout", "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("not received whole within 1000 ms (header_read_timeout)"),
        "{body}"
    );
}

#[tokio::test]
async fn http2_bodies_share_one_16_mib_budget_and_beyond_it_are_a_503() {
    let fg = Floodgate::with_config(&config("60s"), &[]);
    // 3 connections x 100 streams, each announcing 64 KiB and sending 60,000 bytes of it:
    // 18 MB, of which the budget holds 279 bodies.
    let mut senders = Vec::new();
    for _ in 0..3 {
        senders.push(connect(&fg).await);
    }
    let calls: Vec<_> = senders
        .iter_mut()
        .flat_map(|sender| {
            (0..100)
                .map(|_| {
                    let part = futures_util::stream::iter([Bytes::from(vec![b' '; 60_000])])
                        .chain(futures_util::stream::pending())
                        .boxed();
                    sender.send_request(post(65_536, part))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut calls: futures_util::stream::FuturesUnordered<_> = calls.into_iter().collect();
    for _ in 0..21 {
        let response = timeout(Duration::from_secs(20), calls.next())
            .await
            .expect("no body was refused: the bodies hold more than the budget")
            .unwrap()
            .unwrap();
        let (status, headers, body) = answer(response).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(body["field"], "body", "{body}");
    }
    // A small request still fits, over HTTP/1.
    let c = serve_support::client();
    let (status, _, body) = serve_support::post_json(
        &c,
        &fg.url("/v1/check"),
        &serde_json::json!({"rule": "api", "key": "k"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Once the held bodies are gone, so is their charge: 100 more bodies of 60,000 fit.
    drop(calls);
    drop(senders);
    let mut sender = connect(&fg).await;
    let whole = || {
        let text = format!(
            "{{\"rule\": \"api\", \"key\": \"k\"{}}}",
            " ".repeat(59_000)
        );
        post(
            text.len(),
            futures_util::stream::iter([Bytes::from(text)]).boxed(),
        )
    };
    let freed = timeout(Duration::from_secs(10), async {
        loop {
            let (status, _, _) = answer(sender.send_request(whole()).await.unwrap()).await;
            if status == 200 {
                break;
            }
        }
    })
    .await;
    assert!(freed.is_ok(), "the budget was not given back");
}
