//! The request bodies whose members exclude one another, written as `oneOf` in the document.
//!
//! The request types parse every member as optional and the handlers refuse the combinations
//! that make no sense with a 400 naming the member (`rule`/`key`/`cost` or `descriptors`;
//! `cost` or `costs`; no `max_wait_ms` or `reserve` on a peek). A document generated from the
//! types alone would call those bodies valid, so a client generated from it could send them,
//! and a fuzzer holding the service to its document (schemathesis' `positive_data_acceptance`)
//! rightly reports them. Each such body is rewritten here into one variant per accepted shape,
//! built from the members of the derived schema so that the descriptions and bounds are still
//! the type's own.

use serde_json::{json, Map, Value};

/// The shapes of a body: its derived schema's name, the name of the rewritten schema, and per
/// variant the name of its own schema (a client generator names its type after it), its
/// members and the ones it requires.
struct Shapes {
    derived: &'static str,
    name: &'static str,
    description: &'static str,
    variants: &'static [(
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
    )],
}

const CHECK: Shapes = Shapes {
    derived: "CheckRequest",
    name: "CheckRequest",
    description: "A decision request: one item (`rule`, `key`, `cost`) or several \
        (`descriptors`), not both.",
    variants: &[
        (
            "CheckOne",
            &["rule", "key", "cost", "max_wait_ms", "reserve"],
            &["rule", "key"],
        ),
        (
            "CheckMany",
            &["descriptors", "max_wait_ms", "reserve"],
            &["descriptors"],
        ),
    ],
};

const PEEK: Shapes = Shapes {
    derived: "CheckRequest",
    name: "PeekRequest",
    description: "A peek: the items of a decision request, without `max_wait_ms` and `reserve` \
        (a peek waits for nothing and reserves nothing).",
    variants: &[
        ("PeekOne", &["rule", "key", "cost"], &["rule", "key"]),
        ("PeekMany", &["descriptors"], &["descriptors"]),
    ],
};

const SETTLE: Shapes = Shapes {
    derived: "SettleRequest",
    name: "SettleRequest",
    description: "A settle: the reservation token and the actual cost (one reserved item) or \
        costs (one per reserved item, in the order of the check's descriptors), not both.",
    variants: &[
        (
            "SettleOne",
            &["reservation", "cost"],
            &["reservation", "cost"],
        ),
        (
            "SettleMany",
            &["reservation", "costs"],
            &["reservation", "costs"],
        ),
    ],
};

/// Rewrites the exclusive bodies of `doc` and points `/v1/peek` at its own schema.
pub(super) fn apply(doc: &mut Value) {
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    // Every variant is built from the derived schemas before any is replaced.
    let built: Vec<(String, Value)> = [&CHECK, &PEEK, &SETTLE]
        .iter()
        .filter_map(|shapes| {
            // Only a derived schema has members: a rewritten one is left as it is.
            let derived = schemas.get(shapes.derived)?.get("properties")?;
            Some(one_of(shapes, derived))
        })
        .flatten()
        .collect();
    for (name, schema) in built {
        schemas.insert(name, schema);
    }
    if let Some(schema) =
        doc.pointer_mut("/paths/~1v1~1peek/post/requestBody/content/application~1json/schema")
    {
        *schema = json!({ "$ref": "#/components/schemas/PeekRequest" });
    }
}

/// The schemas of `shapes` over `members` (the derived schema's `properties`): one per
/// variant, then the body's own, the `oneOf` of them.
fn one_of(shapes: &Shapes, members: &Value) -> Vec<(String, Value)> {
    let empty = Map::new();
    let members = members.as_object().unwrap_or(&empty);
    let mut schemas: Vec<(String, Value)> = shapes
        .variants
        .iter()
        .map(|(name, names, required)| {
            let properties: Map<String, Value> = names
                .iter()
                .filter_map(|name| Some((name.to_string(), members.get(*name)?.clone())))
                .collect();
            let schema = json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            });
            (name.to_string(), schema)
        })
        .collect();
    let refs: Vec<Value> = schemas
        .iter()
        .map(|(name, _)| json!({ "$ref": format!("#/components/schemas/{name}") }))
        .collect();
    let body = json!({ "description": shapes.description, "oneOf": refs });
    schemas.push((shapes.name.to_string(), body));
    schemas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_body_is_one_item_or_several_and_a_peek_has_no_wait() {
        let mut doc: Value = serde_json::from_str(&super::super::document()).unwrap();
        // Rewriting again changes nothing.
        let once = doc.clone();
        apply(&mut doc);
        assert_eq!(doc, once);
        let schemas = &doc["components"]["schemas"];
        let refs = |name: &str| schemas[name]["oneOf"].clone();
        let to = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
        assert_eq!(
            refs("CheckRequest"),
            json!([to("CheckOne"), to("CheckMany")])
        );
        assert_eq!(refs("PeekRequest"), json!([to("PeekOne"), to("PeekMany")]));
        assert_eq!(
            refs("SettleRequest"),
            json!([to("SettleOne"), to("SettleMany")])
        );
        assert_eq!(schemas["CheckOne"]["required"], json!(["rule", "key"]));
        assert_eq!(schemas["CheckMany"]["required"], json!(["descriptors"]));
        assert!(schemas["CheckMany"]["properties"].get("rule").is_none());
        // The members keep the type's bounds.
        assert_eq!(
            schemas["CheckOne"]["properties"]["cost"]["maximum"],
            1_000_000
        );
        assert!(schemas["PeekOne"]["properties"]
            .get("max_wait_ms")
            .is_none());
        assert!(schemas["PeekMany"]["properties"].get("reserve").is_none());
        assert_eq!(
            doc["paths"]["/v1/peek"]["post"]["requestBody"]["content"]["application/json"]
                ["schema"]["$ref"],
            "#/components/schemas/PeekRequest"
        );
        assert_eq!(
            schemas["SettleOne"]["required"],
            json!(["reservation", "cost"])
        );
        assert_eq!(
            schemas["SettleMany"]["required"],
            json!(["reservation", "costs"])
        );
    }
}
