//! [`build_traffic`]: the traffic a [`Spec`] describes, a trace's or a generated scenario's.

use floodgate_core::Quota;

use crate::choice::Choice;
use crate::error::Error;
use crate::spec::{check_request_count, Preset, ScenarioName, Spec, TraceInput};
use crate::trace;
use crate::traffic::{Boundary, CalmSpike, DailyJobs, Flood, Traffic};

/// Builds the traffic a spec describes.
///
/// # Errors
/// [`Error::Invalid`] for a parameter that does not apply to the chosen scenario or traffic
/// that would exceed [`Spec::max_requests`]; [`Error::Trace`] for an unreadable or bad trace;
/// [`Error::Invalid`] (`field` = the scenario's parameter) for parameters that make no sense
/// (e.g. `--before` longer than the first window).
pub fn build_traffic(spec: &Spec, quota: &Quota) -> Result<Traffic, Error> {
    let scenario = match spec.preset {
        Some(_) => ScenarioName::Boundary,
        None => spec.scenario,
    };
    check_flags(spec, scenario)?;
    if let Some(input) = &spec.trace {
        return from_trace(spec, input);
    }
    generate(spec, quota, scenario)
}

/// Refuses the parameters that do not apply to `scenario` (or to a trace).
fn check_flags(spec: &Spec, scenario: ScenarioName) -> Result<(), Error> {
    let only = |present: bool, field: &'static str, wanted: ScenarioName| -> Result<(), Error> {
        if present && (spec.trace.is_some() || scenario != wanted) {
            return Err(Error::invalid(
                field,
                format!("--{field} applies only to --scenario {}", wanted.name()),
            ));
        }
        Ok(())
    };
    only(spec.before.is_some(), "before", ScenarioName::Boundary)?;
    only(spec.after.is_some(), "after", ScenarioName::Boundary)?;
    only(spec.at.is_some(), "at", ScenarioName::CalmSpike)?;
    if spec.every.is_some()
        && (spec.trace.is_some()
            || !matches!(scenario, ScenarioName::CalmSpike | ScenarioName::DailyJobs))
    {
        return Err(Error::invalid(
            "every",
            "--every applies only to --scenario calm-spike and daily-jobs",
        ));
    }
    only(spec.runners.is_some(), "runners", ScenarioName::DailyJobs)?;
    only(spec.rate.is_some(), "rate", ScenarioName::Flood)
}

/// The traffic of a trace, refusing the generators' parameters.
fn from_trace(spec: &Spec, input: &TraceInput) -> Result<Traffic, Error> {
    for (present, field) in [
        (spec.requests.is_some(), "requests"),
        (spec.spread.is_some(), "spread"),
        (spec.duration.is_some(), "duration"),
    ] {
        if present {
            return Err(Error::invalid(
                field,
                format!("--{field} does not apply to --trace (the trace gives every request)"),
            ));
        }
    }
    // A trace is already in memory as text; its size is the input's, not generated.
    let traffic = match input {
        TraceInput::File(path) => trace::read_trace(path)?,
        TraceInput::Text { name, text } => trace::parse_trace(name, text)?,
    };
    check_request_count(
        traffic.requests.len() as u128,
        spec.max_requests,
        "the trace",
    )?;
    Ok(traffic)
}

/// The traffic of a generated scenario. Every scenario's size is computed arithmetically and
/// checked before anything is generated.
fn generate(spec: &Spec, quota: &Quota, scenario: ScenarioName) -> Result<Traffic, Error> {
    let max = spec.max_requests;
    let (traffic, field) = match scenario {
        ScenarioName::Boundary => {
            let mut b = Boundary::for_quota(quota);
            if spec.preset == Some(Preset::RedisBoundary) {
                // Measured on Redis: each burst of 200 took about 14 ms (~14,000 checks/s), the
                // first ended about 0.13 s before the edge, the second began just after it.
                b.requests = 2 * quota.limit();
                b.before = 130_000;
                b.after = 10_000;
                b.spread = 14_000;
            }
            b.requests = spec.requests.unwrap_or(b.requests);
            b.before = spec.before.unwrap_or(b.before);
            b.after = spec.after.unwrap_or(b.after);
            b.spread = spec.spread.unwrap_or(b.spread);
            b.key.clone_from(&spec.key);
            if spec.duration.is_some() {
                return Err(Error::invalid(
                    "duration",
                    "--duration does not apply to --scenario boundary (it covers two periods)",
                ));
            }
            check_request_count(b.count(), max, "--scenario boundary")?;
            (b.traffic(), "before")
        }
        ScenarioName::CalmSpike => {
            let mut c = CalmSpike::for_quota(quota);
            c.requests = spec.requests.unwrap_or(c.requests);
            c.spread = spec.spread.unwrap_or(c.spread);
            c.at = spec.at.unwrap_or(c.at);
            c.every = spec.every.unwrap_or(c.every);
            c.duration = spec.duration.unwrap_or(c.duration);
            c.key.clone_from(&spec.key);
            check_request_count(c.count(), max, "--scenario calm-spike")?;
            (c.traffic(), "at")
        }
        ScenarioName::DailyJobs => {
            if spec.requests.is_some() || spec.spread.is_some() {
                let field = if spec.requests.is_some() {
                    "requests"
                } else {
                    "spread"
                };
                return Err(Error::invalid(
                    field,
                    "--requests and --spread do not apply to --scenario daily-jobs (use \
                     --runners and --every)",
                ));
            }
            let mut d = DailyJobs::for_quota(quota);
            d.runners = spec.runners.unwrap_or(d.runners);
            d.every = spec.every.unwrap_or(d.every);
            d.duration = spec.duration.unwrap_or(d.duration);
            d.key.clone_from(&spec.key);
            check_request_count(d.count(), max, "--scenario daily-jobs")?;
            (d.traffic(), "every")
        }
        ScenarioName::Flood => {
            if spec.requests.is_some() || spec.spread.is_some() {
                let field = if spec.requests.is_some() {
                    "requests"
                } else {
                    "spread"
                };
                return Err(Error::invalid(
                    field,
                    "--requests and --spread do not apply to --scenario flood (use --rate)",
                ));
            }
            let mut f = Flood::for_quota(quota);
            if let Some((units, per)) = spec.rate {
                (f.units, f.per) = (units, per);
            }
            f.duration = spec.duration.unwrap_or(f.duration);
            f.key.clone_from(&spec.key);
            check_request_count(f.count(), max, "--scenario flood")?;
            (f.traffic(), "rate")
        }
    };
    traffic.map_err(|message| {
        // A message about one flag (`--every must be ...`) names that field.
        const FIELDS: [&str; 8] = [
            "requests", "spread", "before", "after", "at", "every", "rate", "runners",
        ];
        let named = message
            .strip_prefix("--")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|flag| FIELDS.iter().find(|f| **f == flag).copied());
        Error::invalid(named.unwrap_or(field), message)
    })
}
