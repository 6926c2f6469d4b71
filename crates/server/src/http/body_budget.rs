//! The bounds every API request body shares, whatever its connection (HTTP/1 or HTTP/2):
//!
//! - **a deadline**: the whole body must arrive within `header_read_timeout` of the request's
//!   head (10 s by default), else reading it fails with [`BodyDeadline`] (a 408 naming `body`).
//!   The idle timer (`body_idle_timeout`) alone let a body that trickles a byte now and then
//!   live for ever;
//! - **a budget**: all API requests together hold at most [`BODY_BUDGET`] bytes of request
//!   body, each charged what it has read until its answer is made. A request that finds the
//!   budget spent is answered 503 with `Retry-After` before its body is read; one whose body
//!   does not fit fails with [`BodyBudgetFull`] (the same 503). Without it HTTP/2 multiplied
//!   the 64 KiB bound of a body by the streams of a connection (256 x 64 KiB = 16 MiB each).
//!
//! The reverse proxy's bodies are streamed to the upstream, not held: they have the proxy's
//! own bounds (docs/security.md).

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::problem::invalid;

/// Request-body bytes all API requests may hold at once (16 MiB: 256 bodies of the largest
/// size; a decision request is a few hundred bytes).
pub(crate) const BODY_BUDGET: usize = 16 * 1024 * 1024;

/// The problem type of a spent budget.
pub(crate) const PROBLEM_BODIES_BUSY: &str = "urn:floodgate:problem:request-bodies-busy";

/// What the API's requests hold now.
static USED: AtomicUsize = AtomicUsize::new(0);

/// The `Retry-After` of a spent budget, in seconds: bodies are read within seconds.
const RETRY_AFTER_S: u32 = 1;

/// A request body did not arrive whole within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyDeadline(pub(crate) Duration);

impl std::fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not received whole within {} ms (header_read_timeout)",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyDeadline {}

/// The request bodies of the API hold [`BODY_BUDGET`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyBudgetFull;

impl std::fmt::Display for BodyBudgetFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server holds as many request body bytes as it may ({BODY_BUDGET}); retry"
        )
    }
}

impl std::error::Error for BodyBudgetFull {}

/// What one request has charged to the budget, given back when the last holder drops it
/// (the body and the middleware, which outlives the handler).
#[derive(Debug, Default)]
struct Charge(AtomicUsize);

impl Charge {
    fn take(&self, n: usize) -> bool {
        let taken = USED
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= BODY_BUDGET)
            })
            .is_ok();
        if taken {
            self.0.fetch_add(n, Ordering::AcqRel);
        }
        taken
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        USED.fetch_sub(*self.0.get_mut(), Ordering::AcqRel);
    }
}

/// The middleware: a spent budget is a 503 at once; otherwise the body is read under the
/// deadline and the budget, and its charge is held until the answer is made. `after` is
/// `header_read_timeout` (read at start, as the listeners' other timers).
pub(crate) async fn bound(State(after): State<Duration>, request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    if USED.load(Ordering::Acquire) >= BODY_BUDGET {
        return budget_full();
    }
    let charge = Arc::new(Charge::default());
    let (parts, inner) = request.into_parts();
    let body = Bounded {
        inner,
        charge: Arc::clone(&charge),
        deadline: Box::pin(tokio::time::sleep(after)),
        after,
        failed: false,
    };
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    // The handler has made its answer: what it read is no longer held.
    drop(charge);
    response
}

/// The 503 of a spent budget.
pub(crate) fn budget_full() -> Response {
    let mut response = super::problem::problem(
        StatusCode::SERVICE_UNAVAILABLE,
        PROBLEM_BODIES_BUSY,
        "Service Unavailable",
        format!("{BodyBudgetFull}: the request body was not read"),
        Some(("field", "body".into())),
    );
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(RETRY_AFTER_S),
    );
    response
}

/// The answer to a body that failed with [`BodyDeadline`] or [`BodyBudgetFull`] (somewhere in
/// `error`'s sources), or `None` for another failure.
pub(crate) fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<Response> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(deadline) = e.downcast_ref::<BodyDeadline>() {
            return Some(invalid(
                StatusCode::REQUEST_TIMEOUT,
                "body",
                deadline.to_string(),
            ));
        }
        if e.is::<BodyBudgetFull>() {
            return Some(budget_full());
        }
        next = e.source();
    }
    None
}

/// A request body under the deadline and the budget.
struct Bounded {
    inner: Body,
    charge: Arc<Charge>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    after: Duration,
    failed: bool,
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, Bytes::len);
                if n > 0 && !this.charge.take(n) {
                    this.failed = true;
                    return Poll::Ready(Some(Err(Box::new(BodyBudgetFull))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    this.failed = true;
                    return Poll::Ready(Some(Err(Box::new(BodyDeadline(this.after)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_given_back_when_dropped_and_the_budget_is_never_passed() {
        let before = USED.load(Ordering::Acquire);
        let a = Charge::default();
        assert!(a.take(1_000));
        assert_eq!(USED.load(Ordering::Acquire), before + 1_000);
        let b = Charge::default();
        assert!(!b.take(BODY_BUDGET));
        drop(a);
        drop(b);
        assert_eq!(USED.load(Ordering::Acquire), before);
    }
}
