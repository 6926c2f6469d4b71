//! `[server.grpc_tls]`: the gRPC listener over TLS and mutual TLS, called by a tonic client
//! (rustls) with certificates made in the test: a decision over TLS, plaintext and an unknown
//! server CA refused; with `client_ca_file` and `client_san`, a client without a certificate,
//! with one of another CA, or with another SAN refused; certificates replaced on disk serve
//! new handshakes while an open connection keeps working, and a broken replacement keeps the
//! previous ones.

mod serve_support;
mod tls_support;

use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serve_support::{client, metric, Floodgate};
use tls_support::{connect, port_of, write, Ca, Pair};
use tonic::transport::Channel;

/// A rule of 2 per minute on `(generic_key, all)` in domain `edge`, with `tls` as the
/// `[server.grpc_tls]` table's lines.
fn config(tls: &str) -> String {
    format!(
        "[server.grpc_tls]\n{tls}\n\n[[rules]]\nname = \"everyone\"\nalgorithm = \"fixed_window\"\n\
         limit = \"2/min\"\ndomain = \"edge\"\ndescriptors = [{{ key = \"generic_key\", value = \"all\" }}]\n"
    )
}

const SERVER_ONLY: &str = "cert_file = \"server.crt\"\nkey_file = \"server.key\"";
const MUTUAL: &str = "cert_file = \"server.crt\"\nkey_file = \"server.key\"\n\
                      client_ca_file = \"clients.crt\"\nclient_san = \"envoy.test\"";

/// Floodgate with the server certificate `server` and the client CA `clients` (written even
/// when unused) and `tls` lines; its gRPC port.
fn start(server: &Pair, clients: &Ca, tls: &str) -> (Floodgate, u16) {
    let toml = config(tls);
    let fg = Floodgate::with_files(
        &[
            ("server.crt", &server.cert),
            ("server.key", &server.key),
            ("clients.crt", &clients.pem),
            ("floodgate.toml", &toml),
        ],
        "floodgate.toml",
        &["--grpc-listen", "127.0.0.1:0"],
    );
    let port = port_of(fg.grpc.as_ref().unwrap());
    (fg, port)
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "generic_key".into(),
                value: "all".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// One decision on `c`: its overall code, or the error's text.
async fn decide(c: &mut RateLimitServiceClient<Channel>) -> Result<Code, String> {
    let r = c
        .should_rate_limit(request())
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(Code::try_from(r.into_inner().overall_code).unwrap())
}

/// Connects (trusting `ca`, presenting `identity`) and decides once.
async fn connect_and_decide(port: u16, ca: &Ca, identity: Option<&Pair>) -> Result<Code, String> {
    let mut c = connect(port, ca, identity)
        .await
        .map_err(|e| format!("{e:?}"))?;
    decide(&mut c).await
}

async fn handshake_failures(fg: &Floodgate) -> f64 {
    metric(
        &client(),
        fg,
        "floodgate_connections_closed_total{reason=\"tls_handshake\"}",
    )
    .await
    .unwrap_or(0.0)
}

#[tokio::test]
async fn decisions_over_tls_and_plaintext_is_refused() {
    let ca = Ca::new("server CA");
    let (fg, port) = start(&ca.server(), &ca, SERVER_ONLY);
    let mut c = connect(port, &ca, None).await.unwrap();
    assert_eq!(decide(&mut c).await, Ok(Code::Ok));
    assert_eq!(decide(&mut c).await, Ok(Code::Ok));
    assert_eq!(decide(&mut c).await, Ok(Code::OverLimit));

    // A plaintext HTTP/2 client gets no answer from a TLS listener.
    let plain = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}")).await;
    if let Ok(mut plain) = plain {
        assert!(decide(&mut plain).await.is_err());
    }
    // A client that does not trust the server's CA refuses it.
    let other = Ca::new("another CA");
    assert!(connect_and_decide(port, &other, None).await.is_err());
    assert!(handshake_failures(&fg).await >= 1.0, "{}", fg.logs());
}

