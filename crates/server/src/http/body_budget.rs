//! The bounds every API request body shares, whatever its connection (HTTP/1 or HTTP/2):
//!
//! - **a deadline**: the whole body must arrive within `header_read_timeout` of the request's
//!   head (10 s by default), else reading it fails with [`BodyDeadline`] (a 408 naming `body`).
//!   The idle timer (`body_idle_timeout`) alone let a body that trickles a byte now and then
//!   live for ever;
//! - **a budget**: all API requests together hold at most [`BODY_BUDGET`] bytes of request
//!   body, each charged what it has read until its answer is sent. A request that finds the
//!   budget spent is answered 503 with `Retry-After` before its body is read; one whose body
//!   does not fit fails with [`BodyBudgetFull`] (the same 503). Without it HTTP/2 multiplied
//!   the 64 KiB bound of a body by the streams of a connection (256 x 64 KiB = 16 MiB each).
//!
//! Both are applied where every request body is wrapped anyway, by the API listeners'
//! connections (`crate::serve::listener`): one body wrapper and one lazily made timer for the
//! idle timer and the deadline together, which most requests (a body that arrives with its
//! head) never need. The reverse proxy's bodies are streamed to the upstream, not held: they
//! have the proxy's own bounds (docs/security.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::response::Response;
use http::StatusCode;

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

/// What one request has charged to the budget, given back by the last holder (its body, and
/// its connection's record of the request, which lasts until the answer is sent): when
/// dropped, or with [`Charge::give_back`] by a record that finds itself the last, which then
/// keeps the charge for the connection's next request.
#[derive(Debug, Default)]
pub(crate) struct Charge(AtomicUsize);

impl Charge {
    /// Charges `n` more bytes, or `false` (nothing charged) when they do not fit.
    pub(crate) fn take(&self, n: usize) -> bool {
        // One atomic add in the usual case; an add that overshot is taken back.
        let before = USED.fetch_add(n, Ordering::AcqRel);
        if before
            .checked_add(n)
            .is_none_or(|total| total > BODY_BUDGET)
        {
            USED.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        self.0.fetch_add(n, Ordering::Relaxed);
        true
    }
}

impl Charge {
    /// Gives back what was charged (the charge may then be used again).
    pub(crate) fn give_back(&mut self) {
        let n = std::mem::take(self.0.get_mut());
        if n > 0 {
            USED.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Whether the budget is spent: a request with a body is then answered [`budget_full`] before
/// its body is read.
pub(crate) fn spent() -> bool {
    USED.load(Ordering::Acquire) >= BODY_BUDGET
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
