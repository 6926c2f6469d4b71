//! What the HTTP probe is given ([`HttpOptions`]) and why it may refuse to run
//! ([`HttpAuditError`]): a leaf below the probe, the checks and the report.

use super::headers::DeclaredLimit;
#[cfg(doc)]
use crate::timeline::Timeline;

/// Plans above this many requests need [`HttpOptions::confirmed`] (`--yes`).
pub const CONFIRM_ABOVE: u64 = 100;

/// Microseconds per second.
pub(super) const US: u64 = 1_000_000;

/// What to probe and within which bounds.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The one URL requests go to (`http://` only).
    pub url: String,
    /// The request method (default `GET`).
    pub method: String,
    /// Extra request headers (an API key, say), sent with every request.
    pub headers: Vec<(String, String)>,
    /// The limit to test against when the endpoint declares none (or to override it).
    pub limit: Option<DeclaredLimit>,
    /// Most requests sent in all.
    pub max_requests: u64,
    /// Most seconds the probe runs (on its [`Timeline`]).
    pub max_seconds: u64,
    /// Requests in flight at once during a burst.
    pub concurrency: usize,
    /// A new TCP connection for every request (so a connection-balancing proxy spreads them).
    pub new_connections: bool,
    /// The largest multiple of the limit the multiplication burst can tell apart; the burst
    /// sends one capacity more than this many times the capacity.
    pub max_multiple: u64,
    /// Allow a plan above [`CONFIRM_ABOVE`] requests.
    pub confirmed: bool,
    /// Draw a progress bar on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
    /// Timeout of one request, in milliseconds.
    pub request_timeout_ms: u64,
    /// Statuses that mean "denied" besides 429 (nginx's `limit_req` answers 503 without
    /// `Retry-After`); 403, 420 and 503 count as denials anyway when they carry `Retry-After`
    /// or say nothing remains.
    pub deny_statuses: Vec<u16>,
}

impl HttpOptions {
    /// The defaults for `url`: GET, 5,000 requests, 60 s, 50 connections, multiples up to 4,
    /// 5 s per request, not confirmed, no progress bar.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            method: "GET".into(),
            headers: Vec::new(),
            limit: None,
            max_requests: 5_000,
            max_seconds: 60,
            concurrency: 50,
            new_connections: false,
            max_multiple: 4,
            confirmed: false,
            progress: false,
            request_timeout_ms: 5_000,
            deny_statuses: Vec::new(),
        }
    }
}

/// Why the probe did not run.
#[derive(Debug, thiserror::Error)]
pub enum HttpAuditError {
    /// The URL does not parse or is not `http://`.
    #[error("{0}")]
    Url(String),
    /// A bad option (zero concurrency, a header that is not valid HTTP, ...).
    #[error("{0}")]
    Option(String),
    /// The plan needs `--yes`.
    #[error("this audit would send up to {planned} requests to {target} over up to {seconds} s (more than {CONFIRM_ABOVE}); add --yes to proceed, or lower --max-requests")]
    NeedsConfirmation {
        /// Requests planned (an upper bound).
        planned: u64,
        /// `host:port`.
        target: String,
        /// Seconds planned (an upper bound).
        seconds: u64,
    },
    /// The first request got no HTTP answer.
    #[error("{target} did not answer: {error}")]
    Unreachable {
        /// `host:port`.
        target: String,
        /// The transport error.
        error: String,
    },
    /// No limit declared and none given.
    #[error("{target} declares no limit (no RateLimit-Policy, RateLimit or X-RateLimit-* header in its answer, status {status}); give the limit to test with --limit, e.g. --limit 100/s")]
    NoDeclaredLimit {
        /// `host:port`.
        target: String,
        /// The discovery response's status.
        status: u16,
    },
}
