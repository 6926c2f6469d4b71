//! The multiplication, window-edge and `Retry-After` checks of the probe.

use std::collections::BTreeMap;

use super::headers::DeclaredLimit;
use super::options::{HttpOptions, US};
use super::probe::{Outcome, Phase, Prober, Sample};
use super::report::{error_hint, ms, secs, Tally};
use crate::timeline::Timeline;
use crate::{Level, Verdict};

/// A designed burst (nginx `limit_req burst=`, a bucket's capacity not declared in headers):
/// the first burst admitted more than one counter of the declared limit admits in its time
/// while the burst after the edge, the multiplication check's, did not reach 1.5x. A note of
/// its own, as docs/audit.md says, not only the first burst's count beside that verdict.
pub(super) fn designed_burst(
    d: &DeclaredLimit,
    first: &[Sample],
    again: Option<&[Sample]>,
) -> Option<Verdict> {
    let again = Tally::of(again?);
    let t1 = Tally::of(first);
    let (allowance, again_allowance) = (d.allowance(t1.span_us()), d.allowance(again.span_us()));
    let ratio = t1.admitted as f64 / allowance;
    if d.burst.is_some() || ratio <= 1.02 || again.admitted as f64 / again_allowance >= 1.5 {
        return None;
    }
    let above = t1.admitted.saturating_sub(d.limit);
    Some(
        Verdict::new(
            "burst",
            Level::Note,
            format!(
                "the first burst admitted {} in {} where one counter of {} admits at most {allowance:.0} ({ratio:.2}x): \
                 a designed burst of about {above} above the limit (nginx limit_req burst=, a bucket's capacity), \
                 or a fixed window's edge inside that burst; the burst after the edge admitted {}",
                t1.admitted,
                ms(t1.span_us()),
                d.describe(),
                again.admitted
            ),
        )
        .with("first_admitted", t1.admitted)
        .with("above_limit", above)
        .with("ratio", ratio),
    )
}

