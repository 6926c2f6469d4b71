//! `floodgate audit http URL`: probe a live limiter within a bounded budget.
//!
//! The probe sends requests to the one URL it is given (no redirects are followed, no other
//! address is contacted), at most [`HttpOptions::max_requests`] of them, for at most
//! [`HttpOptions::max_seconds`], and refuses a plan of more than [`CONFIRM_ABOVE`] requests
//! unless [`HttpOptions::confirmed`] (`--yes`). In order:
//!
//! 1. **discovery**: one request; the declared limit from its headers ([`headers`]) or the one
//!    given ([`HttpOptions::limit`]).
//! 2. **multiplication**: a concurrent burst of `(max_multiple + 1) x capacity` requests (over
//!    [`HttpOptions::concurrency`] connections, each request on a new connection with
//!    [`HttpOptions::new_connections`], so that a load balancer spreads them). One counter
//!    admits at most its burst plus what it refills meanwhile; K instances each with its own
//!    counter admit about K times that, and each `remaining` value then comes back K times.
//! 3. **window edge**: once the burst has used up the allowance, one request every 1/20 of
//!    the window until one is admitted (where the allowance came back: a fixed window's edge),
//!    then a burst 1/10 window before the next edge and one 1/20 window after it. A fixed window
//!    admits about twice what one window admitted across its edge; a sliding log never more.
//!    Then a second multiplication burst 1/10 window after the following edge: every
//!    algorithm has its whole allowance back there, and no edge can fall inside it (the first
//!    burst may have crossed one unseen, which a fixed window would admit twice); the
//!    multiplication verdict rests on this burst when it ran.
//! 4. **Retry-After**: after a denial saying `Retry-After: R`, one retry at `R - 1` s (should
//!    still be denied: `R` is rounded up) and, after a denial, one at exactly `R` s (must be
//!    admitted: a `Retry-After` that sends clients back too early is a bug).
//! 5. **shape**: every denial's status (429), `Retry-After` (present, whole seconds, >= 1), the
//!    draft headers' syntax, and `application/problem+json`.
//!
//! Time goes through a [`Timeline`], so tests can probe window edges on a manual clock.

mod checks;
pub mod headers;
mod probe;
mod render;
mod shape;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::timeline::Timeline;
use crate::{Level, Verdict};
use checks::{edge_verdict, multiplication, retry_after_check, window_edge};
use headers::DeclaredLimit;
use probe::{Outcome, Phase, Prober, Sample};
use shape::shape;

pub(crate) use render::verdict_lines as render_verdicts;
pub use render::{svg, table};

/// Plans above this many requests need [`HttpOptions::confirmed`] (`--yes`).
pub const CONFIRM_ABOVE: u64 = 100;

/// Microseconds per second.
const US: u64 = 1_000_000;

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

/// Admitted, denied and failed requests in one 100 ms column (by the time the answer came).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Column {
    /// Start of the column, microseconds since the probe began.
    pub start_us: u64,
    /// Answers that admitted.
    pub admitted: u64,
    /// Answers that denied (429, or 403/503 with `Retry-After` or nothing remaining).
    pub denied: u64,
    /// Other answers and transport errors.
    pub errors: u64,
}

/// One phase of the probe: when it ran and what it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseSummary {
    /// `discovery`, `multiplication`, `edge_search`, `edge_before`, `edge_after`,
    /// `multiplication_again`, `retry_early`, `retry_exhaust`, `retry_on_time`.
    pub phase: &'static str,
    /// First request sent, microseconds since the start.
    pub start_us: u64,
    /// Last answer, microseconds since the start.
    pub end_us: u64,
    /// Requests sent.
    pub sent: u64,
    /// Admitted.
    pub admitted: u64,
    /// Denied.
    pub denied: u64,
    /// Errors.
    pub errors: u64,
}

/// Everything the probe found.
#[derive(Debug, Clone, Serialize)]
pub struct HttpReport {
    /// The URL probed.
    pub url: String,
    /// The declared limit tested against.
    pub declared: DeclaredLimit,
    /// `true` when the limit came from `--limit`, not from the endpoint.
    pub limit_given: bool,
    /// Requests sent.
    pub sent: u64,
    /// Admitted, denied, errors in all.
    pub admitted: u64,
    /// Denied in all.
    pub denied: u64,
    /// Errors in all.
    pub errors: u64,
    /// Microseconds from the first request to the last answer.
    pub duration_us: u64,
    /// Connections: `concurrency` and whether each request had its own.
    pub concurrency: usize,
    /// Each request on a new connection.
    pub new_connections: bool,
    /// The verdicts, in the order above.
    pub verdicts: Vec<Verdict>,
    /// The phases.
    pub phases: Vec<PhaseSummary>,
    /// Per 100 ms: admitted, denied, errors.
    pub columns: Vec<Column>,
}

impl HttpReport {
    /// `true` when any verdict is a danger (the command then exits with status 1).
    pub fn has_danger(&self) -> bool {
        self.verdicts.iter().any(Verdict::is_danger)
    }

