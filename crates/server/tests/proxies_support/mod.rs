//! Harness for the real-proxy tests (`proxies`): the snippets of `docs/proxies/` with their
//! addresses replaced, a proxy process stopped on drop, a raw-TCP app behind it, and raw
//! HTTP/1.1 requests and their parsed replies.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// The snippet `name` from `docs/proxies/`, with its addresses replaced (each must be there:
/// a snippet that changed its addresses fails here, not later).
pub fn snippet(name: &str, proxy: SocketAddr, floodgate: &str, app: SocketAddr) -> String {
    let text = std::fs::read_to_string(docs().join("proxies").join(name))
        .unwrap_or_else(|e| panic!("docs/proxies/{name}: {e}"));
    let all = [
        ("127.0.0.1:8000", proxy.to_string()),
        ("127.0.0.1:8080", floodgate.to_string()),
        ("127.0.0.1:3000", app.to_string()),
    ];
    let used = match name {
        "traefik.yml" | "traefik-headers.yml" => &all[..1],
        "traefik-dynamic.yml" | "traefik-headers-dynamic.yml" => &all[1..],
        _ => &all[..],
    };
    let mut out = text.clone();
    for (placeholder, real) in used {
        assert!(
            text.contains(placeholder),
            "docs/proxies/{name} lost {placeholder}"
        );
        out = out.replace(placeholder, real);
    }
    out
}

/// A free loopback port (bound and released; the proxy binds it next).
pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A binary the tests need, or a panic that says how to install it.
pub fn binary(name: &str, candidates: &[PathBuf], install: &str) -> PathBuf {
    let path_dirs = std::env::var_os("PATH").unwrap_or_default();
    candidates
        .iter()
        .cloned()
        .chain(std::env::split_paths(&path_dirs).map(|d| d.join(name)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed: scripts/test installs it ({install})"))
}

/// A proxy process; stopped (SIGTERM, then reaped) on drop. A watchdog shell owns it and stops
/// it when its stdin closes, so it also ends when the test process dies.
pub struct Proxy {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proxy {
    /// Runs `program args` in `dir` (which holds its configuration), its output in
    /// `dir/proxy.log`; `addr` is where it was told to listen.
    pub fn spawn(
        dir: tempfile::TempDir,
        addr: SocketAddr,
        program: &Path,
        args: &[String],
        env: &[(&str, PathBuf)],
    ) -> Self {
        let log = dir.path().join("proxy.log");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(
                r#"log=$1; shift; exec 3<&0
"$@" >"$log" 2>&1 </dev/null & p=$!
{ read _ <&3; kill "$p" 2>/dev/null; } &
wait "$p""#,
            )
            .arg("sh")
            .arg(&log)
            .arg(program)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start sh");
        Self {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `GET /ready` through the proxy gets a reply that `ready` accepts (the
    /// app's, as no rule limits /ready). `Err` with the log when the proxy exited, e.g.
    /// because its port was taken meanwhile.
    pub async fn ready(&mut self, ready: &Ready) -> Result<(), String> {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("exited ({status}):\n{}", self.logs()));
            }
            if let Ok(reply) = send(self.addr, "/ready", &[]).await {
                if ready(&reply) {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("not ready within 15 s:\n{}", self.logs()))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// How to run a proxy: its folder (with its configuration), program, arguments, environment.
pub type Launch = (
    tempfile::TempDir,
    PathBuf,
    Vec<String>,
    Vec<(&'static str, PathBuf)>,
);

/// Starts a proxy from `make(port)` and waits until it serves (`ready`); tries again on a new
/// port when it could not bind the first one.
pub async fn start_proxy(make: impl Fn(SocketAddr) -> Launch, ready: &Ready) -> Proxy {
    let mut last = String::new();
    for _ in 0..3 {
        let addr = free_port();
        let (dir, program, args, env) = make(addr);
        let mut proxy = Proxy::spawn(dir, addr, &program, &args, &env);
        match proxy.ready(ready).await {
            Ok(()) => return proxy,
            Err(why) if why.contains("in use") => last = why,
            Err(why) => panic!("{} did not start: {why}", program.display()),
        }
    }
    panic!("no free port for the proxy: {last}");
}

/// The app behind the proxy: answers every request 200 with JSON `{"app": "hello", "head":
/// <the request head it received>}` and closes the connection. Raw TCP, so it takes any bytes
/// a proxy forwards.
pub async fn start_app() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = serde_json::json!({
                    "app": "hello",
                    "head": String::from_utf8_lossy(&head),
                })
                .to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

/// Whether a reply shows the proxy serving.
pub type Ready = dyn Fn(&Reply) -> bool + Sync;

/// What a client received.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The app's view of the request: its head, lower-cased.
    pub fn app_saw(&self) -> String {
        self.json()["head"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase()
    }
}

/// Sends `GET target` (bytes as they are) with `headers` over a new connection, and reads the
/// whole answer (`Connection: close`).
pub async fn send(
    addr: SocketAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    exchange(TcpStream::connect(addr).await?, addr, target, headers).await
}

/// Sends `GET target` with `headers` on `conn` (to `addr`) and reads the whole answer.
pub async fn exchange(
    mut conn: TcpStream,
    addr: SocketAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    let mut request = format!("GET {target} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    parse(&raw).ok_or_else(|| std::io::Error::other(format!("bad reply {raw:?}")))
}

pub fn parse(raw: &[u8]) -> Option<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Reply {
        status,
        headers,
        body,
    })
}

pub fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}

/// nginx's launch: `conf` (a server block, such as the nginx snippet) included in a main file
/// that runs in the foreground with every path in a temporary directory.
pub fn nginx_launch(nginx: &Path, conf: &str) -> Launch {
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
    let args = [
        "-p",
        &d,
        "-e",
        &format!("{d}/error.log"),
        "-c",
        &format!("{d}/nginx.conf"),
    ]
    .map(String::from)
    .to_vec();
    (dir, nginx.to_path_buf(), args, vec![])
}