/// The multiplication verdict and the measured capacity: what the second burst (`again`,
/// sent just after a window edge) admitted, or without it the first (`first`, with the
/// discovery request).
// Over 120 lines: one verdict whose cases, message and details all read the same tallies,
// ratio and notes computed at the top.
pub(super) fn multiplication(
    opts: &HttpOptions,
    d: &DeclaredLimit,
    first: &[Sample],
    again: Option<&[Sample]>,
    burst_n: u64,
) -> (Verdict, Option<u64>) {
    let samples = again.unwrap_or(first);
    let t1 = Tally::of(first);
    let t = Tally::of(samples);
    let span = t.span_us();
    let allowance = d.allowance(span);
    let ratio = t.admitted as f64 / allowance;
    let k = ratio.round().max(1.0) as u64;
    // How often the highest `remaining` came back among admissions: K counters each count
    // down from the same value (the lower values also repeat as a bucket refills).
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.outcome == Outcome::Admitted) {
        if let Some(r) = s.remaining {
            *seen.entry(r).or_default() += 1;
        }
    }
    let repeats = seen.iter().next_back().map(|(r, n)| (*r, *n));
    let conn = if opts.new_connections {
        format!("{} at a time, a new connection each", opts.concurrency)
    } else {
        format!("over {} connections", opts.concurrency)
    };
    let which = match again {
        Some(_) => format!(
            "a burst of {} ({conn}) 1/10 window after an edge: {} admitted, {} denied in {} (the first burst: {} admitted)",
            t.sent,
            t.admitted,
            t.denied,
            ms(span),
            t1.admitted
        ),
        None => format!(
            "one request, then a burst of {} ({conn}): {} admitted, {} denied in {}",
            t.sent.saturating_sub(1),
            t.admitted,
            t.denied,
            ms(span)
        ),
    };
    let base = format!(
        "{which}; one counter of {} admits at most {:.0} in that time",
        d.describe(),
        allowance
    );
    // A limiter that fails open (its store down) admits without its usual headers.
    let headed = |s: &&Sample| s.declared.is_some() || s.remaining.is_some();
    let admitted: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.outcome == Outcome::Admitted)
        .collect();
    let bare = admitted.iter().filter(|s| !headed(s)).count() as u64;
    let bare_note = if bare > 0 && admitted.iter().any(headed) {
        format!("; {bare} of the {} admissions carried no rate-limit headers (a limiter failing open while its store is down answers so)", admitted.len())
    } else {
        String::new()
    };
    let repeat_note = match repeats {
        Some((r, n)) if n > 1 => format!("; remaining={r} came back {n} times"),
        _ => String::new(),
    };
    let mut v = if t.errors * 10 > t.sent {
        Verdict::new(
            "multiplication",
            Level::Inconclusive,
            format!(
                "{base}; but {} of the answers were errors{}",
                t.errors,
                error_hint(samples)
            ),
        )
    } else if t.denied == 0 && t.admitted < burst_n {
        Verdict::new(
            "multiplication",
            Level::Inconclusive,
            format!("{base}; but the request budget ran out before a denial (planned {burst_n}): raise --max-requests"),
        )
    } else if t.denied == 0 {
        Verdict::new(
            "multiplication",
            Level::Danger,
            format!(
                "{base}: all admitted, at least {}x the limit: not enforced for this client, or more than {} instances each with its own counter{bare_note}",
                opts.max_multiple + 1,
                opts.max_multiple
            ),
        )
    } else if ratio >= 1.5 {
        Verdict::new(
            "multiplication",
            Level::Danger,
            format!(
                "{base}: about {k}x the limit ({ratio:.2}x): {k} instances each with its own counter?{repeat_note}{bare_note}"
            ),
        )
    } else if ratio < 0.5 {
        Verdict::new(
            "multiplication",
            Level::Note,
            format!("{base}: fewer than declared ({ratio:.2}x): other traffic shares this key, or the limit counts something else"),
        )
    } else {
        Verdict::new(
            "multiplication",
            Level::Ok,
            format!("{base}: one counter ({ratio:.2}x the limit){repeat_note}"),
        )
    };
    if again.is_none() && v.level != Level::Inconclusive {
        v.summary.push_str(
            " (one burst only: the window edge was not found, so it may have crossed one)",
        );
    }
    v = v
        .with("burst", t.sent)
        .with("admitted", t.admitted)
        .with("denied", t.denied)
        .with("errors", t.errors)
        .with("span_us", span)
        .with("allowance", allowance)
        .with("ratio", (ratio * 1000.0).round() / 1000.0)
        .with("multiple", k)
        .with("first_burst_admitted", t1.admitted)
        .with("after_edge", again.is_some())
        .with("admitted_without_headers", bare);
    if let Some((r, n)) = repeats {
        v = v.with("highest_remaining", r).with("repeats", n);
    }
    let capacity = (t.admitted > 0).then_some(t.admitted);
    (v, capacity)
}

/// What the window-edge probe measured.
#[derive(Debug)]
pub(super) struct EdgeData {
    pub(super) window_us: u64,
    /// Where the allowance came back (the first admitted poll).
    pub(super) edge_us: u64,
    pub(super) polls: u64,
    pub(super) step_us: u64,
    pub(super) before: Vec<Sample>,
    pub(super) after: Vec<Sample>,
}

