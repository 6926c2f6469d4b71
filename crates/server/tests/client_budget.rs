//! `floodgate-client` end to end: eight job processes share one daily budget of 10,000 units
//! through two `floodgate serve` processes on one real redis-server, on the manual clock.
//!
//! The eight jobs are OS processes: this test binary run again with `--ignored --exact
//! job_process` and the job's instance in `FLOODGATE_JOB_API` (the pattern of `rusty-fork`).
//! Each has its own runtime, connection pool and memory; all they share is Redis.

mod serve_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use floodgate_client::{Budget, Client, Clock, Error, ManualClock, Micros, Sleeper, SpendError};
use floodgate_store::redis::testing::RedisServer;
use serde_json::json;
use serve_support::{advance_as, client, Floodgate, START_US};

const DAY_US: u64 = 86_400_000_000;
const TOKEN: &str = "jobs-share-one-daily-budget";

/// A daily quota of 10,000 units as a fixed window (it frees at the day's end, UTC), and a
/// 10/s GCRA rule for the acquire test. A store failure answers 503, never a silent admit.
fn config(redis: &str) -> String {
    format!(
        r#"
[server]
api_token = "{TOKEN}"

[store]
kind = "redis"
url = "{redis}"
timeout_ms = 2000

[[rules]]
name = "per-day"
limit = "10000/d"
algorithm = "fixed_window"
failure_mode = "closed"

[[rules]]
name = "per-second"
limit = "10/s"
algorithm = "gcra"
failure_mode = "closed"
"#
    )
}

/// The job's calls: a search (100 units) then nine list calls (1 unit each), over and over.
fn cost_of(call: u64) -> u64 {
    if call.is_multiple_of(10) {
        100
    } else {
        1
    }
}

/// Runs one job until the budget refuses: returns (units spent, the refusal).
async fn job(budget: Budget) -> (u64, floodgate_client::Exhausted) {
    for call in 0.. {
        match budget.spend(cost_of(call)).await {
            Ok(()) => {}
            Err(SpendError::Exhausted(e)) => return (budget.spent(), e),
            Err(other) => panic!("job failed: {other}"),
        }
    }
    unreachable!()
}

