//! [`RateLimit`]: the middleware service.

use std::task::{Context, Poll};

use floodgate_store::Store;
use http::{Request, Response};
use tower_service::Service;

use crate::future::{ResponseBody, ResponseFuture};
use floodgate_limiter::RateLimiter;

use crate::response;

/// Checks each request against the [`RateLimiter`]'s rules. Admitted requests go to `inner`
/// and their responses get `RateLimit-Policy` / `RateLimit` headers; denied ones are answered
/// here (429, or 503 / 400, see [`crate::response`]) without calling `inner`. A request of a
/// rule in the delay mode ([`Rule::delay`](crate::Rule::delay)) that fits within the delay is
/// held until its slot, then `inner` is called ([`RateLimiter::admit`]).
#[derive(Debug)]
pub struct RateLimit<I, S> {
    inner: I,
    limiter: RateLimiter<S>,
}

impl<I: Clone, S> Clone for RateLimit<I, S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<I, S> RateLimit<I, S> {
    /// Wraps `inner`.
    pub fn new(inner: I, limiter: RateLimiter<S>) -> Self {
        Self { inner, limiter }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &I {
        &self.inner
    }

    /// The limiter.
    pub fn limiter(&self) -> &RateLimiter<S> {
        &self.limiter
    }
}

impl<I, S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<I, S>
where
    S: Store,
    I: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    I::Future: Send + 'static,
    ReqB: Send + 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = I::Error;
    type Future = ResponseFuture<ResB, I::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The service that was polled ready is the one that must be called (tower's contract);
        // keep a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let plan = self.limiter.plan_request(&request);
        let limiter = self.limiter.clone();
        // The decision future is made inside this one, not captured by it: a captured future
        // would be held twice (as capture and as awaitee), and a store's future can be large.
        Box::pin(async move {
            // A check, or in the delay mode a reservation held until its slot (dropping this
            // future while it waits gives the slot back).
            let verdict = limiter.admit(plan).await;
            if let Some(response) = response::for_verdict(&verdict) {
                return Ok(response.map(ResponseBody::full));
            }
            let mut response = inner.call(request).await?;
            response::apply_headers(response.headers_mut(), &verdict.outcomes);
            Ok(response.map(ResponseBody::inner))
        })
    }
}
