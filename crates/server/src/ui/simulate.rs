//! `POST /v1/simulate`: the simulation engine of `floodgate simulate` behind the API.
//!
//! The body is a JSON object whose members are the fields of [`floodgate_simulate::Spec`],
//! every one optional (the defaults are those of `floodgate simulate` without flags):
//!
//! ```json
//! {"scenario": "boundary", "algorithm": "fixed_window", "limit": "10/10s", "burst": 10,
//!  "instances": 3, "counter": "local", "balance": "round-robin", "store": "memory",
//!  "requests": 10, "spread": "0", "before": "500ms", "after": "500ms", "at": "4.5s",
//!  "every": "1s", "rate": "100/10s", "duration": "10s", "max_requests": 1000,
//!  "key": "client", "column": "1s", "preset": "clock-boundary",
//!  "trace": "t_ms,key,cost\n950,alice,1\n"}
//! ```
//!
//! Names and choices are the command line's (`--counter local` is `"counter": "local"`);
//! durations are strings with a unit (`950ms`, `0.95s`, `4.5s`, `1min`, or `0`); `limit` is a
//! quota (`10/10s`); `rate` is `COUNT/DURATION`; `trace` is the text of a trace (CSV
//! `t_ms,key,cost` or JSON lines), replacing `scenario` and `preset`. Unknown members and
//! members given twice are refused.
//!
//! The answer is exactly the document `floodgate simulate --format json` prints for the same
//! inputs. Work is bounded (docs/ui.md lists the bounds): at most
//! [`request::MAX_SIMULATE_REQUESTS`] requests with one algorithm and
//! [`request::MAX_SIMULATE_REQUESTS_ALL`] with several (`max_requests`
//! may lower it, never raise it), at most [`request::MAX_INSTANCES`] instances, `max_wait` at
//! most [`request::MAX_WAIT_US`], every other duration at most [`request::MAX_DURATION_US`], a
//! body of at most
//! [`MAX_SIMULATE_BODY_BYTES`] arriving within [`BODY_TIMEOUT`], an answer of at most [`MAX_ANSWER_BYTES`], counters in memory
//! only, at most [`MAX_IN_FLIGHT`] simulations from reading the body until the answer is sent
//! (a 503 with `Retry-After` beyond), [`MAX_RUNNING`] of them running on the blocking thread
//! pool. With an API or admin token configured it needs one ([`crate::http::auth`]). Every
//! refusal is a problem+json naming the member at fault: a 400 when the body breaks the
//! OpenAPI document's schema, a 422 when it is well formed but cannot be run ([`request`]).

mod request;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use floodgate_simulate::{build_report, json};
use http::{HeaderValue, StatusCode};
use tokio::sync::{Semaphore, SemaphorePermit};

pub(crate) use self::request::SimulateRequest;
use self::request::{
    api_words, parse_body, spec_of, MAX_SIMULATE_REQUESTS, MAX_SIMULATE_REQUESTS_ALL,
};
use crate::http::problem::invalid;
use crate::state::AppState;

/// Largest answer, in bytes (16 MiB). Rendering stops at it (a trace's keys can be long) and
/// the request is a 422 naming `max_requests`.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Largest accepted `/v1/simulate` body, in bytes (1 MiB: room for a pasted trace of about
/// 50,000 lines).
pub(crate) const MAX_SIMULATE_BODY_BYTES: usize = 1024 * 1024;

/// How long the body may take to arrive once a slot is taken (a 408 naming `body` beyond).
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most simulations running at once (on the blocking pool); admitted ones wait for a run slot.
const MAX_RUNNING: usize = 2;

/// Most simulations in flight at once, from reading the body until the answer is sent (or its
/// connection closed): a slow reader holds its slot, so at most this many answers are held.
/// Further requests are a 503 with `Retry-After`.
pub(crate) const MAX_IN_FLIGHT: usize = 4;

/// The slots bounding simulations in flight and running (one process, one pool).
static IN_FLIGHT: Semaphore = Semaphore::const_new(MAX_IN_FLIGHT);
static RUNNING: Semaphore = Semaphore::const_new(MAX_RUNNING);

