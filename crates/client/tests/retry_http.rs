//! The retry policy against a real local HTTP server (axum) that rate-limits: 429 with
//! `Retry-After`, then 200. Waits are recorded by a sleeper instead of slept, so the test
//! asserts the exact schedule without waiting it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::get;
use axum::Router;
use floodgate_client::retry::{FastRandom, RetryPolicy};
use floodgate_client::{ManualClock, Micros, Sleeper};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Records each wait and moves the manual clock by it (time passes only through waits).
#[derive(Debug)]
struct Recorder {
    clock: ManualClock,
    waits: Mutex<Vec<Micros>>,
}

impl Sleeper for Recorder {
    fn sleep(&self, micros: Micros) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.waits.lock().unwrap().push(micros);
        self.clock.advance(micros);
        Box::pin(std::future::ready(()))
    }
}

/// Serves `/limited`: the first `refusals` requests get 429 with `headers`, later ones 200.
/// Returns the base URL and the request count.
async fn server(refusals: usize, headers: HeaderMap) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let app = Router::new().route(
        "/limited",
        get(move || {
            let (seen, headers) = (Arc::clone(&seen), headers.clone());
            async move {
                if seen.fetch_add(1, Ordering::SeqCst) < refusals {
                    (StatusCode::TOO_MANY_REQUESTS, headers, "slow down")
                } else {
                    (StatusCode::OK, HeaderMap::new(), "ok")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/limited"), count)
}

fn recorder() -> Arc<Recorder> {
    Arc::new(Recorder {
        clock: ManualClock::new(1_800_000_000_000_000),
        waits: Mutex::new(Vec::new()),
    })
}

async fn call(policy: RetryPolicy, url: &str) -> reqwest::Response {
    let mut api = ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(policy))
        .service(reqwest::Client::new());
    let request = reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap());
    api.ready().await.unwrap().call(request).await.unwrap()
}

#[tokio::test]
async fn a_429_with_retry_after_seconds_is_retried_after_exactly_that() {
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_static("2"));
    let (url, count) = server(2, h).await;
    let rec = recorder();
    let policy = RetryPolicy::new().max_attempts(3).sleeper(rec.clone());
    let response = call(policy, &url).await;
    assert_eq!(response.status(), 200);
    assert_eq!(count.load(Ordering::SeqCst), 3);
    assert_eq!(*rec.waits.lock().unwrap(), [2_000_000, 2_000_000]);
}

#[tokio::test]
async fn an_http_date_retry_after_is_measured_on_the_policy_clock() {
    let mut h = HeaderMap::new();
    // 1_800_000_000 s since the epoch is 2027-01-15T08:00:00Z: 5 s after the clock's start.
    h.insert(
        "retry-after",
        HeaderValue::from_static("Fri, 15 Jan 2027 08:00:05 GMT"),
    );
    let (url, count) = server(1, h).await;
    let rec = recorder();
    let clock = Arc::new(rec.clock.clone());
    let policy = RetryPolicy::new().clock(clock).sleeper(rec.clone());
    assert_eq!(call(policy, &url).await.status(), 200);
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert_eq!(*rec.waits.lock().unwrap(), [5_000_000]);
}

#[tokio::test]
async fn without_hints_it_backs_off_with_full_jitter_and_gives_up_after_max_attempts() {
    let (url, count) = server(usize::MAX, HeaderMap::new()).await;
    let rec = recorder();
    let policy = RetryPolicy::new()
        .max_attempts(4)
        .backoff(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_millis(250),
        )
        .random(FastRandom::with_seed(7))
        .sleeper(rec.clone());
    let response = call(policy, &url).await;
    // Out of attempts: the last 429 is the answer.
    assert_eq!(response.status(), 429);
    assert_eq!(count.load(Ordering::SeqCst), 4);
    let waits = rec.waits.lock().unwrap().clone();
    assert_eq!(waits.len(), 3);
    for (attempt, (wait, bound)) in waits.iter().zip([100_000, 200_000, 250_000]).enumerate() {
        assert!(*wait <= bound, "retry {attempt}: {wait} above {bound}");
    }
    // The same seed gives the same schedule.
    let (url2, _) = server(usize::MAX, HeaderMap::new()).await;
    let rec2 = recorder();
    let again = RetryPolicy::new()
        .max_attempts(4)
        .backoff(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_millis(250),
        )
        .random(FastRandom::with_seed(7))
        .sleeper(rec2.clone());
    call(again, &url2).await;
    assert_eq!(*rec2.waits.lock().unwrap(), waits);
}