/// One job as its own process: spends through `FLOODGATE_JOB_API` until the budget refuses and
/// writes `spent rule cost remaining retry_after_us until` to `FLOODGATE_JOB_OUT`. Run only by
/// `eight_jobs_share_a_daily_budget...`; alone it does nothing.
#[test]
#[ignore = "a child process of eight_jobs_share_a_daily_budget...; it runs this itself"]
fn job_process() {
    let (Ok(api), Ok(out)) = (
        std::env::var("FLOODGATE_JOB_API"),
        std::env::var("FLOODGATE_JOB_OUT"),
    ) else {
        // Run alone (`--include-ignored`): not a job, nothing to do.
        return;
    };
    // Start together: the parent writes a line to every job's stdin once all are spawned. End
    // of input instead means the parent is gone (it failed before): no job then.
    if std::io::stdin().read_line(&mut String::new()).unwrap() == 0 {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (spent, e) = rt.block_on(async {
        // The job's clock mirrors the servers' manual clock, which stays at START_US.
        let client = Client::builder(&api)
            .bearer_token(TOKEN)
            .clock(Arc::new(ManualClock::new(START_US)))
            .build()
            .unwrap();
        job(Budget::new(client, "per-day", "paid-api")).await
    });
    let line = format!(
        "{spent} {} {} {} {} {}\n",
        e.rule, e.cost, e.remaining, e.retry_after_us, e.until
    );
    std::fs::write(out, line).unwrap();
}

/// What one job process reported: (spent, the refusal).
fn read_job(path: &std::path::Path) -> (u64, floodgate_client::Exhausted) {
    let text = std::fs::read_to_string(path).unwrap();
    let f: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(f.len(), 6, "{text:?}");
    let n = |i: usize| f[i].parse::<u64>().unwrap();
    let e = floodgate_client::Exhausted {
        rule: f[1].to_string(),
        cost: n(2),
        remaining: n(3),
        retry_after_us: n(4),
        until: n(5),
    };
    (n(0), e)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_jobs_share_a_daily_budget_through_two_instances_and_stop_with_the_exact_until() {
    let redis = RedisServer::start().unwrap();
    let config = config(&redis.url());
    let instances = [
        Floodgate::with_config(&config, &[]),
        Floodgate::with_config(&config, &[]),
    ];
    // The clients' clock mirrors the servers' manual clock.
    let clock = ManualClock::new(START_US);
    let budgets = |clock: &ManualClock| -> Vec<Budget> {
        (0..2)
            .map(|i| {
                let client = Client::builder(&instances[i % 2].api)
                    .bearer_token(TOKEN)
                    .clock(Arc::new(clock.clone()))
                    .build()
                    .unwrap();
                Budget::new(client, "per-day", "paid-api")
            })
            .collect()
    };
    // Eight job processes at once, four on each instance.
    let outs = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let jobs: Vec<_> = (0..8)
        .map(|i| {
            let out = outs.path().join(format!("job-{i}"));
            let child = std::process::Command::new(&exe)
                .args(["--ignored", "--exact", "job_process", "--test-threads=1"])
                .env("FLOODGATE_JOB_API", &instances[i % 2].api)
                .env("FLOODGATE_JOB_OUT", &out)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let mut jobs = jobs;
    for (child, _) in &mut jobs {
        use std::io::Write;
        writeln!(child.stdin.take().unwrap(), "go").unwrap();
    }
    let reports = tokio::task::spawn_blocking(move || {
        jobs.into_iter()
            .map(|(mut child, out)| {
                let status = child.wait().unwrap();
                assert!(status.success(), "job process: {status}");
                read_job(&out)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut total = 0;
    // START_US is 08:00 UTC: the day's window ends 16 hours later.
    let day_end = START_US - START_US % DAY_US + DAY_US;
    assert_eq!(day_end - START_US, 16 * 3_600_000_000);
    let shares: Vec<u64> = reports.iter().map(|(spent, _)| *spent).collect();
    // Started together, the jobs interleave (which job gets how much is the scheduler's).
    assert!(shares.iter().filter(|s| **s > 0).count() >= 2, "{shares:?}");
    for (spent, exhausted) in reports {
        total += spent;
        assert_eq!(exhausted.rule, "per-day");
        assert_eq!(exhausted.until, day_end, "{exhausted}");
        assert_eq!(exhausted.retry_after_us, day_end - START_US);
        assert!(exhausted.remaining < exhausted.cost, "{exhausted}");
    }
    assert!(total <= 10_000, "spent {total}: {shares:?}");
    // What the jobs were granted is exactly what the shared count holds.
    let c = client();
    let (_, _, peek) = post_json_auth(&c, &instances[1].url("/v1/peek")).await;
    assert_eq!(
        peek["remaining"].as_u64().unwrap(),
        10_000 - total,
        "{peek}"
    );
    // Every job stopped only when a search could not fit: fewer than 100 units are left.
    assert!(10_000 - total < 100, "spent {total}");

    // One microsecond before `until` the quota is still spent, and says the same `until`.
    let to = |us: u64| {
        let c = c.clone();
        let instances = &instances;
        async move {
            for fg in instances {
                advance_as(&c, fg, us, TOKEN).await;
            }
        }
    };
    to(day_end - START_US - 1).await;
    clock.set(day_end - 1);
    let again = budgets(&clock);
    match again[0].spend(100).await {
        Err(SpendError::Exhausted(e)) => {
            assert_eq!(e.until, day_end);
            assert_eq!(e.retry_after_us, 1);
        }
        other => panic!("{other:?}"),
    }
    // At `until` exactly the next day's budget is there, on both instances.
    to(1).await;
    clock.set(day_end);
    again[0].spend(100).await.unwrap();
    again[1].spend(100).await.unwrap();
    let (_, _, peek) = post_json_auth(&c, &instances[0].url("/v1/peek")).await;
    assert_eq!(peek["remaining"], 9_800, "{peek}");
}

async fn post_json_auth(
    c: &reqwest::Client,
    url: &str,
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    let r = c
        .post(url)
        .bearer_auth(TOKEN)
        .json(&json!({"rule": "per-day", "key": "paid-api", "cost": 0}))
        .send()
        .await
        .unwrap();
    serve_support::split(r).await
}

/// Sleeps by moving both clocks: the client's and the server's manual clock.
#[derive(Debug)]
struct AdvanceBoth {
    clock: ManualClock,
    api: String,
    slept: std::sync::Mutex<Vec<Micros>>,
}

impl Sleeper for AdvanceBoth {
    fn sleep(&self, micros: Micros) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.slept.lock().unwrap().push(micros);
            let r = client()
                .post(format!("{}/v1/debug/clock/advance", self.api))
                .bearer_auth(TOKEN)
                .json(&json!({ "micros": micros }))
                .send()
                .await
                .unwrap();
            let (status, _, body) = serve_support::split(r).await;
            assert_eq!(status, 200, "{body}");
            self.clock.advance(micros);
        })
    }
}

#[tokio::test]
async fn acquire_sleeps_the_reserved_wait_and_refuses_what_cannot_fit_the_deadline() {
    let redis = RedisServer::start().unwrap();
    let fg = Floodgate::with_config(&config(&redis.url()), &[]);
    let clock = ManualClock::new(START_US);
    let sleeper = Arc::new(AdvanceBoth {
        clock: clock.clone(),
        api: fg.api.clone(),
        slept: std::sync::Mutex::new(Vec::new()),
    });
    let c = Client::builder(&fg.api)
        .bearer_token(TOKEN)
        .clock(Arc::new(clock.clone()))
        .sleeper(sleeper.clone())
        .jitter_seed(11)
        .build()
        .unwrap();
    // The burst of 10 at once: no sleep.
    for _ in 0..10 {
        let a = c
            .acquire("per-second", "job", 1, START_US + 250_000)
            .await
            .unwrap();
        assert_eq!(a.wait_us, Some(0));
    }
    assert!(sleeper.slept.lock().unwrap().is_empty());
    // The 11th is reserved 100 ms ahead: acquire sleeps exactly that and returns at its slot.
    let a = c
        .acquire("per-second", "job", 1, START_US + 250_000)
        .await
        .unwrap();
    assert_eq!(a.wait_us, Some(100_000));
    assert_eq!(*sleeper.slept.lock().unwrap(), [100_000]);
    assert_eq!(clock.now(), START_US + 100_000);
    // The next slot is 100 ms away; a deadline 50 ms ahead cannot be met: refused at once,
    // without sleeping to the deadline.
    let e = c
        .acquire("per-second", "job", 1, START_US + 150_000)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeadlineExceeded {
                retry_after: Some(100_000),
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(sleeper.slept.lock().unwrap().len(), 1);
    // A deadline in the past is refused without asking.
    let e = c
        .acquire("per-second", "job", 1, START_US)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeadlineExceeded {
                retry_after: None,
                ..
            }
        ),
        "{e:?}"
    );
    // Slots reserved up to the rule's horizon (a full burst's refill, 1 s): the server cannot
    // reserve further ahead, so acquire gets a 429 and retries at its retry_after plus full
    // jitter (at most 10 ms on the first retry), then is admitted before the deadline.
    let raw = client();
    let mut reserved = 0;
    loop {
        let r = raw
            .post(fg.url("/v1/check"))
            .bearer_auth(TOKEN)
            .json(&json!({"rule": "per-second", "key": "job", "max_wait_ms": 86_400_000u64}))
            .send()
            .await
            .unwrap();
        if r.status() != 200 {
            break;
        }
        reserved += 1;
    }
    assert!(reserved > 0);
    let before = clock.now();
    let deadline = before + 5_000_000;
    let a = c.acquire("per-second", "job", 1, deadline).await.unwrap();
    assert!(a.allowed);
    let slept = sleeper.slept.lock().unwrap().clone();
    // The 429 said 1.1 s (the slot after the reserved second, 100 ms per unit); acquire slept
    // that plus its jitter and was then admitted at once.
    assert_eq!(slept.len(), 2, "{slept:?}");
    assert!(
        (1_100_000..=1_110_000).contains(&slept[1]),
        "retry_after plus at most 10 ms of jitter: {slept:?}"
    );
    assert_eq!(a.wait_us, Some(0));
    assert!(clock.now() <= deadline);
    // A wrong token is the server's 403 problem, not a denial.
    let bad = Client::builder(&fg.api)
        .bearer_token("wrong")
        .build()
        .unwrap();
    let e = bad.check("per-second", "job", 1).await.unwrap_err();
    assert!(matches!(e, Error::Problem { status: 403, .. }), "{e:?}");
    // A cost above the rule's capacity is a 400 naming `cost`.
    let e = c.check("per-day", "job", 10_001).await.unwrap_err();
    assert!(
        matches!(&e, Error::Problem { status: 400, field: Some(f), .. } if f == "cost"),
        "{e:?}"
    );
}

/// `reserve` then `settle` through a real `floodgate serve` on Redis: an estimate of 500 units
/// settled at 120 gives 380 back, the key's standing is the server's, and settling the same
/// reservation again is `AlreadySettled` (the claim in Redis), with nothing given back twice.
#[tokio::test]
async fn reserve_then_settle_gives_back_the_rest_once() {
    let redis = RedisServer::start().unwrap();
    let fg = Floodgate::with_config(&config(&redis.url()), &[]);
    let c = Client::builder(&fg.api)
        .bearer_token(TOKEN)
        .build()
        .unwrap();
    let r = c
        .reserve("per-day", "llm-team", 500, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((r.estimate, r.wait_us), (500, 0));
    assert!(r.expires_at.is_some());
    let before = c.check("per-day", "llm-team", 0).await.unwrap();
    assert_eq!(before.remaining, Some(9_500));
    let settled = c.settle(&r, 120).await.unwrap();
    assert_eq!(settled.decisions.len(), 1);
    let d = &settled.decisions[0];
    assert_eq!((d.reserved, d.actual, d.remaining), (500, 120, 9_880));
    assert!(d.current);
    let again = c.settle(&r, 0).await.unwrap_err();
    assert!(matches!(again, Error::AlreadySettled), "{again:?}");
    let after = c.check("per-day", "llm-team", 0).await.unwrap();
    assert_eq!(after.remaining, Some(9_880));
}
