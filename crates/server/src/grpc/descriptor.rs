//! What envoyproxy/ratelimit's per-descriptor keys change in an answer, as it computes them:
//! the counter key (`share_threshold`: every value matching a wildcard shares one counter;
//! a request's `limit` override has counters of its own), the stats key (`detailed_metric`,
//! `value_to_metric`; the `descriptor` label of `floodgate_descriptor_decisions_total`) and
//! the response's `dynamic_metadata` (`metadata`, with `[envoy] response_dynamic_metadata`).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};

use crate::config::descriptors::{DescriptorRule, ValueMatch};

/// The partition key of a descriptor: its domain and entries, each escaped, so every distinct
/// list of values has its own counter (`domain=edge|remote_address=203.0.113.7`); an entry
/// whose rule level shares its wildcard (`share_threshold`) counts under the pattern instead
/// of the value, and a limit override (`limit`) is part of the key.
pub(super) fn counter_key(
    domain: &str,
    d: &RateLimitDescriptor,
    rule: Option<&DescriptorRule>,
) -> String {
    let entries = d.entries.iter().enumerate().map(|(i, e)| {
        let value = match rule.map(|r| (&r.entries[i].value, r.extras.shares(i))) {
            Some((ValueMatch::Wildcard(parts), true)) => parts.join("*"),
            _ => e.value.clone(),
        };
        (e.key.as_str(), value)
    });
    let mut parts: Vec<(&str, String)> = vec![("domain", domain.to_string())];
    parts.extend(entries);
    if let Some(o) = &d.limit {
        parts.push(("limit", format!("{}/{}", o.requests_per_unit, o.unit)));
    }
    floodgate_tower::encode_key(parts.iter().map(|(k, v)| (*k, v.as_bytes())))
}

/// envoyproxy/ratelimit's stats key of a descriptor its rule selected:
/// `domain.key_value.key...`, each level written as configured (a wildcard as its pattern, no
/// value as the key alone) unless `value_to_metric` puts the request's value there, or the
/// rule's `detailed_metric` puts every request value there; a level sharing its wildcard
/// (`share_threshold`) is always its pattern.
pub(super) fn stats_key(domain: &str, d: &RateLimitDescriptor, rule: &DescriptorRule) -> String {
    let mut out = domain.to_string();
    for (i, (e, config)) in d.entries.iter().zip(&rule.entries).enumerate() {
        out.push('.');
        out.push_str(&e.key);
        let shared = matches!(config.value, ValueMatch::Wildcard(_)) && rule.extras.shares(i);
        let runtime =
            rule.extras.detailed_metric || rule.extras.value_to_metric.get(i) == Some(&true);
        let value = match (&config.value, shared, runtime) {
            (ValueMatch::Wildcard(parts), true, _) => Some(parts.join("*")),
            (_, false, true) => Some(e.value.clone()).filter(|v| !v.is_empty()),
            (v, _, _) => v.text(),
        };
        if let Some(v) = value {
            out.push('_');
            out.push_str(&v);
        }
    }
    out
}

fn string(s: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn object(fields: std::collections::HashMap<String, Value>) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

/// A JSON value as a protobuf `Value`.
pub(super) fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value {
            kind: Some(Kind::NullValue(0)),
        },
        J::Bool(b) => Value {
            kind: Some(Kind::BoolValue(*b)),
        },
        J::Number(n) => number(n.as_f64().unwrap_or(0.0)),
        J::String(s) => string(s.clone()),
        J::Array(items) => list(items.iter().map(from_json).collect()),
        J::Object(map) => object(map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect()),
    }
}

/// Merges JSON object `src` into `dest`: objects field by field, anything else replaced (as
/// envoyproxy/ratelimit's `mergeMetadata`).
pub(super) fn merge_json(
    dest: &mut serde_json::Map<String, serde_json::Value>,
    src: &serde_json::Value,
) {
    let Some(src) = src.as_object() else { return };
    for (k, v) in src {
        match (dest.get_mut(k), v) {
            (Some(serde_json::Value::Object(d)), serde_json::Value::Object(_)) => merge_json(d, v),
            _ => {
                dest.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The response's `dynamic_metadata`, as envoyproxy/ratelimit writes it: `domain`,
/// `descriptors` (each `entries: ["key=value", ...]`, its `limit` and `hitsAddend` when set),
/// the request's `hitsAddend` when set, and `metadata`: the merged `metadata` of the
/// descriptors that were not over their limit.
pub(super) fn dynamic_metadata(
    request: &RateLimitRequest,
    passed_metadata: &serde_json::Map<String, serde_json::Value>,
) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_string(), string(request.domain.clone()));
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut f = std::collections::HashMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| string(format!("{}={}", e.key, e.value)))
                .collect();
            f.insert("entries".to_string(), list(entries));
            if let Some(o) = &d.limit {
                let unit = RateLimitUnit::try_from(o.unit).map_or("UNKNOWN", |u| u.as_str_name());
                f.insert(
                    "limit".to_string(),
                    string(format!(
                        "requests_per_unit:{} unit:{unit}",
                        o.requests_per_unit
                    )),
                );
            }
            if let Some(h) = &d.hits_addend {
                f.insert("hitsAddend".to_string(), number(h.value as f64));
            }
            object(f)
        })
        .collect();
    fields.insert("descriptors".to_string(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_string(),
            number(f64::from(request.hits_addend)),
        );
    }
    if !passed_metadata.is_empty() {
        fields.insert(
            "metadata".to_string(),
            from_json(&serde_json::Value::Object(passed_metadata.clone())),
        );
    }
    Struct { fields }
}
