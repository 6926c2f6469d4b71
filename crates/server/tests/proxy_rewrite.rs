//! What the reverse proxy forwards, rewrites and refuses (docs/proxies.md, "Reverse proxy"):
//! the real `floodgate serve --upstream` in front of a real nginx with an `api.example.com`
//! virtual host beside a default one, or a raw-socket upstream where the bytes matter; clients
//! speak raw HTTP/1.1 or HTTP/2 (hyper, prior knowledge). The manual clock never moves, so a
//! 2/min host rule admits exactly 2.

mod serve_support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serve_support::Floodgate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A host rule: 2 a minute per client for `api.example.com`, and 5 a minute under `/limited`
/// (the raw upstream's tests).
const CONFIG: &str = r#"
[[rules]]
name = "api-host"
limit = "2/min"
key = "client_ip"
[rules.match]
host = "api.example.com"

[[rules]]
name = "limited"
limit = "5/min"
key = "client_ip"
[rules.match]
path_prefix = "/limited"
"#;

/// A real nginx with two virtual hosts on one port, each answering which one it is, the
/// `Host` it saw and the `X-Forwarded-Host`.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_nginx() -> Nginx {
    // A port picked free can be taken before nginx binds it (tests start servers in
    // parallel): then nginx exits, and it is tried again on another.
    for _ in 0..5 {
        let mut nginx = spawn_nginx();
        // Until it answers as itself: bounded, and waiting for a process to bind (no clock).
        for _ in 0..500 {
            if answers_as_nginx(nginx.addr).await {
                return nginx;
            }
            if nginx.child.try_wait().ok().flatten().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    panic!("nginx did not start");
}

/// Whether `addr` answers with this file's nginx configuration.
async fn answers_as_nginx(addr: SocketAddr) -> bool {
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return false;
    };
    let request = b"GET / HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n";
    let mut out = Vec::new();
    conn.write_all(request).await.is_ok()
        && conn.read_to_end(&mut out).await.is_ok()
        && out.windows(13).any(|w| w == b"default vhost")
}

