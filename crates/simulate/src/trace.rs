//! Reading recorded or hand-written traffic for `floodgate simulate --trace FILE`.
//!
//! Each line is one request, either CSV `t_ms,key,cost` or a JSON object
//! `{"t_ms": 950, "key": "alice", "cost": 1}`; the two forms may be mixed. `t_ms` is
//! milliseconds since the start of the simulation (decimals down to the microsecond, e.g.
//! `950.5`); `cost` is optional and defaults to 1. Blank lines and lines starting with `#` are
//! skipped, and a first CSV line whose `t_ms` field reads `t_ms` is a header. Lines need not be
//! in time order: requests are replayed sorted by time, ties in file order.

use std::path::Path;

use super::traffic::{format_duration, parse_decimal_scaled, Request, Traffic};

/// A trace line that could not be read: names the file, the 1-based line and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: field `{field}`: {reason}")]
pub struct TraceError {
    /// The trace file as given on the command line.
    pub file: String,
    /// 1-based line number (0 when the file itself could not be read).
    pub line: usize,
    /// `t_ms`, `key`, `cost`, or `line` when the line as a whole is malformed.
    pub field: &'static str,
    /// What was wrong.
    pub reason: String,
}

/// Reads a trace file into [`Traffic`] named `trace`.
///
/// # Errors
/// [`TraceError`] for an unreadable file (line 0) or the first bad line.
pub fn read_trace(path: &Path) -> Result<Traffic, TraceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TraceError {
        file: file.clone(),
        line: 0,
        field: "line",
        reason: format!("cannot read the trace: {e}"),
    })?;
    parse_trace(&file, &text)
}

/// Parses trace text (see the module docs); `file` only names the source in errors.
///
/// # Errors
/// [`TraceError`] for the first bad line.
pub fn parse_trace(file: &str, text: &str) -> Result<Traffic, TraceError> {
    let mut requests = Vec::new();
    let mut seen_data = false;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fail = |field: &'static str, reason: String| TraceError {
            file: file.to_string(),
            line: index + 1,
            field,
            reason,
        };
        let parsed = if line.starts_with('{') {
            parse_json_line(line)
        } else {
            if !seen_data && line.split(',').next().map(str::trim) == Some("t_ms") {
                seen_data = true;
                continue; // header
            }
            parse_csv_line(line)
        };
        let (t_us, key, cost) = parsed.map_err(|(field, reason)| fail(field, reason))?;
        seen_data = true;
        requests.push(Request {
            t_us,
            key,
            cost,
            source: "trace",
        });
    }
    requests.sort_by_key(|r| r.t_us);
    let keys = {
        let mut keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.len()
    };
    let last = requests.last().map_or(0, |r| r.t_us);
    let description = format!(
        "{} requests from {file} ({keys} key{}, last at {})",
        requests.len(),
        if keys == 1 { "" } else { "s" },
        format_duration(last)
    );
    let span = last + 1;
    Ok(Traffic {
        name: "trace".into(),
        description,
        requests,
        span_us: span,
    })
}

