//! [`TestCerts`]: a CA and certificates for the TLS tests, made with `openssl`.

use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use super::process::{missing_binary, DIR_COUNTER};

/// Test certificates, made with the `openssl` command line in their own temporary folder
/// (removed on drop): a CA, a server certificate for `127.0.0.1` only (also usable
/// as a client certificate: cluster nodes present it to each other on the TLS bus), a client
/// certificate (both signed by the CA, ECDSA P-256, valid 2 days), and an unrelated second CA.
#[derive(Debug)]
pub struct TestCerts {
    dir: PathBuf,
}

impl TestCerts {
    /// Makes the certificates.
    ///
    /// # Errors
    /// When `openssl` is missing or fails.
    pub fn generate() -> io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "floodgate-certs-{}-{}",
            std::process::id(),
            DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let certs = Self { dir };
        let script = r#"set -e
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() { key "$1.key"; openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 2 -subj "/CN=$2"; }
ca ca floodgate-test-ca
ca other-ca floodgate-other-ca
echo 'subjectAltName=IP:127.0.0.1' > server.ext
echo 'extendedKeyUsage=serverAuth,clientAuth' >> server.ext
echo 'extendedKeyUsage=clientAuth' > client.ext
for who in server client; do
  key "$who.key"
  openssl req -new -key "$who.key" -out "$who.csr" -subj "/CN=floodgate-test-$who"
  openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out "$who.crt" -days 2 -extfile "$who.ext"
done"#;
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&certs.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| missing_binary("sh", e))?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "making test certificates with openssl failed (is openssl installed?): {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(certs)
    }

    /// A file of the set: `ca.crt`, `other-ca.crt`, `server.crt`, `server.key`, `client.crt`,
    /// `client.key`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The contents of [`path`](Self::path)`(name)`.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path(name))
    }

    pub(super) fn server_args(&self, tls_port: u16, client_certs: bool) -> Vec<String> {
        let path = |n: &str| self.path(n).to_string_lossy().into_owned();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path("server.crt"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.crt"),
            "--tls-auth-clients".into(),
            if client_certs { "yes" } else { "no" }.into(),
        ]
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
