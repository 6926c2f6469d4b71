//! [`RateLimitLayer`]: wraps services in [`RateLimit`].

use tower_layer::Layer;

use floodgate_limiter::RateLimiter;

use crate::service::RateLimit;

/// A tower [`Layer`] applying a [`RateLimiter`] to every request of the wrapped service.
#[derive(Debug)]
pub struct RateLimitLayer<S> {
    limiter: RateLimiter<S>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
        }
    }
}

impl<S> RateLimitLayer<S> {
    /// A layer using `limiter` (clones share its rules and store).
    pub fn new(limiter: RateLimiter<S>) -> Self {
        Self { limiter }
    }

    /// The limiter, e.g. to replace its rules on reload.
    pub fn limiter(&self) -> &RateLimiter<S> {
        &self.limiter
    }
}

impl<I, S> Layer<I> for RateLimitLayer<S> {
    type Service = RateLimit<I, S>;

    fn layer(&self, inner: I) -> Self::Service {
        RateLimit::new(inner, self.limiter.clone())
    }
}
