//! Regression test: `check-config` accepted `max_connections = 100000` silently while `serve`
//! then refused to start for the open-file limit. `check-config` now warns (exit status 0: the
//! file is valid, the machine is what falls short), naming the setting and the limit.

use std::process::Command;

#[test]
fn check_config_warns_when_max_connections_exceeds_the_open_file_limit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.toml");
    let check = |text: &str| {
        std::fs::write(&file, text).unwrap();
        let out = Command::new("sh")
            .args([
                "-c",
                "ulimit -n 1024 && exec \"$0\" check-config \"$1\"",
                env!("CARGO_BIN_EXE_floodgate"),
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let rule = "[[rules]]\nname = \"r\"\nlimit = \"5/min\"\nkey = \"client_ip\"\n";
    let (code, stderr) = check(&format!("[server]\nmax_connections = 100000\n\n{rule}"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: [server] max_connections = 100000"),
        "{stderr}"
    );
    assert!(stderr.contains("(RLIMIT_NOFILE) is 1024"), "{stderr}");
    // What the limit holds: no warning.
    let (code, stderr) = check(&format!("[server]\nmax_connections = 500\n\n{rule}"));
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
}
