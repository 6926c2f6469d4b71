//! The web page in a real browser: headless Chromium driven over WebDriver (Debian's chromium
//! and chromium-driver; `scripts/test` installs them), against the real `floodgate serve` on
//! the manual clock. The simulator's three exercises must show the documents' numbers and
//! exactly what `floodgate simulate --format json` prints for the same inputs; the live view
//! must show a rule's denials rise, a shadow rule's would-be decisions as `/metrics` counts
//! them, and keep its address (`/ui/#live`) across a reload; `floodgate simulate --format svg`
//! must lay out within its canvas in Chromium's own font metrics. Screenshots go to
//! `target/tmp/ui-screenshots/`.

mod serve_support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use serve_support::{client, metric, post_json, Floodgate};

/// A chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Self {
        let mut child = Command::new("chromedriver")
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver not found: install chromium and chromium-driver (scripts/test does)",
            );
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Bounded: chromedriver prints this line once it listens, or exits (EOF).
        let port = loop {
            let line = lines
                .next()
                .expect("chromedriver exited before listening")
                .unwrap();
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').to_string();
            }
        };
        // Keep reading its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--window-size=1280,1200"]}),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("start a headless Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, for at most 20 s.
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..400 {
        if let Some(v) = probe().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The text of the first element matching `css`, if any.
async fn text(b: &Client, css: &str) -> Option<String> {
    let e = b.find(Locator::Css(css)).await.ok()?;
    e.text().await.ok()
}

/// Waits until `css` shows `want`.
async fn wait_text(b: &Client, css: &str, want: &str) {
    until(&format!("{css} to show {want}"), || async {
        (text(b, css).await.as_deref() == Some(want)).then_some(())
    })
    .await;
}

async fn click(b: &Client, css: &str) {
    b.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(b: &Client, name: &str) {
    let png = b.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
}

/// `floodgate simulate --format json ARGS`, parsed.
fn cli(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["simulate", "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Asserts that the panel of every run of `doc` named in `shown` displays the run's figures:
/// totals, the true rate and its ratio, the per-source counts and every column.
async fn assert_page_equals(b: &Client, doc: &Value, shown: &[&str]) {
    let runs = doc["runs"].as_array().unwrap();
    for name in shown {
        let run = runs.iter().find(|r| r["algorithm"] == *name).unwrap();
        let s = &run["summary"];
        let panel = format!("#run-{name}");
        let field = |cls: &str| format!("{panel} dd.{cls}");
        assert_eq!(
            text(b, &field("admitted")).await.unwrap(),
            s["admitted"].to_string()
        );
        assert_eq!(
            text(b, &field("rejected")).await.unwrap(),
            s["rejected"].to_string()
        );
        assert_eq!(
            text(b, &field("max")).await.unwrap(),
            s["max_in_period"]["units"].to_string()
        );
        assert_eq!(
            text(b, &field("ratio")).await.unwrap(),
            format!("{:.2}x", s["over_admission"].as_f64().unwrap())
        );
        if let Some(shared) = s["shared_reference"].as_object() {
            assert_eq!(
                text(b, &field("shared")).await.unwrap(),
                format!(
                    "{} admitted, max {}",
                    shared["admitted"], shared["max_in_period"]
                )
            );
        }
        for src in s["per_source"].as_array().unwrap() {
            if s["per_source"].as_array().unwrap().len() < 2 {
                break;
            }
            let row = format!("{panel} [data-source={}]", src["source"]);
            let admitted = text(b, &format!("{row} .admitted")).await.unwrap();
            let rejected = text(b, &format!("{row} .rejected")).await.unwrap();
            assert_eq!(admitted, src["admitted"].to_string(), "{name} {row}");
            assert_eq!(rejected, src["rejected"].to_string(), "{name} {row}");
        }
        // The per-column table (the chart's text alternative), read in one round trip.
        let columns: Value = b
            .execute(
                "return [...document.querySelectorAll(arguments[0] + ' table.columns tr')]\
                 .slice(1).map(r => [...r.cells].slice(1).map(c => Number(c.textContent)));",
                vec![json!(panel)],
            )
            .await
            .unwrap();
        let want: Vec<Value> = s["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                json!([
                    c["admitted"],
                    c["rejected"].as_u64().unwrap() + c["impossible"].as_u64().unwrap()
                ])
            })
            .collect();
        assert_eq!(columns, Value::Array(want), "{name} columns");
        // The chart is drawn: a canvas inside the panel.
        b.find(Locator::Css(&format!("{panel} canvas")))
            .await
            .unwrap_or_else(|_| panic!("{name}: no chart"));
    }
}

#[tokio::test]
// Over 120 lines: one browser session through the three exercises in order, each step on
// the page the step before left.
async fn the_three_exercises_show_the_documents_numbers_and_equal_the_command_line() {
    let fg = Floodgate::start(&[]);
    let driver = Driver::start();
    let b = driver.browser().await;
    b.goto(&fg.url("/ui/")).await.unwrap();
    // The default view has loaded its controls and a first chart.
    until("the algorithm checkboxes", || async {
        b.find(Locator::Css("#algorithm-gcra")).await.ok()
    })
    .await;

    // 1: two bursts of ten at the window edge; the fixed window admits 20, the sliding 10.
    click(&b, "#preset-1").await;
    wait_text(&b, "#run-fixed_window dd.admitted", "20").await;
    wait_text(&b, "#run-sliding_window dd.admitted", "10").await;
    let doc = cli(&[
        "--algorithm",
        "all",
        "--limit",
        "10/10s",
        "--scenario",
        "boundary",
    ]);
    assert_page_equals(&b, &doc, &["fixed_window", "sliding_window"]).await;
    assert!(text(&b, "#run-token_bucket").await.is_none());
    screenshot(&b, "exercise-1-window-edge").await;

    // 2: a calm client and a sudden 15: both windows reject calm requests, the token bucket
    // never does.
    click(&b, "#preset-2").await;
    wait_text(&b, "#run-token_bucket [data-source=calm] .rejected", "0").await;
    let doc = cli(&[
        "--algorithm",
        "all",
        "--limit",
        "10/10s",
        "--scenario",
        "calm-spike",
    ]);
    assert_page_equals(
        &b,
        &doc,
        &["fixed_window", "sliding_window", "token_bucket"],
    )
    .await;
    for window in ["fixed_window", "sliding_window"] {
        let rejected: u64 = text(&b, &format!("#run-{window} [data-source=calm] .rejected"))
            .await
            .unwrap()
            .parse()
            .unwrap();
        assert!(rejected > 0, "{window} rejected no calm request");
    }
    screenshot(&b, "exercise-2-calm-spike").await;

    // 3: a flood on three instances with their own counters: 30 in ten seconds; one shared
    // counter: 10.
    click(&b, "#preset-3").await;
    wait_text(&b, "#run-fixed_window dd.admitted", "30").await;
    let local = cli(&[
        "--algorithm",
        "fixed_window",
        "--limit",
        "10/10s",
        "--scenario",
        "flood",
        "--instances",
        "3",
        "--counter",
        "local",
        "--balance",
        "round-robin",
    ]);
    assert_page_equals(&b, &local, &["fixed_window"]).await;
    assert_eq!(
        text(&b, "#run-fixed_window dd.shared").await.unwrap(),
        "10 admitted, max 10"
    );
    screenshot(&b, "exercise-3-flood-local").await;
    // With the keyboard, as a user without a mouse would: focus the radio, press space.
    b.find(Locator::Css("#counter-shared"))
        .await
        .unwrap()
        .send_keys(" ")
        .await
        .unwrap();
    wait_text(&b, "#run-fixed_window dd.admitted", "10").await;
    let shared = cli(&[
        "--algorithm",
        "fixed_window",
        "--limit",
        "10/10s",
        "--scenario",
        "flood",
        "--instances",
        "3",
        "--counter",
        "shared",
        "--balance",
        "round-robin",
    ]);
    assert_page_equals(&b, &shared, &["fixed_window"]).await;
    screenshot(&b, "exercise-3-flood-shared").await;

    // A pasted trace (the text box's example: two requests of alice) on the same setup.
    click(&b, "#scenario-trace").await;
    wait_text(&b, "#run-fixed_window dd.admitted", "2").await;
    let trace: String = b
        .execute("return document.querySelector('#trace').value;", vec![])
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, &trace).unwrap();
    let doc = cli(&[
        "--trace",
        path.to_str().unwrap(),
        "--algorithm",
        "fixed_window",
        "--limit",
        "10/10s",
        "--instances",
        "3",
        "--counter",
        "shared",
        "--balance",
        "round-robin",
    ]);
    assert_page_equals(&b, &doc, &["fixed_window"]).await;
    // An uploaded CSV file replaces the text.
    let upload = dir.path().join("upload.csv");
    std::fs::write(&upload, "t_ms,key,cost\n0,bob,1\n10,bob,1\n20,bob,1\n").unwrap();
    b.find(Locator::Css("#trace-file"))
        .await
        .unwrap()
        .send_keys(upload.to_str().unwrap())
        .await
        .unwrap();
    wait_text(&b, "#run-fixed_window dd.admitted", "3").await;
    // A malformed line: the server's problem names the trace and the line.
    let text_box = b.find(Locator::Css("#trace")).await.unwrap();
    text_box.send_keys("\nsoon,alice,1").await.unwrap();
    until("the trace error", || async {
        let t = text(&b, "#sim-status").await?;
        (t.starts_with("trace: trace:") && t.contains("field `t_ms`: \"soon\"")).then_some(())
    })
    .await;
    assert_eq!(
        text_box.attr("aria-invalid").await.unwrap().as_deref(),
        Some("true")
    );
    click(&b, "#scenario-flood").await;

    // A bad input shows the server's problem, naming the field.
    let limit = b.find(Locator::Css("#limit")).await.unwrap();
    limit.clear().await.unwrap();
    limit.send_keys("ten per second").await.unwrap();
    until("the limit error", || async {
        let t = text(&b, "#sim-status").await?;
        t.starts_with("limit:").then_some(())
    })
    .await;
    assert_eq!(
        limit.attr("aria-invalid").await.unwrap().as_deref(),
        Some("true")
    );
    b.close().await.unwrap();
}

