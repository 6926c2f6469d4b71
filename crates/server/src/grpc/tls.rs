//! TLS and mutual TLS on the gRPC listener (rustls on ring).
//!
//! [`GrpcTlsSettings`] is what a configuration gives: the server's certificate chain and
//! private key (PEM files), and optionally a CA whose certificates clients must present
//! (mutual TLS) with a subject alternative name they must carry. The TOML configuration fills
//! it from `[server.grpc_tls]` (`crate::config::validate::grpc_tls`); envoyproxy/ratelimit's
//! environment fills it from `GRPC_SERVER_USE_TLS`, `GRPC_SERVER_TLS_CERT`,
//! `GRPC_SERVER_TLS_KEY`, `GRPC_CLIENT_TLS_CACERT` and `GRPC_CLIENT_TLS_SAN` (each
//! [`TlsField`] names both).
//!
//! The files are read at start ([`GrpcTlsSettings::load`]: an error names the field), then
//! every second and on `SIGHUP` ([`Acceptors::watch`]): when their contents changed and still
//! make a valid configuration, new handshakes use it; connections already open keep theirs.
//! A change that does not load (a key that does not match its certificate, say, while the
//! files are being replaced one by one) is logged and counted
//! (`floodgate_tls_reloads_total{result="error"}`), and the previous certificates stay in
//! force until the files change again.
//!
//! Client certificates (with `client_ca_file`): required; verified against that CA only (not
//! the system's roots, which would let any publicly trusted certificate in), with the
//! `clientAuth` extended key usage when the certificate lists key usages, and, with
//! `client_san`, a DNS or IP subject alternative name matching it (as a server name is
//! matched: a `*.example.com` certificate matches `a.example.com`). A failed handshake closes
//! the connection and is counted in `floodgate_connections_closed_total{reason="tls_handshake"}`.
//!
//! Bounds: each file is read up to [`MAX_PEM_BYTES`](crate::config::pem::MAX_PEM_BYTES); a handshake must be complete within
//! `header_read_timeout` of the connection (with its budget slot held meanwhile, as any
//! connection); rustls bounds each handshake message to 64 KiB.

use std::future::Future as _;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// How often the files are read to see whether they changed.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// TLS on the gRPC listener, as configured: plain paths and names that any configuration
/// mode builds (TOML's `[server.grpc_tls]`, envoyproxy/ratelimit's environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrpcTlsSettings {
    /// The server's certificate chain, PEM (leaf first).
    pub(crate) cert_file: PathBuf,
    /// The server certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub(crate) key_file: PathBuf,
    /// Mutual TLS: clients must present a certificate signed by a CA of this PEM bundle.
    /// `None`: no client certificate is asked for.
    pub(crate) client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: the client certificate must carry this DNS name or IP address
    /// as a subject alternative name.
    pub(crate) client_san: Option<String>,
}

/// Which setting a [`TlsError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TlsField {
    /// [`GrpcTlsSettings::cert_file`].
    Cert,
    /// [`GrpcTlsSettings::key_file`].
    Key,
    /// [`GrpcTlsSettings::client_ca_file`].
    ClientCa,
    /// [`GrpcTlsSettings::client_san`].
    ClientSan,
}

impl TlsField {
    /// Its name in `[server.grpc_tls]`.
    pub(crate) fn toml_key(self) -> &'static str {
        match self {
            Self::Cert => "cert_file",
            Self::Key => "key_file",
            Self::ClientCa => "client_ca_file",
            Self::ClientSan => "client_san",
        }
    }

    /// Its name in envoyproxy/ratelimit's environment.
    pub(crate) fn env_var(self) -> &'static str {
        match self {
            Self::Cert => "GRPC_SERVER_TLS_CERT",
            Self::Key => "GRPC_SERVER_TLS_KEY",
            Self::ClientCa => "GRPC_CLIENT_TLS_CACERT",
            Self::ClientSan => "GRPC_CLIENT_TLS_SAN",
        }
    }
}

