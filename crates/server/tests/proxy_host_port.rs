//! Regression test: a port of any number of leading zeros (`Host: x:000080`, a thousand zeros)
//! and the port `0` were accepted and forwarded. A port is 1 to 65535 in at most 5 digits;
//! anything else is a 400 naming the field, not charged. Proxy mode (raw bytes to the real
//! binary, an axum upstream) and forward-auth's `X-Forwarded-Host`.

mod serve_support;

use serve_support::{client, split, Floodgate, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = r#"
[[rules]]
name = "all"
limit = "100/min"
key = "client_ip"
"#;

/// Sends one HTTP/1.1 request with `Host: <host>` to the proxy listener; the status line and
/// the body.
async fn proxy_status(fg: &Floodgate, host: &str) -> (u16, String) {
    let addr = fg.proxy.as_deref().unwrap().trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    (status, text)
}

#[tokio::test]
async fn ports_with_more_than_five_digits_or_zero_are_refused() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(CONFIG, &["--upstream", &upstream.url]);
    let c = client();
    let thousand = format!("x:{}80", "0".repeat(1000));
    for host in [
        "x:000080",
        thousand.as_str(),
        "x:0",
        "x:00000",
        "x:65536",
        "[::1]:000080",
    ] {
        let (status, text) = proxy_status(&fg, host).await;
        assert_eq!(status, 400, "{host}: {text}");
        assert!(text.contains("application/problem+json"), "{host}: {text}");
        assert!(text.contains("\"field\":\"host\""), "{host}: {text}");
        let r = c
            .get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-host", host)
            .send()
            .await
            .unwrap();
        let (status, _, body) = split(r).await;
        assert_eq!(status, 400, "{host}: {body}");
        assert_eq!(body["field"], "x-forwarded-host", "{host}: {body}");
    }
    // Five digits or fewer: normalised, forwarded without its leading zeros.
    for (host, forwarded) in [("x:00080", "x:80"), ("x:65535", "x:65535"), ("x:", "x")] {
        let (status, text) = proxy_status(&fg, host).await;
        assert_eq!(status, 200, "{host}: {text}");
        assert!(
            text.contains(&format!("\"host\":\"{forwarded}\"")),
            "{host}: {text}"
        );
    }
}
