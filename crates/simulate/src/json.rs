//! `--format json`: one JSON document with every decision and the summary of each run.
//!
//! ```text
//! { "scenario": "boundary", "preset": null, "traffic": "...",
//!   "policy": {"limit": 100, "period_us": 1000000, "burst": 100},
//!   "setup": {"instances": 1, "counter": "local", "balance": "round-robin"},
//!   "runs": [ { "algorithm": "fixed_window",
//!               "summary": { "requests": 200, "admitted": 200, ..., "max_in_period": {...},
//!                            "over_admission": 2.0, "shared_reference": null },
//!               "decisions": [ {"t_us": 950000, "key": "client", "instance": 0, "cost": 1,
//!                               "source": "burst-1", "allowed": true, "remaining": 99,
//!                               "retry_after_us": null, "reset_after_us": 50000}, ... ] } ] }
//! ```
//!
//! A request whose cost exceeds the capacity has `"error": "insufficient_capacity"` and
//! `"capacity"` instead of the decision fields (no `allowed`): it was refused as impossible, not
//! denied, and no amount of waiting would admit it.

use std::fmt::Write;

use floodgate_core::CheckError;
use serde_json::{json, Value};

use super::engine::Run;
use super::Report;

/// Renders the report as JSON, ending with a newline: the header and summaries pretty-printed,
/// each decision on one line (a trace can hold millions).
pub fn render(report: &Report) -> String {
    // Without a bound the document is always written.
    render_within(report, usize::MAX).unwrap_or_default()
}

/// [`render`], but `None` as soon as the document grows beyond `max_bytes`: the text is
/// never more than `max_bytes` plus one decision's line, whatever the report holds (a trace's
/// keys can be long).
pub fn render_within(report: &Report, max_bytes: usize) -> Option<String> {
    let mut text = serde_json::to_string_pretty(&header(report)).expect("JSON values serialize");
    // Re-open the object to append "runs", writing the decisions line by line.
    let body_end = text
        .trim_end()
        .strip_suffix('}')
        .expect("an object")
        .trim_end()
        .len();
    text.truncate(body_end);
    text.push_str(",\n  \"runs\": [");
    for (i, run) in report.runs.iter().enumerate() {
        text.push_str(if i == 0 { "\n" } else { ",\n" });
        let _ = write!(
            text,
            "    {{\n      \"algorithm\": \"{}\",\n      \"summary\": {},\n      \"decisions\": [",
            run.kind.as_str(),
            serde_json::to_string(&summary(run)).expect("summary serializes")
        );
        if text.len() > max_bytes || !write_decisions(&mut text, report, run, max_bytes) {
            return None;
        }
        text.push_str("\n      ]\n    }");
    }
    text.push_str("\n  ]\n}\n");
    (text.len() <= max_bytes).then_some(text)
}

/// Everything but the runs.
fn header(report: &Report) -> Value {
    let mut header = json!({
        "scenario": report.traffic.name,
        "preset": report.preset.map(|p| p.as_str()),
        "traffic": report.traffic.description,
        "policy": {
            "limit": report.quota.limit(),
            "period_us": report.quota.period(),
            "burst": report.quota.burst(),
        },
        "setup": report.setup,
    });
    if let Some(max_wait) = report.max_wait {
        header["max_wait_us"] = max_wait.into();
    }
    if let Some((zone, start)) = &report.calendar {
        header["calendar"] = json!({ "zone": zone, "start": start });
    }
    header
}

/// A run's summary plus its shared-counter reference.
fn summary(run: &Run) -> Value {
    let mut summary = serde_json::to_value(&run.summary).expect("summary serializes");
    summary.as_object_mut().expect("an object").insert(
        "shared_reference".into(),
        match run.shared_reference {
            Some((admitted, max)) => json!({"admitted": admitted, "max_in_period": max}),
            None => Value::Null,
        },
    );
    summary.as_object_mut().expect("an object").insert(
        "reject_reference".into(),
        serde_json::to_value(run.reject_reference).expect("reference serializes"),
    );
    summary
}

