//! Forward-auth refuses a forwarding header it cannot read instead of skipping it: an
//! `X-Forwarded-Host` (or method header) that is not visible ASCII, empty or blank, and a
//! `Host` sent twice, are a 400 naming the header. Skipped, they fell back to the
//! sub-request's own `Host` and walked around host rules, also through the real nginx with
//! `docs/proxies/nginx.conf` (nginx passes `$host` with a `\xff` in it).

mod serve_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serve_support::Floodgate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Two requests a minute to the host api.example.com.
const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]

[[rules]]
name = "api-host"
limit = "2/min"
key = "global"
[rules.match]
host = "api.example.com"
"#;

/// Sends `head` (the request line and headers, without the blank line) on a new connection
/// and returns the answer's status and whole text.
async fn raw(addr: &str, head: &[u8]) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut request = head.to_vec();
    request.extend_from_slice(b"connection: close\r\n\r\n");
    conn.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn api(fg: &Floodgate) -> String {
    fg.api.trim_start_matches("http://").to_string()
}

/// Spends the host rule's two requests, so that only a request escaping it is a 200.
async fn exhaust(fg: &Floodgate) {
    let head =
        b"GET /v1/forward-auth HTTP/1.1\r\nhost: fg\r\nx-forwarded-host: api.example.com\r\n";
    for expected in [200, 200, 429] {
        assert_eq!(raw(&api(fg), head).await.0, expected);
    }
}

#[tokio::test]
async fn an_unreadable_forwarding_header_is_a_400_naming_it() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    exhaust(&fg).await;
    let cases: [(&[u8], &str); 9] = [
        (
            b"x-forwarded-host: api.example.com\xff\r\n",
            "x-forwarded-host",
        ),
        (
            b"x-forwarded-host: api.example.com\x80\r\n",
            "x-forwarded-host",
        ),
        (
            b"x-forwarded-host: \xffapi.example.com\r\n",
            "x-forwarded-host",
        ),
        (
            "x-forwarded-host: api.exämple.com\r\n".as_bytes(),
            "x-forwarded-host",
        ),
        (b"x-forwarded-host:\r\n", "x-forwarded-host"),
        (b"x-forwarded-host:   \r\n", "x-forwarded-host"),
        (
            b"x-forwarded-method: G\xffT\r\nx-forwarded-host: api.example.com\r\n",
            "x-forwarded-method",
        ),
        (
            b"x-original-method: \r\nx-forwarded-host: api.example.com\r\n",
            "x-original-method",
        ),
        (
            b"x-forwarded-method: G{T\r\nx-forwarded-host: api.example.com\r\n",
            "x-forwarded-method",
        ),
    ];
    for (header, field) in cases {
        let mut head = b"GET /v1/forward-auth HTTP/1.1\r\nhost: fg\r\n".to_vec();
        head.extend_from_slice(header);
        let (status, text) = raw(&api(&fg), &head).await;
        assert_eq!(status, 400, "{}: {text}", String::from_utf8_lossy(header));
        assert!(text.contains(&format!("\"field\":\"{field}\"")), "{text}");
    }
}

#[tokio::test]
async fn a_host_sent_twice_is_a_400_on_both_endpoints() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    // The rule counts the sub-request's own Host when no X-Forwarded-Host is sent.
    for expected in [200, 200, 429] {
        let head = b"GET /v1/forward-auth HTTP/1.1\r\nhost: api.example.com\r\n";
        assert_eq!(raw(&api(&fg), head).await.0, expected);
    }
    for target in ["/v1/forward-auth", "/v1/forward-auth/api/x"] {
        for hosts in [
            "host: other.example\r\nhost: api.example.com\r\n",
            "host: api.example.com\r\nhost: other.example\r\n",
        ] {
            let head = format!("GET {target} HTTP/1.1\r\n{hosts}");
            let (status, text) = raw(&api(&fg), head.as_bytes()).await;
            assert_eq!(status, 400, "{target} {hosts}: {text}");
            assert!(text.contains("\"field\":\"host\""), "{text}");
        }
    }
}

// --- through the real nginx -------------------------------------------------------------------

/// nginx (`daemon off`), killed on drop.
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

fn nginx_binary() -> PathBuf {
    let path_dirs = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(PathBuf::from("/usr/sbin/nginx"))
        .chain(std::env::split_paths(&path_dirs).map(|d| d.join("nginx")))
        .find(|p| p.is_file())
        .expect("nginx is not installed: scripts/test installs it (Debian package nginx)")
}

/// `docs/proxies/nginx.conf` with its three addresses replaced, run in a folder of its own.
fn start_nginx(floodgate: &str, app: SocketAddr) -> Nginx {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/proxies/nginx.conf");
    let snippet = std::fs::read_to_string(docs).unwrap();
    for placeholder in ["127.0.0.1:8000", "127.0.0.1:8080", "127.0.0.1:3000"] {
        assert!(
            snippet.contains(placeholder),
            "nginx.conf lost {placeholder}"
        );
    }
    let conf = snippet
        .replace("127.0.0.1:8000", &addr.to_string())
        .replace("127.0.0.1:8080", floodgate)
        .replace("127.0.0.1:3000", &app.to_string());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    std::fs::write(dir.path().join("floodgate.conf"), conf).unwrap();
    let main = format!(
        "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         events {{ worker_connections 64; }}\nhttp {{\n    access_log off;\n    \
         client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n    \
         fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    \
         scgi_temp_path {d}/scgi;\n    include {d}/floodgate.conf;\n}}\n"
    );
    std::fs::write(dir.path().join("nginx.conf"), main).unwrap();
    let child = Command::new(nginx_binary())
        .args(["-p", &d, "-e", &format!("{d}/error.log"), "-c"])
        .arg(format!("{d}/nginx.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Nginx {
        child,
        addr,
        _dir: dir,
    }
}

/// An app that answers every request 200 `app` and closes.
async fn start_app() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\napp",
                    )
                    .await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn through_nginx_a_host_with_a_byte_that_is_not_ascii_is_refused_not_served() {
    let app = start_app().await;
    let fg = Floodgate::with_config(CONFIG, &[]);
    let nginx = start_nginx(&api(&fg), app);
    let proxy = nginx.addr.to_string();
    // Until nginx serves (it was just started): /ready is under no host rule.
    let mut up = false;
    for _ in 0..300 {
        if TcpStream::connect(&proxy).await.is_ok()
            && raw(&proxy, b"GET /ready HTTP/1.1\r\nhost: ready.example\r\n")
                .await
                .0
                == 200
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "nginx did not start");
    let get = |host: &[u8]| {
        let mut head = b"GET / HTTP/1.1\r\nhost: ".to_vec();
        head.extend_from_slice(host);
        head.extend_from_slice(b"\r\n");
        head
    };
    for expected in [200, 200, 429] {
        assert_eq!(raw(&proxy, &get(b"api.example.com")).await.0, expected);
    }
    for host in [
        &b"api.example.com\xff"[..],
        b"api.example.com\x80",
        b"\xffapi.example.com",
        "api.exämple.com".as_bytes(),
    ] {
        let (status, text) = raw(&proxy, &get(host)).await;
        assert_eq!(status, 400, "{}: {text}", String::from_utf8_lossy(host));
        assert!(!text.ends_with("app"), "the app served it: {text}");
    }
}
