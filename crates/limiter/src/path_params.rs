//! Path parameters (`/api/login;jsessionid=x`): RFC 3986 keeps `;jsessionid=x` in the segment,
//! so `/api/login;jsessionid=x` is not under `/api/login`; but Tomcat, Spring, Jetty and
//! other servlet containers strip every segment's parameters before routing and serve it as
//! `/api/login`. Read the RFC's way, a client would walk around any path rule with one `;`
//! (and `/x/..;/api/login`, which Tomcat serves as `/api/login`, around any rule on `/api`).
//! So rules match and count request paths without them by default ([`PathParameters`]).

use std::borrow::Cow;

use http::uri::{PathAndQuery, Uri};

/// What rule matching does with path parameters (`;name=value` in a path segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathParameters {
    /// Match and count paths without them: `/api/login;jsessionid=x/a;v=2` is read as
    /// `/api/login/a` (every literal `;` up to the segment's end removed, before dot segments
    /// are resolved, as servlet containers do; an escaped `%3B` is part of the segment). The
    /// default.
    #[default]
    Strip,
    /// Keep them, as RFC 3986 does: `/api/login;x=1` is a segment of its own, not under
    /// `/api/login` (for an upstream that routes on them).
    Keep,
}

/// `path` without its segments' parameters: each literal `;` and what follows it up to the
/// next `/` removed. Borrowed when there is none.
///
/// ```
/// use floodgate_limiter::strip_path_parameters;
/// assert_eq!(strip_path_parameters("/api/login;jsessionid=x"), "/api/login");
/// assert_eq!(strip_path_parameters("/x/..;/api/a;v=1/b"), "/x/../api/a/b");
/// assert_eq!(strip_path_parameters("/api/a%3Bb"), "/api/a%3Bb");
/// ```
pub fn strip_path_parameters(path: &str) -> Cow<'_, str> {
    if !path.contains(';') {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(segment.split(';').next().unwrap_or_default());
    }
    Cow::Owned(out)
}

/// `uri` with its path's parameters stripped (scheme, authority and query kept), or `None`
/// when its path has none.
pub(crate) fn without_parameters(uri: &Uri) -> Option<Uri> {
    let Cow::Owned(path) = strip_path_parameters(uri.path()) else {
        return None;
    };
    let text = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let mut parts = uri.clone().into_parts();
    // Removing characters from a valid path leaves a valid one; kept total all the same.
    parts.path_and_query = Some(PathAndQuery::try_from(text).ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_segment_loses_its_parameters_and_nothing_else() {
        for (path, expected) in [
            ("/api/login;jsessionid=x", "/api/login"),
            ("/api;a=1;b=2/login", "/api/login"),
            ("/;x", "/"),
            ("/api/;x/y", "/api//y"),
            ("/x/..;/api/login", "/x/../api/login"),
            ("/api/login", "/api/login"),
        ] {
            assert_eq!(strip_path_parameters(path), expected, "{path}");
        }
    }

    #[test]
    fn the_uri_keeps_its_authority_and_query() {
        let uri: Uri = "http://api.example.com:8080/api/login;jsessionid=x?next=/a;b"
            .parse()
            .unwrap();
        let stripped = without_parameters(&uri).unwrap();
        assert_eq!(stripped.path(), "/api/login");
        assert_eq!(stripped.query(), Some("next=/a;b"));
        assert_eq!(
            stripped.authority().unwrap().as_str(),
            "api.example.com:8080"
        );
        assert!(without_parameters(&"/api/login?x=;".parse().unwrap()).is_none());
    }
}