    /// The JSON document of `--format json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

fn secs(us: u64) -> String {
    let s = us as f64 / US as f64;
    if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.2} s")
    }
}

fn ms(us: u64) -> String {
    format!("{} ms", (us + 500) / 1000)
}

/// Admitted, denied, errors and the span of a set of samples.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    sent: u64,
    admitted: u64,
    denied: u64,
    errors: u64,
    first_sent_us: u64,
    last_done_us: u64,
}

impl Tally {
    fn of<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Self {
        let mut t = Tally {
            first_sent_us: u64::MAX,
            ..Tally::default()
        };
        for s in samples {
            t.sent += 1;
            match s.outcome {
                Outcome::Admitted => t.admitted += 1,
                Outcome::Denied => t.denied += 1,
                Outcome::Error => t.errors += 1,
            }
            t.first_sent_us = t.first_sent_us.min(s.sent_us);
            t.last_done_us = t.last_done_us.max(s.done_us);
        }
        if t.sent == 0 {
            t.first_sent_us = 0;
        }
        t
    }

    fn span_us(&self) -> u64 {
        self.last_done_us.saturating_sub(self.first_sent_us)
    }
}

/// Runs the probe on `timeline` and returns its report.
///
/// # Errors
/// [`HttpAuditError`]: a bad URL or option, a plan that needs `--yes`, an endpoint that does
/// not answer the first request or declares no limit while none was given. A failure later in
/// the probe is not an error: the affected checks are inconclusive.
pub async fn audit<T: Timeline>(
    opts: &HttpOptions,
    timeline: &T,
) -> Result<HttpReport, HttpAuditError> {
    let prober = Prober::new(opts, timeline)?;
    let target = prober.target().to_string();
    // With the limit given, the plan is known before anything is sent.
    if let Some(d) = &opts.limit {
        check_plan(opts, d, &target)?;
    }
    let (first, declared, limit_given) = discover(opts, &prober, target).await?;
    prober.set_budget(opts.max_requests.saturating_sub(1));
    prober.start_bar(plan(opts, &declared).0);
    let deadline_us = first.sent_us + opts.max_seconds * US;
    prober.set_deadline(deadline_us);

    let mut verdicts = Vec::new();
    let cap = declared.burst.unwrap_or(declared.limit).max(1);
    let margin = (cap / 5).max(2);

    // 2. Multiplication: a first burst (it also uses up the allowance).
    let burst_n = (opts.max_multiple + 1) * cap;
    let burst = prober.burst(Phase::Multiplication, burst_n).await;
    let mut m1 = burst.clone();
    m1.push(first.clone());
    let m1_admitted = Tally::of(&m1).admitted;
    let exhausted = burst.iter().any(|s| s.outcome == Outcome::Denied);
    let mut last_denial = last_denial_of(&burst);

    // 3. Window edge, then a second multiplication burst just after an edge: the first burst
    // may have crossed a window edge unseen (a fixed window would then admit twice), the
    // second starts 1/10 window after one, when every algorithm has its whole allowance back.
    let edge = match declared.window_us {
        None => Err(Verdict::new(
            "window_edge",
            Level::Inconclusive,
            format!(
                "not checked: the window is not known ({}); give it with --limit N/PERIOD",
                declared.source
            ),
        )),
        Some(_) if !exhausted => Err(Verdict::new(
            "window_edge",
            Level::Inconclusive,
            format!(
                "not checked: the burst ({} sent of {burst_n} planned) was never denied, so there is no edge to find",
                burst.len()
            ),
        )),
        // Bursts of what the first admitted, at least the declared capacity (the first may
        // have met an allowance already used up by other traffic).
        Some(w) => {
            window_edge(
                &prober,
                timeline,
                w,
                m1_admitted.max(cap) + margin,
                deadline_us,
            )
            .await
        }
    };
    let mut m2 = None;
    if let (Ok(e), Some(w)) = (&edge, declared.window_us) {
        last_denial = last_denial_of(&e.after).or(last_denial);
        let at = e.edge_us + w + w + w / 10;
        if at + w / 5 <= deadline_us {
            timeline.wait_until(at).await;
            let again = prober.burst(Phase::MultiplicationAgain, burst_n).await;
            last_denial = last_denial_of(&again).or(last_denial);
            m2 = Some(again);
        }
    }
    let (mult, capacity) = multiplication(opts, &declared, &m1, m2.as_deref(), burst_n);
    verdicts.push(mult);
    verdicts.extend(checks::designed_burst(&declared, &m1, m2.as_deref()));
    verdicts.push(match edge {
        Ok(e) => edge_verdict(&e, capacity.unwrap_or(m1_admitted).max(1)),
        Err(v) => v,
    });

    // 4. Retry-After.
    let retry = retry_after_check(
        &prober,
        timeline,
        last_denial,
        capacity.unwrap_or(cap).max(1),
        margin,
        deadline_us,
    )
    .await;
    verdicts.push(retry);

    // 5. Shape.
    let all = prober.samples();
    verdicts.extend(shape(&all));
    prober.finish_bar();

    let total = Tally::of(&all);
    Ok(HttpReport {
        url: opts.url.clone(),
        declared,
        limit_given,
        sent: total.sent,
        admitted: total.admitted,
        denied: total.denied,
        errors: total.errors,
        duration_us: total.span_us(),
        concurrency: opts.concurrency,
        new_connections: opts.new_connections,
        verdicts,
        phases: phases(&all),
        columns: columns(&all),
    })
}

