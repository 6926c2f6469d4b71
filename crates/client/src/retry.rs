//! Retrying calls to any HTTP API that rate-limits: a [`tower::retry::Policy`] for
//! `reqwest` (whose `Client` is a tower `Service`), honouring what the server says and backing
//! off with full jitter when it says nothing.
//!
//! For each retryable answer (429, 502, 503, 504, or a connect/timeout error) the wait is, in
//! this order:
//!
//! 1. `Retry-After`: delay-seconds (`120`) or an HTTP-date (`Wed, 21 Oct 2026 07:28:00 GMT`,
//!    measured against the policy's clock), exactly;
//! 2. the `RateLimit` header of draft-ietf-httpapi-ratelimit-headers: the longest `t` of the
//!    exhausted members (`r=0`), e.g. `"per-minute";r=0;t=12`; an exhausted member without `t`
//!    waits its `RateLimit-Policy` window `w`; the earlier drafts' `RateLimit-Remaining: 0`
//!    with `RateLimit-Reset: N` likewise;
//! 3. else full-jitter exponential backoff: `random(0, min(cap, base * 2^attempt))`
//!    (attempt 0 for the first retry), the AWS Architecture Blog's "full jitter".
//!
//! At most [`RetryPolicy::max_attempts`] tries in all; a server-given wait above
//! [`RetryPolicy::max_delay`] is not waited for (the answer is returned as it is).
//!
//! ```no_run
//! # async fn call() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::time::Duration;
//! use floodgate_client::retry::RetryPolicy;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! let policy = RetryPolicy::new()
//!     .max_attempts(5)
//!     .backoff(Duration::from_millis(100), Duration::from_secs(10));
//! let mut api = ServiceBuilder::new()
//!     .layer(tower::retry::RetryLayer::new(policy))
//!     .service(reqwest::Client::new());
//! let request = reqwest::Request::new(
//!     reqwest::Method::GET,
//!     "https://api.example.com/v1/search".parse()?,
//! );
//! let response = api.ready().await?.call(request).await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_core::{Clock, Micros, SystemClock, Timestamp};
use http::{HeaderMap, StatusCode};

use crate::sleep::{micros_of, Sleeper, TokioSleeper};

/// `min(cap, base * 2^attempt)` in microseconds, saturating: the upper bound of the full
/// jitter for retry number `attempt` (0 for the first retry).
pub fn full_jitter_bound(base: Micros, cap: Micros, attempt: u32) -> Micros {
    let factor = 1u64.checked_shl(attempt).unwrap_or(u64::MAX);
    base.saturating_mul(factor).min(cap)
}

/// A source of uniform random numbers for the jitter (inject one to test the schedule).
pub trait Random: Send + fmt::Debug {
    /// A uniform number in `0..=bound`.
    fn up_to(&mut self, bound: u64) -> u64;
}

/// [`Random`] on `fastrand` (seeded or from the OS).
#[derive(Debug, Clone)]
pub struct FastRandom(fastrand::Rng);

impl FastRandom {
    /// Seeded: the same seed gives the same waits.
    pub fn with_seed(seed: u64) -> Self {
        Self(fastrand::Rng::with_seed(seed))
    }
}

impl Default for FastRandom {
    fn default() -> Self {
        Self(fastrand::Rng::new())
    }
}

impl Random for FastRandom {
    fn up_to(&mut self, bound: u64) -> u64 {
        self.0.u64(0..=bound)
    }
}

/// Where a wait came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSource {
    /// The `Retry-After` header.
    RetryAfter,
    /// The `RateLimit` (or `RateLimit-Reset`) header, or the `RateLimit-Policy` window.
    RateLimit,
    /// Full-jitter exponential backoff.
    Backoff,
}

