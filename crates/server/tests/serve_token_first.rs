//! With `--api-token` set, every guarded endpoint that takes a body refuses a request without
//! the token before it reads a byte of the body (issue 27, F2): `/v1/settle` used to take the
//! body as an extractor, so an unauthenticated client could hold a 64 KiB buffer per request
//! (per HTTP/2 stream) until the body timeout. Here the head announces 64 KiB and no body byte
//! is ever sent: the first answer must be the 401, never a `100 Continue` (the server starting
//! to read the body), through a real socket.

mod serve_support;

use serve_support::Floodgate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "api-token-0123456789abcdef";

/// Sends only the head of a POST to `path` announcing a 64 KiB body; the status line read back.
async fn status_without_body(fg: &Floodgate, path: &str) -> String {
    let addr = fg.api.strip_prefix("http://").unwrap();
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 65536\r\nExpect: 100-continue\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    // The body is never sent. `Expect: 100-continue`: the server answers `100 Continue` when
    // the handler starts reading the body, so the first status line tells whether the token
    // was checked first (401) or the body read first (100).
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer).to_string();
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn settle_and_check_refuse_a_missing_token_before_reading_the_body() {
    let fg = Floodgate::with_config(
        "[[rules]]\nname = \"r\"\nlimit = \"10/s\"\n",
        &["--api-token", TOKEN],
    );
    for path in [
        "/v1/settle",
        "/v1/check",
        "/v1/peek",
        "/v1/debug/clock/advance",
    ] {
        let status = status_without_body(&fg, path).await;
        assert_eq!(status, "HTTP/1.1 401 Unauthorized", "{path}");
    }
}