fn spawn_nginx() -> Nginx {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("nginx is not installed: scripts/test installs it (Debian package nginx)");
    let dir = tempfile::tempdir().unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let d = dir.path().display().to_string();
    let answer = "host=$http_host xfh=$http_x_forwarded_host tcip=$http_true_client_ip";
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\nhttp {{\n  access_log off;\n  \
         client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
         scgi_temp_path {d}/scgi;\n  \
         server {{ listen {addr} default_server; server_name _; \
         location / {{ return 200 \"default vhost {answer}\\n\"; }} }}\n  \
         server {{ listen {addr}; server_name api.example.com; \
         location / {{ return 200 \"api vhost {answer}\\n\"; }} }}\n}}\n"
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let child = Command::new(nginx)
        .args(["-p", &d, "-e", &format!("{d}/error.log"), "-c"])
        .arg(dir.path().join("nginx.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    // Stopped on drop, whichever way this ends.
    Nginx {
        child,
        addr,
        _dir: dir,
    }
}

/// What a client received.
#[derive(Debug)]
struct Reply {
    status: u16,
    /// Names in lower case, in the order received.
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// `host:port` of the proxy listener.
fn proxy_addr(fg: &Floodgate) -> SocketAddr {
    fg.proxy_url("")
        .trim_start_matches("http://")
        .parse()
        .unwrap()
}

/// Sends `raw` (a whole request, bytes as they are) on a new connection and reads the answer
/// to the end (the request says `Connection: close`).
async fn raw(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out).await;
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer head: {:?}", String::from_utf8_lossy(&out)));
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = out[end + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
}

/// `GET target HTTP/1.1` with these header lines (each `name: value`, sent as they are).
async fn get(addr: SocketAddr, target: &str, lines: &[&str]) -> Reply {
    let mut request = format!("GET {target} HTTP/1.1\r\n");
    for line in lines {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("connection: close\r\n\r\n");
    raw(addr, request.as_bytes()).await
}

/// An HTTP/2 request (prior knowledge) for `uri` (its authority is `:authority`) with extra
/// headers; (status, headers, body).
async fn h2(addr: SocketAddr, uri: &str, headers: &[(&str, &str)]) -> Reply {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .uri(uri)
        .version(http::Version::HTTP_2);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    let response = send
        .send_request(b.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    }
}

async fn behind_nginx() -> (Nginx, Floodgate, SocketAddr) {
    let nginx = start_nginx().await;
    let upstream = format!("http://{}", nginx.addr);
    let fg = Floodgate::with_config(CONFIG, &["--upstream", &upstream]);
    let addr = proxy_addr(&fg);
    (nginx, fg, addr)
}

/// The problem's `detail` names `field`.
fn names(reply: &Reply, field: &str) -> bool {
    reply.header("content-type") == Some("application/problem+json") && reply.body.contains(field)
}

#[tokio::test]
async fn an_absolute_form_target_with_another_host_is_refused_and_the_host_rule_counts_its_authority(
) {
    let (_nginx, _fg, addr) = behind_nginx().await;
    // The issue's bypass: other.example in the target, api.example.com in Host.
    for _ in 0..4 {
        let r = get(
            addr,
            "http://other.example/api/login",
            &["host: api.example.com"],
        )
        .await;
        assert_eq!(r.status, 400, "{r:?}");
        assert!(names(&r, "host"), "{r:?}");
    }
    // The absolute form's authority is the host: forwarded as Host, and counted.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = get(addr, "http://API.example.com/api/login", &[]).await;
        if r.status == 200 {
            assert!(
                r.body.starts_with("api vhost host=api.example.com "),
                "{r:?}"
            );
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let r = get(addr, "/api/login", &["host: api.example.com"]).await;
    assert_eq!(r.status, 429, "{r:?}");
}

#[tokio::test]
async fn other_spellings_of_the_host_count_against_the_host_rule_and_non_hosts_are_400() {
    let (_nginx, _fg, addr) = behind_nginx().await;
    for bad in [
        &["host: api.example.com:abc"][..],
        &[],
        &["host: "],
        &["host: a, b"],
        &["host: api.example.com", "host: api.example.com"],
        &["host: other.example", "host: api.example.com"],
    ] {
        let r = get(addr, "/api/login", bad).await;
        assert_eq!(r.status, 400, "{bad:?}: {r:?}");
        assert!(names(&r, "host"), "{bad:?}: {r:?}");
    }
    let mut statuses = Vec::new();
    for spelling in ["api.example.com.", "API.Example.Com:080", "api.example.com"] {
        let r = get(addr, "/api/login", &[&format!("host: {spelling}")]).await;
        if r.status == 200 {
            // What nginx was sent is what the rule matched: the one spelling.
            assert!(
                r.body.starts_with("api vhost host=api.example.com"),
                "{r:?}"
            );
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 429]);
}

#[tokio::test]
async fn h2_requests_reach_the_upstream_with_their_authority_as_host() {
    let (_nginx, _fg, addr) = behind_nginx().await;
    let r = h2(addr, "http://api.example.com/api/login", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body, "api vhost host=api.example.com xfh=api.example.com tcip=\n",
        "{r:?}"
    );
    let r = h2(
        addr,
        "http://other.example/api/login",
        &[("host", "api.example.com")],
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains(":authority"), "{r:?}");
    // The one admitted above was counted under the host rule.
    let r = h2(addr, "http://api.example.com/", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = h2(addr, "http://api.example.com/", &[]).await;
    assert_eq!(r.status, 429, "{r:?}");
    // Another spelling of the host in :authority is the same host, under the same rule.
    let r = h2(addr, "http://API.Example.com./", &[]).await;
    assert_eq!(r.status, 429, "{r:?}");
}

#[tokio::test]
async fn connection_naming_host_or_forwarding_headers_does_not_remove_them() {
    let (_nginx, _fg, addr) = behind_nginx().await;
    let r = raw(
        addr,
        b"GET /x HTTP/1.1\r\nhost: api.example.com\r\nconnection: close, host, x-forwarded-host\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body,
        "api vhost host=api.example.com xfh=api.example.com tcip=\n"
    );
}

/// A raw-socket upstream: records each request head it reads and answers with the bytes
/// `answer(head)` gives (closing the connection after); for a head containing `hold`, it
/// reads to the end of the connection first and answers nothing.
struct RawUpstream {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

async fn raw_upstream(answer: fn(&str) -> String) -> RawUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
                seen.lock().unwrap().push(head.clone());
                if head.contains("hold") {
                    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                    return;
                }
                let _ = conn.write_all(answer(&head).as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    RawUpstream { addr, heads }
}

fn canned(head: &str) -> String {
    let path = head.split(' ').nth(1).unwrap_or("/");
    let h = "HTTP/1.1 200 OK\r\nconnection: close\r\n";
    match path {
        "/both" => format!("{h}content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
        "/gzip" => format!("{h}transfer-encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        "/zeros" => format!("{h}content-length: 005\r\n\r\nhello"),
        "/limited/fields" | "/fields" => format!(
            "{h}ratelimit: \"up\";r=9;t=1\r\nratelimit-policy: \"up\";q=10\r\n\
             x-ratelimit-remaining: 9\r\nretry-after: 77\r\ncontent-length: 2\r\n\r\nok"
        ),
        "/limited/denied" => "HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\n\
             ratelimit: \"up\";r=0;t=77\r\nretry-after: 77\r\ncontent-length: 4\r\n\r\nslow"
            .to_string(),
        _ => format!("{h}content-length: 2\r\n\r\nok"),
    }
}

async fn behind_raw(config: &str) -> (RawUpstream, Floodgate, SocketAddr) {
    let up = raw_upstream(canned).await;
    let upstream = format!("http://{}", up.addr);
    let fg = Floodgate::with_config(config, &["--upstream", &upstream]);
    let addr = proxy_addr(&fg);
    (up, fg, addr)
}

#[tokio::test]
async fn upstream_framing_is_normalised_and_codings_other_than_chunked_are_refused() {
    let (up, _fg, addr) = behind_raw(CONFIG).await;
    // Content-Length beside chunked: the chunked body, whole, without the length.
    let r = get(addr, "/both", &["host: app.example"]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "hello world");
    assert!(r.header("content-length").is_none(), "{r:?}");
    // gzip would be lost: refused.
    let r = get(addr, "/gzip", &["host: app.example"]).await;
    assert_eq!(r.status, 502, "{r:?}");
    // The same over HTTP/2 (no chunking on the client's side: DATA frames).
    let r = h2(addr, "http://app.example/both", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "hello world");
    assert!(r.header("content-length").is_none(), "{r:?}");
    let r = h2(addr, "http://app.example/gzip", &[]).await;
    assert_eq!(r.status, 502, "{r:?}");
    // 005 is 5.
    let r = get(addr, "/zeros", &["host: app.example"]).await;
    assert_eq!(
        (r.status, r.header("content-length")),
        (200, Some("5")),
        "{r:?}"
    );
    assert_eq!(r.body, "hello");
    // A client's gzip, chunked: refused before the upstream, 501 naming the field.
    let before = up.heads.lock().unwrap().len();
    let r = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nhost: app.example\r\ntransfer-encoding: gzip, chunked\r\n\
          connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 501, "{r:?}");
    assert!(names(&r, "transfer-encoding"), "{r:?}");
    let r = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nhost: app.example\r\ncontent-length: 003\r\n\
          connection: close\r\n\r\nabc",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let heads = up.heads.lock().unwrap();
    assert_eq!(heads.len(), before + 1, "{heads:?}");
    assert!(heads[before].contains("content-length: 3\r\n"), "{heads:?}");
}

#[tokio::test]
async fn malformed_client_chunking_is_the_clients_400_not_an_upstream_failure() {
    let (_up, fg, addr) = behind_raw(CONFIG).await;
    for chunks in [
        &b"0x3\r\nabc\r\n0\r\n\r\n"[..],
        b"10000000000000000\r\nabc\r\n0\r\n\r\n",
        b"3\nabc\n0\n\n",
    ] {
        let mut request =
            b"POST /hold HTTP/1.1\r\nhost: app.example\r\ntransfer-encoding: chunked\r\n\
              connection: close\r\n\r\n"
                .to_vec();
        request.extend_from_slice(chunks);
        let r = raw(addr, &request).await;
        assert_eq!(
            r.status,
            400,
            "{:?}: {r:?}",
            String::from_utf8_lossy(chunks)
        );
        assert!(names(&r, "body"), "{r:?}");
    }
    assert!(
        !fg.logs().contains("upstream request failed"),
        "{}",
        fg.logs()
    );
}

#[tokio::test]
async fn floodgates_rate_limit_fields_replace_the_upstreams_except_on_its_own_429() {
    let (_up, _fg, addr) = behind_raw(CONFIG).await;
    // Admitted under a rule: Floodgate's fields only.
    let r = get(addr, "/limited/fields", &["host: app.example"]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.all("ratelimit").len(), 1, "{r:?}");
    assert!(
        r.all("ratelimit")[0].starts_with("\"limited\";r=4;"),
        "{r:?}"
    );
    assert_eq!(r.all("ratelimit-policy").len(), 1, "{r:?}");
    assert!(!r.all("ratelimit-policy")[0].contains("\"up\""), "{r:?}");
    assert!(r.header("x-ratelimit-remaining").is_none(), "{r:?}");
    assert!(r.header("retry-after").is_none(), "{r:?}");
    // No rule applies: still no upstream fields.
    let r = get(addr, "/fields", &["host: app.example"]).await;
    assert_eq!(r.status, 200, "{r:?}");
    for gone in [
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-remaining",
        "retry-after",
    ] {
        assert!(r.header(gone).is_none(), "{gone}: {r:?}");
    }
    // The upstream's 429 keeps its own, and only its own.
    let r = get(addr, "/limited/denied", &["host: app.example"]).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.all("retry-after"), ["77"], "{r:?}");
    assert_eq!(r.all("ratelimit"), ["\"up\";r=0;t=77"], "{r:?}");
    assert!(r.header("ratelimit-policy").is_none(), "{r:?}");
    assert_eq!(r.body, "slow");
    // Over HTTP/2 alike.
    let r = h2(addr, "http://app.example/limited/fields", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.all("ratelimit")[0].starts_with("\"limited\";r=2;"),
        "{r:?}"
    );
    assert!(r.header("x-ratelimit-remaining").is_none(), "{r:?}");
    assert!(r.header("retry-after").is_none(), "{r:?}");
    let r = h2(addr, "http://app.example/limited/denied", &[]).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.all("retry-after"), ["77"], "{r:?}");
    assert_eq!(r.all("ratelimit"), ["\"up\";r=0;t=77"], "{r:?}");
}

/// Client-address headers, one line each, as a client sends them.
const CLIENT_ADDRESS_LINES: [&str; 8] = [
    "true-client-ip: 10.0.0.1",
    "cf-connecting-ip: 10.0.0.2",
    "x-client-ip: 10.0.0.3",
    "fastly-client-ip: 10.0.0.4",
    "x_forwarded_for: 10.0.0.5",
    "x-original-url: /admin",
    "x-rewrite-url: /admin",
    "x-kept: 1",
];

/// Sends [`CLIENT_ADDRESS_LINES`] over HTTP/1.1 and HTTP/2 and checks the upstream saw
/// exactly the lines `kept` says.
async fn client_address_headers_through(
    up: &RawUpstream,
    addr: SocketAddr,
    kept: fn(&str) -> bool,
) {
    let mut lines = vec!["host: app.example"];
    lines.extend_from_slice(&CLIENT_ADDRESS_LINES);
    let r = get(addr, "/who", &lines).await;
    assert_eq!(r.status, 200, "{r:?}");
    let pairs: Vec<(&str, &str)> = CLIENT_ADDRESS_LINES
        .iter()
        .filter_map(|l| l.split_once(": "))
        .collect();
    let r = h2(addr, "http://app.example/who", &pairs).await;
    assert_eq!(r.status, 200, "{r:?}");
    let heads = up.heads.lock().unwrap();
    assert_eq!(heads.len(), 2, "{heads:?}");
    for head in heads.iter() {
        for line in &CLIENT_ADDRESS_LINES {
            assert_eq!(head.contains(line), kept(line), "{line}: {head}");
        }
    }
}

#[tokio::test]
async fn client_address_headers_from_an_untrusted_peer_are_stripped() {
    let (up, _fg, addr) = behind_raw(CONFIG).await;
    client_address_headers_through(&up, addr, |line| line.starts_with("x-kept")).await;
}

#[tokio::test]
async fn client_address_headers_named_in_keep_client_headers_pass() {
    let config = format!("[server]\nkeep_client_headers = [\"CF-Connecting-IP\"]\n{CONFIG}");
    let (up, _fg, addr) = behind_raw(&config).await;
    client_address_headers_through(&up, addr, |line| {
        line.starts_with("cf-connecting-ip") || line.starts_with("x-kept")
    })
    .await;
}

#[test]
fn a_keep_client_headers_name_that_is_not_stripped_is_a_config_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floodgate.toml");
    std::fs::write(
        &path,
        "[server]\nkeep_client_headers = [\"true-client-ip\", \"x-forwarded-for\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("floodgate.toml:2") && err.contains("server.keep_client_headers[1]"),
        "{err}"
    );
    assert!(!err.contains("keep_client_headers[0]"), "{err}");
}
