//! The [`Walker`] over envoyproxy/ratelimit's YAML: the errors and the entries found so far,
//! and the readers of one node (a mapping, a string, a boolean, an integer) that check its type
//! and name the file, line and field when it is wrong.

use floodgate_core::{Micros, Policy, Quota};
use floodgate_tower::FailureMode;
use saphyr::{MarkedYaml, Scalar, YamlData};

use crate::config::descriptors::{DescriptorExtras, EntryMatch};
use crate::config::error::ConfigError;

/// One YAML `rate_limit` (or unlimited / block list entry) found while walking the files,
/// before names are settled.
pub(super) struct Found {
    pub(super) file: usize,
    pub(super) line: usize,
    pub(super) field: String,
    pub(super) domain: String,
    pub(super) entries: Vec<EntryMatch>,
    pub(super) kind: FoundKind,
    pub(super) limit_name: Option<String>,
    pub(super) replaces: Vec<String>,
    /// The descriptor keys of envoyproxy/ratelimit Floodgate reads beside the limit.
    pub(super) extras: DescriptorExtras,
}

pub(super) enum FoundKind {
    Rule {
        policy: Box<Policy>,
        shadow: bool,
        failure_mode: FailureMode,
        overrides: Vec<Quota>,
    },
    Unlimited,
    Blocked {
        period: Micros,
    },
}

pub(super) struct Walker<'a> {
    pub(super) errors: Vec<ConfigError>,
    pub(super) found: Vec<Found>,
    pub(super) files: &'a [(String, String)],
    /// Files may share a domain (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`): their
    /// descriptors are merged, a composite key given twice is still an error.
    pub(super) merge_domains: bool,
}

/// The 1-based line of a node.
pub(super) fn line(node: &MarkedYaml<'_>) -> usize {
    node.span.start.line().max(1)
}

pub(super) fn type_name(node: &MarkedYaml<'_>) -> &'static str {
    match &node.data {
        YamlData::Value(Scalar::Null) => "null",
        YamlData::Value(Scalar::Boolean(_)) => "a boolean",
        YamlData::Value(Scalar::Integer(_)) => "an integer",
        YamlData::Value(Scalar::FloatingPoint(_)) => "a number",
        YamlData::Value(Scalar::String(_)) => "a string",
        YamlData::Sequence(_) => "a list",
        YamlData::Mapping(_) => "a mapping",
        _ => "a value",
    }
}

impl Walker<'_> {
    pub(super) fn error(
        &mut self,
        file: usize,
        line: usize,
        field: &str,
        message: impl Into<String>,
    ) {
        self.errors.push(ConfigError {
            file: self.files[file].0.clone(),
            line,
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// The fields of a mapping node as `(name, key line, value)`; an error (and `None`) when
    /// the node is not a mapping or a key is not a string.
    pub(super) fn mapping<'n, 'i>(
        &mut self,
        file: usize,
        node: &'n MarkedYaml<'i>,
        field: &str,
    ) -> Option<Vec<(String, usize, &'n MarkedYaml<'i>)>> {
        let YamlData::Mapping(map) = &node.data else {
            self.error(
                file,
                line(node),
                field,
                format!("expected a mapping, got {}", type_name(node)),
            );
            return None;
        };
        let mut out = Vec::with_capacity(map.len());
        for (k, v) in map {
            match &k.data {
                YamlData::Value(Scalar::String(s)) => out.push((s.to_string(), line(k), v)),
                _ => self.error(
                    file,
                    line(k),
                    field,
                    format!("keys must be strings, got {}", type_name(k)),
                ),
            }
        }
        Some(out)
    }

    /// A scalar's text: a string as it is, any other scalar as written in the file (so
    /// `value: 007` is `"007"`, as envoyproxy/ratelimit's YAML decoder reads it).
    pub(super) fn text(
        &mut self,
        file: usize,
        node: &MarkedYaml<'_>,
        field: &str,
    ) -> Option<String> {
        match &node.data {
            YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
            YamlData::Value(Scalar::Null) => Some(String::new()),
            YamlData::Value(_) => {
                let (start, end) = (node.span.start.index(), node.span.end.index());
                let written: String = self.files[file]
                    .1
                    .chars()
                    .skip(start)
                    .take(end.saturating_sub(start))
                    .collect();
                Some(written.trim().to_string())
            }
            _ => {
                self.error(
                    file,
                    line(node),
                    field,
                    format!("expected a string, got {}", type_name(node)),
                );
                None
            }
        }
    }

    pub(super) fn boolean(
        &mut self,
        file: usize,
        node: &MarkedYaml<'_>,
        field: &str,
    ) -> Option<bool> {
        match &node.data {
            YamlData::Value(Scalar::Boolean(b)) => Some(*b),
            _ => {
                self.error(
                    file,
                    line(node),
                    field,
                    format!("expected true or false, got {}", type_name(node)),
                );
                None
            }
        }
    }

    pub(super) fn integer(
        &mut self,
        file: usize,
        node: &MarkedYaml<'_>,
        field: &str,
        max: u64,
    ) -> Option<u64> {
        match &node.data {
            YamlData::Value(Scalar::Integer(n)) if *n >= 0 && (*n as u64) <= max => Some(*n as u64),
            _ => {
                self.error(
                    file,
                    line(node),
                    field,
                    format!("expected a whole number from 0 to {max}"),
                );
                None
            }
        }
    }

    /// An unknown key: what Floodgate says of envoyproxy/ratelimit's keys it does not take,
    /// else "unknown field" with the keys taken here (`expected`).
    pub(super) fn unknown(
        &mut self,
        file: usize,
        line: usize,
        at: &str,
        key: &str,
        expected: &[&str],
    ) {
        let field = if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        };
        let message = match key {
            "delay" => {
                "delay is not supported: the rate limit service answers OK or OVER_LIMIT and \
                 cannot hold a request (to hold requests behind Envoy, give a TOML rule a \
                 `delay` and use ext_authz with forward-auth; docs/envoy.md)"
            }
            _ => {
                let expected = expected.join(", ");
                self.error(
                    file,
                    line,
                    &field,
                    format!("unknown field (expected one of: {expected})"),
                );
                return;
            }
        };
        self.error(file, line, &field, message);
    }
}