/// Finds where the allowance comes back after the burst and sends `n` requests 1/10 window
/// before the next edge and `n` 1/20 window after it; `Err` is the verdict when it cannot.
pub(super) async fn window_edge<T: Timeline>(
    prober: &Prober<'_, T>,
    timeline: &T,
    window_us: u64,
    n: u64,
    deadline_us: u64,
) -> Result<EdgeData, Verdict> {
    let step = (window_us / 20).max(10_000);
    // Search (up to 2 windows), the two bursts (1.05), the second multiplication burst (1.1).
    let need_us =
        2 * window_us + window_us + window_us / 20 + window_us + window_us / 10 + window_us / 5;
    if timeline.now_us() + need_us > deadline_us {
        return Err(Verdict::new(
            "window_edge",
            Level::Inconclusive,
            format!(
                "not checked: finding and probing an edge of a {} window takes up to {}, beyond --max-seconds",
                secs(window_us),
                secs(need_us)
            ),
        )
        .with("window_us", window_us));
    }
    let mut t = timeline.now_us();
    let give_up = t + 2 * window_us;
    let mut edge = None;
    let mut polls = 0u64;
    while t < give_up {
        t += step;
        timeline.wait_until(t).await;
        let Some(s) = prober.burst(Phase::EdgeSearch, 1).await.into_iter().next() else {
            break;
        };
        polls += 1;
        if s.outcome == Outcome::Admitted {
            edge = Some(s.sent_us);
            break;
        }
    }
    let Some(e1) = edge else {
        return Err(Verdict::new(
            "window_edge",
            Level::Inconclusive,
            format!(
                "no request was admitted in {} after the burst ({polls} tries, one every {}): the allowance never came back",
                secs(2 * window_us),
                ms(step)
            ),
        ));
    };
    let e2 = e1 + window_us;
    timeline.wait_until(e2 - window_us / 10).await;
    let before = prober.burst(Phase::EdgeBefore, n).await;
    timeline.wait_until(e2 + window_us / 20).await;
    let after = prober.burst(Phase::EdgeAfter, n).await;
    Ok(EdgeData {
        window_us,
        edge_us: e1,
        polls,
        step_us: step,
        before,
        after,
    })
}

/// The window-edge verdict, against `capacity` (what one clean burst admitted).
pub(super) fn edge_verdict(e: &EdgeData, capacity: u64) -> Verdict {
    let window_us = e.window_us;
    let e2 = e.edge_us + window_us;
    let tb = Tally::of(&e.before);
    let ta = Tally::of(&e.after);
    let both = Tally::of(e.before.iter().chain(e.after.iter()));
    let span = both.span_us();
    let x = both.admitted;
    let ratio = x as f64 / capacity as f64;
    let base = format!(
        "the allowance came back {} in (found in {} {}, one every {}), so a window edge would be at {}: {} admitted in a burst {} before it, {} in one {} after it, {x} within {} = {ratio:.2}x the {capacity} one burst admits",
        secs(e.edge_us),
        e.polls,
        if e.polls == 1 { "try" } else { "tries" },
        ms(e.step_us),
        secs(e2),
        tb.admitted,
        ms(e2.saturating_sub(tb.first_sent_us)),
        ta.admitted,
        ms(ta.first_sent_us.saturating_sub(e2)),
        ms(span),
    );
    let v = if span >= window_us {
        Verdict::new(
            "window_edge",
            Level::Inconclusive,
            format!(
                "{base}; but the two bursts took longer than one {} window",
                secs(window_us)
            ),
        )
    } else if both.errors * 10 > both.sent {
        Verdict::new(
            "window_edge",
            Level::Inconclusive,
            format!("{base}; but {} answers were errors", both.errors),
        )
    } else if ratio >= 1.5 {
        Verdict::new(
            "window_edge",
            Level::Danger,
            format!("{base}: leaks at the window edge (a fixed window resets there, so a client gets about 2x across it)"),
        )
    } else if ratio > 1.02 {
        Verdict::new(
            "window_edge",
            Level::Note,
            format!("{base}: a little over within one window (a bucket's refill or a sliding window counter's estimate), no edge leak"),
        )
    } else {
        Verdict::new("window_edge", Level::Ok, format!("{base}: no edge leak"))
    };
    v.with("edge_us", e.edge_us)
        .with("search_polls", e.polls)
        .with("before_admitted", tb.admitted)
        .with("after_admitted", ta.admitted)
        .with("admitted", x)
        .with("span_us", span)
        .with("capacity", capacity)
        .with("ratio", (ratio * 1000.0).round() / 1000.0)
}

