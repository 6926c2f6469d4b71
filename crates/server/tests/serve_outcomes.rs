//! Every decision outcome is counted the same way through each front end: `POST /v1/check`,
//! forward-auth, the reverse proxy and the floodgate-tower layer in an app of its own. They
//! only translate their wire format; `floodgate_tower::RateLimiter` decides and counts, so one
//! table of steps gives one table of `floodgate_decisions_total{rule, outcome}` increments.

mod serve_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::MemoryStore;
use floodgate_tower::{CostSource, KeySource, Outcome, RateLimitLayer, RateLimiter, Rule, RuleSet};
use http::{HeaderName, Request, Response};
use serde_json::json;
use serve_support::{client, Floodgate, Upstream, START_US};
use tower::{Layer, ServiceExt};

/// Three rules on the same key: `a` (2/min, cost from `x-cost`), `b` (1/min) and the shadow
/// rule `s` (1/min).
const CONFIG: &str = r#"
[[rules]]
name = "a"
limit = "2/min"
algorithm = "fixed_window"
key = "header:x-who"
cost_header = "x-cost"

[[rules]]
name = "b"
limit = "1/min"
algorithm = "fixed_window"
key = "header:x-who"

[[rules]]
name = "s"
limit = "1/min"
algorithm = "fixed_window"
key = "header:x-who"
shadow = true
"#;

const RULES: [&str; 3] = ["a", "b", "s"];

/// One request of the table: who sends it (the key; `None`: the key header is absent) and its
/// cost header for rule `a` (`None`: absent, the cost is 1).
struct Step {
    name: &'static str,
    who: Option<&'static str>,
    cost: Option<&'static str>,
    /// The increments every front end must count, `(rule, outcome)`.
    counts: &'static [(&'static str, &'static str)],
    /// Whether `/v1/check` can express the request (it names keys and costs in JSON, so a
    /// missing key or a non-numeric cost is a 400 about the body, not a decision).
    api: bool,
}

const STEPS: &[Step] = &[
    Step {
        name: "admitted by all",
        who: Some("K"),
        cost: None,
        counts: &[("a", "allowed"), ("b", "allowed"), ("s", "shadow_allowed")],
        api: true,
    },
    Step {
        name: "refused by b: a is not charged",
        who: Some("K"),
        cost: None,
        counts: &[
            ("a", "not_charged"),
            ("b", "denied"),
            ("s", "shadow_denied"),
        ],
        api: true,
    },
    Step {
        name: "a cost above a's capacity",
        who: Some("K"),
        cost: Some("3"),
        counts: &[("a", "cost_exceeds_capacity")],
        api: true,
    },
    Step {
        name: "a cost that is not a number",
        who: Some("K"),
        cost: Some("abc"),
        counts: &[("a", "invalid_cost")],
        api: false,
    },
    Step {
        name: "no key",
        who: None,
        cost: None,
        counts: &[("a", "skipped"), ("b", "skipped"), ("s", "skipped")],
        api: false,
    },
];

type Counts = BTreeMap<(String, String), f64>;