/// The retry policy; see the [module documentation](self). `Clone` gives a policy with the
/// same settings, sharing the random source, clock and sleeper (tower clones it per request).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    base: Micros,
    cap: Micros,
    max_attempts: u32,
    max_delay: Micros,
    attempt: u32,
    random: Arc<Mutex<dyn Random>>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicy {
    /// Three tries, backoff base 100 ms and cap 10 s, server-given waits up to 60 s honoured;
    /// the system clock, tokio's timer and OS-seeded randomness.
    pub fn new() -> Self {
        Self {
            base: 100_000,
            cap: 10_000_000,
            max_attempts: 3,
            max_delay: 60_000_000,
            attempt: 0,
            random: Arc::new(Mutex::new(FastRandom::default())),
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
        }
    }

    /// Tries in all, the first included (at least 1: 1 never retries).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The backoff's `base` and `cap` (when the server gives no wait).
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.base = micros_of(base);
        self.cap = micros_of(cap);
        self
    }

    /// The longest server-given wait honoured; an answer asking more is returned, not retried.
    pub fn max_delay(mut self, max: Duration) -> Self {
        self.max_delay = micros_of(max);
        self
    }

    /// The random source of the jitter.
    pub fn random(mut self, random: impl Random + 'static) -> Self {
        self.random = Arc::new(Mutex::new(random));
        self
    }

    /// The clock an HTTP-date `Retry-After` is measured against.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// What sleeps between tries.
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// The wait before retry number `attempt` (0 for the first retry) after an answer with
    /// `status` and `headers` at `now`, or `None` when it is not retried (not retryable,
    /// out of attempts, or the server asks more than `max_delay`).
    pub fn wait_for(
        &self,
        attempt: u32,
        status: StatusCode,
        headers: &HeaderMap,
        now: Timestamp,
    ) -> Option<(Micros, WaitSource)> {
        if !retryable(status) || attempt.saturating_add(1) >= self.max_attempts {
            return None;
        }
        if let Some(wait) = retry_after(headers, now) {
            return (wait <= self.max_delay).then_some((wait, WaitSource::RetryAfter));
        }
        if let Some(wait) = ratelimit_wait(headers) {
            return (wait <= self.max_delay).then_some((wait, WaitSource::RateLimit));
        }
        Some((self.backoff_wait(attempt), WaitSource::Backoff))
    }

    /// The wait before retry `attempt` after a transport error (connect or timeout errors are
    /// retried with backoff; others are not).
    fn wait_after_error(&self, attempt: u32, error: &reqwest::Error) -> Option<Micros> {
        let transient = error.is_connect() || error.is_timeout();
        (transient && attempt.saturating_add(1) < self.max_attempts)
            .then(|| self.backoff_wait(attempt))
    }

    /// `random(0, min(cap, base * 2^attempt))`.
    pub fn backoff_wait(&self, attempt: u32) -> Micros {
        let bound = full_jitter_bound(self.base, self.cap, attempt);
        let mut random = match self.random.lock() {
            Ok(random) => random,
            Err(poisoned) => poisoned.into_inner(),
        };
        random.up_to(bound)
    }
}

/// 429 and the gateway/unavailable statuses; nothing else is worth repeating unchanged.
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// `Retry-After` as microseconds from `now`: delay-seconds or an HTTP-date (a date in the
/// past is 0).
pub fn retry_after(headers: &HeaderMap, now: Timestamp) -> Option<Micros> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1_000_000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at = micros_of(at.duration_since(std::time::UNIX_EPOCH).ok()?);
    Some(at.saturating_sub(now))
}

/// The wait the `RateLimit` headers ask for, in microseconds: the longest `t` of the members
/// with `r=0` (an exhausted member without `t` waits its `RateLimit-Policy` `w`), or the
/// earlier drafts' `RateLimit-Reset` when `RateLimit-Remaining` is 0. `None` when no quota is
/// exhausted.
pub fn ratelimit_wait(headers: &HeaderMap) -> Option<Micros> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let windows = text("ratelimit-policy")
        .map(|p| members(p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut longest: Option<u64> = None;
    if let Some(state) = text("ratelimit") {
        for (name, params) in members(state) {
            if param(params, "r") != Some(0) {
                continue;
            }
            let secs = param(params, "t").or_else(|| {
                windows
                    .iter()
                    .find(|(n, _)| *n == name)
                    .and_then(|(_, p)| param(p, "w"))
            });
            if let Some(secs) = secs {
                longest = Some(longest.map_or(secs, |l| l.max(secs)));
            }
        }
    }
    if longest.is_none() {
        let remaining = text("ratelimit-remaining").and_then(|v| v.trim().parse::<u64>().ok());
        if remaining == Some(0) {
            longest = text("ratelimit-reset").and_then(|v| v.trim().parse().ok());
        }
    }
    longest.map(|secs| secs.saturating_mul(1_000_000))
}

/// The members of a structured-field list: `(name, parameters)`.
fn members(list: &str) -> impl Iterator<Item = (&str, &str)> {
    list.split(',').map(|member| {
        let member = member.trim();
        match member.split_once(';') {
            Some((name, params)) => (name.trim(), params),
            None => (member, ""),
        }
    })
}

/// The integer parameter `name` of `params` (`r=0;t=12`).
fn param(params: &str, name: &str) -> Option<u64> {
    params.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.trim() == name).then(|| v.trim().parse().ok()).flatten()
    })
}

impl tower::retry::Policy<reqwest::Request, reqwest::Response, reqwest::Error> for RetryPolicy {
    type Future = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn retry(
        &mut self,
        _request: &mut reqwest::Request,
        result: &mut Result<reqwest::Response, reqwest::Error>,
    ) -> Option<Self::Future> {
        let wait = match result {
            Ok(response) => self
                .wait_for(
                    self.attempt,
                    response.status(),
                    response.headers(),
                    self.clock.now(),
                )
                .map(|(wait, _)| wait),
            Err(error) => self.wait_after_error(self.attempt, error),
        }?;
        self.attempt = self.attempt.saturating_add(1);
        let sleeper = Arc::clone(&self.sleeper);
        Some(Box::pin(async move { sleeper.sleep(wait).await }))
    }

