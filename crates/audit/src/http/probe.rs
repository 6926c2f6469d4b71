//! Sending the probe's requests: one client, one budget, one record per answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::headers::{self, DeclaredLimit};
use super::options::{HttpAuditError, HttpOptions};
use crate::timeline::Timeline;

/// Most body bytes read from one answer (the rest is dropped with the connection).
const BODY_LIMIT: usize = 64 * 1024;

/// The step of the probe a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Discovery,
    Multiplication,
    EdgeSearch,
    EdgeBefore,
    EdgeAfter,
    MultiplicationAgain,
    RetryEarly,
    RetryExhaust,
    RetryOnTime,
}

impl Phase {
    pub(crate) const ALL: [Phase; 9] = [
        Phase::Discovery,
        Phase::Multiplication,
        Phase::EdgeSearch,
        Phase::EdgeBefore,
        Phase::EdgeAfter,
        Phase::MultiplicationAgain,
        Phase::RetryEarly,
        Phase::RetryExhaust,
        Phase::RetryOnTime,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Discovery => "discovery",
            Phase::Multiplication => "multiplication",
            Phase::EdgeSearch => "edge_search",
            Phase::EdgeBefore => "edge_before",
            Phase::EdgeAfter => "edge_after",
            Phase::MultiplicationAgain => "multiplication_again",
            Phase::RetryEarly => "retry_early",
            Phase::RetryExhaust => "retry_exhaust",
            Phase::RetryOnTime => "retry_on_time",
        }
    }
}

/// How an answer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// 1xx to 3xx.
    Admitted,
    /// 429, a status given with `--deny-status`, or 403/420/503 with `Retry-After` or
    /// nothing remaining.
    Denied,
    /// Anything else, and no answer at all.
    Error,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Denied => "denied",
            Outcome::Error => "an error",
        }
    }
}

/// One request and what came back.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) phase: Phase,
    pub(crate) sent_us: u64,
    pub(crate) done_us: u64,
    /// 0 when no HTTP answer came.
    pub(crate) status: u16,
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<String>,
    pub(crate) remaining: Option<u64>,
    pub(crate) declared: Option<DeclaredLimit>,
    /// `None`: no header; `Some(Err)`: unparsable.
    pub(crate) retry_after: Option<Result<u64, String>>,
    pub(crate) content_type: Option<String>,
    pub(crate) problem_json: bool,
    pub(crate) has_draft_headers: bool,
    pub(crate) syntax: Vec<String>,
}

/// The probe's client, budget, records and progress bar.
pub(crate) struct Prober<'t, T> {
    client: reqwest::Client,
    method: reqwest::Method,
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    target: String,
    concurrency: usize,
    deny_statuses: Vec<u16>,
    timeline: &'t T,
    budget: AtomicU64,
    deadline_us: AtomicU64,
    samples: Mutex<Vec<Sample>>,
    bar: ProgressBar,
}