#[tokio::test]
async fn mutual_tls_needs_a_client_certificate_of_the_ca_with_the_san() {
    let (server_ca, clients) = (Ca::new("server CA"), Ca::new("client CA"));
    let (fg, port) = start(&server_ca.server(), &clients, MUTUAL);

    let envoy = clients.client("envoy.test");
    assert_eq!(
        connect_and_decide(port, &server_ca, Some(&envoy)).await,
        Ok(Code::Ok)
    );
    // No client certificate.
    let none = connect_and_decide(port, &server_ca, None).await;
    assert!(none.is_err(), "{none:?}");
    // A certificate with the right SAN from another CA.
    let stranger = Ca::new("client CA").client("envoy.test");
    let e = connect_and_decide(port, &server_ca, Some(&stranger)).await;
    assert!(e.is_err(), "{e:?}");
    // The right CA, another SAN.
    let other_san = clients.client("other.test");
    let e = connect_and_decide(port, &server_ca, Some(&other_san)).await;
    assert!(e.is_err(), "{e:?}");
    assert!(handshake_failures(&fg).await >= 3.0, "{}", fg.logs());
    // The refused calls charged nothing: the second of 2 per minute is still admitted.
    assert_eq!(
        connect_and_decide(port, &server_ca, Some(&envoy)).await,
        Ok(Code::Ok)
    );
}

/// Polls (every 100 ms, at most 10 s) until a new connection trusting `ca` decides: the
/// watcher reads the files every second.
async fn until_served_by(port: u16, ca: &Ca, identity: Option<&Pair>) {
    for _ in 0..100 {
        if connect_and_decide(port, ca, identity).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the replaced certificate was never served");
}

fn replace(dir: &Path, pair: &Pair) {
    write(dir, "server.key", &pair.key);
    write(dir, "server.crt", &pair.cert);
}

#[tokio::test]
async fn replaced_certificates_serve_new_handshakes_and_open_connections_stay() {
    let (old_ca, new_ca, clients) = (Ca::new("old CA"), Ca::new("new CA"), Ca::new("clients"));
    let (fg, port) = start(&old_ca.server(), &clients, MUTUAL);
    let envoy = clients.client("envoy.test");
    // A connection opened before the rotation, trusting the old CA only.
    let mut open = connect(port, &old_ca, Some(&envoy)).await.unwrap();
    assert_eq!(decide(&mut open).await, Ok(Code::Ok));

    replace(fg.dir(), &new_ca.server());
    until_served_by(port, &new_ca, Some(&envoy)).await;
    // New handshakes see the new certificate only...
    assert!(connect_and_decide(port, &old_ca, Some(&envoy))
        .await
        .is_err());
    // ...while the open connection keeps working (a new one would fail: it trusts the old CA).
    assert_eq!(decide(&mut open).await, Ok(Code::OverLimit));
    let c = client();
    let ok = "floodgate_tls_reloads_total{result=\"ok\"}";
    assert!(metric(&c, &fg, ok).await.unwrap() >= 1.0);

    // A broken replacement (and a SIGHUP) keeps the certificates in force.
    write(fg.dir(), "server.crt", "not a certificate");
    fg.signal("HUP");
    let error = "floodgate_tls_reloads_total{result=\"error\"}";
    for _ in 0..100 {
        if metric(&c, &fg, error).await.unwrap() >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        metric(&c, &fg, error).await.unwrap() >= 1.0,
        "{}",
        fg.logs()
    );
    assert!(connect_and_decide(port, &new_ca, Some(&envoy))
        .await
        .is_ok());
    assert!(fg.logs().contains("the previous ones stay in force"));
}

#[test]
fn check_config_names_the_field_of_a_bad_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let pair = ca.server();
    std::fs::write(dir.path().join("server.crt"), &pair.cert).unwrap();
    // The key of another certificate.
    std::fs::write(dir.path().join("server.key"), ca.server().key).unwrap();
    let file = dir.path().join("floodgate.toml");
    std::fs::write(&file, config(SERVER_ONLY)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("floodgate.toml:3: server.grpc_tls.key_file:")
            && text.contains("does not go with the certificate"),
        "{text}"
    );
}
