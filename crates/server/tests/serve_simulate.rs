//! `POST /v1/simulate` and the `/ui/` switch of `floodgate serve`, end to end: the real binary,
//! a real HTTP client, and `floodgate simulate --format json` as the reference the API must
//! equal byte for byte.

mod serve_support;

use std::process::Command;

use serde_json::{json, Value};
use serve_support::{client, post_json, problem, simulate_text, Floodgate};

/// `floodgate simulate --format json ARGS`, as text.
fn cli_json(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["simulate", "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn answers_exactly_what_the_command_line_prints() {
    let fg = Floodgate::start(&[]);
    let c = client();
    let cases: [(Value, &[&str]); 5] = [
        (json!({}), &[]),
        (
            json!({"scenario": "calm-spike", "algorithm": "token_bucket", "limit": "10/10s"}),
            &[
                "--scenario",
                "calm-spike",
                "--algorithm",
                "token_bucket",
                "--limit",
                "10/10s",
            ],
        ),
        (
            json!({"scenario": "flood", "algorithm": "fixed_window", "instances": 3,
                   "counter": "local", "balance": "skewed", "rate": "100/10s",
                   "duration": "20s"}),
            &[
                "--scenario",
                "flood",
                "--algorithm",
                "fixed_window",
                "--instances",
                "3",
                "--counter",
                "local",
                "--balance",
                "skewed",
                "--rate",
                "100/10s",
                "--duration",
                "20s",
            ],
        ),
        (
            json!({"preset": "clock-boundary", "before": "60ms", "spread": "10ms",
                   "burst": 50, "column": "100ms", "key": "k"}),
            &[
                "--preset",
                "clock-boundary",
                "--before",
                "60ms",
                "--spread",
                "10ms",
                "--burst",
                "50",
                "--column",
                "100ms",
                "--key",
                "k",
            ],
        ),
        (
            json!({"scenario": "calm-spike", "every": "950ms", "at": "4.5s", "requests": 30,
                   "counter": "split", "instances": 2, "algorithm": "all"}),
            &[
                "--scenario",
                "calm-spike",
                "--every",
                "950ms",
                "--at",
                "4.5s",
                "--requests",
                "30",
                "--counter",
                "split",
                "--instances",
                "2",
            ],
        ),
    ];
    for (body, args) in cases {
        let (status, text) = simulate_text(&c, &fg, &body).await;
        assert_eq!(status, 200, "{body}: {text}");
        assert_eq!(text, cli_json(args), "{body}");
    }
}

#[tokio::test]
async fn a_pasted_trace_equals_the_same_trace_from_a_file() {
    let fg = Floodgate::start(&[]);
    let c = client();
    let trace =
        "t_ms,key,cost\n950,alice,1\n960,alice,3\n1050,bob,1\n{\"t_ms\":1100,\"key\":\"alice\"}\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, trace).unwrap();
    let body = json!({"trace": trace, "limit": "2/s", "algorithm": "gcra"});
    let (status, text) = simulate_text(&c, &fg, &body).await;
    assert_eq!(status, 200, "{text}");
    let cli = cli_json(&[
        "--trace",
        path.to_str().unwrap(),
        "--limit",
        "2/s",
        "--algorithm",
        "gcra",
    ]);
    let (api, cli): (Value, Value) = (
        serde_json::from_str(&text).unwrap(),
        serde_json::from_str(&cli).unwrap(),
    );
    // The trace's name differs (`trace` for pasted text, the path for a file); nothing else.
    assert_eq!(api["runs"], cli["runs"]);
    assert_eq!(api["policy"], cli["policy"]);
    assert_eq!(api["runs"][0]["summary"]["requests"], 4);

    // A trace above the rest of the API's 64 KiB body limit is fine here (up to 1 MiB).
    let big: String = (0..10_000).map(|i| format!("{i},k,1\n")).collect();
    assert!(big.len() > 64 * 1024);
    let (status, _, doc) = post_json(
        &c,
        &fg.url("/v1/simulate"),
        &json!({"trace": big, "algorithm": "sliding_log", "limit": "100/s"}),
    )
    .await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["runs"][0]["summary"]["requests"], 10_000);
    assert_eq!(doc["runs"][0]["summary"]["admitted"], 1_000);
}

