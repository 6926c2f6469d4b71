//! The OpenAPI document (issue 22): `docs/openapi.json` is what `floodgate openapi` prints and
//! `GET /v1/openapi.json` answers; schemathesis fuzzes a live `floodgate serve` from it on the
//! memory store and on a real redis-server, with and without `api_token`; and a Python client
//! generated from it with openapi-python-client checks, reserves, settles and reads a 429.
//!
//! The Python tools are in `.venv-test` (scripts/test installs them).

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use floodgate_store::redis::testing::RedisServer;
use serve_support::{client, Floodgate};

const API_TOKEN: &str = "api-token-0123456789";
const ADMIN_TOKEN: &str = "admin-token-0123456789";

const RULES: &str = r#"
[[rules]]
name = "per-second"
limit = "10/s"
algorithm = "gcra"

[[rules]]
name = "per-minute"
limit = "2/min"
algorithm = "token_bucket"
"#;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A program of the tests' Python environment.
fn venv(program: &str) -> PathBuf {
    let path = root().join(".venv-test/bin").join(program);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test, which installs schemathesis and \
         openapi-python-client into .venv-test",
        path.display()
    );
    path
}

fn config(store: &str, api_token: bool) -> String {
    let token = if api_token {
        format!("api_token = \"{API_TOKEN}\"\n")
    } else {
        String::new()
    };
    format!("[server]\nadmin_token = \"{ADMIN_TOKEN}\"\n{token}{store}{RULES}")
}

#[tokio::test]
async fn docs_openapi_json_is_what_the_binary_prints_and_serves() {
    let printed = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("openapi")
        .output()
        .unwrap();
    assert!(printed.status.success());
    let printed = String::from_utf8(printed.stdout).unwrap();
    let committed = std::fs::read_to_string(root().join("docs/openapi.json")).unwrap();
    assert!(
        printed == committed,
        "docs/openapi.json is stale: run `cargo run -p floodgate -- openapi > docs/openapi.json`"
    );
    // Served without a token, even when one is configured: it holds no client data.
    let fg = Floodgate::with_config(&config("", true), &[]);
    let r = client()
        .get(fg.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.text().await.unwrap(), committed);
    let doc: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // The test-only clock is not part of the API.
    assert!(doc["paths"].get("/v1/debug/clock/advance").is_none());
    // A valid OpenAPI 3.1 document, by a validator nobody here wrote.
    let valid = Command::new(venv("python"))
        .args([
            "-c",
            "import json, sys; from openapi_spec_validator import validate; \
             validate(json.load(open(sys.argv[1])))",
        ])
        .arg(root().join("docs/openapi.json"))
        .output()
        .unwrap();
    assert!(
        valid.status.success(),
        "{}",
        String::from_utf8_lossy(&valid.stderr)
    );
}

/// Runs schemathesis (all its default checks, every phase, stateful links included) against
/// `fg` with `token` as the bearer token, from the document narrowed to `config` (`floodgate
/// openapi --config`: `rule` one of its rules, `cost` within that rule's capacity), so that
/// `positive_data_acceptance` holds on the decision calls too; its hooks
/// (openapi_client/schemathesis_hooks.py) keep the summed costs of `descriptors` within
/// capacity, which JSON Schema cannot state. tests/schemathesis.toml lists the operations
/// where `positive_data_acceptance` still cannot hold, and why.
fn fuzz(fg: &Floodgate, config: &str, token: &str, what: &str) {
    // Its cache of found failures goes into its working directory: a temporary one.
    let cwd = tempfile::tempdir().unwrap();
    let file = cwd.path().join("floodgate.toml");
    std::fs::write(&file, config).unwrap();
    let narrowed = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["openapi", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        narrowed.status.success(),
        "{}",
        String::from_utf8_lossy(&narrowed.stderr)
    );
    let document = cwd.path().join("openapi.json");
    std::fs::write(&document, &narrowed.stdout).unwrap();
    let out = Command::new(venv("schemathesis"))
        .current_dir(cwd.path())
        .env(
            "PYTHONPATH",
            root().join("crates/server/tests/openapi_client"),
        )
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("FLOODGATE_OPENAPI", &document)
        .arg("--config-file")
        .arg(root().join("crates/server/tests/schemathesis.toml"))
        .arg("run")
        .arg(&document)
        .args(["--url", &fg.api])
        // Bounded: about 20 s a run on a loaded 2-core machine.
        .args(["--max-examples", "25", "--workers", "2", "--seed", "22"])
        .args(["--request-timeout", "20", "--generation-database", "none"])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--no-color", "--output-truncate", "true"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures ({what}):\n{stdout}\n{}\nfloodgate's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        fg.logs()
    );
    assert!(stdout.contains("passed"), "{stdout}");
}

#[test]
fn schemathesis_finds_nothing_on_the_memory_store() {
    for (api_token, token, what) in [
        (false, ADMIN_TOKEN, "memory store, no api_token"),
        (true, API_TOKEN, "memory store, api_token"),
    ] {
        let config = config("", api_token);
        let fg = Floodgate::with_config(&config, &[]);
        fuzz(&fg, &config, token, what);
    }
}

#[test]
fn schemathesis_finds_nothing_on_a_redis_store() {
    let redis = RedisServer::start().unwrap();
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 2000\n",
        redis.url()
    );
    for (api_token, token, what) in [
        (false, ADMIN_TOKEN, "redis store, no api_token"),
        (true, API_TOKEN, "redis store, api_token"),
    ] {
        let config = config(&store, api_token);
        let fg = Floodgate::with_config(&config, &[]);
        fuzz(&fg, &config, token, what);
    }
}

#[test]
fn a_generated_python_client_checks_reserves_settles_and_reads_a_429() {
    let dir = tempfile::tempdir().unwrap();
    let generated = Command::new(venv("openapi-python-client"))
        .arg("generate")
        .arg("--path")
        .arg(root().join("docs/openapi.json"))
        .arg("--output-path")
        .arg(dir.path().join("floodgate_client"))
        .args(["--meta", "none"])
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let fg = Floodgate::with_config(&config("", true), &[]);
    let run = Command::new(venv("python"))
        .arg(root().join("crates/server/tests/openapi_client/tour.py"))
        .args([&fg.api, API_TOKEN])
        .env("PYTHONPATH", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // The manual clock makes every number exact (docs/any-language.md shows this output).
    assert_eq!(
        stdout,
        "check: 200 allowed True remaining 9\n\
         reserve: 200 remaining 5 expires in 300000000 us\n\
         settle: 200 reserved 5 actual 2 remaining 8\n\
         denied: 429 allowed False retry_after_us 30000000 Retry-After 30\n"
    );
}

/// Found by schemathesis: `"descriptors": null` was taken for an absent list (the top-level
/// item was decided and consumed) while every other optional member refuses `null`.
#[tokio::test]
async fn descriptors_null_is_refused_naming_it() {
    let fg = Floodgate::with_config(&config("", false), &[]);
    let c = client();
    for path in ["/v1/check", "/v1/peek"] {
        let r = c
            .post(fg.url(path))
            .header("content-type", "application/json")
            .body(r#"{"rule": "per-minute", "key": "carol", "descriptors": null}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let problem: serde_json::Value = r.json().await.unwrap();
        assert_eq!(problem["field"], "descriptors", "{path}: {problem}");
    }
    // Nothing was consumed: both units of the minute are still there.
    assert_eq!(
        serve_support::remaining(&c, &fg, "per-minute", "carol").await,
        2
    );
}
