//! The answers budget of `floodgate serve` (`serve/answers.rs`), through the real binary and
//! raw HTTP/2: clients that open no flow-control window hold every answer they ask for, and
//! past the budget the connection holding the most is closed, its answers freed.

mod serve_support;

use std::net::SocketAddr;
use std::time::Duration;

use serve_support::raw::{closed_after, h2_get, PREFACE_WINDOW_0};
use serve_support::{client, metric, Floodgate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// A connection that asks for `path` on 100 streams and then reads (answering nothing, so
/// acknowledging no SETTINGS: the server's keep-alive does not end it within a test).
async fn holder(to: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(to).await.unwrap();
    let mut out = PREFACE_WINDOW_0.to_vec();
    for i in 0..100u32 {
        out.extend_from_slice(&h2_get(2 * i + 1, path));
    }
    s.write_all(&out).await.unwrap();
    s
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// An attacker's review: 190 such connections asking for `/v1/openapi.json` (95 KB) took the
/// process from 41 MB to 1.84 GB, unauthenticated. Twelve of them ask for 1,200 answers,
/// about 115 MB, past the 64 MiB budget: connections are closed, the process stays small,
/// and `/healthz` answers meanwhile.
#[tokio::test]
async fn connections_that_read_no_answer_are_closed_past_the_answers_budget() {
    let fg = Floodgate::start(&[]);
    let api: SocketAddr = fg.api.trim_start_matches("http://").parse().unwrap();
    let before = rss_kib(fg.pid());
    let mut holders = Vec::new();
    for _ in 0..12 {
        holders.push(holder(api, "/v1/openapi.json").await);
    }
    let c = client();
    let series = r#"floodgate_connections_closed_total{reason="answers_held"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    let shed = loop {
        let shed = metric(&c, &fg, series).await.unwrap_or(0.0);
        if shed >= 1.0 || Instant::now() > deadline {
            break shed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(shed >= 1.0, "no connection closed for its held answers");
    let mut closed = 0;
    for s in &mut holders {
        if closed_after(s, Duration::from_millis(200)).await.is_some() {
            closed += 1;
        }
    }
    assert!(closed >= 1, "every holder still open");
    // Held at most the budget plus one connection's answers (100 x 99 KB) beyond the start.
    let grown_mib = rss_kib(fg.pid()).saturating_sub(before) / 1024;
    assert!(grown_mib < 64 + 10 + 30, "grew {grown_mib} MiB");
    let health = c.get(fg.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// The client preface with the largest flow-control windows (`SETTINGS_INITIAL_WINDOW_SIZE`
/// 2^31 - 1 and a connection WINDOW_UPDATE as large): the server may send everything, and
/// what the socket does not take waits in the server.
const PREFACE_WINDOW_MAX: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x06\x04\0\0\0\0\0\0\x04\x7f\xff\xff\xff\0\0\x04\x08\0\0\0\0\0\x7f\xff\0\0";

/// The same attack with open windows and a socket never read: the answers' bodies are all
/// taken by the connection and wait in its frames, not in the bodies. 60 connections of 100
/// answers (about 570 MB) are past the budget too, beyond what the sockets hold.
#[tokio::test]
async fn connections_whose_sockets_are_not_read_are_closed_past_the_answers_budget() {
    let fg = Floodgate::start(&[]);
    let api: SocketAddr = fg.api.trim_start_matches("http://").parse().unwrap();
    let mut holders = Vec::new();
    for _ in 0..60 {
        let mut s = TcpStream::connect(api).await.unwrap();
        let mut out = PREFACE_WINDOW_MAX.to_vec();
        for i in 0..100u32 {
            out.extend_from_slice(&h2_get(2 * i + 1, "/v1/openapi.json"));
        }
        s.write_all(&out).await.unwrap();
        holders.push(s);
    }
    let c = client();
    let series = r#"floodgate_connections_closed_total{reason="answers_held"}"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    let shed = loop {
        let shed = metric(&c, &fg, series).await.unwrap_or(0.0);
        if shed >= 1.0 || Instant::now() > deadline {
            break shed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(shed >= 1.0, "no connection closed for its unread answers");
    let health = c.get(fg.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    drop(holders);
}

const GRPC_CONFIG: &str = r#"
[server]
grpc_max_concurrent_streams = 1024

[[rules]]
name = "edge"
limit = "100000/s"
domain = "edge"
descriptors = [{ key = "remote_address" }]
"#;

/// A `ShouldRateLimit` call on `stream`: HEADERS (`POST`, `content-type: application/grpc`,
/// `te: trailers`), then one DATA frame (END_STREAM) with domain `edge` and one descriptor.
fn should_rate_limit(stream: u32) -> Vec<u8> {
    const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let mut block = vec![0x83, 0x86, 0x04, u8::try_from(PATH.len()).unwrap()];
    block.extend_from_slice(PATH.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"127.0.0.1");
    block.extend_from_slice(&[0x0f, 0x10, 16]);
    block.extend_from_slice(b"application/grpc");
    block.extend_from_slice(&[0x00, 2]);
    block.extend_from_slice(b"te");
    block.push(8);
    block.extend_from_slice(b"trailers");
    let mut out = frame(0x1, 0x4, stream, &block);
    // RateLimitRequest { domain: "edge", descriptors: [{ entries: [{ remote_address: 1.2.3.4 }] }] }
    let entry = [&[0x0a, 14][..], b"remote_address", &[0x12, 7], b"1.2.3.4"].concat();
    let descriptor = [&[0x0a, u8::try_from(entry.len()).unwrap()][..], &entry].concat();
    let message = [
        &[0x0a, 4][..],
        b"edge",
        &[0x12, u8::try_from(descriptor.len()).unwrap()],
        &descriptor,
    ]
    .concat();
    let mut data = vec![0];
    data.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    data.extend_from_slice(&message);
    out.extend_from_slice(&frame(0x0, 0x1, stream, &data));
    out
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![
        0,
        u8::try_from(len >> 8).unwrap(),
        u8::try_from(len & 0xff).unwrap(),
        kind,
        flags,
    ];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The attacker's review: 1,024 calls held on each of 40 gRPC connections (window 0) took the
/// process from 34 MB to 312 MB and were never ended. Ten connections of 1,024 calls pass the
/// 64 MiB budget (8 KiB a call): connections are closed, and `/healthz` answers meanwhile.
#[tokio::test]
async fn grpc_connections_that_read_no_answer_are_closed_past_the_budget() {
    let fg = Floodgate::with_config(GRPC_CONFIG, &["--grpc-listen", "127.0.0.1:0"]);
    let grpc: SocketAddr = fg
        .grpc
        .as_ref()
        .unwrap()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let mut holders = Vec::new();
    for _ in 0..10 {
        let mut s = TcpStream::connect(grpc).await.unwrap();
        let mut out = PREFACE_WINDOW_0.to_vec();
        for i in 0..1024u32 {
            out.extend_from_slice(&should_rate_limit(2 * i + 1));
        }
        s.write_all(&out).await.unwrap();
        holders.push(s);
    }
    let c = client();
    let series = r#"floodgate_connections_closed_total{reason="answers_held"}"#;
    let deadline = Instant::now() + Duration::from_secs(30);
    let shed = loop {
        let shed = metric(&c, &fg, series).await.unwrap_or(0.0);
        if shed >= 1.0 || Instant::now() > deadline {
            break shed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(shed >= 1.0, "no gRPC connection closed for its held calls");
    let mut closed = 0;
    for s in &mut holders {
        if closed_after(s, Duration::from_millis(200)).await.is_some() {
            closed += 1;
        }
    }
    assert!(closed >= 1, "every holder still open");
    let health = c.get(fg.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// An attacker's review: an HTTP/2 connection its client closed with a stream still open
/// (its answer unread) came back in the list of idle connections for ever, ahead of the
/// real ones: at the connection cap, eviction picked it, closed nothing, and a new client
/// waited for an idle timeout (59 s). Its answers' charges were never given back either.
#[tokio::test]
async fn connections_closed_with_a_stream_open_leave_eviction_working() {
    let fg = Floodgate::with_config("[server]\nmax_connections = 30\n", &[]);
    let api: SocketAddr = fg.api.trim_start_matches("http://").parse().unwrap();
    for _ in 0..10 {
        let mut s = TcpStream::connect(api).await.unwrap();
        let mut out = PREFACE_WINDOW_0.to_vec();
        out.extend_from_slice(&h2_get(1, "/healthz"));
        s.write_all(&out).await.unwrap();
        // The answer's headers came (its body cannot): then the client goes.
        let mut buf = [0u8; 256];
        let _ = timeout(Duration::from_secs(2), s.read(&mut buf)).await;
        drop(s);
    }
    // The cap filled with idle keep-alive connections, each after one answer.
    let mut idle = Vec::new();
    for _ in 0..30 {
        let mut s = TcpStream::connect(api).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("an idle connection's answer")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        idle.push(s);
    }
    // A new client gets room at once: the longest-idle real connection is closed for it.
    let started = Instant::now();
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
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{started:?}");
}
