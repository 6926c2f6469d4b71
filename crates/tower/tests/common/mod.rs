//! Shared helpers: a layered test service over a MemoryStore with a frozen ManualClock.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_store::{MemoryStore, Store};
use floodgate_tower::{PeerAddr, RateLimit, RateLimiter, RuleSet};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceExt};

pub const T0: u64 = 1_700_000_000_000_000;

pub fn gcra(quota: &str) -> Policy {
    Policy::new(AlgorithmKind::Gcra, quota.parse().unwrap()).unwrap()
}

/// What a test sees of a response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// The inner service: answers 200 "ok" and counts its calls.
#[derive(Clone, Default)]
pub struct Backend {
    pub calls: Arc<AtomicUsize>,
}

impl Service<Request<String>> for Backend {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<String>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
    }
}

impl Backend {
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

pub struct Harness<S> {
    pub clock: ManualClock,
    pub limiter: RateLimiter<S>,
    pub backend: Backend,
    pub service: RateLimit<Backend, S>,
}

/// A harness over a fresh MemoryStore at T0.
pub fn harness(rules: RuleSet) -> Harness<MemoryStore> {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    with_store(clock, store, rules)
}

pub fn with_store<S: Store>(clock: ManualClock, store: Arc<S>, rules: RuleSet) -> Harness<S> {
    let limiter = RateLimiter::new(store, rules);
    let backend = Backend::default();
    let service = RateLimit::new(backend.clone(), limiter.clone());
    Harness {
        clock,
        limiter,
        backend,
        service,
    }
}

/// A GET `path` request from socket peer `peer` ("ip:port" or "[v6]:port") with `headers`.
pub fn request(path: &str, peer: &str, headers: &[(&str, &str)]) -> Request<String> {
    let mut builder = Request::builder().uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut req = builder.body(String::new()).unwrap();
    req.extensions_mut()
        .insert(PeerAddr(peer.parse().expect("peer socket address")));
    req
}

impl<S: Store> Harness<S> {
    pub async fn send(&self, req: Request<String>) -> Reply {
        let response = self.service.clone().oneshot(req).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    /// The status answered to a GET `path` from socket peer `peer` without extra headers.
    pub async fn status(&self, path: &str, peer: &str) -> StatusCode {
        self.send(request(path, peer, &[])).await.status
    }

    /// Sends `n` copies of a request and returns how many were answered 200.
    pub async fn admitted(&self, n: usize, make: impl Fn() -> Request<String>) -> usize {
        let mut ok = 0;
        for _ in 0..n {
            let reply = self.send(make()).await;
            assert!(
                reply.status == StatusCode::OK || reply.status == StatusCode::TOO_MANY_REQUESTS,
                "unexpected {reply:?}"
            );
            ok += usize::from(reply.status == StatusCode::OK);
        }
        ok
    }
}

/// A counter's name, labels and value.
pub type Counted = (String, Vec<(String, String)>, u64);

/// Every counter `recorder` holds (a snapshot drains the recorder: take one).
pub fn counters(recorder: &metrics_util::debugging::DebuggingRecorder) -> Vec<Counted> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => Some((
                key.key().name().to_string(),
                key.key()
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect(),
                n,
            )),
            _ => None,
        })
        .collect()
}

/// Every counter recorded while `f` ran on a current-thread runtime with a local recorder.
pub fn with_metrics<F: std::future::Future<Output = ()>>(f: impl FnOnce() -> F) -> Vec<Counted> {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f());
    });
    counters(&recorder)
}

/// The sum of counter `name` over the series whose labels include every pair of `labels`.
pub fn counted(recorded: &[Counted], name: &str, labels: &[(&str, &str)]) -> u64 {
    recorded
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.contains(&((*k).into(), (*v).into())))
        })
        .map(|(_, _, n)| *n)
        .sum()
}