/// What is wrong with one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsError {
    /// The setting at fault.
    pub(crate) field: TlsField,
    /// What is wrong, naming the file.
    pub(crate) message: String,
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field.toml_key(), self.message)
    }
}

impl std::error::Error for TlsError {}

/// The files' contents, as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Option<Vec<u8>>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl GrpcTlsSettings {
    /// Reads the files and builds the TLS configuration: what new handshakes use.
    ///
    /// # Errors
    /// The first problem: a file that cannot be read or is too large, PEM without a
    /// certificate or key, a key that does not match the certificate, a CA bundle without a
    /// usable certificate, a `client_san` that is no DNS name or IP address, or one without
    /// `client_ca_file`.
    pub(crate) fn load(&self) -> Result<Arc<ServerConfig>, TlsError> {
        self.build(&self.read()?)
    }

    fn read(&self) -> Result<Files, TlsError> {
        Ok(Files {
            cert: read_pem(&self.cert_file, TlsField::Cert)?,
            key: read_pem(&self.key_file, TlsField::Key)?,
            ca: self
                .client_ca_file
                .as_deref()
                .map(|p| read_pem(p, TlsField::ClientCa))
                .transpose()?,
        })
    }

    fn build(&self, files: &Files) -> Result<Arc<ServerConfig>, TlsError> {
        let fail = |field, message: String| TlsError { field, message };
        let shown = |p: &Path| format!("{:?}", p.display().to_string());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&files.cert)
            .collect::<Result<_, _>>()
            .map_err(|e| {
                fail(
                    TlsField::Cert,
                    format!("{}: invalid PEM: {e}", shown(&self.cert_file)),
                )
            })?;
        if certs.is_empty() {
            return Err(fail(
                TlsField::Cert,
                format!("{} holds no PEM certificate", shown(&self.cert_file)),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| {
            fail(
                TlsField::Key,
                format!(
                    "{} holds no usable PEM private key: {e}",
                    shown(&self.key_file)
                ),
            )
        })?;
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(TlsField::Cert, e.to_string()))?;
        let builder = match (&files.ca, &self.client_ca_file) {
            (Some(ca), Some(ca_file)) => {
                builder.with_client_cert_verifier(self.client_verifier(ca, ca_file, provider)?)
            }
            _ => {
                if self.client_san.is_some() {
                    return Err(fail(
                        TlsField::ClientSan,
                        "needs a client CA (the SAN is checked on client certificates, which \
                         are asked for only with one)"
                            .into(),
                    ));
                }
                builder.with_no_client_auth()
            }
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            fail(
                TlsField::Key,
                format!(
                    "{} does not go with the certificate of {}: {e}",
                    shown(&self.key_file),
                    shown(&self.cert_file)
                ),
            )
        })?;
        // gRPC is HTTP/2.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    fn client_verifier(
        &self,
        ca: &[u8],
        ca_file: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let fail = |message: String| TlsError {
            field: TlsField::ClientCa,
            message: format!("{:?}: {message}", ca_file.display().to_string()),
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca) {
            let cert = cert.map_err(|e| fail(format!("invalid PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| fail(format!("not a usable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(fail("holds no PEM certificate".into()));
        }
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let Some(san) = &self.client_san else {
            return Ok(inner);
        };
        let san = ServerName::try_from(san.clone()).map_err(|_| TlsError {
            field: TlsField::ClientSan,
            message: format!("{san:?} is neither a DNS name nor an IP address"),
        })?;
        Ok(Arc::new(SanVerifier { inner, san }))
    }
}

fn read_pem(path: &Path, field: TlsField) -> Result<Vec<u8>, TlsError> {
    let fail = |message: String| TlsError { field, message };
    let shown = format!("{:?}", path.display().to_string());
    crate::config::pem::read(path).map_err(|e| fail(e.message(&shown)))
}

/// The CA's verification, then the expected subject alternative name.
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: ServerName<'static>,
}

impl ClientCertVerifier for SanVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        rustls::client::verify_server_name(&ParsedCertificate::try_from(end_entity)?, &self.san)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The TLS configuration new handshakes use, replaced when the files change.
#[derive(Debug)]
pub(crate) struct Acceptors {
    settings: GrpcTlsSettings,
    current: ArcSwap<ServerConfig>,
}