#[tokio::test]
async fn the_live_view_shows_a_rules_denials_rise() {
    let fg = Floodgate::with_config(
        r#"
[[rules]]
name = "tight"
limit = "2/min"
algorithm = "fixed_window"
key = "client_ip"

[[rules]]
name = "roomy"
limit = "1000/s"
key = "client_ip"
"#,
        &[],
    );
    let driver = Driver::start();
    let b = driver.browser().await;
    b.goto(&fg.url("/ui/")).await.unwrap();
    click(&b, "#tab-live").await;
    wait_text(&b, "[data-rule=tight] dd.denied", "0").await;
    assert_eq!(
        text(&b, "[data-rule=tight] .meta").await.unwrap(),
        "fixed_window, 2/min"
    );
    assert_eq!(text(&b, "#store dd.kind").await.unwrap(), "memory");

    // Five checks on the manual clock (time stands still): two admitted, three denied.
    let c = client();
    for _ in 0..5 {
        let (status, _, _) = post_json(
            &c,
            &fg.url("/v1/check"),
            &json!({"rule": "tight", "key": "alice"}),
        )
        .await;
        assert!(status == 200 || status == 429);
    }
    wait_text(&b, "[data-rule=tight] dd.denied", "3").await;
    wait_text(&b, "[data-rule=tight] dd.admitted", "2").await;
    assert_eq!(text(&b, "[data-rule=roomy] dd.denied").await.unwrap(), "0");
    let keys: u64 = text(&b, "#store dd.keys-held")
        .await
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(keys >= 1);
    screenshot(&b, "live").await;
    b.close().await.unwrap();
}

