//! [`RateLimitLayer`]: wraps services in [`RateLimit`].

use tower_layer::Layer;

use floodgate_limiter::RateLimiter;

use crate::service::RateLimit;

/// A tower [`Layer`] applying a [`RateLimiter`] to every request of the wrapped service.
///
/// # Examples
///
/// ```
/// use floodgate_tower::{AlgorithmKind, KeySource, Policy, RateLimitLayer, RateLimiter, Rule, RuleSet};
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let policy = Policy::new(AlgorithmKind::FixedWindow, "1/min".parse().unwrap()).unwrap();
/// let rule = Rule::new("everyone", policy, KeySource::Constant("all".into()));
/// let layer = RateLimitLayer::new(RateLimiter::in_memory(RuleSet::new(vec![rule])));
/// let app = layer.layer(service_fn(|_: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
/// }));
/// let first = app.clone().oneshot(Request::new(())).await.unwrap();
/// assert_eq!(first.status(), StatusCode::OK);
/// let second = app.clone().oneshot(Request::new(())).await.unwrap();
/// assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
/// # });
/// ```
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
