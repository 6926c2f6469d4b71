//! Query parameters with errors that name the parameter at fault.

use axum::extract::{FromRequestParts, Query};
use axum::response::Response;
use http::request::Parts;
use http::StatusCode;

use super::problem::invalid;

/// The query parameters of a request, as decoded `(name, value)` pairs, with typed getters
/// whose errors are 400 problems naming the parameter (axum's `Query<T>` answers a bad value
/// with a plain-text 400 that names nothing). Unknown parameters are ignored, since proxies
/// may add their own.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Response> {
        match Query::<Vec<(String, String)>>::try_from_uri(&parts.uri) {
            Ok(Query(pairs)) => Ok(Self(pairs)),
            Err(e) => Err(invalid(StatusCode::BAD_REQUEST, "query", e.body_text())),
        }
    }
}

impl QueryParams {
    /// The value of parameter `name`: `None` when absent; a 400 naming it when given twice.
    ///
    /// # Errors
    /// A problem response when `name` appears more than once.
    pub(crate) fn get(&self, name: &str) -> Result<Option<&str>, Response> {
        let mut found = self
            .0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str());
        let first = found.next();
        if found.next().is_some() {
            return Err(invalid(
                StatusCode::BAD_REQUEST,
                name,
                "given more than once",
            ));
        }
        Ok(first)
    }

    /// A boolean parameter: `true` or `false` (`None` when absent).
    ///
    /// # Errors
    /// A 400 naming `name` for any other value, or when it is given twice.
    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, Response> {
        match self.get(name)? {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(invalid(
                StatusCode::BAD_REQUEST,
                name,
                format!("must be true or false, got {other:?}"),
            )),
        }
    }

    /// A `u16` parameter (`None` when absent).
    ///
    /// # Errors
    /// A 400 naming `name` when the value is not a whole number from 0 to 65535, or when it is
    /// given twice.
    pub(crate) fn u16(&self, name: &str) -> Result<Option<u16>, Response> {
        match self.get(name)? {
            None => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| {
                invalid(
                    StatusCode::BAD_REQUEST,
                    name,
                    format!("must be a whole number, got {text:?}"),
                )
            }),
        }
    }
}
