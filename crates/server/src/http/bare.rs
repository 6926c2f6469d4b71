//! BENCH ONLY: `POST /v1/bench/bare`, the baseline the decision endpoint is measured against
//! by `floodgate bench --what http`. Served only with the hidden `floodgate serve
//! --bench-baseline` flag.
//!
//! It is a bare axum handler that does the work of `POST /v1/check` that is *not* rate
//! limiting, behind the same server stack (same process setup, runtime, listener, router,
//! body limit, connection handling): it reads the whole request body as [`Bytes`] under the
//! same [`DefaultBodyLimit`](axum::extract::DefaultBodyLimit), and answers 200 with a fixed
//! `application/json` body of the same shape and size as a one-rule `/v1/check` answer
//! ([`BARE_ANSWER`]). It does not parse the request, decide, count metrics, or send the
//! `RateLimit` headers: those are the decision endpoint's own work.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

/// The answer of [`bare`]: byte for byte what `/v1/check` answers for an admitted one-rule
/// request (`{"rule":"per-user","key":"user:000123","cost":1}` under a 10,000,000/s GCRA rule).
const BARE_ANSWER: &str = "{\"allowed\":true,\"decisions\":[{\"allowed\":true,\
\"key\":\"user:000123\",\"limit\":10000000,\"remaining\":9999999,\"reset_after_us\":1,\
\"retry_after_us\":null,\"rule\":\"per-user\",\"shadow\":false}],\"limit\":10000000,\
\"remaining\":9999999,\"reset_after_us\":1,\"retry_after_s\":null,\"retry_after_us\":null,\
\"rule\":\"per-user\"}";

/// `POST /v1/bench/bare`: reads the body, answers [`BARE_ANSWER`] (413 as plain text when the
/// body is over the limit, as axum does).
pub(super) async fn bare(body: Result<Bytes, BytesRejection>) -> Response {
    match body {
        Ok(_) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            BARE_ANSWER,
        )
            .into_response(),
        Err(rejection) => rejection.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bare_answer_is_json_shaped_like_a_check_answer() {
        let v: serde_json::Value = serde_json::from_str(BARE_ANSWER).unwrap();
        assert_eq!(v["allowed"], true);
        assert_eq!(v["decisions"][0]["key"], "user:000123");
        assert_eq!(v["rule"], "per-user");
    }
}
