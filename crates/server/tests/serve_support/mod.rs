//! Harness for the `floodgate serve` end-to-end tests: the real binary as a child process on a
//! free loopback port, on the test-only manual clock, killed on drop; and a real upstream HTTP
//! server (axum) for proxy mode.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::routing::any;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::Notify;

pub mod raw;

/// The manual clock's start: 2027-01-15T08:00:00Z in microseconds.
pub const START_US: u64 = 1_800_000_000_000_000;

/// A running `floodgate serve`.
pub struct Floodgate {
    child: Child,
    /// `http://127.0.0.1:PORT` of the API listener.
    pub api: String,
    /// `http://127.0.0.1:PORT` of the proxy listener (proxy mode only).
    pub proxy: Option<String>,
    /// `http://127.0.0.1:PORT` of the gRPC listener (with `--grpc-listen` only).
    pub grpc: Option<String>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Floodgate {
    /// Starts `floodgate serve --listen 127.0.0.1:0 --manual-clock START_US <args>` and waits
    /// for the "listening" lines on its stdout.
    pub fn start(args: &[&str]) -> Self {
        Self::spawn(tempfile::tempdir().unwrap(), args)
    }

    /// Writes `config` (TOML) to a file in the process's own temporary directory and starts it
    /// as [`Floodgate::start`] with `--config <that file>` followed by `args`.
    pub fn with_config(config: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("floodgate.toml");
        std::fs::write(&path, config).unwrap();
        let mut all = vec!["--config", path.to_str().unwrap()];
        all.extend_from_slice(args);
        Self::spawn(dir, &all)
    }

    /// Writes `files` (name, text) into the process's own temporary directory and starts it as
    /// [`Floodgate::start`] with `--config <that directory>/<config>` (a file name, or `.` for
    /// the directory itself) followed by `args`.
    pub fn with_files(files: &[(&str, &str)], config: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let path = dir.path().join(config);
        let mut all = vec!["--config", path.to_str().unwrap()];
        all.extend_from_slice(args);
        Self::spawn(dir, &all)
    }

    /// [`Floodgate::with_config`] on the system clock (no `--manual-clock`): for what only
    /// real time shows (requests held until their slot).
    pub fn with_config_on_real_clock(config: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("floodgate.toml");
        std::fs::write(&path, config).unwrap();
        let mut all = vec!["--config", path.to_str().unwrap()];
        all.extend_from_slice(args);
        Self::spawn_on(dir, &all, false, None)
    }

    /// The process's temporary directory (where [`Floodgate::with_files`] wrote its files).
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// [`Floodgate::start`] with `dir` as the process's temporary directory (kept until drop).
    pub fn spawn(dir: tempfile::TempDir, args: &[&str]) -> Self {
        Self::spawn_on(dir, args, true, None)
    }

    /// [`Floodgate::with_config`] started by `sh -c 'ulimit <ulimit> && exec floodgate ...'`,
    /// e.g. `-n 1024` (soft and hard open-file limits) or `-S -n 1024` (soft only).
    pub fn with_config_under_ulimit(config: &str, ulimit: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("floodgate.toml");
        std::fs::write(&path, config).unwrap();
        let mut all = vec!["--config", path.to_str().unwrap()];
        all.extend_from_slice(args);
        Self::spawn_on(dir, &all, true, Some(ulimit))
    }

    /// [`Floodgate::spawn`], on the manual clock or not, under `sh -c 'ulimit ULIMIT'` or not.
    fn spawn_on(
        dir: tempfile::TempDir,
        args: &[&str],
        manual_clock: bool,
        ulimit: Option<&str>,
    ) -> Self {
        let log = dir.path().join("floodgate.log");
        let proxy_mode = args.contains(&"--upstream");
        let grpc_mode = args.contains(&"--grpc-listen");
        let mut cmd = match ulimit {
            None => Command::new(env!("CARGO_BIN_EXE_floodgate")),
            Some(ulimit) => {
                let mut sh = Command::new("sh");
                sh.args([
                    "-c",
                    &format!("ulimit {ulimit} && exec \"$0\" \"$@\""),
                    env!("CARGO_BIN_EXE_floodgate"),
                ]);
                sh
            }
        };
        cmd.arg("serve").args(["--listen", "127.0.0.1:0"]);
        if manual_clock {
            cmd.args(["--manual-clock", &START_US.to_string()]);
        }
        cmd.args(args)
            .env_remove("FLOODGATE_ADMIN_TOKEN")
            .env_remove("FLOODGATE_RESERVATION_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        if proxy_mode {
            cmd.args(["--admin-listen", "127.0.0.1:0"]);
        }
        let mut child = cmd.spawn().expect("start floodgate");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut api = None;
        let mut proxy = None;
        let mut grpc = None;
        // Bounded: the child prints these lines right after binding, or exits (EOF).
        while api.is_none() || (proxy_mode && proxy.is_none()) || (grpc_mode && grpc.is_none()) {
            let line = match lines.next() {
                Some(Ok(line)) => line,
                _ => panic!(
                    "floodgate exited before listening:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            };
            let addr = line
                .strip_prefix("floodgate: listening on ")
                .and_then(|rest| rest.split(' ').next())
                .map(|a| format!("http://{a}"));
            if line.ends_with("(API)") {
                api = addr;
            } else if line.contains("(proxy to") {
                proxy = addr;
            } else if line.ends_with("(gRPC)") {
                grpc = addr;
            }
        }
        Self {
            child,
            api: api.unwrap(),
            proxy,
            grpc,
            log,
            _dir: dir,
        }
    }

    /// The process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "HUP", "TERM") with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the process to exit (bounded by the test's own timeout).
    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }

    /// What the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `{api}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api)
    }

    /// `{proxy}{path}`.
    pub fn proxy_url(&self, path: &str) -> String {
        format!("{}{path}", self.proxy.as_ref().expect("proxy mode"))
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client without connection pooling surprises: one per test is fine.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// POSTs JSON and returns (status, headers, body as JSON or Null).
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client.post(url).json(body).send().await.unwrap();
    split(r).await
}

/// `POST` `body` to `path` of `fg`: (status, body).
pub async fn call(c: &reqwest::Client, fg: &Floodgate, path: &str, body: Value) -> (u16, Value) {
    let (status, _, body) = post_json(c, &fg.url(path), &body).await;
    (status, body)
}

/// The `remaining` units of `rule`/`key`, by a cost-0 `/v1/peek` (asserting 200).
pub async fn remaining(c: &reqwest::Client, fg: &Floodgate, rule: &str, key: &str) -> u64 {
    let (status, body) = call(
        c,
        fg,
        "/v1/peek",
        json!({"rule": rule, "key": key, "cost": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

/// (status, headers, body parsed as JSON, or `Value::String` when it is not JSON).
pub async fn split(r: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Value) {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, body)
}

/// Moves the server's manual clock forward.
pub async fn advance(client: &reqwest::Client, fg: &Floodgate, micros: u64) {
    let (status, _, body) = post_json(
        client,
        &fg.url("/v1/debug/clock/advance"),
        &json!({ "micros": micros }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// [`advance`] on a server with an API or admin token: the debug clock needs one of them.
pub async fn advance_as(client: &reqwest::Client, fg: &Floodgate, micros: u64, token: &str) {
    let r = client
        .post(fg.url("/v1/debug/clock/advance"))
        .bearer_auth(token)
        .json(&json!({ "micros": micros }))
        .send()
        .await
        .unwrap();
    let (status, _, body) = split(r).await;
    assert_eq!(status, 200, "{body}");
}

/// Reads one sample of the Prometheus text (e.g. `floodgate_config_reloads_total{result="ok"}`).
pub async fn metric(client: &reqwest::Client, fg: &Floodgate, series: &str) -> Option<f64> {
    let text = client
        .get(fg.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Waits (looking every 5 ms, at most 1 s) until `n` requests are held.
pub async fn until_waiting(c: &reqwest::Client, fg: &Floodgate, n: f64) {
    let mut waiting = None;
    for _ in 0..200 {
        waiting = metric(c, fg, "floodgate_requests_waiting").await;
        if waiting == Some(n) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("{waiting:?} requests held, not {n}");
}

/// Writes `text` to `path` atomically (write a sibling, then rename), so a watcher never reads
/// half a file.
pub fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A real upstream HTTP server on a free loopback port.
///
/// - `/echo-body` answers with the request body, streamed back as it arrives;
/// - `/bytes/N` answers N bytes with `Content-Length: N`, streamed in 64 KiB chunks;
/// - `/slow` waits until [`Upstream::release`] (after signalling [`Upstream::arrived`]);
/// - `/held-body` answers `start;` at once and `end` once [`Upstream::release`] is notified
///   (a long poll: its head and a first chunk, then nothing until its source has more);
/// - any other path answers JSON describing the request (method, path, some headers).
pub struct Upstream {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Notified when a `/slow` request arrives.
    pub arrived: Arc<Notify>,
    /// Notify to let `/slow` answer (and `/held-body` end).
    pub release: Arc<Notify>,
}

impl Upstream {
    /// Binds and serves in the background of the current tokio runtime.
    pub async fn start() -> Self {
        let arrived = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let (a, r) = (Arc::clone(&arrived), Arc::clone(&release));
        let app =
            Router::new()
                .route(
                    "/echo-body",
                    any(|req: Request| async move {
                        Body::from_stream(req.into_body().into_data_stream())
                    }),
                )
                .route(
                    "/bytes/{n}",
                    any(
                        |axum::extract::Path(n): axum::extract::Path<u64>| async move {
                            let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
                            let chunks = (0..n.div_ceil(64 * 1024)).map(move |i| {
                                let left = n - i * 64 * 1024;
                                let len = usize::try_from(left.min(64 * 1024)).unwrap();
                                Ok::<_, std::io::Error>(chunk.slice(..len))
                            });
                            axum::response::Response::builder()
                                .header("content-length", n)
                                .body(Body::from_stream(futures_util::stream::iter(chunks)))
                                .unwrap()
                        },
                    ),
                )
                .route(
                    "/held-body",
                    any({
                        let r = Arc::clone(&r);
                        move || {
                            let r = Arc::clone(&r);
                            let start = futures_util::stream::once(async {
                                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"start;"))
                            });
                            let end = futures_util::stream::once(async move {
                                r.notified().await;
                                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"end"))
                            });
                            async move {
                                use futures_util::StreamExt;
                                Body::from_stream(start.chain(end))
                            }
                        }
                    }),
                )
                .route(
                    "/slow",
                    any(move || {
                        let (a, r) = (Arc::clone(&a), Arc::clone(&r));
                        async move {
                            a.notify_one();
                            r.notified().await;
                            "slow done"
                        }
                    }),
                )
                .fallback(|req: Request| async move {
                    let h = req.headers();
                    let get = |name: &str| {
                        h.get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string)
                    };
                    Json(json!({
                        "method": req.method().as_str(),
                        "path": req.uri().path_and_query().map(|p| p.as_str()),
                        "x_forwarded_for": get("x-forwarded-for"),
                        "x_forwarded_host": get("x-forwarded-host"),
                        "x_forwarded_proto": get("x-forwarded-proto"),
                        "x_real_ip": get("x-real-ip"),
                        "forwarded": get("forwarded"),
                        "x_secret": get("x-secret"),
                        "connection": get("connection"),
                        "host": get("host"),
                    }))
                });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("http://{addr}"),
            arrived,
            release,
        }
    }
}

/// A `/v1/check` body: one item of `rule` for `key`.
pub fn check(rule: &str, key: &str) -> Value {
    json!({ "rule": rule, "key": key })
}

/// A proxy-mode configuration: `[server] upstream` is added by the tests (the upstream's port
/// is known only once it runs).
pub const PROXY_CONFIG: &str = r#"
[[rules]]
name = "per-ip"
limit = "3/min"
key = "client_ip"
[rules.match]
path_prefix = "/api"

[[rules]]
name = "search-budget"
limit = "200/min"
key = "client_ip"
[rules.match]
path_prefix = "/search"
[[rules.route_costs]]
path_prefix = "/search/deep"
cost = 100
"#;

/// `POST /v1/simulate` with `body`: the status and the answer's text (JSON when 200).
pub async fn simulate_text(c: &reqwest::Client, fg: &Floodgate, body: &Value) -> (u16, String) {
    let r = c
        .post(fg.url("/v1/simulate"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    let text = r.text().await.unwrap();
    if status == 200 {
        assert_eq!(kind, "application/json");
    }
    (status, text)
}

/// `(status, content type, field, detail)` of a `/v1/simulate` answer.
pub async fn problem(
    c: &reqwest::Client,
    fg: &Floodgate,
    body: &str,
) -> (u16, String, Value, String) {
    let r = c
        .post(fg.url("/v1/simulate"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    let doc: Value = r.json().await.unwrap();
    let detail = doc["detail"].as_str().unwrap_or_default().to_string();
    (status, kind, doc["field"].clone(), detail)
}
