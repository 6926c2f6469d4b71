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

use floodgate_core::CheckError;
use serde_json::{json, Value};

use super::Report;

/// Renders the report as pretty-printed JSON, ending with a newline.
pub fn render(report: &Report) -> String {
    let mut text = serde_json::to_string_pretty(&to_value(report)).expect("JSON values serialize");
    text.push('\n');
    text
}

/// The report as a JSON value (see the module docs for its shape).
pub fn to_value(report: &Report) -> Value {
    let requests = &report.traffic.requests;
    let runs: Vec<Value> = report
        .runs
        .iter()
        .map(|run| {
            let decisions: Vec<Value> = run
                .outcomes
                .iter()
                .map(|o| {
                    let r = &requests[o.request];
                    let mut v = json!({
                        "t_us": r.t_us,
                        "key": r.key,
                        "instance": o.instance,
                        "cost": r.cost,
                        "source": r.source,
                    });
                    let fields = v.as_object_mut().expect("an object");
                    match o.result {
                        Ok(d) => {
                            fields.insert("allowed".into(), d.allowed.into());
                            fields.insert("remaining".into(), d.remaining.into());
                            fields.insert("retry_after_us".into(), json!(d.retry_after));
                            fields.insert("reset_after_us".into(), d.reset_after.into());
                        }
                        Err(CheckError::InsufficientCapacity { capacity, .. }) => {
                            fields.insert("error".into(), "insufficient_capacity".into());
                            fields.insert("capacity".into(), capacity.into());
                        }
                        Err(other) => {
                            fields.insert("error".into(), other.to_string().into());
                        }
                    }
                    v
                })
                .collect();
            let mut summary = serde_json::to_value(&run.summary).expect("summary serializes");
            summary.as_object_mut().expect("an object").insert(
                "shared_reference".into(),
                match run.shared_reference {
                    Some((admitted, max)) => json!({"admitted": admitted, "max_in_period": max}),
                    None => Value::Null,
                },
            );
            json!({
                "algorithm": run.kind.as_str(),
                "summary": summary,
                "decisions": decisions,
            })
        })
        .collect();
    json!({
        "scenario": report.traffic.name,
        "preset": report.preset.map(|p| p.as_str()),
        "traffic": report.traffic.description,
        "policy": {
            "limit": report.quota.limit(),
            "period_us": report.quota.period(),
            "burst": report.quota.burst(),
        },
        "setup": report.setup,
        "runs": runs,
    })
}
