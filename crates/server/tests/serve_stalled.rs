//! Requests whose client takes nothing of its answer, through the real binary and raw
//! sockets: an HTTP/2 stream whose window stays 0, an HTTP/1 client that reads no proxied
//! download. Such a request is busy for ever (no timer runs in flight), so before this it held
//! its connection slot and its upstream connection for as long as the client liked (an
//! attacker's review: 4,100 such `/healthz` streams held every slot; 260 unread pipelined
//! downloads held the upstream pool). Now it is closed after `idle_timeout` with
//! `reason="stalled"`, and at the cap a stalled connection makes room; a proxied long poll,
//! which has nothing to send, is not cut.
//!
//! A timeout can only be shown by real time passing, so these tests configure short ones
//! (hundreds of milliseconds) and wait for them with a bounded deadline.

mod serve_support;

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serve_support::raw::{closed_after, h2_frame, h2_get, until_metric, PREFACE_WINDOW_0};
use serve_support::{client, Floodgate, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const RULES: &str = r#"
[[rules]]
name = "api"
limit = "100000/s"
key = "client_ip"
"#;

const STALLED: &str = r#"floodgate_connections_closed_total{reason="stalled"}"#;

fn addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

/// A connection with one `GET path` stream at window 0: its answer's head comes, its body
/// never can.
async fn window_0(to: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(to).await.unwrap();
    let mut out = PREFACE_WINDOW_0.to_vec();
    out.extend_from_slice(&h2_get(1, path));
    s.write_all(&out).await.unwrap();
    s
}

#[tokio::test]
async fn an_http2_stream_whose_window_stays_0_is_closed_after_the_idle_timeout() {
    let fg = Floodgate::with_config(&format!("[server]\nidle_timeout = \"400ms\"\n{RULES}"), &[]);
    let mut s = window_0(addr(&fg.api), "/healthz").await;
    let after = closed_after(&mut s, Duration::from_secs(10))
        .await
        .expect("a stalled stream's connection stays open");
    // Never before the idle timeout; within it and two looks of its timer (400 ms apart).
    assert!(after >= Duration::from_millis(400), "{after:?}");
    assert!(until_metric(&fg, STALLED, 1.0, Duration::from_secs(2)).await >= 1.0);
}

/// The client sends a proxied download's request and reads nothing: the socket fills, the
/// proxy stops polling the upstream body, and the one upstream connection allowed
/// (`upstream_max_connections = 1`) stayed held. Closed as stalled, it is free for the next.
#[tokio::test]
async fn an_http1_client_that_reads_no_proxied_download_is_closed_and_frees_the_upstream() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(
        &format!(
            "[server]\nidle_timeout = \"400ms\"\nupstream_max_connections = 1\n\
             upstream_response_timeout = \"30s\"\n{RULES}"
        ),
        &["--upstream", &upstream.url],
    );
    let proxy = addr(fg.proxy.as_ref().unwrap());
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(b"GET /bytes/200000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Not read until the server gave up on it (the kernel's buffers fill in the meantime).
    let gone = timeout(Duration::from_secs(10), async {
        loop {
            if until_metric(&fg, STALLED, 1.0, Duration::from_millis(200)).await >= 1.0 {
                return;
            }
        }
    })
    .await;
    assert!(gone.is_ok(), "an unread download is still open after 10 s");
    assert!(closed_after(&mut s, Duration::from_secs(10))
        .await
        .is_some());
    // The upstream connection is free: a request through the proxy gets its answer.
    let r = timeout(
        Duration::from_secs(5),
        client().get(fg.proxy_url("/info")).send(),
    )
    .await
    .expect("the upstream pool is still held")
    .unwrap();
    assert_eq!(r.status(), 200);
}

/// A proxied long poll sends its head and a first chunk, then waits for its upstream for
/// several idle timeouts: it has nothing to send, so it is not stalled, and arrives whole.
#[tokio::test]
async fn a_proxied_answer_that_waits_for_its_upstream_is_not_cut() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(
        &format!(
            "[server]\nidle_timeout = \"300ms\"\nheader_read_timeout = \"300ms\"\n\
             upstream_response_timeout = \"30s\"\n{RULES}"
        ),
        &["--upstream", &upstream.url],
    );
    // HTTP/1.1.
    let mut r = client()
        .get(fg.proxy_url("/held-body"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(&r.chunk().await.unwrap().unwrap()[..], b"start;");
    // Several idle timeouts and timer looks with nothing to send.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    upstream.release.notify_one();
    let rest = timeout(Duration::from_secs(5), r.bytes())
        .await
        .expect("the rest of a long poll")
        .expect("an HTTP/1.1 long poll was cut");
    assert_eq!(&rest[..], b"end");
    // HTTP/2 (hyper's client).
    let tcp = TcpStream::connect(addr(fg.proxy.as_ref().unwrap()))
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::get("http://localhost/held-body")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let answer = sender.send_request(request).await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = answer.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(&first[..], b"start;");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    upstream.release.notify_one();
    let rest = timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("the rest of a long poll")
        .expect("an HTTP/2 long poll was cut")
        .to_bytes();
    assert_eq!(&rest[..], b"end");
    assert_eq!(
        until_metric(&fg, STALLED, 1.0, Duration::from_millis(100)).await,
        0.0
    );
}

/// The cap filled with stalled connections (idle timeout an hour away): a new client gets
/// room once their timers saw them stalled (`header_read_timeout` apart), by closing one.
#[tokio::test]
async fn at_the_cap_a_stalled_connection_makes_room() {
    let fg = Floodgate::with_config(
        &format!(
            "[server]\nmax_connections = 16\nidle_timeout = \"1h\"\n\
             header_read_timeout = \"300ms\"\n{RULES}"
        ),
        &[],
    );
    let api = addr(&fg.api);
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut s = window_0(api, "/healthz").await;
        // Its answer's head: the request is in flight (not an idle connection to evict).
        assert!(h2_frame(&mut s, 0x1, Duration::from_secs(5))
            .await
            .is_some());
        held.push(s);
    }
    let answer = timeout(Duration::from_secs(5), async {
        let mut s = TcpStream::connect(api).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.unwrap();
        answer
    })
    .await
    .expect("no room made at the cap within 5 s");
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    let mut closed = 0;
    for s in &mut held {
        if closed_after(s, Duration::from_millis(100)).await.is_some() {
            closed += 1;
        }
    }
    assert!(closed >= 1, "no stalled connection was closed");
    assert!(until_metric(&fg, STALLED, 1.0, Duration::from_secs(2)).await >= 1.0);
    let evicted = r#"floodgate_connections_closed_total{reason="evicted"}"#;
    assert_eq!(until_metric(&fg, evicted, 1.0, Duration::ZERO).await, 0.0);
}
