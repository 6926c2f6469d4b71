//! Reading a JSON request body: the size bound, strict parsing (unknown and repeated members
//! refused), whole numbers, and the store key of a client-supplied key.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use http::StatusCode;
use serde::Deserialize;

use super::bounds::MAX_BODY_BYTES;
use super::problem::invalid;

/// An optional member that, when present, must hold a value: `null` is a 400 naming the
/// member (as any other wrong type), never the same as leaving it out.
pub(crate) fn not_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A JSON number that must be a whole number from 0 to `max` (`what`: "whole number", or with
/// its unit); the error says why, for a 400 naming the member. A whole number written with a
/// fraction or an exponent (`2.0`, `3e0`, `1.5e3`) is that number: JSON Schema's `integer`
/// (the OpenAPI document's type for these members) is any number whose fraction is zero; below
/// 2^64 a whole `f64` is a `u64` exactly, so any `max` is held exactly.
pub(crate) fn whole_number(n: &serde_json::Number, max: u64, what: &str) -> Result<u64, String> {
    if let Some(v) = n.as_u64() {
        if v <= max {
            return Ok(v);
        }
    } else if let Some(f) = n.as_f64() {
        if (0.0..18_446_744_073_709_551_616.0).contains(&f) && f.fract() == 0.0 {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let v = f as u64;
            if v <= max {
                return Ok(v);
            }
        }
    }
    Err(format!("must be a {what} between 0 and {max}, got {n}"))
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`]; errors name the field at fault.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, Response> {
    let bytes = body_within(body, MAX_BODY_BYTES)?;
    parse_json(&bytes)
}

/// A body of at most `max` bytes, or the problem answering why not: a 408 past the body
/// deadline and a 503 with the body budget full ([`super::body_budget::refusal`]), a 413 above
/// `max`, else the rejection's status, each naming `body`.
pub(crate) fn body_within(
    body: Result<Bytes, BytesRejection>,
    max: usize,
) -> Result<Bytes, Response> {
    let too_large = || {
        invalid(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body",
            format!("must be at most {max} bytes"),
        )
    };
    let bytes = body.map_err(|rejection| {
        if let Some(refused) = super::body_budget::refusal(&rejection) {
            refused
        } else if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            invalid(rejection.status(), "body", rejection.body_text())
        }
    })?;
    if bytes.len() > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Parses a JSON object into `T`, refusing what the typed request refuses: unknown and
/// repeated members (`{"rule": "a", "rule": "b"}` is an error, never "the last one wins"), a
/// body that is not an object, trailing data. Errors are 400 problems naming the field at fault
/// (`body` for the syntax).
pub(crate) fn parse_json<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, Response> {
    let bad = |field: &str, detail: String| invalid(StatusCode::BAD_REQUEST, field, detail);
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        // Valid JSON of another shape, or not JSON at all.
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => bad("body", "invalid JSON: expected an object".into()),
                Err(e) => bad("body", format!("invalid JSON: {e}")),
            },
        );
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        // A missing or repeated member is reported at its object; name the member itself.
        let member = ["missing field `", "duplicate field `"]
            .iter()
            .find_map(|p| message.strip_prefix(p)?.split('`').next());
        let field = match (member, path.as_str()) {
            _ if inner.is_syntax() || inner.is_eof() => "body".to_string(),
            (Some(m), ".") => m.to_string(),
            (Some(m), at) => format!("{at}.{m}"),
            (None, ".") => "body".to_string(),
            (None, at) => at.to_string(),
        };
        bad(&field, format!("invalid JSON: {inner}"))
    })?;
    de.end()
        .map_err(|e| bad("body", format!("invalid JSON: {e}")))?;
    Ok(value)
}

/// The store key of a client-supplied key (`key=<value>`, escaped by floodgate-tower's encoder).
pub(crate) fn client_key(raw: &str) -> String {
    floodgate_tower::encode_key([("key", raw.as_bytes())])
}

/// Whether the `Transfer-Encoding` lines name exactly one coding, `chunked`: the only one
/// Floodgate reads (hyper removes the chunked framing and nothing else, so a body sent
/// `gzip, chunked` would be read as if it were not coded) and the only one the proxy can pass
/// on (it removes the header as hop-by-hop, so an unnamed `gzip` would be lost, and `chunked`
/// applied twice is not valid, RFC 9112 7).
pub(crate) fn only_chunked(headers: &http::HeaderMap) -> bool {
    let mut codings = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','));
    codings
        .next()
        .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"))
        && codings.next().is_none()
}

/// The answer to a request whose `Transfer-Encoding` is not [`only_chunked`]: 501 naming
/// `transfer-encoding` (RFC 9112 6.1), on the API and the proxy alike. Counted in
/// `floodgate_requests_rejected_total{reason="invalid"}`, as a 400 is.
pub(crate) fn unsupported_coding() -> Response {
    super::problem::invalid(
        http::StatusCode::NOT_IMPLEMENTED,
        "transfer-encoding",
        "only chunked is supported (a body of another coding would be read, or reach the \
         upstream, as if it had none)",
    )
}
