//! The reverse proxy strips the origin and client-address headers an upstream may believe
//! (`X-Forwarded-Scheme`, `X-Forwarded-Ssl`, `X-Host`, `X-Original-URI`, `X-Forwarded-Uri`,
//! `X-Envoy-External-Address`, `X-ProxyUser-Ip`) from an untrusted peer unless kept by
//! `[server] keep_client_headers`, and appends itself to `Via` in both directions (RFC 9110
//! 7.6.3) instead of passing the client's alone. A raw-socket upstream records what arrives.

mod serve_support;

use std::sync::{Arc, Mutex};

use serve_support::Floodgate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The headers, one line each, as a client sends them.
const LINES: [&str; 7] = [
    "x-forwarded-scheme: https",
    "x-forwarded-ssl: on",
    "x-host: admin.internal",
    "x-original-uri: /admin",
    "x-forwarded-uri: /admin",
    "x-envoy-external-address: 10.0.0.9",
    "x-proxyuser-ip: 10.0.0.8",
];

/// An upstream that records each request head (lower case) and answers 200 with its own `Via`.
async fn upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).to_ascii_lowercase());
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nvia: 1.1 app\r\ncontent-length: 2\r\n\
                          connection: close\r\n\r\nok",
                    )
                    .await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (url, heads)
}

/// `GET /who` through the proxy with `lines`; the answer's head, lower case.
async fn get(fg: &Floodgate, lines: &[&str]) -> String {
    let addr = fg.proxy.as_deref().unwrap().trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut request = "GET /who HTTP/1.1\r\nhost: app.example\r\nconnection: close\r\n".to_string();
    for line in lines {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    answer
}

const RULES: &str = r#"
[[rules]]
name = "all"
limit = "1000/min"
key = "client_ip"
"#;

#[tokio::test]
async fn origin_and_client_address_headers_from_an_untrusted_peer_are_stripped() {
    let (url, heads) = upstream().await;
    let fg = Floodgate::with_config(RULES, &["--upstream", &url]);
    get(&fg, &LINES).await;
    // Each spelled with `_` too.
    let underscored: Vec<String> = LINES
        .iter()
        .map(|l| {
            let (name, value) = l.split_once(": ").unwrap();
            format!("{}: {value}", name.replace('-', "_"))
        })
        .collect();
    let underscored: Vec<&str> = underscored.iter().map(String::as_str).collect();
    get(&fg, &underscored).await;
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 2);
    for head in heads.iter() {
        for line in LINES {
            let name = line.split_once(':').unwrap().0;
            assert!(!head.contains(name), "{name} reached the upstream: {head}");
            assert!(!head.contains(&name.replace('-', "_")), "{head}");
        }
    }
}

#[tokio::test]
async fn keep_client_headers_passes_the_named_ones() {
    let (url, heads) = upstream().await;
    let config = format!(
        "[server]\nkeep_client_headers = [\"X-Forwarded-Ssl\", \"X-Envoy-External-Address\"]\n{RULES}"
    );
    let fg = Floodgate::with_config(&config, &["--upstream", &url]);
    get(&fg, &LINES).await;
    let heads = heads.lock().unwrap();
    for line in LINES {
        let kept = line.starts_with("x-forwarded-ssl") || line.starts_with("x-envoy-external");
        assert_eq!(heads[0].contains(line), kept, "{line}: {}", heads[0]);
    }
}

#[tokio::test]
async fn via_gets_floodgate_appended_both_ways() {
    let (url, heads) = upstream().await;
    let fg = Floodgate::with_config(RULES, &["--upstream", &url]);
    let answer = get(&fg, &["via: 1.0 edge"]).await;
    assert!(
        answer.contains("\r\nvia: 1.1 app, 1.1 floodgate\r\n"),
        "{answer}"
    );
    get(&fg, &[]).await;
    let heads = heads.lock().unwrap();
    assert!(
        heads[0].contains("\r\nvia: 1.0 edge, 1.1 floodgate\r\n"),
        "{}",
        heads[0]
    );
    assert!(
        heads[1].contains("\r\nvia: 1.1 floodgate\r\n"),
        "{}",
        heads[1]
    );
}
