//! The answers budget of `floodgate serve` (`serve/answers.rs`), through the real binary and
//! raw HTTP/2: clients that open no flow-control window hold every answer they ask for, and
//! past the budget the connection holding the most is closed, its answers freed.

mod serve_support;

use std::net::SocketAddr;
use std::time::Duration;

use serve_support::{client, metric, Floodgate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// The client preface and a SETTINGS frame with `SETTINGS_INITIAL_WINDOW_SIZE` 0: the server
/// may send headers but no body byte.
const PREFACE_WINDOW_0: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x06\x04\0\0\0\0\0\0\x04\0\0\0\0";

/// A HEADERS frame (END_STREAM, END_HEADERS) on `stream` for `GET path`: HPACK with the
/// static table's `:method GET` and `:scheme http`, literal `:path` and `:authority`.
fn get(stream: u32, path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, u8::try_from(path.len()).unwrap()];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"127.0.0.1");
    let len = block.len();
    let mut frame = vec![
        0,
        u8::try_from(len >> 8).unwrap(),
        u8::try_from(len & 0xff).unwrap(),
        0x1,
        0x5,
    ];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(&block);
    frame
}

/// A connection that asks for `path` on 100 streams and then reads (answering nothing, so
/// acknowledging no SETTINGS: the server's keep-alive does not end it within a test).
async fn holder(to: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(to).await.unwrap();
    let mut out = PREFACE_WINDOW_0.to_vec();
    for i in 0..100u32 {
        out.extend_from_slice(&get(2 * i + 1, path));
    }
    s.write_all(&out).await.unwrap();
    s
}

/// Whether the server closed `s` within `within` (EOF or a reset; frames are skipped).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
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
        if closed_within(s, Duration::from_millis(200)).await {
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