type LineResult = Result<(u64, String, u64), (&'static str, String)>;

fn parse_csv_line(line: &str) -> LineResult {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    if !(2..=3).contains(&fields.len()) {
        return Err((
            "line",
            format!(
                "expected t_ms,key,cost (3 comma-separated fields), found {}",
                fields.len()
            ),
        ));
    }
    let t_us = parse_t_ms(fields[0])?;
    let key = parse_key(fields[1])?;
    let cost = match fields.get(2) {
        Some(text) => parse_cost(text)?,
        None => 1,
    };
    Ok((t_us, key, cost))
}

fn parse_json_line(line: &str) -> LineResult {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| ("line", format!("invalid JSON: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| ("line", "expected a JSON object".to_string()))?;
    if let Some(unknown) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "t_ms" | "key" | "cost"))
    {
        return Err((
            "line",
            format!("unknown field {unknown:?} (expected t_ms, key, cost)"),
        ));
    }
    let t_us = match object.get("t_ms") {
        Some(serde_json::Value::Number(n)) => parse_t_ms(&n.to_string())?,
        Some(other) => return Err(("t_ms", format!("expected a number, found {other}"))),
        None => return Err(("t_ms", "missing".into())),
    };
    let key = match object.get("key") {
        Some(serde_json::Value::String(s)) => parse_key(s)?,
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(other) => return Err(("key", format!("expected a string, found {other}"))),
        None => return Err(("key", "missing".into())),
    };
    let cost = match object.get("cost") {
        Some(serde_json::Value::Number(n)) => parse_cost(&n.to_string())?,
        Some(other) => return Err(("cost", format!("expected a whole number, found {other}"))),
        None => 1,
    };
    Ok((t_us, key, cost))
}

fn parse_t_ms(text: &str) -> Result<u64, (&'static str, String)> {
    parse_decimal_scaled(text, 1_000)
        .and_then(|us| u64::try_from(us).ok())
        // Keep simulated times far below the epoch base's headroom.
        .filter(|&us| us <= MAX_TRACE_US)
        .ok_or_else(|| {
            (
                "t_ms",
                format!(
                    "{text:?} is not a time in milliseconds (a non-negative number with at most \
                     3 decimals, at most {} ms)",
                    MAX_TRACE_US / 1_000
                ),
            )
        })
}

/// The latest accepted trace time: 10 years of microseconds.
const MAX_TRACE_US: u64 = 10 * 366 * 86_400 * 1_000_000;

fn parse_key(text: &str) -> Result<String, (&'static str, String)> {
    if text.is_empty() {
        Err(("key", "empty".into()))
    } else {
        Ok(text.to_string())
    }
}

fn parse_cost(text: &str) -> Result<u64, (&'static str, String)> {
    match text.parse::<u64>() {
        Ok(0) => Err(("cost", "must be at least 1".into())),
        Ok(cost) => Ok(cost),
        Err(_) => Err(("cost", format!("{text:?} is not a whole number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_csv_with_header_json_and_comments() {
        let text = "t_ms,key,cost\n\
                    # a comment\n\
                    950,alice,1\n\
                    \n\
                    {\"t_ms\": 1050.5, \"key\": \"bob\", \"cost\": 100}\n\
                    10,alice\n";
        let t = parse_trace("t.csv", text).unwrap();
        let got: Vec<_> = t
            .requests
            .iter()
            .map(|r| (r.t_us, r.key.as_str(), r.cost))
            .collect();
        assert_eq!(
            got,
            [
                (10_000, "alice", 1),
                (950_000, "alice", 1),
                (1_050_500, "bob", 100)
            ]
        );
        assert_eq!(t.span_us, 1_050_501);
        assert_eq!(
            t.description,
            "3 requests from t.csv (2 keys, last at 1.0505 s)"
        );
    }

    #[test]
    fn bad_lines_name_file_line_and_field() {
        let cases = [
            ("1,a,1\nx,a,1\n", 2, "t_ms"),
            ("1,a,zero\n", 1, "cost"),
            ("1,a,0\n", 1, "cost"),
            ("1,,1\n", 1, "key"),
            ("1,a,1,9\n", 1, "line"),
            ("-5,a,1\n", 1, "t_ms"),
            ("0.0001,a,1\n", 1, "t_ms"),
            ("{\"t_ms\": 1}\n", 1, "key"),
            ("{\"t_ms\": \"1\", \"key\": \"a\"}\n", 1, "t_ms"),
            ("{\"t_ms\": 1, \"key\": \"a\", \"cost\": 1.5}\n", 1, "cost"),
            ("{\"t_ms\": 1, \"key\": \"a\", \"weight\": 2}\n", 1, "line"),
            ("{\"t_ms\": 1,\n", 1, "line"),
        ];
        for (text, line, field) in cases {
            let err = parse_trace("t.csv", text).unwrap_err();
            assert_eq!((err.line, err.field), (line, field), "{text:?}: {err}");
            assert_eq!(err.file, "t.csv");
        }
        let err = parse_trace("t.csv", "1,a,1\nx,a,1\n").unwrap_err();
        assert!(
            err.to_string().starts_with("t.csv:2: field `t_ms`: \"x\""),
            "{err}"
        );
    }
}
