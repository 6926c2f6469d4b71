//! Allocations per decision on the in-process hot paths, counted by an instrumented global
//! allocator: a benchmark (`cargo bench -p floodgate-bench --bench alloc`), not a test; nothing
//! is asserted, the table is the result.
//!
//! Each path first runs over [`KEYS`] keys to create them, then [`ROUNDS`] more times on the
//! held keys; the table gives allocations (plus reallocations) and bytes per decision in those
//! rounds, step by step. The steps follow the front ends:
//!
//! - `/v1/check` engine path: the partition key (`key=<client key>`, as the JSON API's
//!   `client_key` encodes it), the [`Plan`], [`RateLimiter::evaluate`] and the `RateLimit`
//!   headers (`apply_headers_of`, as the answer writes them);
//! - tower layer: [`RateLimitLayer`] around a service answering an empty body, one request per
//!   decision, the key from a header (`X-Api-Key`), the request built outside the count;
//! - gRPC engine path: a one-descriptor plan (the key as `ShouldRateLimit` encodes a
//!   descriptor's entries), evaluate, and the `RateLimit` headers `response_headers_to_add` is
//!   made from. The protobuf answer and the serving stacks (prost, tonic, hyper, axum) are not
//!   in these counts: `scripts/callgrind-http` and `scripts/callgrind-grpc` count the whole
//!   server's `malloc` calls per request.

use std::alloc::System;
use std::future::Future;
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, ManualClock, Policy};
use floodgate_limiter::{encode_key, KeySource, Mode, Plan, RateLimiter, Rule, RuleSet};
use floodgate_store::MemoryStore;
use floodgate_tower::RateLimitLayer;
use http::{HeaderMap, HeaderName, Request, Response};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tower::{Layer, Service, ServiceExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Distinct keys per path (the `/v1/check` body of `scripts/callgrind-http` uses 1,000).
const KEYS: usize = 1_000;
/// Measured passes over the keys.
const ROUNDS: usize = 10;
const T0: u64 = 1_700_000_000_000_000;

/// Allocations and bytes per decision of one step.
#[derive(Default, Clone, Copy)]
struct Count {
    allocations: f64,
    bytes: f64,
}

/// Counts what `f` allocates over `n` calls, per call; the results are kept (and so not
/// freed inside the count).
fn count<R>(n: usize, mut f: impl FnMut(usize) -> R) -> (Count, Vec<R>) {
    let mut kept = Vec::with_capacity(n);
    let (c, ()) = count_all(
        || {
            for i in 0..n {
                kept.push(f(i));
            }
        },
        n,
    );
    (c, kept)
}

/// Counts what one call of `f` allocates, per one of the `n` decisions it makes.
fn count_all<R>(f: impl FnOnce() -> R, n: usize) -> (Count, R) {
    let region = Region::new(GLOBAL);
    let result = f();
    let stats = region.change();
    let per = |x: usize| x as f64 / n as f64;
    let c = Count {
        allocations: per(stats.allocations + stats.reallocations),
        bytes: per(stats.bytes_allocated + stats.bytes_reallocated.max(0) as usize),
    };
    (c, result)
}

/// The header map of a JSON answer before the `RateLimit` headers: its `Content-Type`.
fn answer_headers() -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    map
}

fn limiter(keys: KeySource) -> (RateLimiter<MemoryStore>, ManualClock) {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let policy =
        Policy::new(AlgorithmKind::Gcra, "10000000/s".parse().expect("quota")).expect("policy");
    let rules = RuleSet::new(vec![Rule::new("per-user", policy, keys)]);
    (RateLimiter::new(store, rules), clock)
}

/// Runs `fut` to completion on a current-thread runtime (outside any count).
fn block_on<F: Future>(rt: &tokio::runtime::Runtime, fut: F) -> F::Output {
    rt.block_on(fut)
}

