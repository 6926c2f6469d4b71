//! `[server.grpc_tls]`: TLS, and optionally mutual TLS, on the gRPC listener (see
//! [`crate::grpc::tls`] for what is checked and when the files are read again).
//!
//! ```toml
//! [server]
//! grpc_listen = "0.0.0.0:8081"
//!
//! [server.grpc_tls]
//! cert_file = "tls/server.crt"        # the server's certificate chain, PEM, leaf first
//! key_file = "tls/server.key"         # its private key, PEM (PKCS#8, PKCS#1 or SEC1)
//! client_ca_file = "tls/clients.crt"  # optional: clients must present a certificate of this CA
//! client_san = "envoy.internal"       # optional, with client_ca_file: a SAN the client's must carry
//! ```
//!
//! Relative paths are relative to the configuration file's folder. The files are read and
//! checked when the configuration is (`check-config` too): an error names the file, the line
//! and the field. Like the rest of `[server]`, the paths are read once at start; the files'
//! contents are watched.

use std::path::Path;

use toml::Spanned;

use super::validator::Validator;
use crate::config::raw::RawGrpcTls;
use crate::grpc::tls::{GrpcTlsSettings, TlsField};

impl Validator<'_> {
    /// The settings of `[server.grpc_tls]`, loaded once to check them; `None` when absent or
    /// wrong (then the errors are pushed, naming the field).
    pub(super) fn grpc_tls(
        &mut self,
        raw: Option<&Spanned<RawGrpcTls>>,
    ) -> Option<GrpcTlsSettings> {
        let table = raw?;
        let t = table.get_ref();
        let dir = Path::new(self.src.file).parent();
        let path = |v: &Spanned<String>| {
            dir.map_or_else(
                || Path::new(v.get_ref()).to_path_buf(),
                |d| d.join(v.get_ref()),
            )
        };
        let before = self.errors.len();
        for (value, field, what) in [
            (
                &t.cert_file,
                "cert_file",
                "the server's certificate chain, PEM",
            ),
            (
                &t.key_file,
                "key_file",
                "the server certificate's private key, PEM",
            ),
        ] {
            if value.is_none() {
                self.push(
                    table,
                    format!("server.grpc_tls.{field}"),
                    format!("missing: {field} is required ({what})"),
                );
            }
        }
        let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) else {
            return None;
        };
        for v in [&t.cert_file, &t.key_file, &t.client_ca_file, &t.client_san]
            .into_iter()
            .flatten()
        {
            if v.get_ref().is_empty() {
                self.push(v, "server.grpc_tls".into(), "must not be empty".into());
            }
        }
        if self.errors.len() > before {
            return None;
        }
        let settings = GrpcTlsSettings {
            cert_file: path(cert),
            key_file: path(key),
            client_ca_file: t.client_ca_file.as_ref().map(path),
            client_san: t.client_san.as_ref().map(|s| s.get_ref().clone()),
        };
        match settings.load() {
            Ok(_) => Some(settings),
            Err(e) => {
                let at = match e.field {
                    TlsField::Cert => Some(cert),
                    TlsField::Key => Some(key),
                    TlsField::ClientCa => t.client_ca_file.as_ref(),
                    TlsField::ClientSan => t.client_san.as_ref(),
                };
                let field = format!("server.grpc_tls.{}", e.field.toml_key());
                match at {
                    Some(at) => self.push(at, field, e.message),
                    None => self.push(table, field, e.message),
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn err(dir: &Path, text: &str) -> String {
        let file = dir.join("rules.toml");
        std::fs::write(&file, text).unwrap();
        crate::config::load::load(&file).unwrap_err().to_string()
    }

    #[test]
    fn grpc_tls_errors_name_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("s.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("s.key"), key.serialize_pem()).unwrap();
        let shown = dir.path().join("rules.toml").display().to_string();

        let e = err(
            dir.path(),
            "[server]\n\n[server.grpc_tls]\ncert_file = \"s.crt\"\n",
        );
        assert!(
            e.contains(&format!(
                "{shown}:3: server.grpc_tls.key_file: missing: key_file is required"
            )),
            "{e}"
        );
        let e = err(
            dir.path(),
            "[server.grpc_tls]\ncert_file = \"s.crt\"\nkey_file = \"none.key\"\n",
        );
        assert!(
            e.contains(&format!("{shown}:3: server.grpc_tls.key_file: cannot read")),
            "{e}"
        );
        let e = err(
            dir.path(),
            "[server.grpc_tls]\ncert_file = \"s.crt\"\nkey_file = \"s.key\"\nclient_san = \"envoy\"\n",
        );
        assert!(
            e.contains(&format!(
                "{shown}:4: server.grpc_tls.client_san: needs a client CA"
            )),
            "{e}"
        );
        let e = err(
            dir.path(),
            "[server.grpc_tls]\ncert_file = \"s.crt\"\nkey_file = \"s.key\"\nclient_ca = \"x\"\n",
        );
        assert!(e.contains("unknown field `client_ca`"), "{e}");
        // Relative to the file's folder; a valid table loads.
        let file = dir.path().join("ok.toml");
        std::fs::write(
            &file,
            "[server.grpc_tls]\ncert_file = \"s.crt\"\nkey_file = \"s.key\"\nclient_ca_file = \"s.crt\"\nclient_san = \"localhost\"\n",
        )
        .unwrap();
        let tls = crate::config::load::load(&file)
            .unwrap()
            .server
            .grpc_tls
            .unwrap();
        assert_eq!(tls.cert_file, dir.path().join("s.crt"));
        assert_eq!(tls.client_san.as_deref(), Some("localhost"));
    }
}