/// Every `floodgate_decisions_total` sample of a Prometheus text.
fn decisions(text: &str) -> Counts {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("floodgate_decisions_total{rule=\"")?;
            let (rule, rest) = rest.split_once("\",outcome=\"")?;
            let (outcome, value) = rest.split_once("\"} ")?;
            Some((
                (rule.to_string(), outcome.to_string()),
                value.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// The increments from `before` to `after` (zero increments left out).
fn increments(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

fn expected(step: &Step) -> Counts {
    step.counts
        .iter()
        .map(|(r, o)| ((r.to_string(), o.to_string()), 1.0))
        .collect()
}

/// A front end of `floodgate serve`: sends one step's request with the key `who`.
#[derive(Clone, Copy, Debug)]
enum Served {
    Check,
    ForwardAuth,
    Proxy,
}

async fn send_served(fg: &Floodgate, how: Served, step: &Step, who: Option<String>) {
    let c = client();
    let status = match how {
        Served::Check => {
            let who = who.expect("the API names its key");
            let cost_a: u64 = step.cost.map_or(1, |c| c.parse().unwrap());
            let body = json!({"descriptors": [
                {"rule": "a", "key": who, "cost": cost_a},
                {"rule": "b", "key": who},
                {"rule": "s", "key": who},
            ]});
            c.post(fg.url("/v1/check"))
                .json(&body)
                .send()
                .await
                .unwrap()
        }
        Served::ForwardAuth | Served::Proxy => {
            let mut r = match how {
                Served::ForwardAuth => c
                    .get(fg.url("/v1/forward-auth"))
                    .header("x-forwarded-uri", "/"),
                _ => c.get(fg.proxy_url("/")),
            };
            if let Some(who) = who {
                r = r.header("x-who", who);
            }
            if let Some(cost) = step.cost {
                r = r.header("x-cost", cost);
            }
            r.send().await.unwrap()
        }
    }
    .status();
    assert!(
        [200, 400, 429].contains(&status.as_u16()),
        "{how:?} {}: {status}",
        step.name
    );
}

#[tokio::test]
async fn every_outcome_is_counted_identically_through_the_four_front_ends() {
    let upstream = Upstream::start().await;
    let fg = Floodgate::with_config(CONFIG, &["--upstream", &upstream.url]);
    let c = client();
    let scrape = || async {
        let text = c
            .get(fg.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        decisions(&text)
    };
    let mut seen: BTreeMap<&str, Vec<Counts>> = BTreeMap::new();
    for (how, name) in [
        (Served::Check, "/v1/check"),
        (Served::ForwardAuth, "forward-auth"),
        (Served::Proxy, "proxy"),
    ] {
        for step in STEPS {
            if matches!(how, Served::Check) && !step.api {
                continue;
            }
            // Each front end counts on keys of its own (one process serves all three).
            let who = step.who.map(|w| format!("{w}-{name}"));
            let before = scrape().await;
            send_served(&fg, how, step, who).await;
            let got = increments(&before, &scrape().await);
            assert_eq!(got, expected(step), "{name}: {}", step.name);
            seen.entry(name).or_default().push(got);
        }
    }

    // The tower layer in an app of its own, with the same rules and its own recorder (on a
    // thread of its own: it runs its own runtime inside the recorder's scope).
    let layer_counts = std::thread::spawn(tower_layer_counts).join().unwrap();
    seen.insert("tower layer", layer_counts);
    // Every outcome the table names exists as a label.
    for step in STEPS {
        for (rule, outcome) in step.counts {
            assert!(RULES.contains(rule));
            assert!(
                Outcome::ALL.iter().any(|o| o.as_str() == *outcome),
                "{outcome}"
            );
        }
    }
    assert_eq!(seen.len(), 4);
}

/// The table's increments through the floodgate-tower layer.
fn tower_layer_counts() -> Vec<Counts> {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new(START_US);
        let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
        let policy = |q: &str| Policy::new(AlgorithmKind::FixedWindow, q.parse().unwrap()).unwrap();
        let key = || KeySource::Header {
            name: HeaderName::from_static("x-who"),
        };
        let rules = RuleSet::new(vec![
            Rule::new("a", policy("2/min"), key()).with_cost(CostSource::Header {
                name: HeaderName::from_static("x-cost"),
                default: 1,
                max: 2,
            }),
            Rule::new("b", policy("1/min"), key()),
            Rule::new("s", policy("1/min"), key()).with_shadow(true),
        ]);
        let app = RateLimitLayer::new(RateLimiter::new(store, rules)).layer(tower::service_fn(
            |_req: Request<String>| async {
                Ok::<_, std::convert::Infallible>(Response::new(String::from("hi")))
            },
        ));
        let counts = || -> Counts {
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .filter(|(k, ..)| k.key().name() == "floodgate_decisions_total")
                .filter_map(|(k, _, _, value)| {
                    let label = |n: &str| {
                        k.key()
                            .labels()
                            .find(|l| l.key() == n)
                            .map(|l| l.value().to_string())
                    };
                    let metrics_util::debugging::DebugValue::Counter(v) = value else {
                        return None;
                    };
                    Some(((label("rule")?, label("outcome")?), v as f64))
                })
                .collect()
        };
        let mut all = Vec::new();
        // Each snapshot of the debugging recorder holds the increments since the last one.
        counts();
        for step in STEPS {
            let mut request = Request::new(String::new());
            if let Some(who) = step.who {
                request
                    .headers_mut()
                    .insert("x-who", format!("{who}-layer").parse().unwrap());
            }
            if let Some(cost) = step.cost {
                request
                    .headers_mut()
                    .insert("x-cost", cost.parse().unwrap());
            }
            runtime.block_on(app.clone().oneshot(request)).unwrap();
            let got = increments(&Counts::new(), &counts());
            assert_eq!(got, expected(step), "tower layer: {}", step.name);
            all.push(got);
        }
        all
    })
}

/// Two rules whose names differ only in case could once share an internal cost header, so the
/// second's route cost overwrote the first's; such names are now refused, and route costs are
/// the rule's own.
#[tokio::test]
async fn case_colliding_rule_names_are_refused_and_route_costs_stay_their_rules_own() {
    let colliding = r#"
[[rules]]
name = "Search"
limit = "1000/min"
[[rules.route_costs]]
path_prefix = "/api/search"
cost = 100

[[rules]]
name = "search"
limit = "1000/min"
[[rules.route_costs]]
path_prefix = "/api/search"
cost = 7
"#;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.toml");
    std::fs::write(&file, colliding).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    assert!(
        stderr.contains("rules[1].name") && stderr.contains("only in case"),
        "{stderr}"
    );

    // Two rules with distinct names and different route costs for the same path: each is
    // charged its own (the collision answered "Search";r=993 where 900 was right).
    let fg = Floodgate::with_config(
        &colliding.replace("name = \"search\"", "name = \"search-lite\""),
        &[],
    );
    let r = client()
        .get(fg.url("/v1/forward-auth"))
        .header("x-forwarded-uri", "/api/search")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ratelimit = r.headers()["ratelimit"].to_str().unwrap().to_string();
    assert!(ratelimit.contains("\"Search\";r=900;"), "{ratelimit}");
}
