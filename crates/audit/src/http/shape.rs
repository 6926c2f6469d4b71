//! The response-shape checks: status, `Retry-After`, draft headers and problem+json.

use std::collections::BTreeMap;

use super::probe::{Outcome, Sample};
use crate::{Level, Verdict};

/// The response-shape verdicts over every denial.
pub(super) fn shape(samples: &[Sample]) -> Vec<Verdict> {
    let denials: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.outcome == Outcome::Denied)
        .collect();
    let n = denials.len() as u64;
    if n == 0 {
        return vec![Verdict::new(
            "denial_status",
            Level::Inconclusive,
            "no denial seen: the shape of a denial was not checked",
        )];
    }
    vec![
        status(&denials),
        retry_after(&denials),
        header_syntax(samples),
        problem_json(&denials),
    ]
}

/// Whether every denial was a 429.
fn status(denials: &[&Sample]) -> Verdict {
    let n = denials.len() as u64;
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    for s in denials {
        *statuses.entry(s.status).or_default() += 1;
    }
    let list = statuses
        .iter()
        .map(|(s, c)| format!("{s} x{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let all429 = statuses.keys().all(|s| *s == 429);
    let mut v = if all429 {
        Verdict::new(
            "denial_status",
            Level::Ok,
            format!("all {n} denials were 429 Too Many Requests"),
        )
    } else {
        Verdict::new(
            "denial_status",
            Level::Note,
            format!("denials answered {list}: 429 Too Many Requests is the status clients and proxies expect (503 reads as an outage, 403 as a permission error)"),
        )
    };
    for (s, c) in &statuses {
        v = v.with(&s.to_string(), *c);
    }
    v
}

/// Whether every denial had a `Retry-After` of whole seconds, at least 1.
fn retry_after(denials: &[&Sample]) -> Verdict {
    let n = denials.len() as u64;
    let missing = denials.iter().filter(|s| s.retry_after.is_none()).count() as u64;
    let invalid: Vec<String> = denials
        .iter()
        .filter_map(|s| s.retry_after.as_ref()?.as_ref().err().cloned())
        .collect();
    let zero = denials
        .iter()
        .filter(|s| matches!(s.retry_after, Some(Ok(0))))
        .count() as u64;
    let (lo, hi) = denials
        .iter()
        .filter_map(|s| s.retry_after.as_ref()?.as_ref().ok().copied())
        .fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let range = if hi > 0 || lo == 0 {
        format!(" (values {lo} to {hi} s)")
    } else {
        String::new()
    };
    let v = if missing > 0 {
        Verdict::new(
            "retry_after_header",
            Level::Danger,
            format!("{missing} of {n} denials had no Retry-After: clients cannot tell when to come back and retry at once"),
        )
    } else if !invalid.is_empty() {
        Verdict::new(
            "retry_after_header",
            Level::Danger,
            format!(
                "{} of {n} denials had an invalid Retry-After: {}",
                invalid.len(),
                invalid[0]
            ),
        )
    } else if zero > 0 {
        Verdict::new(
            "retry_after_header",
            Level::Danger,
            format!("{zero} of {n} denials said Retry-After: 0{range}: a client retries at once and is refused again (it must be whole seconds rounded up, at least 1)"),
        )
    } else {
        Verdict::new(
            "retry_after_header",
            Level::Ok,
            format!("all {n} denials had Retry-After >= 1{range}"),
        )
    };
    v.with("denials", n)
        .with("missing", missing)
        .with("invalid", invalid.len() as u64)
        .with("zero", zero)
}

/// Whether the IETF draft headers, when sent, follow its syntax.
fn header_syntax(samples: &[Sample]) -> Verdict {
    let mut problems: Vec<String> = Vec::new();
    for s in samples {
        for p in &s.syntax {
            if !problems.contains(p) {
                problems.push(p.clone());
            }
        }
    }
    let any_draft = samples.iter().any(|s| s.has_draft_headers);
    if !problems.is_empty() {
        Verdict::new(
            "header_syntax",
            Level::Note,
            format!(
                "{} problem(s) with the IETF draft headers, e.g. {}",
                problems.len(),
                problems[0]
            ),
        )
        .with("problems", problems.clone())
    } else if any_draft {
        Verdict::new(
            "header_syntax",
            Level::Ok,
            "RateLimit-Policy and RateLimit follow the IETF draft's syntax",
        )
    } else {
        Verdict::new(
            "header_syntax",
            Level::Note,
            "no RateLimit-Policy/RateLimit headers (IETF draft): clients cannot see the limit in a standard form",
        )
    }
}

/// Whether every denial was `application/problem+json`.
fn problem_json(denials: &[&Sample]) -> Verdict {
    let n = denials.len() as u64;
    let problem_json = denials.iter().filter(|s| s.problem_json).count() as u64;
    let mut types: BTreeMap<String, u64> = BTreeMap::new();
    for s in denials {
        *types
            .entry(s.content_type.clone().unwrap_or_else(|| "(none)".into()))
            .or_default() += 1;
    }
    let v = if problem_json == n {
        Verdict::new(
            "problem_json",
            Level::Ok,
            format!("all {n} denials were application/problem+json"),
        )
    } else {
        let list = types
            .iter()
            .map(|(t, c)| format!("{t} x{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        Verdict::new(
            "problem_json",
            Level::Note,
            format!(
                "{} of {n} denials were application/problem+json (content types: {list})",
                problem_json
            ),
        )
    };
    v.with("problem_json", problem_json).with("denials", n)
}