/// The Retry-After check, from the last denial seen so far.
// Over 120 lines: one probe in time order (wait, retry early, wait, retry on time) and its
// verdict; each step depends on the answer before it.
pub(super) async fn retry_after_check<T: Timeline>(
    prober: &Prober<'_, T>,
    timeline: &T,
    denial: Option<Sample>,
    capacity: u64,
    margin: u64,
    deadline_us: u64,
) -> Verdict {
    let name = "retry_after";
    let Some(mut d) = denial else {
        return Verdict::new(name, Level::Inconclusive, "not checked: no denial was seen");
    };
    let Some(Ok(r)) = d.retry_after.clone() else {
        return Verdict::new(
            name,
            Level::Inconclusive,
            "not checked: the denials carry no valid Retry-After (see retry_after_header)",
        );
    };
    // Early: at R - 1 s (only when R >= 1).
    // (Retry-After it followed, how long after that denial it was sent, the answer).
    let mut early: Option<(u64, u64, Sample)> = None;
    if r >= 1 {
        let at = d.done_us + (r - 1) * US;
        if at + 2 * US > deadline_us {
            return Verdict::new(
                name,
                Level::Inconclusive,
                format!("not checked: Retry-After {r} s runs past --max-seconds"),
            );
        }
        timeline.wait_until(at).await;
        if let Some(s) = prober.burst(Phase::RetryEarly, 1).await.into_iter().next() {
            early = Some((r, s.sent_us.saturating_sub(d.done_us), s.clone()));
            if s.outcome == Outcome::Denied && matches!(s.retry_after, Some(Ok(_))) {
                d = s;
            } else {
                // Admitted early (or failed): use up the allowance again for a fresh denial.
                let ex = prober.burst(Phase::RetryExhaust, capacity + margin).await;
                match ex
                    .into_iter()
                    .filter(|s| s.outcome == Outcome::Denied && matches!(s.retry_after, Some(Ok(_))))
                    .max_by_key(|s| s.done_us)
                {
                    Some(s) => d = s,
                    None => {
                        return Verdict::new(
                            name,
                            Level::Inconclusive,
                            "a retry 1 s before Retry-After was admitted, and no denial with Retry-After came back afterwards".to_string(),
                        )
                    }
                }
            }
        }
    }
    let Some(Ok(r2)) = d.retry_after.clone() else {
        return Verdict::new(
            name,
            Level::Inconclusive,
            "no valid Retry-After to retry at",
        );
    };
    let at = d.done_us + r2 * US;
    if at > deadline_us {
        return Verdict::new(
            name,
            Level::Inconclusive,
            format!("not checked: Retry-After {r2} s runs past --max-seconds"),
        );
    }
    timeline.wait_until(at).await;
    let Some(on_time) = prober.burst(Phase::RetryOnTime, 1).await.into_iter().next() else {
        return Verdict::new(
            name,
            Level::Inconclusive,
            "the request budget ran out before the retry",
        );
    };
    let early_text = match &early {
        Some((r, after, s)) => format!(
            "a retry {} after a 429 with Retry-After {r} (1 s early) was {}",
            secs(*after),
            s.outcome.as_str()
        ),
        None => "Retry-After 0: no earlier retry possible".to_string(),
    };
    let on_time_text = format!(
        "a retry exactly {} after a 429 with Retry-After {r2} was {}",
        secs(on_time.sent_us.saturating_sub(d.done_us)),
        on_time.outcome.as_str()
    );
    let mut v = match (on_time.outcome, early.as_ref().map(|(_, _, s)| s.outcome)) {
        (Outcome::Denied, _) => Verdict::new(
            name,
            Level::Danger,
            format!(
                "{on_time_text}{}: Retry-After is too early, clients that honour it are refused again",
                on_time
                    .retry_after
                    .as_ref()
                    .and_then(|r| r.as_ref().ok())
                    .map(|r| format!(" (this time Retry-After {r})"))
                    .unwrap_or_default()
            ),
        ),
        (Outcome::Error, _) => Verdict::new(
            name,
            Level::Inconclusive,
            format!("{on_time_text} (status {})", on_time.status),
        ),
        (Outcome::Admitted, Some(Outcome::Admitted)) => Verdict::new(
            name,
            Level::Note,
            format!("{early_text}; {on_time_text}: Retry-After is at least 1 s longer than needed (wastes capacity), unless the allowance came back within a round trip of the 429"),
        ),
        (Outcome::Admitted, _) => Verdict::new(
            name,
            Level::Ok,
            format!("{early_text}; {on_time_text}: honest"),
        ),
    };
    v = v
        .with("retry_after_s", r2)
        .with("on_time", on_time.outcome.as_str());
    if let Some((r, after, s)) = early {
        v = v
            .with("early_retry_after_s", r)
            .with("early_after_us", after)
            .with("early", s.outcome.as_str());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `admitted` admissions then `denied` denials, sent 1 ms apart from `at_us`.
    fn burst(at_us: u64, admitted: u64, denied: u64) -> Vec<Sample> {
        (0..admitted + denied)
            .map(|i| Sample {
                phase: Phase::Multiplication,
                sent_us: at_us + i * 1_000,
                done_us: at_us + i * 1_000 + 500,
                status: if i < admitted { 200 } else { 429 },
                outcome: if i < admitted {
                    Outcome::Admitted
                } else {
                    Outcome::Denied
                },
                error: None,
                remaining: None,
                declared: None,
                retry_after: None,
                content_type: None,
                problem_json: false,
                has_draft_headers: false,
                syntax: Vec::new(),
            })
            .collect()
    }

    fn ten_per_second() -> DeclaredLimit {
        DeclaredLimit {
            limit: 10,
            window_us: Some(US),
            burst: None,
            source: "--limit 10/s".into(),
        }
    }

    /// nginx `limit_req rate=10r/s burst=20 nodelay`: 21 admitted by the first burst of 40,
    /// about 11 after the edge (the bucket refilled for a second).
    #[test]
    fn a_first_burst_above_the_limit_is_a_note_of_its_own() {
        let d = ten_per_second();
        let (first, again) = (burst(0, 21, 19), burst(3 * US, 11, 29));
        let v = designed_burst(&d, &first, Some(&again)).unwrap();
        assert_eq!((v.check.as_str(), v.level), ("burst", Level::Note));
        assert!(
            v.summary.starts_with(
                "the first burst admitted 21 in 40 ms where one counter of 10/s admits at most 10 (2.0"
            ),
            "{}",
            v.summary
        );
        assert!(
            v.summary
                .contains("a designed burst of about 11 above the limit"),
            "{}",
            v.summary
        );
        assert!(
            v.summary.ends_with("the burst after the edge admitted 11"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn no_note_for_a_burst_within_the_limit_a_declared_burst_or_a_multiplied_limit() {
        let d = ten_per_second();
        let within = (burst(0, 10, 30), burst(3 * US, 10, 30));
        assert!(designed_burst(&d, &within.0, Some(&within.1)).is_none());
        let declared = DeclaredLimit {
            burst: Some(21),
            ..ten_per_second()
        };
        let bursty = (burst(0, 21, 19), burst(3 * US, 11, 29));
        assert!(designed_burst(&declared, &bursty.0, Some(&bursty.1)).is_none());
        // Both bursts at 2x: the multiplication check's danger, not a designed burst.
        let doubled = (burst(0, 21, 19), burst(3 * US, 21, 19));
        assert!(designed_burst(&d, &doubled.0, Some(&doubled.1)).is_none());
        // No second burst: nothing to tell a burst from a crossed edge by.
        assert!(designed_burst(&d, &bursty.0, None).is_none());
    }
}
