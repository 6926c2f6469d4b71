//! The header parameters: a string or absent, never `null` (utoipa writes an optional one as
//! `["string", "null"]`, and a fuzzer then sends the text `null`), and the `pattern`s of the
//! forwarding headers of `GET /v1/forward-auth` ([`crate::http::forwarded_grammar`]), which
//! `#[utoipa::path]` parameters cannot carry.

use serde_json::Value;

use crate::http::forwarded_grammar::{HOST, METHOD, URI};

/// The header parameters given a pattern, and the pattern.
const PATTERNS: [(&str, &str); 3] = [
    ("X-Forwarded-Method", METHOD),
    ("X-Forwarded-Host", HOST),
    ("X-Forwarded-Uri", URI),
];

/// Makes every header parameter of `doc` a plain string and sets the patterns on those of
/// `GET /v1/forward-auth`.
pub(super) fn apply(doc: &mut Value) {
    let headers = doc
        .pointer_mut("/paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
        .filter_map(|operation| operation.get_mut("parameters")?.as_array_mut())
        .flat_map(|params| params.iter_mut())
        .filter(|param| param["in"] == "header");
    for param in headers {
        if let Some(schema) = param.get_mut("schema") {
            if schema["type"] == serde_json::json!(["string", "null"]) {
                schema["type"] = Value::from("string");
            }
        }
    }
    let Some(params) = doc
        .pointer_mut("/paths/~1v1~1forward-auth/get/parameters")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for param in params.iter_mut().filter(|p| p["in"] == "header") {
        let name = param["name"].as_str().unwrap_or_default().to_string();
        let pattern = PATTERNS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p);
        if let (Some(pattern), Some(schema)) = (pattern, param.get_mut("schema")) {
            schema["pattern"] = Value::from(pattern);
            // Stated besides the pattern: the fuzzer's boundary values honour bounds first.
            schema["minLength"] = Value::from(1);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_forwarding_headers_have_their_patterns() {
        let doc: serde_json::Value = serde_json::from_str(&super::super::document()).unwrap();
        let params = doc["paths"]["/v1/forward-auth"]["get"]["parameters"]
            .as_array()
            .unwrap();
        for (name, pattern) in super::PATTERNS {
            let param = params.iter().find(|p| p["name"] == name).unwrap();
            assert_eq!(param["schema"]["pattern"], pattern, "{name}");
            assert_eq!(param["schema"]["type"], "string", "{name}");
        }
    }
}