/// Discovery (step 1): one request, and the limit it declares (or the one given), checked
/// against the plan's bound. Returns the first request, the limit, and whether it was given.
async fn discover<T: Timeline>(
    opts: &HttpOptions,
    prober: &Prober<'_, T>,
    target: String,
) -> Result<(Sample, DeclaredLimit, bool), HttpAuditError> {
    prober.set_budget(1);
    let first = prober.burst(Phase::Discovery, 1).await;
    let Some(first) = first.into_iter().next() else {
        return Err(HttpAuditError::Unreachable {
            target,
            error: "no request sent".into(),
        });
    };
    if first.outcome == Outcome::Error && first.status == 0 {
        return Err(HttpAuditError::Unreachable {
            target,
            error: first.error.clone().unwrap_or_default(),
        });
    }
    let (declared, limit_given) = match (&opts.limit, &first.declared) {
        (Some(d), _) => (d.clone(), true),
        (None, Some(d)) => (d.clone(), false),
        (None, None) => {
            return Err(HttpAuditError::NoDeclaredLimit {
                target,
                status: first.status,
            })
        }
    };
    if opts.limit.is_none() {
        check_plan(opts, &declared, &target)?;
    }
    Ok((first, declared, limit_given))
}

/// The plan's upper bounds: (requests, seconds).
fn plan(opts: &HttpOptions, d: &DeclaredLimit) -> (u64, u64) {
    let cap = d.burst.unwrap_or(d.limit).max(1);
    let margin = (cap / 5).max(2);
    let burst = (opts.max_multiple + 1) * cap;
    // discovery + burst + edge search (41 polls) + two edge bursts + the second burst +
    // retries (a burst and 3).
    let requests = 1 + burst + 41 + 2 * (burst + margin) + burst + (burst + margin) + 3;
    (requests.min(opts.max_requests), opts.max_seconds)
}

fn check_plan(opts: &HttpOptions, d: &DeclaredLimit, target: &str) -> Result<(), HttpAuditError> {
    let (planned, seconds) = plan(opts, d);
    if planned > CONFIRM_ABOVE && !opts.confirmed {
        return Err(HttpAuditError::NeedsConfirmation {
            planned,
            target: target.to_string(),
            seconds,
        });
    }
    Ok(())
}

/// `" (most of them 503: if that is how it denies, add --deny-status 503)"`, for the most
/// common error status, or empty.
fn error_hint(samples: &[Sample]) -> String {
    let mut by: BTreeMap<u16, u64> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.outcome == Outcome::Error && s.status != 0)
    {
        *by.entry(s.status).or_default() += 1;
    }
    match by.iter().max_by_key(|(_, n)| **n) {
        Some((status, n)) => {
            format!(" ({n} of them {status}: if that is how it denies, add --deny-status {status})")
        }
        None => String::new(),
    }
}

fn last_denial_of(samples: &[Sample]) -> Option<Sample> {
    samples
        .iter()
        .filter(|s| s.outcome == Outcome::Denied)
        .max_by_key(|s| s.done_us)
        .cloned()
}

fn phases(samples: &[Sample]) -> Vec<PhaseSummary> {
    let mut out: Vec<PhaseSummary> = Vec::new();
    for p in Phase::ALL {
        let t = Tally::of(samples.iter().filter(|s| s.phase == p));
        if t.sent > 0 {
            out.push(PhaseSummary {
                phase: p.as_str(),
                start_us: t.first_sent_us,
                end_us: t.last_done_us,
                sent: t.sent,
                admitted: t.admitted,
                denied: t.denied,
                errors: t.errors,
            });
        }
    }
    out
}

/// Column width of the series: 100 ms.
pub const COLUMN_US: u64 = 100_000;

fn columns(samples: &[Sample]) -> Vec<Column> {
    let end = samples.iter().map(|s| s.done_us).max().unwrap_or(0);
    let n = (end / COLUMN_US + 1) as usize;
    let mut cols: Vec<Column> = (0..n)
        .map(|i| Column {
            start_us: i as u64 * COLUMN_US,
            ..Column::default()
        })
        .collect();
    for s in samples {
        let c = &mut cols[(s.done_us / COLUMN_US) as usize];
        match s.outcome {
            Outcome::Admitted => c.admitted += 1,
            Outcome::Denied => c.denied += 1,
            Outcome::Error => c.errors += 1,
        }
    }
    cols
}
