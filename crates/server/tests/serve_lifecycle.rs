//! The life of a `floodgate serve` process: hot reload (on SIGHUP and on a changed file),
//! `check-config`, refused start-up options, and the shutdown (draining, `--shutdown-delay`).

mod serve_support;

use serde_json::{json, Value};
use serve_support::{
    check, client, metric, post_json, split, write_atomically, Floodgate, Upstream, PROXY_CONFIG,
};

const RELOAD_V1: &str = r#"
[[rules]]
name = "kept"
limit = "5/min"

[[rules]]
name = "changed"
limit = "5/min"
"#;

const RELOAD_V2: &str = r#"
[[rules]]
name = "kept"
limit = "5/min"

[[rules]]
name = "changed"
limit = "6/min"

[[rules]]
name = "added"
limit = "1/min"
"#;

async fn readyz(c: &reqwest::Client, fg: &Floodgate) -> Value {
    c.get(fg.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn hot_reload_keeps_unchanged_rules_and_rejects_invalid_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rules.toml");
    write_atomically(&config, RELOAD_V1);
    // Reload on SIGHUP only, so each signal is exactly one reload.
    let fg = Floodgate::start(&[
        "--config",
        config.to_str().unwrap(),
        "--watch-interval",
        "0",
    ]);
    let c = client();
    for rule in ["kept", "changed"] {
        for _ in 0..3 {
            let (status, _, _) = post_json(&c, &fg.url("/v1/check"), &check(rule, "k")).await;
            assert_eq!(status, 200);
        }
    }

    write_atomically(&config, RELOAD_V2);
    fg.signal("HUP");
    // Bounded polling for the reload to land (the file watcher may see it first).
    let mut reloaded = false;
    for _ in 0..2_000 {
        let ready = readyz(&c, &fg).await;
        if ready["config"]["rules"].as_array().map(Vec::len) == Some(3) {
            reloaded = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(reloaded, "reload did not land:\n{}", fg.logs());
    assert_eq!(readyz(&c, &fg).await["config"]["generation"], 2);
    let peek = |rule: &str| json!({"rule": rule, "key": "k", "cost": 0});
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("kept")).await;
    assert_eq!(body["remaining"], 2, "an unchanged rule keeps its counters");
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("changed")).await;
    assert_eq!(
        body["remaining"], 6,
        "a rule whose quota changed starts fresh"
    );
    let (status, _, _) = post_json(&c, &fg.url("/v1/check"), &check("added", "k")).await;
    assert_eq!(status, 200);
    assert!(metric(&c, &fg, "floodgate_config_reloads_total{result=\"ok\"}").await >= Some(1.0));

    // An invalid file is rejected, counted and logged; the old rules keep serving.
    let generation = readyz(&c, &fg).await["config"]["generation"].clone();
    write_atomically(
        &config,
        &RELOAD_V2.replace("limit = \"1/min\"", "limit = \"10/fortnight\""),
    );
    fg.signal("HUP");
    let mut counted = false;
    for _ in 0..2_000 {
        if metric(&c, &fg, "floodgate_config_reloads_total{result=\"error\"}").await >= Some(1.0) {
            counted = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(counted, "invalid reload not counted:\n{}", fg.logs());
    assert_eq!(readyz(&c, &fg).await["config"]["generation"], generation);
    let (_, _, body) = post_json(&c, &fg.url("/v1/peek"), &peek("kept")).await;
    assert_eq!(body["remaining"], 2);
    assert!(
        fg.logs()
            .contains("rules[2].limit: invalid quota \\\"10/fortnight\\\"")
            || fg
                .logs()
                .contains("rules[2].limit: invalid quota \"10/fortnight\""),
        "{}",
        fg.logs()
    );
}

#[tokio::test]
async fn a_changed_config_file_is_picked_up_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rules.toml");
    write_atomically(&config, RELOAD_V1);
    let fg = Floodgate::start(&["--config", config.to_str().unwrap()]);
    let c = client();
    write_atomically(&config, RELOAD_V2);
    // The watcher checks the file every second; bounded polling until it has.
    let mut rules = 0;
    for _ in 0..100_000 {
        rules = readyz(&c, &fg).await["config"]["rules"]
            .as_array()
            .map_or(0, Vec::len);
        if rules == 3 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(rules, 3, "{}", fg.logs());
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_cleanly() {
    let upstream = Upstream::start().await;
    let mut fg = Floodgate::start(&["--upstream", &upstream.url]);
    let c = client();
    let in_flight = tokio::spawn({
        let (c, url) = (c.clone(), fg.proxy_url("/slow"));
        async move {
            let r = c.get(url).send().await?;
            Ok::<_, reqwest::Error>((r.status().as_u16(), r.text().await?))
        }
    });
    upstream.arrived.notified().await;
    fg.signal("TERM");
    // Without --shutdown-delay the listeners close at once: readiness goes away (connection
    // refused) while the request is still open.
    let mut not_ready = false;
    for _ in 0..2_000 {
        match c.get(fg.url("/readyz")).send().await {
            Ok(r) if r.status() == 200 => tokio::task::yield_now().await,
            _ => {
                not_ready = true;
                break;
            }
        }
    }
    assert!(not_ready, "still ready after SIGTERM");
    upstream.release.notify_one();
    let answer = in_flight.await.unwrap();
    let logs = fg.logs();
    let (status, text) = answer.unwrap_or_else(|e| panic!("{e}\n{logs}"));
    assert_eq!((status, text.as_str()), (200, "slow done"));
    let exit = tokio::task::spawn_blocking(move || fg.wait())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test]
async fn with_a_shutdown_delay_readyz_is_503_while_still_serving_until_a_second_signal() {
    let mut fg = Floodgate::start(&["--shutdown-delay", "10min"]);
    let c = client();
    let (status, _, body) = split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, &body["status"]), (200, &json!("ready")));
    fg.signal("TERM");
    // Bounded polling until the signal has been handled.
    let mut seen = None;
    for _ in 0..5_000 {
        let (status, _, body) = split(c.get(fg.url("/readyz")).send().await.unwrap()).await;
        if status == 503 {
            seen = Some(body);
            break;
        }
        tokio::task::yield_now().await;
    }
    let body = seen.unwrap_or_else(|| panic!("/readyz never answered 503:\n{}", fg.logs()));
    assert_eq!(body["status"], "shutting_down");
    // Still serving decisions while load balancers take the instance out.
    let (status, _, _) =
        post_json(&c, &fg.url("/v1/check"), &check("per-client-ip", "alice")).await;
    assert_eq!(status, 200);
    // A second signal ends the wait: the process exits cleanly long before ten minutes.
    fg.signal("TERM");
    let exit = tokio::task::spawn_blocking(move || fg.wait())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

/// Runs `floodgate check-config <file>` in `dir`.
fn run_check_config(dir: &std::path::Path, file: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(dir)
        .args(["check-config", file])
        .output()
        .unwrap()
}

/// `floodgate check-config rules.toml | head -1`: a reader that closed the pipe is no error
/// (it used to panic with "failed printing to stdout").
#[test]
fn check_config_into_a_closed_pipe_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.toml"), PROXY_CONFIG).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .current_dir(dir.path())
        .args(["check-config", "rules.toml"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the child writes anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stderr).unwrap(), "");
}

#[test]
fn check_config_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("rules.toml");
    std::fs::write(
        &bad,
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\n\n[[rules]]\nname = \"a\"\nlimit = \"10/fortnight\"\n",
    )
    .unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "rules.toml:6: rules[1].name: duplicate rule name \"a\" (also rules[0].name); names must be unique\n\
         rules.toml:7: rules[1].limit: invalid quota \"10/fortnight\": unknown period unit \"fortnight\" (use us, ms, s, min, h or day)\n"
    );
    std::fs::write(&bad, PROXY_CONFIG).unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("per-ip: token_bucket 3/min"));

    // A syntax error names the line, and no field; a missing file names the file and why.
    std::fs::write(&bad, "[[rules]]\nname = \"a\"\nlimit = \n").unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("rules.toml:3: invalid TOML: "),
        "{stderr}"
    );
    let out = run_check_config(dir.path(), "missing.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("missing.toml: cannot read: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // A rule whose requests cost nothing would never limit.
    std::fs::write(
        &bad,
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\ncost = 0\n",
    )
    .unwrap();
    let out = run_check_config(dir.path(), "rules.toml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("rules.toml:4: rules[0].cost: must be at least 1"),
        "{stderr}"
    );
}

/// `--admin-token short` and `FLOODGATE_ADMIN_TOKEN=x` used to start and accept `Bearer x`:
/// the file's minimum length is the rule everywhere.
#[test]
fn a_short_admin_token_is_refused_from_the_flag_and_the_environment() {
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        cmd.env_remove("FLOODGATE_ADMIN_TOKEN");
        if let Some(token) = env {
            cmd.env("FLOODGATE_ADMIN_TOKEN", token);
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .expect("floodgate runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, env) in [
        (&["--admin-token", "short"][..], None),
        (&[][..], Some("x")),
        (&["--admin-token", "sixteen chars ok"][..], None),
    ] {
        let (ok, stderr) = run(args, env);
        assert!(!ok, "{args:?} {env:?} started");
        assert!(
            stderr.contains("at least 16 printable ASCII characters without spaces"),
            "{stderr}"
        );
    }
}