    fn clone_request(&mut self, request: &reqwest::Request) -> Option<reqwest::Request> {
        request.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// A scripted random source: answers `bound * numerator / 8` for each numerator in turn.
    #[derive(Debug)]
    struct Eighths(Vec<u64>, usize);

    impl Random for Eighths {
        fn up_to(&mut self, bound: u64) -> u64 {
            let n = self.0[self.1 % self.0.len()];
            self.1 += 1;
            bound / 8 * n
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_bound_doubles_from_base_up_to_the_cap() {
        let bounds: Vec<u64> = (0..8).map(|a| full_jitter_bound(100, 1_000, a)).collect();
        assert_eq!(bounds, [100, 200, 400, 800, 1_000, 1_000, 1_000, 1_000]);
        assert_eq!(full_jitter_bound(100, u64::MAX, 200), u64::MAX);
    }

    #[test]
    fn backoff_without_server_hints_is_full_jitter_and_bounded_in_attempts() {
        let policy = RetryPolicy::new()
            .max_attempts(6)
            .backoff(Duration::from_millis(100), Duration::from_millis(1_000))
            .random(Eighths(vec![8, 4, 0, 8, 2], 0));
        let none = HeaderMap::new();
        let waits: Vec<_> = (0..6)
            .map(|a| policy.wait_for(a, StatusCode::TOO_MANY_REQUESTS, &none, 0))
            .collect();
        // bounds 100, 200, 400, 800, 1000 ms; picks 8/8, 4/8, 0/8, 8/8, 2/8 of them.
        let ms = |m: u64| Some((m * 1_000, WaitSource::Backoff));
        assert_eq!(waits, [ms(100), ms(100), ms(0), ms(800), ms(250), None]);
        assert_eq!(policy.wait_for(0, StatusCode::BAD_REQUEST, &none, 0), None);
        assert_eq!(policy.wait_for(0, StatusCode::OK, &none, 0), None);
        assert!(policy
            .wait_for(0, StatusCode::SERVICE_UNAVAILABLE, &none, 0)
            .is_some());
    }

    #[test]
    fn retry_after_in_seconds_and_as_an_http_date() {
        let policy = RetryPolicy::new();
        let now = 1_800_000_000_000_000; // 2027-01-15T08:00:00Z
        let seconds = headers(&[("retry-after", "7")]);
        assert_eq!(
            policy.wait_for(0, StatusCode::TOO_MANY_REQUESTS, &seconds, now),
            Some((7_000_000, WaitSource::RetryAfter))
        );
        let date = headers(&[("retry-after", "Fri, 15 Jan 2027 08:00:03 GMT")]);
        assert_eq!(retry_after(&date, now), Some(3_000_000));
        assert_eq!(retry_after(&date, now + 5_000_000), Some(0));
        // Beyond max_delay: not waited for.
        let long = headers(&[("retry-after", "3600")]);
        assert_eq!(
            policy.wait_for(0, StatusCode::TOO_MANY_REQUESTS, &long, now),
            None
        );
        // Garbage is ignored: backoff.
        let junk = headers(&[("retry-after", "soon")]);
        assert_eq!(
            policy
                .wait_for(0, StatusCode::TOO_MANY_REQUESTS, &junk, now)
                .map(|w| w.1),
            Some(WaitSource::Backoff)
        );
    }

    #[test]
    fn ratelimit_headers_give_the_longest_exhausted_reset() {
        let h = headers(&[
            (
                "ratelimit",
                "\"per-second\";r=4;t=1, \"per-minute\";r=0;t=12",
            ),
            (
                "ratelimit-policy",
                "\"per-second\";q=10;w=1, \"per-minute\";q=100;w=60",
            ),
        ]);
        assert_eq!(ratelimit_wait(&h), Some(12_000_000));
        let no_t = headers(&[
            ("ratelimit", "\"day\";r=0"),
            ("ratelimit-policy", "\"day\";q=10000;w=86400"),
        ]);
        assert_eq!(ratelimit_wait(&no_t), Some(86_400_000_000));
        let left = headers(&[("ratelimit", "\"a\";r=3;t=9")]);
        assert_eq!(ratelimit_wait(&left), None);
        let old = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "5")]);
        assert_eq!(ratelimit_wait(&old), Some(5_000_000));
        assert_eq!(
            RetryPolicy::new().wait_for(0, StatusCode::TOO_MANY_REQUESTS, &h, 0),
            Some((12_000_000, WaitSource::RateLimit))
        );
    }
}
