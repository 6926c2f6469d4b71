//! Hostile configuration files: nested thousands of levels deep or too large. They are refused
//! with an error naming the file, line and bound, by `check-config`, at start and on a hot
//! reload of the live file, which leaves the process serving the configuration in force.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{client, metric, post_json, write_atomically, Floodgate};

const TOML: &str = "[[rules]]\nname = \"api\"\nlimit = \"5/minute\"\nkey = \"header:x-user\"\n";

const YAML: &str = "domain: rl\ndescriptors:\n  - key: generic_key\n    value: five\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";

/// A YAML file whose descriptor list nests `levels` block sequences (`- - - ... x`).
fn deep_yaml(levels: usize) -> String {
    format!("domain: rl\ndescriptors:\n{}x\n", "- ".repeat(levels))
}

/// Sends SIGHUP and waits until the process has counted `n` failed reloads.
async fn reload_fails(fg: &Floodgate, n: f64) {
    let c = client();
    fg.signal("HUP");
    for _ in 0..200 {
        if metric(&c, fg, "floodgate_config_reloads_total{result=\"error\"}").await >= Some(n) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the reload was not refused:\n{}", fg.logs());
}

async fn readyz(fg: &Floodgate) -> Value {
    let r = client().get(fg.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_5000_level_yaml_written_over_the_live_config_leaves_it_serving_the_old_one() {
    let fg = Floodgate::with_files(&[("rules.yaml", YAML)], "rules.yaml", &[]);
    let before = readyz(&fg).await;
    write_atomically(&fg.dir().join("rules.yaml"), &deep_yaml(5_000));
    reload_fails(&fg, 1.0).await;
    let logs = fg.logs();
    assert!(
        logs.contains("rules.yaml:3: nested more than 64 levels deep"),
        "{logs}"
    );
    // Alive, and still on the configuration it had.
    let after = readyz(&fg).await;
    assert_eq!(after["config"], before["config"], "{after}");
    assert_eq!(after["config"]["generation"], 1);
    // A flow-style one too (`[[[[...`).
    write_atomically(
        &fg.dir().join("rules.yaml"),
        &format!("domain: rl\ndescriptors: {}\n", "[".repeat(20_000)),
    );
    reload_fails(&fg, 2.0).await;
    assert_eq!(readyz(&fg).await["config"], before["config"]);
}

#[tokio::test]
async fn a_deeply_nested_toml_written_over_the_live_config_leaves_it_serving_the_old_one() {
    let fg = Floodgate::with_config(TOML, &[]);
    let c = client();
    let check = json!({"rule": "api", "key": "alice"});
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &check).await;
    assert_eq!((status, &body["remaining"]), (200, &json!(4)), "{body}");
    let path = fg.dir().join("floodgate.toml");
    let deep = [
        format!("{TOML}cost = {}\n", "[".repeat(5_000)),
        format!("{TOML}[server]\n{} = 1\n", vec!["a"; 5_000].join(".")),
        format!("[{}]\n", vec!["a"; 5_000].join(".")),
        format!("{TOML}x = {}\n", "{a = ".repeat(5_000)),
    ];
    for (i, text) in deep.iter().enumerate() {
        write_atomically(&path, text);
        reload_fails(&fg, (i + 1) as f64).await;
    }
    assert!(
        fg.logs().contains("nested more than 64 levels deep"),
        "{}",
        fg.logs()
    );
    // Still serving, on the old rule and its state.
    let (status, _, body) = post_json(&c, &fg.url("/v1/check"), &check).await;
    assert_eq!((status, &body["remaining"]), (200, &json!(3)), "{body}");
    assert_eq!(readyz(&fg).await["config"]["generation"], 1);
}

/// Runs `floodgate check-config <file>` in `dir`.
fn check_config(dir: &std::path::Path, file: &str) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(dir)
        .args(["check-config", file])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_on_a_20000_level_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), deep_yaml(20_000)).unwrap();
    std::fs::write(
        dir.path().join("rules.toml"),
        format!("{TOML}cost = {}\n", "[".repeat(20_000)),
    )
    .unwrap();
    // An exit code (not a signal: `code()` is `None` after an abort), and the bound named.
    let (code, stderr) = check_config(dir.path(), "rules.yaml");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rules.yaml:3: nested more than 64 levels deep"),
        "{stderr}"
    );
    let (code, stderr) = check_config(dir.path(), "rules.toml");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rules.toml:5: nested more than 64 levels deep"),
        "{stderr}"
    );
}

#[test]
fn check_config_refuses_a_file_over_4_mib_without_parsing_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(TOML);
    while text.len() <= 4 << 20 {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(dir.path().join("rules.toml"), &text).unwrap();
    let (code, stderr) = check_config(dir.path(), "rules.toml");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rules.toml: the file is larger than 4194304 bytes"),
        "{stderr}"
    );
    // Just below the bound is fine.
    text.truncate(4 << 20);
    let end = text.rfind('\n').unwrap() + 1;
    text.truncate(end);
    std::fs::write(dir.path().join("rules.toml"), &text).unwrap();
    let (code, stderr) = check_config(dir.path(), "rules.toml");
    assert_eq!(code, Some(0), "{stderr}");
}
