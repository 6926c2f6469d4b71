//! The document narrowed to one configuration (`floodgate openapi --config FILE`).
//!
//! The served document (and `docs/openapi.json`) is the API's contract, the same for every
//! configuration, so a client generated from it keeps working across reloads: `rule` is any
//! name and `cost` any whole number up to 1,000,000. A deployment knows more: which rules a
//! decision call can name (those whose `scope` holds `api`) and how many units each can grant
//! at once. Narrowed, the document says so: `rule` is one of those names, and per rule `cost`
//! is at most its capacity (an `if`/`then` per rule in `CheckOne`, `PeekOne` and
//! `Descriptor`). A request valid by this document is one the configuration decides (200 or
//! 429), never a 400, except for what JSON Schema cannot state: the summed cost of one rule
//! and key across `descriptors` must fit that rule's capacity too. Contract tests and fuzzers
//! of a deployment (the test suite's schemathesis run) read this one.

use serde_json::{json, Value};

/// The request schemas that name a rule and a cost.
const ITEMS: [&str; 3] = ["CheckOne", "PeekOne", "Descriptor"];

/// Narrows `doc` to `rules`, each a decision call's rule name and its capacity (units at once).
pub(super) fn apply(doc: &mut Value, file: &str, rules: &[(&str, u64)]) {
    let names: Vec<&str> = rules.iter().map(|(name, _)| *name).collect();
    if let Some(info) = doc.get_mut("info").and_then(Value::as_object_mut) {
        let description = info
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        info.insert(
            "description".into(),
            Value::String(format!(
                "{description}\n\nNarrowed to the configuration {file}: `rule` is one of its \
                 decision rules and `cost` at most that rule's capacity (`floodgate openapi \
                 --config`)."
            )),
        );
    }
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for name in ITEMS {
        let Some(schema) = schemas.get_mut(name).and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(rule) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut("rule"))
            .and_then(Value::as_object_mut)
        {
            rule.remove("example");
            rule.insert("enum".into(), json!(names));
        }
        let per_rule: Vec<Value> = rules
            .iter()
            .map(|(rule, capacity)| {
                json!({
                    "if": {"properties": {"rule": {"const": rule}}, "required": ["rule"]},
                    "then": {"properties": {"cost": {"maximum": capacity}}},
                })
            })
            .collect();
        if !per_rule.is_empty() {
            schema.insert("allOf".into(), Value::Array(per_rule));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_become_an_enum_and_each_cost_its_capacity() {
        let mut doc: Value = serde_json::from_str(&super::super::document()).unwrap();
        apply(&mut doc, "rules.toml", &[("a", 10), ("b", 2)]);
        for name in ITEMS {
            let schema = &doc["components"]["schemas"][name];
            assert_eq!(
                schema["properties"]["rule"]["enum"],
                json!(["a", "b"]),
                "{name}"
            );
            assert_eq!(
                schema["allOf"][1]["then"]["properties"]["cost"]["maximum"],
                2
            );
            assert_eq!(schema["allOf"][1]["if"]["properties"]["rule"]["const"], "b");
        }
        assert!(doc["info"]["description"]
            .as_str()
            .unwrap()
            .contains("Narrowed to the configuration rules.toml"));
    }
}