/// With an API token configured the page still works: without the token it says the server
/// needs one; typed into the field, or given in the URL fragment (`/ui/#token=...`, never
/// sent to the server and taken out of the address bar), it is sent as `Authorization:
/// Bearer` to `/v1/simulate` and `/v1/ui/live`.
#[tokio::test]
async fn with_an_api_token_the_page_asks_for_it_and_sends_it_as_a_header() {
    let token = "page-token-0123456789";
    let fg = Floodgate::with_config(
        &format!(
            "[server]\napi_token = \"{token}\"\n\n[[rules]]\nname = \"tight\"\n\
             limit = \"2/min\"\nalgorithm = \"fixed_window\"\nkey = \"client_ip\"\n"
        ),
        &[],
    );
    let driver = Driver::start();
    let b = driver.browser().await;
    b.goto(&fg.url("/ui/")).await.unwrap();
    // The first chart's request is refused, and the page says why.
    until("the token message", || async {
        let t = text(&b, "#sim-status").await?;
        t.contains("needs a token").then_some(())
    })
    .await;
    // Typed into the field (taken when it loses focus, here to the exercise's button).
    b.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    click(&b, "#preset-1").await;
    wait_text(&b, "#run-fixed_window dd.admitted", "20").await;
    b.close().await.unwrap();

    // A new session given the token in the fragment: the live view answers, and the address
    // bar no longer shows the token.
    let b = driver.browser().await;
    b.goto(&fg.url(&format!("/ui/#token={token}")))
        .await
        .unwrap();
    until("the algorithm checkboxes", || async {
        b.find(Locator::Css("#algorithm-gcra")).await.ok()
    })
    .await;
    let url = b.current_url().await.unwrap();
    assert_eq!(url.fragment(), None, "{url}");
    click(&b, "#tab-live").await;
    wait_text(&b, "[data-rule=tight] dd.denied", "0").await;
    assert_eq!(
        text(&b, "[data-rule=tight] .meta").await.unwrap(),
        "fixed_window, 2/min"
    );
    screenshot(&b, "live-with-token").await;
    b.close().await.unwrap();
}