/// The engine path of one decision (`key_of` makes its partition key from the client's key):
/// partition key, plan, evaluate and headers, each counted alone.
fn engine_path(
    rt: &tokio::runtime::Runtime,
    name: &str,
    key_of: fn(&str) -> String,
) -> Vec<(String, Count)> {
    let (limiter, _clock) = limiter(KeySource::Constant("unused".into()));
    let clients: Vec<String> = (0..KEYS).map(|i| format!("user:{i:06}")).collect();
    for client in &clients {
        let mut plan = Plan::new(limiter.rules());
        plan.push(0, key_of(client), 1);
        let verdict = block_on(rt, limiter.evaluate(&plan, Mode::Check));
        assert!(verdict.is_admitted(), "a quota of 10,000,000/s admits");
    }
    let n = KEYS * ROUNDS;
    let (key, mut keys) = count(n, |i| key_of(&clients[i % KEYS]));
    let (plan, plans) = count(n, |i| {
        let mut plan = Plan::new(limiter.rules());
        plan.push(0, std::mem::take(&mut keys[i]), 1);
        plan
    });
    let (evaluate, verdicts) = count(n, |i| {
        block_on(rt, limiter.evaluate(&plans[i], Mode::Check))
    });
    assert!(verdicts.iter().all(|v| v.is_admitted()));
    // Into the header map of an answer that already has its `Content-Type` (as the JSON
    // answer's has, and made outside the count), so the count is what the headers add.
    let mut maps: Vec<HeaderMap> = (0..n).map(|_| answer_headers()).collect();
    let (headers, ()) = count_all(
        || {
            for (map, verdict) in maps.iter_mut().zip(&verdicts) {
                floodgate_tower::response::apply_headers_of(map, verdict.outcomes.iter());
            }
        },
        n,
    );
    assert!(maps.iter().all(|m| m.contains_key("ratelimit")));
    let (runtime, _) = count(n, |_| block_on(rt, async {}));
    vec![
        (format!("{name}: partition key"), key),
        (format!("{name}: plan"), plan),
        (format!("{name}: evaluate (store, verdict)"), evaluate),
        (format!("{name}: RateLimit headers"), headers),
        (format!("{name}: (the runtime's block_on alone)"), runtime),
    ]
}

/// The tower layer around a service that answers an empty body: one request per decision.
fn tower_layer(rt: &tokio::runtime::Runtime) -> Vec<(String, Count)> {
    let header = HeaderName::from_static("x-api-key");
    let (limiter, _clock) = limiter(KeySource::Header {
        name: header.clone(),
    });
    let app = RateLimitLayer::new(limiter).layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, std::convert::Infallible>(Response::new(()))
    }));
    let request = |i: usize| {
        Request::builder()
            .header(&header, format!("user:{:06}", i % KEYS))
            .body(())
            .expect("request")
    };
    let call = |app: &mut floodgate_tower::RateLimit<_, MemoryStore>, r: Request<()>| {
        block_on(rt, async {
            let response = app
                .ready()
                .await
                .expect("ready")
                .call(r)
                .await
                .expect("infallible");
            assert_eq!(response.status(), http::StatusCode::OK);
            response
        })
    };
    let mut app = app;
    for i in 0..KEYS {
        call(&mut app, request(i));
    }
    let n = KEYS * ROUNDS;
    let mut requests: Vec<Option<Request<()>>> = (0..n).map(|i| Some(request(i))).collect();
    let (layer, responses) = count(n, |i| call(&mut app, requests[i].take().expect("once")));
    assert!(responses
        .iter()
        .all(|r| r.headers().contains_key("ratelimit")));
    vec![("tower layer: request to response".to_string(), layer)]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = engine_path(&rt, "/v1/check", |client| {
        encode_key([("key", client.as_bytes())])
    });
    rows.extend(tower_layer(&rt));
    rows.extend(engine_path(&rt, "gRPC", |client| {
        encode_key([("domain", b"bench".as_slice()), ("user", client.as_bytes())])
    }));
    println!("Allocations per decision ({KEYS} held keys x {ROUNDS} rounds, GCRA, memory store)\n");
    println!("| path: step | allocations | bytes |");
    println!("|---|---:|---:|");
    for (name, c) in rows {
        println!("| {name} | {:.2} | {:.0} |", c.allocations, c.bytes);
    }
}
