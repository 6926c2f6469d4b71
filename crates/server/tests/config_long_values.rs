//! A configuration error quotes at most 120 characters of a value, with its length: a 3 MB
//! value is not echoed whole into one line of `check-config`'s output, the start log or a
//! reload's log.

use std::process::Command;

#[test]
fn check_config_quotes_a_3_mb_value_cut_with_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let value = "a".repeat(3_000_000);
    let path = dir.path().join("floodgate.toml");
    std::fs::write(&path, format!("[server]\nlisten = \"{value}\"\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.len() < 4_000, "{} bytes of output", text.len());
    assert!(text.contains("floodgate.toml:2"), "{text}");
    assert!(text.contains("server.listen"), "{text}");
    assert!(
        text.contains(&format!("\"{}…\" (3000000 characters)", "a".repeat(120))),
        "{text}"
    );
}