impl<'t, T: Timeline> Prober<'t, T> {
    pub(crate) fn new(opts: &HttpOptions, timeline: &'t T) -> Result<Self, HttpAuditError> {
        let url = reqwest::Url::parse(&opts.url)
            .map_err(|e| HttpAuditError::Url(format!("URL {:?}: {e}", opts.url)))?;
        if url.scheme() != "http" {
            return Err(HttpAuditError::Url(format!(
                "URL {:?}: only http:// is supported by this build (reach an https:// endpoint through a local TLS tunnel)",
                opts.url
            )));
        }
        let host = url.host_str().unwrap_or_default().to_string();
        let target = format!("{host}:{}", url.port_or_known_default().unwrap_or(80));
        if opts.concurrency == 0 {
            return Err(HttpAuditError::Option(
                "--concurrency must be at least 1".into(),
            ));
        }
        if opts.max_requests == 0 || opts.max_seconds == 0 {
            return Err(HttpAuditError::Option(
                "--max-requests and --max-seconds must be at least 1".into(),
            ));
        }
        let method = reqwest::Method::from_bytes(opts.method.as_bytes()).map_err(|_| {
            HttpAuditError::Option(format!("--method {:?} is not an HTTP method", opts.method))
        })?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &opts.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                HttpAuditError::Option(format!("--header {k:?}: not a header name"))
            })?;
            let value = reqwest::header::HeaderValue::from_str(v).map_err(|_| {
                HttpAuditError::Option(format!("--header {k}: value {v:?} is not valid"))
            })?;
            headers.append(name, value);
        }
        let mut builder = reqwest::Client::builder()
            // Only the address given: never follow a redirect elsewhere, never a proxy.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(Duration::from_millis(opts.request_timeout_ms.max(1)));
        if opts.new_connections {
            builder = builder.pool_max_idle_per_host(0);
        }
        let client = builder
            .build()
            .map_err(|e| HttpAuditError::Option(format!("HTTP client: {e}")))?;
        Ok(Self {
            client,
            method,
            url,
            headers,
            target,
            concurrency: opts.concurrency,
            deny_statuses: opts.deny_statuses.clone(),
            timeline,
            budget: AtomicU64::new(0),
            deadline_us: AtomicU64::new(u64::MAX),
            samples: Mutex::new(Vec::new()),
            bar: if opts.progress {
                ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
            } else {
                ProgressBar::hidden()
            },
        })
    }

    /// `host:port`.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    /// Requests that may still be sent.
    pub(crate) fn set_budget(&self, n: u64) {
        self.budget.store(n, Ordering::SeqCst);
    }

    pub(crate) fn start_bar(&self, planned: u64) {
        self.bar.set_length(planned);
        self.bar.set_position(1);
        self.bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests, {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
    }

    pub(crate) fn finish_bar(&self) {
        self.bar.finish_and_clear();
    }

    /// Every record so far.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// No request is sent after this time (microseconds on the timeline): `--max-seconds` is a
    /// hard bound (plus one request timeout), even when the target answers slowly.
    pub(crate) fn set_deadline(&self, t_us: u64) {
        self.deadline_us.store(t_us, Ordering::SeqCst);
    }

    fn take(&self) -> bool {
        self.timeline.now_us() < self.deadline_us.load(Ordering::SeqCst)
            && self
                .budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok()
    }

    /// Sends up to `n` requests, `concurrency` at a time (fewer when the budget runs out), and
    /// returns their records in the order the answers came.
    pub(crate) async fn burst(&self, phase: Phase, n: u64) -> Vec<Sample> {
        self.bar.set_message(phase.as_str());
        let out: Vec<Sample> = stream::iter(0..n)
            .map(|_| self.one(phase))
            .buffer_unordered(self.concurrency)
            .filter_map(|s| async move { s })
            .collect()
            .await;
        if let Ok(mut all) = self.samples.lock() {
            all.extend(out.iter().cloned());
        }
        out
    }

    async fn one(&self, phase: Phase) -> Option<Sample> {
        if !self.take() {
            return None;
        }
        let sent_us = self.timeline.now_us();
        let result = self
            .client
            .request(self.method.clone(), self.url.clone())
            .headers(self.headers.clone())
            .send()
            .await;
        let mut sample = Sample {
            phase,
            sent_us,
            done_us: sent_us,
            status: 0,
            outcome: Outcome::Error,
            error: None,
            remaining: None,
            declared: None,
            retry_after: None,
            content_type: None,
            problem_json: false,
            has_draft_headers: false,
            syntax: Vec::new(),
        };
        match result {
            Err(e) => sample.error = Some(e.to_string()),
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let pairs: Vec<(String, String)> = resp
                    .headers()
                    .iter()
                    .filter_map(|(k, v)| {
                        Some((k.as_str().to_string(), v.to_str().ok()?.to_string()))
                    })
                    .collect();
                let view = || pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                let get = |name: &str| {
                    pairs
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.as_str())
                };
                let allowance = headers::allowance(view(), None);
                sample.status = status;
                sample.remaining = allowance.remaining;
                sample.declared = headers::declared_limit(view());
                sample.retry_after = get("retry-after").map(|v| {
                    headers::retry_after(v, get("date")).map(headers::RetryAfter::seconds)
                });
                sample.content_type = get("content-type").map(str::to_string);
                sample.problem_json = sample.content_type.as_deref().is_some_and(|c| {
                    c.trim()
                        .to_ascii_lowercase()
                        .starts_with("application/problem+json")
                });
                sample.has_draft_headers =
                    get("ratelimit").is_some() || get("ratelimit-policy").is_some();
                sample.syntax = headers::draft_syntax(view());
                sample.outcome = match status {
                    _ if self.deny_statuses.contains(&status) => Outcome::Denied,
                    100..=399 => Outcome::Admitted,
                    429 => Outcome::Denied,
                    403 | 420 | 503
                        if sample.retry_after.is_some() || sample.remaining == Some(0) =>
                    {
                        Outcome::Denied
                    }
                    _ => Outcome::Error,
                };
                // Read (a bounded part of) the body so the connection can be reused.
                let mut read = 0usize;
                while let Ok(Some(chunk)) = resp.chunk().await {
                    read += chunk.len();
                    if read > BODY_LIMIT {
                        break;
                    }
                }
            }
        }
        sample.done_us = self.timeline.now_us();
        self.bar.inc(1);
        Some(sample)
    }
}