/// `POST /v1/simulate`.
pub(crate) async fn simulate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    if let Err(refused) = crate::http::auth::authorize_costly(&state, request.headers()) {
        return refused;
    }
    // Taken before the body is read: at most MAX_IN_FLIGHT bodies and answers are held.
    let Ok(permit) = IN_FLIGHT.try_acquire() else {
        return busy();
    };
    let in_flight = RunPermit::new(permit);
    // A body sent slowly would hold the slot as long as its sender likes.
    let body = tokio::time::timeout(BODY_TIMEOUT, Bytes::from_request(request, &state)).await;
    let Ok(body) = body else {
        return invalid(
            StatusCode::REQUEST_TIMEOUT,
            "body",
            format!("not received within {} s", BODY_TIMEOUT.as_secs()),
        );
    };
    let bytes = match body {
        Ok(bytes) if bytes.len() <= MAX_SIMULATE_BODY_BYTES => bytes,
        Ok(_) => return too_large(),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return too_large()
        }
        Err(rejection) => {
            return crate::http::body_budget::refusal(&rejection)
                .unwrap_or_else(|| invalid(rejection.status(), "body", rejection.body_text()))
        }
    };
    let spec = match parse_body(&bytes).and_then(spec_of) {
        Ok(spec) => spec,
        Err(bad) => return invalid(bad.status(), &bad.field, bad.detail),
    };
    drop(bytes);
    // `acquire` fails only on a closed semaphore, and this one is never closed.
    let running = RUNNING.acquire().await.ok();
    // The engine is CPU-bound: off the async workers, so a big run does not stall the server.
    // The task holds both slots until it ends: a client that leaves does not stop it, and
    // must not free its slots while it still runs.
    let run = tokio::task::spawn_blocking(move || {
        let gauge = metrics::gauge!("floodgate_simulations_running");
        gauge.increment(1.0);
        let answer =
            build_report(&spec).map(|report| json::render_within(&report, MAX_ANSWER_BYTES));
        gauge.decrement(1.0);
        drop(running);
        (answer, in_flight)
    })
    .await;
    match run {
        Ok((Ok(Some(text)), in_flight)) => {
            let mut response = Response::new(Body::new(Answer {
                rest: Bytes::from(text),
                _slot: in_flight,
            }));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Ok((Ok(None), _)) => invalid(
            StatusCode::UNPROCESSABLE_ENTITY,
            "max_requests",
            format!(
                "the answer would be larger than the API's {MAX_ANSWER_BYTES} bytes (it holds \
                 every decision of every algorithm, with its key); lower max_requests, choose \
                 one algorithm, or use `floodgate simulate`"
            ),
        ),
        Ok((Err(e), _)) => {
            let field = e.field().unwrap_or("body");
            // The engine's advice names no cap; the API has one.
            let detail = api_words(&e.to_string()).replace(
                "or raise max_requests",
                &format!(
                    "or raise max_requests (the API takes at most {MAX_SIMULATE_REQUESTS}, \
                     {MAX_SIMULATE_REQUESTS_ALL} with algorithm all; `floodgate simulate` more)"
                ),
            );
            // The document's schema held (the body parsed): what the engine refuses is a
            // run that cannot be made of well-formed members.
            invalid(StatusCode::UNPROCESSABLE_ENTITY, field, detail)
        }
        Err(e) => {
            tracing::error!(error = %e, "simulation task failed");
            crate::http::problem::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "about:blank",
                "Internal Server Error",
                "the simulation failed",
                None,
            )
        }
    }
}

/// What `/v1/simulate` makes of a body, less the HTTP around it: the parse and, when it
/// parses, the run and its rendering (for the parsers' property test: an answer, never a
/// panic). `Err` is the problem the endpoint would answer.
#[cfg(test)]
pub(crate) fn answer_body(bytes: &[u8]) -> Result<Option<String>, String> {
    let spec = parse_body(bytes)
        .and_then(spec_of)
        .map_err(|bad| format!("{}: {}", bad.field, bad.detail))?;
    build_report(&spec)
        .map(|report| json::render_within(&report, MAX_ANSWER_BYTES))
        .map_err(|e| e.to_string())
}

/// Bytes of the answer handed to the connection at a time.
const ANSWER_CHUNK_BYTES: usize = 64 * 1024;

/// The answer's body: the rendered document, sent in chunks, holding its in-flight slot until
/// the last chunk is taken or the connection is gone (the body is dropped either way).
struct Answer {
    rest: Bytes,
    _slot: RunPermit,
}

/// An in-flight slot, counted in the gauge `floodgate_simulations_in_flight` while held.
struct RunPermit(#[allow(dead_code)] SemaphorePermit<'static>);

impl RunPermit {
    fn new(permit: SemaphorePermit<'static>) -> Self {
        metrics::gauge!("floodgate_simulations_in_flight").increment(1.0);
        Self(permit)
    }
}

impl Drop for RunPermit {
    fn drop(&mut self) {
        metrics::gauge!("floodgate_simulations_in_flight").decrement(1.0);
    }
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        let n = self.rest.len().min(ANSWER_CHUNK_BYTES);
        let chunk = self.rest.split_to(n);
        Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// The 503 of a request arriving while [`MAX_IN_FLIGHT`] simulations are in flight.
fn busy() -> Response {
    let mut response = crate::http::problem::problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "urn:floodgate:problem:simulator-busy",
        "Service Unavailable",
        format!("{MAX_IN_FLIGHT} simulations are in flight (running or being sent); try again"),
        None,
    );
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_large() -> Response {
    invalid(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body",
        format!("must be at most {MAX_SIMULATE_BODY_BYTES} bytes"),
    )
}
