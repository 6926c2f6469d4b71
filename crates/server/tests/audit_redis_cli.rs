//! `floodgate audit redis` through the binary, on the keys `floodgate serve` itself wrote to a
//! real Redis: `--config` attributes them to the configuration's rules (exactly for a rule
//! keyed by a constant and for `--key`), and the exit status says whether a danger was found.

mod serve_support;

use std::process::Command;

use floodgate_store::redis::testing::RedisServer;
use serde_json::{json, Value};
use serve_support::{client, Floodgate};

fn audit(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("audit")
        .arg("redis")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn keys_written_by_serve_are_attributed_to_their_rules() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("floodgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"[store]
kind = "redis"
url = "{}"
timeout_ms = 2000

[[rules]]
name = "per-user"
algorithm = "token_bucket"
limit = "10/hour"

[[rules]]
name = "everyone"
algorithm = "gcra"
limit = "1000/hour"
key = "global"
"#,
            redis.url()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let fg = Floodgate::start(&["--config", config]);
    let c = client();
    for key in ["alice", "bob", "carol"] {
        let r = c
            .post(fg.url("/v1/check"))
            .json(&json!({"rule": "per-user", "key": key}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Forward-auth applies both rules (per client IP, and the global one).
    let r = c.get(fg.url("/v1/forward-auth")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let (code, out, err) = audit(&[
        &redis.url(),
        "--config",
        config,
        "--key",
        "key=alice",
        "--format",
        "json",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["inspected"], 5, "{out}");
    let rules = report["attribution"]["rules"].as_array().unwrap();
    let per_user = rules.iter().find(|r| r["rule"] == "per-user").unwrap();
    let everyone = rules.iter().find(|r| r["rule"] == "everyone").unwrap();
    // alice by name; bob, carol and the client IP's key by layout (two numbers: the only
    // token bucket); the global key by name.
    assert_eq!(
        (
            per_user["exact_keys"].as_u64(),
            per_user["layout_keys"].as_u64()
        ),
        (Some(1), Some(3)),
        "{out}"
    );
    assert_eq!(per_user["found_keys"], json!(["key=alice"]));
    assert_eq!(
        (
            everyone["exact_keys"].as_u64(),
            everyone["layout_keys"].as_u64()
        ),
        (Some(1), Some(0)),
        "{out}"
    );
    assert_eq!(per_user["bytes"], 4 * 88);
    // GCRA keeps its last admission beside the TAT (a stale clock is "no time passed"), in one
    // integer when, as here, its one admission found the key empty (docs/redis.md, "Values").
    assert_eq!(everyone["bytes"], 56);

    // The table says the same, and a key without TTL makes it exit 1.
    redis.cli(&["SET", "fg:leftover", "1"]).unwrap();
    let (code, out, err) = audit(&[&redis.url(), "--config", config]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("per-user  token_bucket 10/h"), "{out}");
    assert!(
        out.contains("no_ttl           DANGER        1 of all 6 keys"),
        "{out}"
    );
    assert!(out.contains("1 danger found (exit status 1)"), "{out}");

    // A bad URL is an error (exit 2), naming it.
    let (code, _, err) = audit(&["http://127.0.0.1:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("URL"), "{err}");
}
