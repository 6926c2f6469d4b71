//! Regression test: the Caddy snippet (docs/proxies/Caddyfile) listened on every interface
//! (`*:8000`) though docs/proxies.md calls it a local configuration on `127.0.0.1:8000`. The
//! real Caddy runs the snippet as it is (its addresses changed) and the kernel's socket table
//! must show its listener on 127.0.0.1 only.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The local addresses (hex, as /proc/net/tcp{,6} write them) listening on `port`.
fn listeners(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is ADDR:PORT; state 0A is LISTEN.
            let Some((addr, p)) = fields[1].split_once(':') else {
                continue;
            };
            if fields[3] == "0A" && u16::from_str_radix(p, 16) == Ok(port) {
                out.push(addr.to_string());
            }
        }
    }
    out
}

#[tokio::test]
async fn the_caddy_snippet_listens_on_loopback_only() {
    let Ok(caddy) = which("caddy") else {
        panic!("caddy not found: install the Debian package caddy");
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/proxies/Caddyfile");
    let text = std::fs::read_to_string(docs).unwrap();
    assert!(text.contains("127.0.0.1:8000"));
    let text = text.replace("127.0.0.1:8000", &format!("127.0.0.1:{port}"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("Caddyfile");
    std::fs::write(&file, text).unwrap();
    let mut child = Command::new(caddy)
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&file)
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Up to 15 s for Caddy to listen.
    let mut seen = listeners(port);
    for _ in 0..300 {
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = listeners(port);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(!seen.is_empty(), "caddy never listened on port {port}");
    // 127.0.0.1 is 0100007F in /proc/net/tcp (little-endian); nothing on 0.0.0.0 or [::].
    assert!(
        seen.iter().all(|a| a == "0100007F"),
        "listening on {seen:?}"
    );
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}
