//! The OpenAPI 3.1 document of the HTTP API: `GET /v1/openapi.json` and `floodgate openapi`
//! (written to `docs/openapi.json`, which a test keeps current).
//!
//! The request schemas are the request types themselves (`CheckRequest`, `Descriptor`,
//! `SettleRequest`, `SimulateRequest`: what parses the bodies) and so are the decision entries
//! of the answers (`DecisionEntry`, `SettledEntry`); the operations are in [`paths`]. The
//! answers that the handlers write field by field or as JSON values are described by the types
//! in [`answers`], which the schema-driven fuzzer of the test suite (`tests/serve_openapi.rs`)
//! holds to what the service really answers. The endpoint holds no client data (no key, no
//! count, no configuration), so it needs no token.

mod answers;
mod cost;
mod exclusive;
mod paths;
mod patterns;
mod specialise;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

pub(crate) use cost::Cost;

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Floodgate",
        description = "The HTTP API of `floodgate serve`: decisions (`/v1/check`, `/v1/peek`, \
            `/v1/settle`), forward-auth for reverse proxies, the admin keys API, the simulator \
            and the web page's data, and the operations endpoints. Times are microseconds \
            (`_us`) unless a name says otherwise (`_ms`, `_s`). Every error is \
            `application/problem+json` (RFC 9457) naming the request `field` at fault.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        paths::check,
        paths::peek,
        paths::settle,
        paths::inspect_key,
        paths::reset_key,
        paths::forward_auth_get,
        paths::forward_auth_post,
        paths::forward_auth_envoy,
        paths::simulate,
        paths::ui_live,
        paths::ui_choices,
        paths::ui_page,
        paths::ui_asset,
        paths::healthz,
        paths::readyz,
        paths::metrics,
        paths::openapi,
    ),
    components(schemas(answers::Problem, paths::DenyStatus)),
    modifiers(&Security, &Problems, &Links),
    tags(
        (name = "decisions", description = "Decide, peek and settle explicit (rule, key, cost) items."),
        (name = "forward-auth", description = "The rules applied to a request a reverse proxy asks about."),
        (name = "admin", description = "A key's standing and its reset (the admin token; on `--admin-listen` in proxy mode)."),
        (name = "simulator", description = "The simulator and the web page's data."),
        (name = "operations", description = "Liveness, readiness, metrics and this document."),
    )
)]
pub(crate) struct ApiDoc;

/// The document as pretty JSON (what `docs/openapi.json` holds, with a final newline).
pub(crate) fn document() -> String {
    pretty(&contract())
}

/// The document narrowed to `config` ([`specialise`]): `rule` one of its decision rules,
/// `cost` at most that rule's capacity. `floodgate openapi --config FILE` prints it.
pub(crate) fn document_for(config: &crate::config::Config) -> String {
    let mut doc = contract();
    let rules: Vec<(&str, u64)> = config
        .rules
        .iter()
        .filter(|r| {
            r.override_of.is_none() && r.applies_to.contains(floodgate_limiter::Traffic::Api)
        })
        .map(|r| (&*r.name, r.policy.capacity()))
        .collect();
    specialise::apply(&mut doc, &config.file, &rules);
    pretty(&doc)
}

/// The document every configuration shares (what `GET /v1/openapi.json` answers).
fn contract() -> serde_json::Value {
    // Serializing a tree of maps, strings and numbers does not fail.
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    camel_case_links(&mut doc);
    exclusive::apply(&mut doc);
    patterns::apply(&mut doc);
    doc
}

/// Pretty JSON with a final newline.
fn pretty(doc: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
}

/// utoipa 5 writes a link's members in snake case (`operation_id`, `request_body`); OpenAPI
/// names them in camel case (`operationId`, `requestBody`), which is what clients and fuzzers
/// read.
fn camel_case_links(doc: &mut serde_json::Value) {
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    let responses = paths
        .values_mut()
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
        .filter_map(|operation| operation.get_mut("responses")?.as_object_mut())
        .flat_map(|responses| responses.values_mut());
    for response in responses {
        let Some(links) = response.get_mut("links").and_then(|l| l.as_object_mut()) else {
            continue;
        };
        for link in links.values_mut().filter_map(|l| l.as_object_mut()) {
            for (snake, camel) in [
                ("operation_id", "operationId"),
                ("operation_ref", "operationRef"),
                ("request_body", "requestBody"),
            ] {
                if let Some(value) = link.remove(snake) {
                    link.insert(camel.into(), value);
                }
            }
        }
    }
}