// Over 120 lines: one table of bodies, each with the member, words and status of its problem.
#[tokio::test]
async fn bad_input_is_a_problem_naming_the_field_400_if_malformed_422_if_it_cannot_run() {
    let fg = Floodgate::start(&[]);
    let c = client();
    let cases = [
        // An unknown algorithm.
        (
            r#"{"algorithm": "leaky"}"#,
            "algorithm",
            "unknown algorithm",
            422,
        ),
        // A flood above the cap: 1,000,000/s for one period of 10 s.
        (
            r#"{"scenario": "flood", "rate": "1000000/1s"}"#,
            "max_requests",
            "would generate 10000000 requests",
            422,
        ),
        // A malformed trace line: the line number is in the detail.
        (
            r#"{"trace": "t_ms,key,cost\n950,alice,1\nsoon,alice,1\n"}"#,
            "trace",
            "trace:3: field `t_ms`",
            422,
        ),
        (r#"{"max_requests": 1000000}"#, "max_requests", "cap", 400),
        (
            r#"{"store": "redis://127.0.0.1:6379"}"#,
            "store",
            "memory only",
            400,
        ),
        (
            r#"{"limit": "1/s", "limit": "2/s"}"#,
            "limit",
            "duplicate",
            400,
        ),
        (r#"{"colour": "red"}"#, "colour", "unknown field", 400),
        // Outside a member's `enum` in the document: malformed.
        (
            r#"{"scenario": "storm"}"#,
            "scenario",
            "expected one of",
            400,
        ),
        (r#"{"store": "disk"}"#, "store", "memory", 400),
        (
            r#"{"before": "1 fortnight"}"#,
            "before",
            "unknown unit",
            422,
        ),
        (
            r#"{"scenario": "flood", "before": "1s"}"#,
            "before",
            "applies only to scenario boundary",
            422,
        ),
        (
            r#"{"balance": "skewed"}"#,
            "balance",
            "needs instances > 1",
            422,
        ),
        (
            r#"{"instances": 100000}"#,
            "instances",
            "between 1 and",
            400,
        ),
        (r#"{"burst": -1}"#, "burst", "invalid", 400),
        (r#"[]"#, "body", "object", 400),
        // Every size input is bounded, naming the bound.
        (
            r#"{"scenario": "flood", "max_wait": "2d"}"#,
            "max_wait",
            "longer than the API's 1 day",
            422,
        ),
        (
            r#"{"scenario": "flood", "duration": "367d"}"#,
            "duration",
            "366 days",
            422,
        ),
        (
            r#"{"scenario": "flood", "rate": "1/367d"}"#,
            "rate",
            "366 days",
            422,
        ),
        (r#"{"column": "367d"}"#, "column", "366 days", 422),
        (
            r#"{"max_requests": 12001}"#,
            "max_requests",
            "cap of 12000 requests with algorithm all",
            422,
        ),
        (
            r#"{"algorithm": "gcra", "max_requests": 50001}"#,
            "max_requests",
            "cap of 50000 requests",
            400,
        ),
        (r#"{"runners": 1001}"#, "runners", "between 1 and 1000", 400),
        (
            r#"{"scenario": "flood", "column": "1ms", "max_wait": "1d"}"#,
            "column",
            "10000 columns once requests wait",
            422,
        ),
    ];
    // 256 characters, as the document bounds `key`, but 768 bytes: well formed, refused.
    let wide_key = format!(r#"{{"key": "{}"}}"#, "\u{2603}".repeat(256));
    let cases = cases
        .into_iter()
        .chain([(wide_key.as_str(), "key", "256 bytes", 422)]);
    for (body, field, words, expected) in cases {
        let (status, kind, got, detail) = problem(&c, &fg, body).await;
        assert_eq!(status, expected, "{body}: {detail}");
        assert_eq!(kind, "application/problem+json", "{body}");
        assert_eq!(got, field, "{body}: {detail}");
        assert!(detail.contains(words), "{body}: {detail}");
        if field != "store" {
            assert!(!detail.contains("--"), "{body}: names a flag: {detail}");
        }
    }
    // Bigger than the body limit (1 MiB): a 413 naming the body.
    let huge = format!(r#"{{"trace": "{}"}}"#, "1,a\\n".repeat(300_000));
    let (status, _, field, _) = problem(&c, &fg, &huge).await;
    assert_eq!((status, field), (413, json!("body")));
}

#[tokio::test]
async fn the_page_is_on_by_default_and_off_with_no_ui_or_the_config() {
    let c = client();
    let on = Floodgate::start(&[]);
    let page = c.get(on.url("/ui/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("<title>Floodgate</title>"));
    for asset in [
        "app.js",
        "style.css",
        "vendor/uPlot.iife.min.js",
        "choices.json",
    ] {
        let r = c.get(on.url(&format!("/ui/{asset}"))).send().await.unwrap();
        assert_eq!(r.status(), 200, "{asset}");
    }
    let (status, _, live) =
        serve_support::split(c.get(on.url("/v1/ui/live")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(live["rules"][0]["name"], "per-client-ip");
    assert_eq!(live["store"]["kind"], "memory");

    let flag = Floodgate::start(&["--no-ui"]);
    let file = Floodgate::with_config(
        "[server]\nui = false\n[[rules]]\nname = \"r\"\nlimit = \"1/s\"\nkey = \"client_ip\"\n",
        &[],
    );
    for off in [&flag, &file] {
        for path in ["/ui/", "/v1/ui/live"] {
            let r = c.get(off.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 404, "{path}");
        }
        // The simulation API is not part of the page: it stays.
        let (status, _, body) = post_json(&c, &off.url("/v1/simulate"), &json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
}

/// The busiest denied keys are listed only when asked for (`[server] ui_denied_keys`), fed by
/// the limiter's own denials on every front end.
#[tokio::test]
async fn the_live_view_lists_denied_keys_only_when_opted_in() {
    let rules = r#"
[[rules]]
name = "tight"
limit = "1/min"
key = "header:x-user"
"#;
    let c = client();
    let deny = |fg: &Floodgate, user: &'static str, times: usize| {
        let c = c.clone();
        let url = fg.url("/v1/forward-auth");
        async move {
            for _ in 0..times {
                c.get(&url).header("x-user", user).send().await.unwrap();
            }
        }
    };
    let live = |fg: &Floodgate| {
        let c = c.clone();
        let url = fg.url("/v1/ui/live");
        async move {
            let r = c.get(&url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };

    let off = Floodgate::with_config(rules, &[]);
    deny(&off, "carol", 3).await;
    assert_eq!(
        live(&off).await["denied_keys"],
        Value::Null,
        "off by default"
    );

    let on = Floodgate::with_config(&format!("[server]\nui_denied_keys = 5\n{rules}"), &[]);
    deny(&on, "carol", 3).await; // 1 admitted, 2 denied
    deny(&on, "dave", 2).await; // 1 admitted, 1 denied
                                // A denial through /v1/check is the limiter's too.
    post_json(
        &c,
        &on.url("/v1/check"),
        &json!({"rule": "tight", "key": "erin"}),
    )
    .await;
    post_json(
        &c,
        &on.url("/v1/check"),
        &json!({"rule": "tight", "key": "erin"}),
    )
    .await;
    let doc = live(&on).await;
    let keys = &doc["denied_keys"];
    assert_eq!(keys["capacity"], 5);
    assert_eq!(keys["denials"], 4, "{doc}");
    let list: Vec<(String, String, u64)> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["rule"].as_str().unwrap().to_string(),
                k["key"].as_str().unwrap().to_string(),
                k["count"].as_u64().unwrap(),
            )
        })
        .collect();
    // A header's value and a client key are shown hashed: the tag, `#` and 8 hex digits.
    let hashed = |key: &str, tag: &str| {
        key.strip_prefix(tag)
            .and_then(|rest| rest.strip_prefix("=#"))
            .is_some_and(|hex| hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let counts: Vec<u64> = list.iter().map(|(_, _, n)| *n).collect();
    assert_eq!(counts, [2, 1, 1], "{doc}");
    assert!(list.iter().all(|(rule, _, _)| rule == "tight"));
    assert!(hashed(&list[0].1, "x-user"), "{doc}");
    assert!(list.iter().any(|(_, k, _)| hashed(k, "key")), "{doc}");
    assert_eq!(
        list.iter().filter(|(_, k, _)| hashed(k, "x-user")).count(),
        2,
        "{doc}"
    );
    for name in ["carol", "dave", "erin"] {
        assert!(!doc.to_string().contains(name), "{name} in clear: {doc}");
    }

    // Out of range: refused at start, naming the field.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"[server]\nui_denied_keys = 5000\n")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server.ui_denied_keys"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
