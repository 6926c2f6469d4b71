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
mod options;
mod probe;
mod render;
mod report;
mod shape;

use crate::timeline::Timeline;
use crate::{Level, Verdict};
use checks::{edge_verdict, multiplication, retry_after_check, window_edge};
use headers::DeclaredLimit;
use probe::{Outcome, Phase, Prober, Sample};
use shape::shape;

use options::US;
pub use options::{HttpAuditError, HttpOptions, CONFIRM_ABOVE};
pub(crate) use render::verdict_lines as render_verdicts;
pub use render::{svg, table};
use report::Tally;
pub use report::{Column, HttpReport, PhaseSummary, COLUMN_US};

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
