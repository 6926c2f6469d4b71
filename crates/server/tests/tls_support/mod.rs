//! Certificates made in the test (rcgen): a CA, server certificates for `localhost` and
//! `127.0.0.1`, client certificates with a chosen SAN; and a tonic client over TLS.

#![allow(dead_code)]

use std::path::Path;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A certificate authority.
pub struct Ca {
    /// Its certificate, PEM.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its private key, PEM.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn issue(&self, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(
            DnType::CommonName,
            sans.first().copied().unwrap_or("client"),
        );
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` and `127.0.0.1`.
    pub fn server(&self) -> Pair {
        self.server_named(&["localhost", "127.0.0.1"])
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server_named(&self, names: &[&str]) -> Pair {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate with the DNS SAN `san`.
    pub fn client(&self, san: &str) -> Pair {
        self.issue(&[san], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// Writes `text` to `dir/name` by a rename, so a reader never sees half of it.
pub fn write(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// The port of `http://127.0.0.1:PORT`.
pub fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// A rate limit client to `127.0.0.1:port` over TLS, checking the server's certificate for
/// `localhost` against `ca`, presenting `identity` when given. Connects at once: a handshake
/// the client refuses is this call's error (one the server refuses may show only at the first
/// call, after TLS 1.3's handshake).
pub async fn connect(
    port: u16,
    ca: &Ca,
    identity: Option<&Pair>,
) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    if let Some(pair) = identity {
        tls = tls.identity(Identity::from_pem(&pair.cert, &pair.key));
    }
    let channel = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))?
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(RateLimitServiceClient::new(channel))
}