impl Acceptors {
    /// Loads `settings` (see [`GrpcTlsSettings::load`]).
    ///
    /// # Errors
    /// As [`GrpcTlsSettings::load`].
    pub(crate) fn new(settings: GrpcTlsSettings) -> Result<Self, TlsError> {
        let config = settings.load()?;
        Ok(Self {
            settings,
            current: ArcSwap::new(config),
        })
    }

    /// The handshake of a new connection, with the configuration in force now, which must be
    /// complete within `timeout`.
    pub(super) fn accept(&self, stream: TcpStream, timeout: Duration) -> Transport {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.current.load_full());
        Transport::Handshake {
            accept: Box::new(acceptor.accept(stream)),
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    /// Reads the files every second, and on `SIGHUP`, until `shutdown`; loads them when their
    /// contents changed since they were last tried (on `SIGHUP` always).
    pub(super) async fn watch(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(hup) => Some(hup),
            Err(e) => {
                tracing::warn!(error = %e, "gRPC TLS: no SIGHUP handler; files are still checked every second");
                None
            }
        };
        let mut last = self.settings.read().ok();
        let mut last_error: Option<TlsError> = None;
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = tick.tick() => false,
                Some(()) = async { match &mut hup { Some(h) => h.recv().await, None => None } } => true,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            let settings = self.settings.clone();
            let Ok(read) = tokio::task::spawn_blocking(move || settings.read()).await else {
                continue;
            };
            let files = match read {
                Ok(files) => files,
                Err(e) => {
                    // Once per distinct problem, not every second.
                    if forced || last_error.as_ref() != Some(&e) {
                        metrics::counter!("floodgate_tls_reloads_total", "result" => "error")
                            .increment(1);
                        tracing::error!(error = %e, "gRPC TLS: cannot read the certificate files; the previous ones stay in force");
                        last_error = Some(e);
                    }
                    continue;
                }
            };
            if !forced && last.as_ref() == Some(&files) {
                continue;
            }
            match self.settings.build(&files) {
                Ok(config) => {
                    self.current.store(config);
                    metrics::counter!("floodgate_tls_reloads_total", "result" => "ok").increment(1);
                    tracing::info!(
                        cert_file = %self.settings.cert_file.display(),
                        "gRPC TLS: certificates reloaded; new connections use them"
                    );
                    last_error = None;
                }
                Err(e) => {
                    metrics::counter!("floodgate_tls_reloads_total", "result" => "error")
                        .increment(1);
                    tracing::error!(error = %e, "gRPC TLS: the changed certificate files do not load; the previous ones stay in force");
                    last_error = Some(e);
                }
            }
            last = Some(files);
        }
    }
}

/// Registers the description and zero values of the TLS reload counter.
pub(super) fn describe_metrics() {
    metrics::describe_counter!(
        "floodgate_tls_reloads_total",
        "Reloads of the gRPC listener's TLS certificate files by result (ok, error: the \
         previous certificates stay in force)"
    );
    for result in ["ok", "error"] {
        metrics::counter!("floodgate_tls_reloads_total", "result" => result).increment(0);
    }
}

/// An accepted gRPC connection's byte stream: plain TCP, or TLS (the handshake first, driven
/// by the first read or write, within its deadline).
pub(super) enum Transport {
    /// No TLS.
    Plain(TcpStream),
    /// The TLS handshake in progress.
    Handshake {
        accept: Box<tokio_rustls::Accept<TcpStream>>,
        deadline: Pin<Box<tokio::time::Sleep>>,
    },
    /// After the handshake.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// The handshake failed: every call fails.
    Failed,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Plain(_) => "Transport::Plain",
            Self::Handshake { .. } => "Transport::Handshake",
            Self::Tls(_) => "Transport::Tls",
            Self::Failed => "Transport::Failed",
        })
    }
}