/// `GET /v1/openapi.json`.
pub(super) async fn serve() -> Response {
    // Built once: the document is the same for the life of the process, and every answer
    // shares its bytes (a copy per request cost 95 KB per answer a client held unread).
    static DOCUMENT: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    let text = DOCUMENT
        .get_or_init(|| bytes::Bytes::from(document()))
        .clone();
    (
        StatusCode::OK,
        [(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        text,
    )
        .into_response()
}

/// The two bearer tokens.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |what: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(what))
                    .build(),
            )
        };
        components.add_security_scheme(
            "api_token",
            bearer(
                "`[server] api_token` (or `--api-token`, `FLOODGATE_API_TOKEN`): needed by the \
                 decision API when configured; without one the decision API is open.",
            ),
        );
        components.add_security_scheme(
            "admin_token",
            bearer(
                "`[server] admin_token` (or `FLOODGATE_ADMIN_TOKEN`): the admin API exists only \
                 when one is configured (404 otherwise); it also opens `/v1/simulate` and \
                 `/v1/ui/live`.",
            ),
        );
    }
}

/// The problem answers every operation may give, added to each operation from [`paths::PROBLEMS`].
struct Problems;

impl Modify for Problems {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                ("get", &mut item.get),
                ("post", &mut item.post),
                ("put", &mut item.put),
                ("delete", &mut item.delete),
                ("patch", &mut item.patch),
                ("head", &mut item.head),
                ("options", &mut item.options),
                ("trace", &mut item.trace),
            ];
            let ids: Vec<&String> = operations
                .iter()
                .filter_map(|(_, o)| o.as_ref()?.operation_id.as_ref())
                .collect();
            let shared = (1..ids.len()).any(|i| ids[..i].contains(&ids[i]));
            for (method, operation) in operations {
                let Some(operation) = operation else {
                    continue;
                };
                add_problems(path, operation);
                // One function for several methods (the Envoy path) gives them one id: an
                // operation id must be unique, so each gets its method appended.
                if shared {
                    if let Some(id) = operation.operation_id.as_mut() {
                        *id = format!("{id}_{method}");
                    }
                }
            }
        }
    }
}

/// Adds the problem answers of `path` (from [`paths::PROBLEMS`]) that `operation` does not
/// describe itself.
fn add_problems(path: &str, operation: &mut Operation) {
    let Some((_, statuses)) = paths::PROBLEMS.iter().find(|(p, _)| *p == path) else {
        return;
    };
    for status in statuses.iter() {
        let code = status.to_string();
        if operation.responses.responses.contains_key(&code) {
            continue;
        }
        let response = ResponseBuilder::new()
            .description(paths::problem_description(*status))
            .content(
                floodgate_tower::response::PROBLEM_JSON,
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .build();
        operation
            .responses
            .responses
            .insert(code, RefOr::T(response));
    }
}

/// The link of a granted reservation to its settle (`reservation` of the check's answer), for
/// generated clients and stateful fuzzing.
struct Links;

impl Modify for Links {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(check) = openapi
            .paths
            .paths
            .get_mut("/v1/check")
            .and_then(|item| item.post.as_mut())
        else {
            return;
        };
        let Some(RefOr::T(granted)) = check.responses.responses.get_mut("200") else {
            return;
        };
        let link = LinkBuilder::new()
            .operation_id("settle")
            .description("Settle the reservation with its actual cost.")
            .request_body(Some(serde_json::json!({
                "reservation": "$response.body#/reservation",
                "cost": 0,
            })))
            .build();
        granted.links.insert("settle".into(), RefOr::T(link));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn doc() -> Value {
        serde_json::from_str(&document()).unwrap()
    }

    /// The bounds the document states are the ones the handlers enforce.
    #[test]
    fn the_documented_bounds_are_the_enforced_ones() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        // The first shape holds `rule`/`key`/`cost`, the second `descriptors`.
        let check = &schemas["CheckOne"]["properties"];
        let several = &schemas["CheckMany"]["properties"];
        let max = |v: &Value| v["maximum"].as_u64();
        let cost = crate::config::MAX_COST;
        assert_eq!(max(&check["cost"]), Some(cost));
        assert_eq!(
            max(&schemas["Descriptor"]["properties"]["cost"]),
            Some(cost)
        );
        assert_eq!(max(&schemas["SettleOne"]["properties"]["cost"]), Some(cost));
        assert_eq!(max(&schemas["Cost"]), Some(cost));
        assert_eq!(max(&check["max_wait_ms"]), Some(86_400_000));
        let key_bytes = super::super::bounds::MAX_KEY_BYTES as u64;
        assert_eq!(check["key"]["maxLength"].as_u64(), Some(key_bytes));
        assert_eq!(
            schemas["Descriptor"]["properties"]["key"]["maxLength"].as_u64(),
            Some(key_bytes)
        );
        let descriptors = super::super::bounds::MAX_CHECK_DESCRIPTORS as u64;
        assert_eq!(
            several["descriptors"]["maxItems"].as_u64(),
            Some(descriptors)
        );
        assert_eq!(doc["openapi"], "3.1.0");
    }

    /// Every path the API router serves is documented (the debug clock and the bench
    /// baseline are not API).
    #[test]
    fn every_path_has_its_problems_and_an_operation() {
        let doc = doc();
        let documented: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for (path, _) in paths::PROBLEMS {
            assert!(documented.contains(path), "{path} is not documented");
        }
        assert_eq!(documented.len(), paths::PROBLEMS.len());
    }
}