/// Appends one JSON object per decision, one per line, comma-separated; `false` (and stops)
/// once `text` is longer than `max_bytes`.
fn write_decisions(text: &mut String, report: &Report, run: &Run, max_bytes: usize) -> bool {
    let requests = &report.traffic.requests;
    for (i, o) in run.outcomes.iter().enumerate() {
        if text.len() > max_bytes {
            return false;
        }
        let r = &requests[o.request];
        text.push_str(if i == 0 { "\n        " } else { ",\n        " });
        let _ = write!(
            text,
            "{{\"t_us\": {}, \"key\": {}, \"instance\": {}, \"cost\": {}, \"source\": \"{}\", ",
            r.t_us,
            serde_json::to_string(&r.key).expect("strings serialize"),
            o.instance,
            r.cost,
            r.source
        );
        if let Some(wait) = o.wait {
            let _ = write!(text, "\"wait_us\": {wait}, ");
        }
        let _ = match o.result {
            Ok(d) => write!(
                text,
                "\"allowed\": {}, \"remaining\": {}, \"retry_after_us\": {}, \"reset_after_us\": {}}}",
                d.allowed,
                d.remaining,
                d.retry_after.map_or_else(|| "null".to_string(), |us| us.to_string()),
                d.reset_after
            ),
            Err(CheckError::InsufficientCapacity { capacity, .. }) => write!(
                text,
                "\"error\": \"insufficient_capacity\", \"capacity\": {capacity}}}"
            ),
            Err(other) => write!(
                text,
                "\"error\": {}}}",
                serde_json::to_string(&other.to_string()).expect("strings serialize")
            ),
        };
    }
    text.len() <= max_bytes
}

#[cfg(test)]
mod tests {
    use floodgate_core::{AlgorithmKind, Quota};

    use super::*;
    use crate::engine::run_in_memory;
    use crate::setup::{Balance, CounterMode, Setup};
    use crate::traffic::{Request, Traffic};

    #[test]
    fn renders_valid_json_with_one_line_per_decision() {
        let quota: Quota = "2/s".parse().unwrap();
        let request = |t_us, key: &str, cost| Request {
            t_us,
            key: key.into(),
            cost,
            source: "trace",
        };
        let requests = vec![
            request(0, "a\"b", 2),
            request(1, "a\"b", 1),
            request(2, "c", 3),
        ];
        let setup = Setup {
            instances: 1,
            counter: CounterMode::Local,
            balance: Balance::RoundRobin,
        };
        let run =
            run_in_memory(&requests, AlgorithmKind::Gcra, quota, setup, 1_000_000, 3).unwrap();
        let report = Report {
            traffic: Traffic {
                name: "trace".into(),
                description: "three".into(),
                requests,
                span_us: 3,
            },
            quota,
            setup,
            preset: None,
            runs: vec![run],
            max_wait: None,
            calendar: None,
        };
        let text = render(&report);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value["policy"],
            json!({"limit": 2, "period_us": 1_000_000, "burst": 2})
        );
        assert_eq!(value["setup"]["counter"], "local");
        let decisions = value["runs"][0]["decisions"].as_array().unwrap();
        assert_eq!(
            decisions[0],
            json!({"t_us": 0, "key": "a\"b", "instance": 0, "cost": 2, "source": "trace",
                   "allowed": true, "remaining": 0, "retry_after_us": null,
                   "reset_after_us": 1_000_000})
        );
        assert_eq!(decisions[1]["allowed"], false);
        assert_eq!(decisions[1]["retry_after_us"], 499_999);
        assert_eq!(
            decisions[2],
            json!({"t_us": 2, "key": "c", "instance": 0, "cost": 3, "source": "trace",
                   "error": "insufficient_capacity", "capacity": 2})
        );
        assert_eq!(value["runs"][0]["summary"]["impossible"], 1);
        assert_eq!(text.lines().filter(|l| l.contains("\"t_us\"")).count(), 3);
        // Bounded: the whole document fits its own length, and not one byte less.
        assert_eq!(render_within(&report, text.len()).as_deref(), Some(&*text));
        assert_eq!(render_within(&report, text.len() - 1), None);
        assert_eq!(render_within(&report, 10), None);
    }
}