impl Transport {
    /// Drives the handshake, when there is one; ready once the stream carries data.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = match self {
            Self::Plain(_) | Self::Tls(_) => return Poll::Ready(Ok(())),
            Self::Failed => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the TLS handshake failed",
                )))
            }
            Self::Handshake { accept, deadline } => match Pin::new(accept.as_mut()).poll(cx) {
                Poll::Ready(result) => result,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the gRPC client did not complete the TLS handshake within \
                     header_read_timeout",
                )),
                Poll::Pending => return Poll::Pending,
            },
        };
        match result {
            Ok(stream) => {
                *self = Self::Tls(Box::new(stream));
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                *self = Self::Failed;
                metrics::counter!("floodgate_connections_closed_total", "reason" => "tls_handshake")
                    .increment(1);
                tracing::debug!(error = %e, "gRPC TLS handshake failed");
                Poll::Ready(Err(e))
            }
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.poll_ready(cx))?;
        match &mut *self {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Handshake { .. } | Self::Failed => Poll::Pending,
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_ready(cx))?;
        match &mut *self {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Handshake { .. } | Self::Failed => Poll::Pending,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_ready(cx))?;
        match &mut *self {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Self::Handshake { .. } | Self::Failed => Poll::Pending,
        }
    }

    fn is_write_vectored(&self) -> bool {
        // Both TCP and tokio-rustls' streams write vectored.
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_ready(cx))?;
        match &mut *self {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Handshake { .. } | Self::Failed => Poll::Pending,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut *self {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            // Dropping the connection closes it.
            Self::Handshake { .. } | Self::Failed => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path) -> GrpcTlsSettings {
        GrpcTlsSettings {
            cert_file: dir.join("server.crt"),
            key_file: dir.join("server.key"),
            client_ca_file: None,
            client_san: None,
        }
    }

    fn write_pair(dir: &Path, name: &str) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    }

    #[test]
    fn a_matching_pair_loads_with_h2() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "localhost");
        let config = settings(dir.path()).load().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn each_problem_names_its_field() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let e = s.load().unwrap_err();
        assert_eq!(e.field, TlsField::Cert);
        assert!(e.message.contains("cannot read"), "{e}");

        write_pair(dir.path(), "localhost");
        // A key of another certificate.
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("server.key"), other.serialize_pem()).unwrap();
        let e = s.load().unwrap_err();
        assert_eq!(e.field, TlsField::Key);
        assert!(
            e.message.contains("does not go with the certificate"),
            "{e}"
        );

        write_pair(dir.path(), "localhost");
        std::fs::write(dir.path().join("junk.pem"), "not pem").unwrap();
        let junk = GrpcTlsSettings {
            cert_file: dir.path().join("junk.pem"),
            ..s.clone()
        };
        assert_eq!(junk.load().unwrap_err().field, TlsField::Cert);

        let ca = GrpcTlsSettings {
            client_ca_file: Some(dir.path().join("junk.pem")),
            ..s.clone()
        };
        let e = ca.load().unwrap_err();
        assert_eq!(e.field, TlsField::ClientCa);
        assert!(e.message.contains("holds no PEM certificate"), "{e}");

        let san_alone = GrpcTlsSettings {
            client_san: Some("envoy".into()),
            ..s.clone()
        };
        assert_eq!(san_alone.load().unwrap_err().field, TlsField::ClientSan);

        let bad_san = GrpcTlsSettings {
            client_ca_file: Some(dir.path().join("server.crt")),
            client_san: Some("not a name!".into()),
            ..s.clone()
        };
        let e = bad_san.load().unwrap_err();
        assert_eq!(e.field, TlsField::ClientSan);
        assert_eq!(e.field.env_var(), "GRPC_CLIENT_TLS_SAN");
    }

    #[test]
    fn a_file_above_the_bound_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "localhost");
        let big = dir.path().join("big.pem");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(crate::config::pem::MAX_PEM_BYTES + 1).unwrap();
        let s = GrpcTlsSettings {
            key_file: big,
            ..settings(dir.path())
        };
        let e = s.load().unwrap_err();
        assert_eq!(e.field, TlsField::Key);
        assert!(e.message.contains("above the 1048576"), "{e}");
    }
}
