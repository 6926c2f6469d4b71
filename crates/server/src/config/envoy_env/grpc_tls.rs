//! `GRPC_SERVER_USE_TLS`, `GRPC_SERVER_TLS_CERT`, `GRPC_SERVER_TLS_KEY`,
//! `GRPC_CLIENT_TLS_CACERT` and `GRPC_CLIENT_TLS_SAN` as the gRPC listener's TLS settings
//! ([`GrpcTlsSettings`], what `[server.grpc_tls]` gives in TOML).
//!
//! As upstream: `GRPC_SERVER_USE_TLS=true` turns TLS on with the certificate and key; with
//! `GRPC_CLIENT_TLS_CACERT` clients must present a certificate of that CA, and with
//! `GRPC_CLIENT_TLS_SAN` it must carry that SAN. Unlike upstream, which ignores the file
//! variables while TLS is off, a file given without `GRPC_SERVER_USE_TLS=true` is refused
//! (as `REDIS_TLS_CACERT` without `REDIS_TLS=true`): nothing is silently ignored. Relative
//! paths are relative to the working directory (as upstream's). The files are loaded here,
//! so an unreadable file or a key that does not match its certificate stops the start naming
//! the variable; they are watched afterwards as in any mode (`crate::grpc::tls`).

use std::path::PathBuf;

use super::reader::Reader;
use crate::grpc::tls::{GrpcTlsSettings, TlsField};

const FIELDS: [TlsField; 4] = [
    TlsField::Cert,
    TlsField::Key,
    TlsField::ClientCa,
    TlsField::ClientSan,
];

/// The TLS settings of the environment: `None` without `GRPC_SERVER_USE_TLS=true` (or when a
/// problem was pushed onto `r`).
pub(super) fn grpc_tls(r: &mut Reader<'_>) -> Option<GrpcTlsSettings> {
    let on = r.bool("GRPC_SERVER_USE_TLS", false);
    let value =
        |r: &Reader<'_>, f: TlsField| Some(r.text(f.env_var(), "")).filter(|v| !v.is_empty());
    if !on {
        for f in FIELDS {
            if let Some(v) = value(r, f) {
                r.fail(f.env_var(), &v, "needs GRPC_SERVER_USE_TLS=true");
            }
        }
        return None;
    }
    let (cert, key) = (value(r, TlsField::Cert), value(r, TlsField::Key));
    for (f, v) in [(TlsField::Cert, &cert), (TlsField::Key, &key)] {
        if v.is_none() {
            r.fail(
                f.env_var(),
                "",
                "GRPC_SERVER_USE_TLS=true needs the server's certificate chain \
                 (GRPC_SERVER_TLS_CERT) and its private key (GRPC_SERVER_TLS_KEY), PEM files",
            );
        }
    }
    let san = value(r, TlsField::ClientSan);
    let ca = value(r, TlsField::ClientCa);
    if let (Some(san), None) = (&san, &ca) {
        r.fail(
            TlsField::ClientSan.env_var(),
            san,
            "needs GRPC_CLIENT_TLS_CACERT (the SAN is checked on client certificates, which \
             are asked for only with a client CA)",
        );
        return None;
    }
    let settings = GrpcTlsSettings {
        cert_file: PathBuf::from(cert?),
        key_file: PathBuf::from(key?),
        client_ca_file: ca.map(PathBuf::from),
        client_san: san,
    };
    match settings.load() {
        Ok(_) => Some(settings),
        Err(e) => {
            let v = r.text(e.field.env_var(), "");
            r.fail(e.field.env_var(), &v, e.message);
            None
        }
    }
}
