//! The delay mode (`delay = "2s"` on a rule) through the real binary: the reverse proxy holds a
//! request until its slot and then forwards it to a real upstream, forward-auth answers 200 at
//! the slot, a request beyond the delay is a 429 at once, a client that goes away gives its
//! slot back, and the waiting bound refuses and counts; two proxies sharing one Redis keep one
//! schedule.
//!
//! The schedule is measured on the real clock (`serve` without `--manual-clock`: tokio's timer
//! is what holds the requests), from the moment the test has written the burst (the first
//! decision, which the schedule counts from, comes after it). Tolerance: a held request is
//! never seen before its slot (tokio's timer never fires early; [`EARLY`] only absorbs the
//! microsecond rounding of the slots), and at most [`LATE`] after it (reading and deciding
//! the first request, the timer's 1 ms granularity, then the forwarding, on a loaded 2-core
//! host running a debug build). The bound test runs on the manual clock, which held requests
//! then watch.

mod serve_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use serve_support::{advance, client, metric, until_waiting, Floodgate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How much earlier than its nominal slot a held request may be seen (see the module docs).
const EARLY: Duration = Duration::from_millis(1);
/// How much later than its nominal slot a held request may be seen.
const LATE: Duration = Duration::from_millis(150);

/// 10/s with a burst of 20 (token bucket): 20 at once, then one every 100 ms; a delay of 2 s
/// schedules up to 20 more. (With the default burst of 10 the bucket schedules at most 1 s
/// ahead, and `check-config` refuses `delay = "2s"` as never reached.)
const TEN_PER_SECOND: &str = r#"
[[rules]]
name = "per-ip"
limit = "10/s"
burst = 20
delay = "2s"
"#;

/// An upstream that notes when each request arrived, by path.
struct Recorder {
    url: String,
    arrivals: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Recorder {
    async fn start() -> Self {
        let arrivals: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
        let log = Arc::clone(&arrivals);
        let app = Router::new().fallback(move |req: Request| {
            let log = Arc::clone(&log);
            async move {
                log.lock()
                    .unwrap()
                    .push((Instant::now(), req.uri().path().to_string()));
                "ok"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, arrivals }
    }

    fn arrivals(&self) -> Vec<(Instant, String)> {
        let mut a = self.arrivals.lock().unwrap().clone();
        a.sort();
        a
    }
}

/// `host:port` of an `http://host:port` URL.
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// A raw HTTP/1.1 request written on its own connection (so a burst can be written in a few
/// microseconds once every connection is open, and a client can go away mid-request).
async fn connect(url: &str) -> TcpStream {
    let stream = TcpStream::connect(authority(url)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

async fn write_get(stream: &mut TcpStream, path: &str, headers: &str) {
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: test\r\n{headers}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
}

/// Reads the whole answer: (status, Retry-After, when it was complete).
async fn read_answer(mut stream: TcpStream) -> (u16, Option<String>, Instant) {
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    let at = Instant::now();
    let text = String::from_utf8_lossy(&bytes);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let retry = text.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("retry-after: ")
            .map(str::to_string)
    });
    (status, retry, at)
}

/// Opens `n` connections (the i-th to `urls[i % urls.len()]`), then writes one GET on each as
/// fast as it can, `path(i)` with `headers`; answers (i, status, Retry-After, answered at), in
/// order of i.
async fn burst(
    urls: &[&str],
    n: usize,
    path: impl Fn(usize) -> String,
    headers: impl Fn(usize) -> String,
) -> (Instant, Vec<(usize, u16, Option<String>, Instant)>) {
    let mut streams = Vec::with_capacity(n);
    for i in 0..n {
        streams.push(connect(urls[i % urls.len()]).await);
    }
    let sent = Instant::now();
    for (i, s) in streams.iter_mut().enumerate() {
        write_get(s, &path(i), &headers(i)).await;
    }
    let readers: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            tokio::spawn(async move {
                let (status, retry, at) = read_answer(s).await;
                (i, status, retry, at)
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(n);
    for r in readers {
        answers.push(r.await.unwrap());
    }
    (sent, answers)
}

/// Asserts that `times` (sorted) are 20 at once and then one every 100 ms for 2 s, measured
/// from `t0` (when the burst was written), within [`EARLY`] / [`LATE`].
fn assert_schedule(what: &str, t0: Instant, times: &[Instant]) {
    assert_eq!(times.len(), 40, "{what}: {} passed", times.len());
    let offsets: Vec<Duration> = times.iter().map(|t| *t - t0).collect();
    for (n, offset) in offsets.iter().enumerate() {
        // The 20 of the burst at once, then the k-th held one at k x 100 ms.
        let slot = Duration::from_millis(100 * n.saturating_sub(19) as u64);
        assert!(
            *offset + EARLY >= slot && *offset <= slot + LATE,
            "{what}: the {n}th passed at {offset:?}, its slot is {slot:?} \
             (tolerance -{EARLY:?}/+{LATE:?}); all: {offsets:?}"
        );
    }
}

/// Asserts that the burst's 429s (`answers` with status 429) are exactly 10 and were refused at
/// once, not held: the next slot is 2.1 s away, so `Retry-After: 3` (whole seconds, rounded up).
fn assert_ten_refused_at_once(sent: Instant, answers: &[(usize, u16, Option<String>, Instant)]) {
    let refused: Vec<_> = answers.iter().filter(|a| a.1 == 429).collect();
    assert_eq!(refused.len(), 10, "{answers:?}");
    for (i, _, retry, at) in refused {
        assert!(*at - sent < Duration::from_millis(500), "{i} was held");
        assert_eq!(retry.as_deref(), Some("3"), "{i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_a_burst_at_its_scheduled_times_and_refuses_beyond_the_delay() {
    let upstream = Recorder::start().await;
    let fg = Floodgate::with_config_on_real_clock(TEN_PER_SECOND, &["--upstream", &upstream.url]);
    let proxy = fg.proxy.clone().unwrap();
    let (sent, answers) = burst(&[&proxy], 50, |i| format!("/r/{i}"), |_| String::new()).await;

    let passed: Vec<_> = answers.iter().filter(|a| a.1 == 200).collect();
    assert_eq!(
        passed.len(),
        40,
        "20 at once, 20 held up to 2 s, the other 10 refused: {answers:?}"
    );
    assert_ten_refused_at_once(sent, &answers);
    let arrivals = upstream.arrivals();
    assert_schedule(
        "arrivals at the upstream",
        sent,
        &arrivals.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
    );
    // Exactly the answered 200s reached the upstream.
    let mut forwarded: Vec<String> = arrivals.into_iter().map(|(_, p)| p).collect();
    let mut ok: Vec<String> = passed.iter().map(|a| format!("/r/{}", a.0)).collect();
    forwarded.sort();
    ok.sort();
    assert_eq!(forwarded, ok);

    let c = client();
    let passed_total = "floodgate_requests_delayed_total{outcome=\"passed\"}";
    assert_eq!(metric(&c, &fg, passed_total).await, Some(20.0));
    assert_eq!(
        metric(&c, &fg, "floodgate_requests_waiting").await,
        Some(0.0)
    );
    let allowed = "floodgate_decisions_total{rule=\"per-ip\",outcome=\"allowed\"}";
    assert_eq!(metric(&c, &fg, allowed).await, Some(40.0));
}

/// The two proxies of one Redis hold one schedule: the burst split between them passes as from
/// one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_sharing_redis_forward_one_schedule() {
    let redis = floodgate_store::redis::testing::RedisServer::start().unwrap();
    let config = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 1000\n{TEN_PER_SECOND}",
        redis.url()
    );
    let upstream = Recorder::start().await;
    let a = Floodgate::with_config_on_real_clock(&config, &["--upstream", &upstream.url]);
    let b = Floodgate::with_config_on_real_clock(&config, &["--upstream", &upstream.url]);
    let (pa, pb) = (a.proxy.clone().unwrap(), b.proxy.clone().unwrap());
    let (sent, answers) = burst(&[&pa, &pb], 50, |i| format!("/r/{i}"), |_| String::new()).await;
    assert_ten_refused_at_once(sent, &answers);
    let arrivals = upstream.arrivals();
    assert_schedule(
        "arrivals from two proxies",
        sent,
        &arrivals.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
    );
    let c = client();
    let passed = "floodgate_requests_delayed_total{outcome=\"passed\"}";
    let held = metric(&c, &a, passed).await.unwrap() + metric(&c, &b, passed).await.unwrap();
    assert_eq!(held, 20.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_answers_a_burst_at_its_scheduled_times_and_refuses_beyond_the_delay() {
    let fg = Floodgate::with_config_on_real_clock(TEN_PER_SECOND, &[]);
    let (sent, answers) = burst(
        &[&fg.api],
        50,
        |_| "/v1/forward-auth".to_string(),
        |i| format!("x-forwarded-uri: /r/{i}\r\nx-forwarded-method: GET\r\n"),
    )
    .await;
    let mut passed: Vec<Instant> = answers.iter().filter(|a| a.1 == 200).map(|a| a.3).collect();
    assert_ten_refused_at_once(sent, &answers);
    passed.sort();
    assert_schedule("forward-auth answers", sent, &passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_while_held_gives_its_slot_back() {
    // 2/s (a token every 500 ms, a burst of 2): held up to 1 s.
    let config = r#"
[[rules]]
name = "per-ip"
limit = "2/s"
delay = "1s"
"#;
    let upstream = Recorder::start().await;
    let fg = Floodgate::with_config_on_real_clock(config, &["--upstream", &upstream.url]);
    let proxy = fg.proxy.clone().unwrap();
    let c = client();
    let get = |path: &'static str| {
        let proxy = proxy.clone();
        async move {
            let mut s = connect(&proxy).await;
            write_get(&mut s, path, "").await;
            s
        }
    };
    let t0 = Instant::now();
    for path in ["/a", "/b"] {
        assert_eq!(read_answer(get(path).await).await.0, 200);
    }
    // Slots at +500 ms and +1 s, in this order.
    let x = tokio::spawn(read_answer(get("/x").await));
    until_waiting(&c, &fg, 1.0).await;
    let y = get("/y").await;
    until_waiting(&c, &fg, 2.0).await;
    // The client of /y goes away; its unit comes back.
    drop(y);
    let refunded = "floodgate_settled_units_total{rule=\"per-ip\",direction=\"refunded\"}";
    let mut units = None;
    for _ in 0..200 {
        units = metric(&c, &fg, refunded).await;
        if units == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(units, Some(1.0), "the slot of /y was given back");
    let cancelled = "floodgate_requests_delayed_total{outcome=\"cancelled\"}";
    assert_eq!(metric(&c, &fg, cancelled).await, Some(1.0));
    // Without the refund /z would need 1.5 s, beyond the delay: a 429 at once. With it, /z
    // takes the +1 s slot that /y left.
    let (status, _, _) = read_answer(get("/z").await).await;
    assert_eq!(status, 200);
    assert_eq!(x.await.unwrap().0, 200);
    let arrivals = upstream.arrivals();
    let seen: Vec<_> = arrivals.iter().map(|(t, p)| (p.clone(), *t - t0)).collect();
    let paths: Vec<&str> = arrivals.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(
        paths,
        ["/a", "/b", "/x", "/z"],
        "/y never reached the upstream: {seen:?}"
    );
    for ((at, path), slot_ms) in arrivals.iter().zip([0, 0, 500, 1000]) {
        let slot = Duration::from_millis(slot_ms);
        let offset = *at - t0;
        assert!(
            offset + EARLY >= slot && offset <= slot + LATE,
            "{path} at {offset:?}, its slot {slot:?}"
        );
    }
}

#[tokio::test]
async fn beyond_max_delayed_a_request_is_refused_and_counted_and_held_ones_watch_the_manual_clock()
{
    let config = r#"
[server]
max_delayed = 1

[[rules]]
name = "per-ip"
limit = "2/s"
delay = "1s"
"#;
    let upstream = Recorder::start().await;
    let fg = Floodgate::with_config(config, &["--upstream", &upstream.url]);
    let proxy = fg.proxy.clone().unwrap();
    let c = client();
    for _ in 0..2 {
        let r = c.get(format!("{proxy}/now")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // Held until the manual clock passes +500 ms.
    let held = tokio::spawn({
        let (c, url) = (c.clone(), format!("{proxy}/held"));
        async move { c.get(url).send().await.unwrap().status().as_u16() }
    });
    until_waiting(&c, &fg, 1.0).await;
    // Within the delay, but the one waiting place is taken: a 429 at once, consuming nothing.
    let r = c.get(format!("{proxy}/full")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let queue_full = "floodgate_requests_delayed_total{outcome=\"queue_full\"}";
    assert_eq!(metric(&c, &fg, queue_full).await, Some(1.0));
    assert!(!held.is_finished(), "the manual clock has not moved");
    advance(&c, &fg, 500_000).await;
    assert_eq!(held.await.unwrap(), 200);
    let paths: Vec<String> = upstream.arrivals().into_iter().map(|(_, p)| p).collect();
    assert_eq!(paths, ["/now", "/now", "/held"]);
    assert_eq!(
        metric(
            &c,
            &fg,
            "floodgate_requests_delayed_total{outcome=\"passed\"}"
        )
        .await,
        Some(1.0)
    );
}

/// Forward-auth reads Envoy's `x-envoy-expected-rq-timeout-ms` as how long the proxy waits for
/// the answer: a slot within nine tenths of it is held, one further away is a 429 at once
/// (though within the rule's delay), and a value that is not a number of milliseconds is a 400
/// naming the header. On the manual clock.
#[tokio::test]
async fn forward_auth_holds_no_longer_than_the_proxy_announces_it_waits() {
    let config = r#"
[[rules]]
name = "per-ip"
limit = "2/s"
delay = "1s"
"#;
    let fg = Floodgate::with_config(config, &[]);
    let c = client();
    let ask = |timeout: &'static str| {
        let (c, url) = (c.clone(), fg.url("/v1/forward-auth"));
        async move {
            c.get(url)
                .header("x-forwarded-uri", "/api")
                .header("x-envoy-expected-rq-timeout-ms", timeout)
                .send()
                .await
                .unwrap()
        }
    };
    for _ in 0..2 {
        assert_eq!(ask("250").await.status(), 200);
    }
    // The next slot is 500 ms away: beyond 0.9 x 250 ms, refused at once, nothing held.
    let r = ask("250").await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        metric(&c, &fg, "floodgate_requests_waiting").await,
        Some(0.0)
    );
    // Within 0.9 x 600 ms: held until its slot.
    let held = tokio::spawn(ask("600"));
    until_waiting(&c, &fg, 1.0).await;
    advance(&c, &fg, 500_000).await;
    assert_eq!(held.await.unwrap().status(), 200);
    // Not a whole number of milliseconds: a 400 naming the header.
    for bad in ["soon", "-1", "1.5", "+250", ""] {
        let r = ask(bad).await;
        assert_eq!(r.status(), 400, "{bad}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["field"], "x-envoy-expected-rq-timeout-ms", "{body}");
    }
    // Where no rule has a delay the header means nothing and is not read: a client's junk
    // value (nginx passes client headers on) does not fail its own request.
    let plain = Floodgate::start(&[]);
    let r = c
        .get(plain.url("/v1/forward-auth"))
        .header("x-forwarded-uri", "/api")
        .header("x-envoy-expected-rq-timeout-ms", "soon")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn check_config_refuses_a_delay_the_rule_can_never_reach_and_shows_one_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        std::fs::write(dir.path().join("rules.toml"), text).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .current_dir(dir.path())
            .args(["check-config", "rules.toml"])
            .output()
            .unwrap()
    };
    // 10/s with the default burst of 10 schedules at most 1 s ahead.
    let out = check("[[rules]]\nname = \"per-ip\"\nlimit = \"10/s\"\ndelay = \"2s\"\n");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "rules.toml:4: rules[0].delay: 2s can never be reached: this rule schedules a \
             request at most 1s ahead (the time its burst of 10 refills)"
        ),
        "{stderr}"
    );
    let out = check(TEN_PER_SECOND);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("delay 2 s (holds a request"), "{stdout}");
}