/// Whether the Live view is the one shown.
async fn live_shown(b: &Client) -> bool {
    b.execute(
        "return document.querySelector('#tab-live').getAttribute('aria-selected') === 'true' \
         && !document.querySelector('#live').hidden \
         && document.querySelector('#simulator').hidden;",
        vec![],
    )
    .await
    .unwrap()
        == json!(true)
}

/// A shadow rule never denies; the live view shows what it would have admitted and denied,
/// the same numbers as `/metrics`' `shadow_allowed` and `shadow_denied` series (issue 23: it
/// showed "admitted 0, shadow 41" where `/metrics` had `shadow_allowed 13`). The view has its
/// own address, `/ui/#live`, which opens it and survives a reload.
#[tokio::test]
async fn a_shadow_rule_shows_what_it_would_admit_and_deny_as_metrics_does() {
    let fg = Floodgate::with_config(
        r#"
[[rules]]
name = "trial"
limit = "3/min"
algorithm = "fixed_window"
key = "client_ip"
shadow = true

[[rules]]
name = "enforced"
limit = "1000/s"
key = "client_ip"
"#,
        &[],
    );
    let driver = Driver::start();
    let b = driver.browser().await;
    b.goto(&fg.url("/ui/#live")).await.unwrap();
    wait_text(&b, "[data-rule=trial] dd.shadow_denied", "0").await;
    assert!(live_shown(&b).await);
    // A shadow rule shows would-admit and would-deny, not admitted and denied.
    assert!(text(&b, "[data-rule=trial] dd.admitted").await.is_none());
    assert!(text(&b, "[data-rule=enforced] dd.shadow_allowed")
        .await
        .is_none());

    // Seven checks on the manual clock: the shadow rule would admit 3 and deny 4; all pass.
    let c = client();
    for _ in 0..7 {
        let (status, _, body) = post_json(
            &c,
            &fg.url("/v1/check"),
            &json!({"rule": "trial", "key": "alice"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let series = |outcome: &str| {
        format!("floodgate_decisions_total{{rule=\"trial\",outcome=\"{outcome}\"}}")
    };
    let allowed = metric(&c, &fg, &series("shadow_allowed")).await.unwrap();
    let denied = metric(&c, &fg, &series("shadow_denied")).await.unwrap();
    assert_eq!((allowed, denied), (3.0, 4.0));
    wait_text(
        &b,
        "[data-rule=trial] dd.shadow_allowed",
        &allowed.to_string(),
    )
    .await;
    wait_text(
        &b,
        "[data-rule=trial] dd.shadow_denied",
        &denied.to_string(),
    )
    .await;
    // The last second in large type beside the chart, without hovering: present for each
    // series shown.
    for g in ["shadow_allowed", "shadow_denied", "error"] {
        assert!(text(&b, &format!("[data-rule=trial] [data-now={g}]"))
            .await
            .is_some());
    }
    let label = b
        .find(Locator::Css("[data-rule=trial] .chart"))
        .await
        .unwrap()
        .attr("aria-label")
        .await
        .unwrap()
        .unwrap();
    assert!(label.contains("3 would admit, 4 would deny"), "{label}");
    screenshot(&b, "live-shadow").await;

    // The address survives a reload; the simulator tab takes `#live` off, the back to `#live`.
    b.refresh().await.unwrap();
    wait_text(&b, "[data-rule=trial] dd.shadow_denied", "4").await;
    assert!(live_shown(&b).await);
    click(&b, "#tab-simulator").await;
    assert_eq!(b.current_url().await.unwrap().fragment(), None);
    assert!(!live_shown(&b).await);
    click(&b, "#tab-live").await;
    assert_eq!(b.current_url().await.unwrap().fragment(), Some("live"));
    b.close().await.unwrap();
}

/// `floodgate simulate --format svg` in Chromium's own layout: every text inside the canvas,
/// no two texts overlapping, the legend's items clear of each other and of the plots
/// (issue 23: daily-jobs' subtitle was cut and its legend overlapped).
#[tokio::test]
async fn simulate_svg_fits_its_canvas_in_a_browser() {
    let driver = Driver::start();
    let b = driver.browser().await;
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("daily-jobs", &["--scenario", "daily-jobs"][..]),
        (
            "calm-spike",
            &["--scenario", "calm-spike", "--max-wait", "2s"][..],
        ),
        ("flood", &["--scenario", "flood", "--instances", "3"][..]),
    ] {
        let path = dir.path().join(format!("{name}.svg"));
        let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["simulate", "--format", "svg", "--output"])
            .arg(&path)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        b.goto(&format!("file://{}", path.display())).await.unwrap();
        let problems = b
            .execute(
                r#"
const svg = document.documentElement;
const W = svg.width.baseVal.value, H = svg.height.baseVal.value;
const box = (e) => { const r = e.getBBox(); return [r.x, r.y, r.x + r.width, r.y + r.height]; };
const meets = (a, b) => a[0] < b[2] - 0.5 && b[0] < a[2] - 0.5 && a[1] < b[3] - 0.5 && b[1] < a[3] - 0.5;
const texts = [...svg.querySelectorAll("text")].map((t) => [box(t), t.textContent]);
const plots = [...svg.querySelectorAll(".plot-area")].map(box);
const legend = [...svg.querySelectorAll(".legend-item")].map(box);
const out = [];
for (const [b, t] of texts) {
  if (b[0] < 0 || b[1] < 0 || b[2] > W || b[3] > H) out.push(`outside: ${t} ${b}`);
  for (const p of plots) if (meets(b, p)) out.push(`on a plot: ${t}`);
}
for (let i = 0; i < texts.length; i++)
  for (let j = i + 1; j < texts.length; j++)
    if (meets(texts[i][0], texts[j][0])) out.push(`overlap: ${texts[i][1]} / ${texts[j][1]}`);
for (let i = 0; i < legend.length; i++) {
  for (let j = i + 1; j < legend.length; j++) if (meets(legend[i], legend[j])) out.push(`legend ${i}/${j}`);
  for (const p of plots) if (meets(legend[i], p)) out.push(`legend ${i} on a plot`);
}
return [out, texts.length, legend.length, plots.length];
"#,
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(problems[0], json!([]), "{name}: {problems}");
        assert!(problems[1].as_u64().unwrap() > 20, "{name}: {problems}");
        assert_eq!(problems[2], 4, "{name}");
        assert_eq!(problems[3], 6, "{name}");
        if name == "daily-jobs" {
            let png = b.screenshot().await.unwrap();
            std::fs::write(screenshot_dir().join("simulate-daily-jobs.png"), png).unwrap();
        }
    }
    b.close().await.unwrap();
}
