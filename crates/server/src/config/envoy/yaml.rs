//! Reading envoyproxy/ratelimit's YAML: a walk over each file's nodes that checks every field
//! (naming its file, line and path) and collects each `rate_limit` found, for [`super::parse`]
//! to turn into rules.

use std::collections::HashMap;

use floodgate_core::{AlgorithmKind, Micros, Policy, Quota};
use floodgate_tower::FailureMode;
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use crate::config::depth;
use crate::config::descriptors::{path_name, DescriptorIndex, EntryMatch, ValueMatch};
use crate::config::error::ConfigError;
use crate::config::schema::{MAX_COST, MAX_SLIDING_LOG_LIMIT};

/// The period of an envoyproxy/ratelimit `unit` (case-insensitive), as its service computes
/// windows: a week is 7 days, a month 30 days, a year 365 days.
pub(crate) fn unit_period(unit: &str) -> Option<Micros> {
    let secs: u64 = match unit.to_ascii_lowercase().as_str() {
        "second" => 1,
        "minute" => 60,
        "hour" => 3_600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        "month" => 30 * 86_400,
        "year" => 365 * 86_400,
        _ => return None,
    };
    Some(secs * 1_000_000)
}

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

/// The fields of one `rate_limit`, as read (see [`Walker::rate_limit_fields`]).
struct RateLimitFields {
    /// `unit` and its line.
    unit: Option<(String, usize)>,
    requests: Option<u64>,
    unlimited: bool,
    name: Option<String>,
    replaces: Vec<String>,
    algorithm: Option<AlgorithmKind>,
    burst: Option<u64>,
    failure_mode: FailureMode,
    /// `overrides`: `((requests_per_unit, period), line, field)` each.
    overrides: Vec<((u64, Micros), usize, String)>,
}

pub(super) struct Walker<'a> {
    pub(super) errors: Vec<ConfigError>,
    pub(super) found: Vec<Found>,
    pub(super) files: &'a [(String, String)],
}

/// The 1-based line of a node.
fn line(node: &MarkedYaml<'_>) -> usize {
    node.span.start.line().max(1)
}

fn type_name(node: &MarkedYaml<'_>) -> &'static str {
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
    fn mapping<'n, 'i>(
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
    fn text(&mut self, file: usize, node: &MarkedYaml<'_>, field: &str) -> Option<String> {
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

    fn boolean(&mut self, file: usize, node: &MarkedYaml<'_>, field: &str) -> Option<bool> {
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

    fn integer(
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

    pub(super) fn file(
        &mut self,
        file: usize,
        name: &str,
        text: &str,
        domains: &mut HashMap<String, usize>,
        index: &mut DescriptorIndex,
    ) {
        // Bounded before the parser sees it: a deeply nested file would overflow its stack.
        if let Err(e) = depth::check_size(name, text).and_then(|()| depth::check_yaml(name, text)) {
            self.errors.push(e);
            return;
        }
        let docs = match MarkedYaml::load_from_str(text) {
            Ok(docs) => docs,
            Err(e) => {
                self.error(
                    file,
                    e.marker().line().max(1),
                    "",
                    format!("invalid YAML: {}", e.info()),
                );
                return;
            }
        };
        let Some(root) = docs.first() else {
            self.error(file, 1, "domain", "the file is empty: a domain is required");
            return;
        };
        if docs.len() > 1 {
            self.error(
                file,
                line(&docs[1]),
                "",
                "one YAML document per file (one domain per file)",
            );
        }
        let Some(fields) = self.mapping(file, root, "") else {
            return;
        };
        let mut domain = None;
        let mut descriptors = None;
        for (key, key_line, value) in fields {
            match key.as_str() {
                "domain" => domain = self.text(file, value, "domain").map(|d| (d, key_line)),
                "descriptors" => descriptors = Some(value),
                other => self.unknown(file, key_line, "", other, &["domain", "descriptors"]),
            }
        }
        let Some((domain, domain_line)) = domain.filter(|(d, _)| !d.is_empty()) else {
            self.error(file, line(root), "domain", "a non-empty domain is required");
            return;
        };
        if let Some(&first) = domains.get(&domain) {
            self.error(
                file,
                domain_line,
                "domain",
                format!(
                    "duplicate domain {domain:?} (also in {}): one domain per file",
                    self.files[first].0
                ),
            );
            return;
        }
        domains.insert(domain.clone(), file);
        index.add_domain(&domain);
        let _ = name;
        if let Some(list) = descriptors {
            self.descriptors(file, &domain, list, "descriptors", &[], index);
        }
    }

    /// An unknown key: what Floodgate says of envoyproxy/ratelimit's keys it does not take,
    /// else "unknown field" with the keys taken here (`expected`).
    fn unknown(&mut self, file: usize, line: usize, at: &str, key: &str, expected: &[&str]) {
        let field = if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        };
        let message = match key {
            "quota_mode" => "quota_mode is not supported by Floodgate (every limit enforces)",
            "value_to_metric" => {
                "value_to_metric is not supported: Floodgate never labels metrics with request \
                 values (their number is unbounded)"
            }
            "share_threshold" => {
                "share_threshold is not supported: each value matching a wildcard has its own \
                 counter"
            }
            "metadata" => "metadata is not supported (Floodgate sends no dynamic metadata)",
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

    /// The items of a `descriptors` list; `None` when it is null (no descriptors) or not a
    /// list (then an error).
    fn descriptor_list<'n, 'i>(
        &mut self,
        file: usize,
        list: &'n MarkedYaml<'i>,
        at: &str,
    ) -> Option<&'n [MarkedYaml<'i>]> {
        match &list.data {
            YamlData::Sequence(items) => Some(items),
            YamlData::Value(Scalar::Null) => None,
            _ => {
                self.error(
                    file,
                    line(list),
                    at,
                    format!("expected a list of descriptors, got {}", type_name(list)),
                );
                None
            }
        }
    }

    fn descriptors(
        &mut self,
        file: usize,
        domain: &str,
        list: &MarkedYaml<'_>,
        at: &str,
        parent: &[EntryMatch],
        index: &mut DescriptorIndex,
    ) {
        let Some(items) = self.descriptor_list(file, list, at) else {
            return;
        };
        let mut siblings: HashMap<(String, Option<String>), usize> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let here = format!("{at}[{i}]");
            let Some(fields) = self.mapping(file, item, &here) else {
                continue;
            };
            let mut key = None;
            let mut value = None;
            let mut rate_limit = None;
            let mut children = None;
            let mut shadow = false;
            for (name, key_line, v) in fields {
                let field = format!("{here}.{name}");
                match name.as_str() {
                    "key" => key = self.text(file, v, &field).map(|k| (k, line(v))),
                    "value" => value = self.text(file, v, &field),
                    "rate_limit" => rate_limit = Some(v),
                    "descriptors" => children = Some(v),
                    "shadow_mode" => shadow = self.boolean(file, v, &field).unwrap_or(false),
                    // Accepted: labels stay bounded whatever it says (see docs/envoy.md).
                    "detailed_metric" => {
                        let _ = self.boolean(file, v, &field);
                    }
                    other => self.unknown(
                        file,
                        key_line,
                        &here,
                        other,
                        &[
                            "key",
                            "value",
                            "rate_limit",
                            "descriptors",
                            "shadow_mode",
                            "detailed_metric",
                        ],
                    ),
                }
            }
            let Some((key, key_line)) = key.filter(|(k, _)| !k.is_empty()) else {
                self.error(
                    file,
                    line(item),
                    &format!("{here}.key"),
                    "descriptor has empty key",
                );
                continue;
            };
            let value = value.filter(|v| !v.is_empty());
            if let Some(&first) = siblings.get(&(key.clone(), value.clone())) {
                self.error(
                    file,
                    key_line,
                    &format!("{here}.key"),
                    format!(
                        "duplicate descriptor composite key {:?} (also {at}[{first}])",
                        path_name(
                            domain,
                            &[
                                parent,
                                &[EntryMatch {
                                    key: key.clone(),
                                    value: ValueMatch::parse(value.as_deref()),
                                }]
                            ]
                            .concat()
                        )
                    ),
                );
                continue;
            }
            siblings.insert((key.clone(), value.clone()), i);
            let mut entries = parent.to_vec();
            entries.push(EntryMatch {
                key,
                value: ValueMatch::parse(value.as_deref()),
            });
            // The node exists even without a limit: the look-up stops at the most specific
            // node, whether or not it limits anything (as envoyproxy/ratelimit's tree does).
            index.touch(domain, &entries);
            if let Some(rl) = rate_limit {
                self.rate_limit(
                    file,
                    domain,
                    rl,
                    &format!("{here}.rate_limit"),
                    &entries,
                    shadow,
                );
            }
            if let Some(children) = children {
                self.descriptors(
                    file,
                    domain,
                    children,
                    &format!("{here}.descriptors"),
                    &entries,
                    index,
                );
            }
        }
    }

    fn rate_limit(
        &mut self,
        file: usize,
        domain: &str,
        node: &MarkedYaml<'_>,
        at: &str,
        entries: &[EntryMatch],
        shadow: bool,
    ) {
        let Some(fields) = self.mapping(file, node, at) else {
            return;
        };
        let before = self.errors.len();
        let RateLimitFields {
            unit,
            requests,
            unlimited,
            name,
            replaces,
            algorithm,
            burst,
            failure_mode,
            overrides,
        } = self.rate_limit_fields(file, fields, at);
        let line_of = line(node);
        if let Some(n) = &name {
            if replaces.iter().any(|r| r == n) {
                self.error(
                    file,
                    line_of,
                    &format!("{at}.replaces"),
                    "replaces should not contain name of same descriptor",
                );
            }
        }
        let period = self.rate_limit_period(file, at, unit.as_ref(), unlimited, line_of);
        if unlimited && (algorithm.is_some() || burst.is_some() || !overrides.is_empty()) {
            self.error(
                file,
                line_of,
                at,
                "an unlimited rate limit takes no algorithm, burst or overrides",
            );
        }
        if self.errors.len() > before {
            return;
        }
        let found = |kind| Found {
            file,
            line: line_of,
            field: at.to_string(),
            domain: domain.to_string(),
            entries: entries.to_vec(),
            kind,
            limit_name: name.clone(),
            replaces: replaces.clone(),
        };
        if unlimited {
            self.found.push(found(FoundKind::Unlimited));
            return;
        }
        let Some(period) = period else { return };
        let requests = requests.unwrap_or(0);
        if requests == 0 {
            if algorithm.is_some() || burst.is_some() || !overrides.is_empty() {
                self.error(
                    file,
                    line_of,
                    at,
                    "requests_per_unit: 0 blocks every request; it takes no algorithm, burst or \
                     overrides",
                );
                return;
            }
            self.found.push(found(FoundKind::Blocked { period }));
            return;
        }
        let kind = algorithm.unwrap_or(AlgorithmKind::FixedWindow);
        let policy = match self.policy(kind, requests, period, burst) {
            Ok(p) => p,
            Err(msg) => {
                self.error(file, line_of, &format!("{at}.requests_per_unit"), msg);
                return;
            }
        };
        let mut quotas = Vec::new();
        for (q, l, f) in overrides {
            match self.policy(kind, q.0, q.1, None) {
                Ok(p) => quotas.push(*p.quota()),
                Err(msg) => self.error(file, l, &f, msg),
            }
        }
        self.found.push(found(FoundKind::Rule {
            policy: Box::new(policy),
            shadow,
            failure_mode,
            overrides: quotas,
        }));
    }

    /// The fields of one `rate_limit` mapping, each checked on its own (errors pushed).
    fn rate_limit_fields(
        &mut self,
        file: usize,
        fields: Vec<(String, usize, &MarkedYaml<'_>)>,
        at: &str,
    ) -> RateLimitFields {
        let mut unit = None;
        let mut requests = None;
        let mut unlimited = false;
        let mut name = None;
        let mut replaces = Vec::new();
        let mut algorithm = None;
        let mut burst = None;
        let mut failure_mode = FailureMode::Open;
        let mut overrides = Vec::new();
        for (key, key_line, v) in fields {
            let field = format!("{at}.{key}");
            match key.as_str() {
                "unit" => unit = self.text(file, v, &field).map(|u| (u, line(v))),
                "requests_per_unit" => {
                    requests = self.integer(file, v, &field, u64::from(u32::MAX));
                }
                "unlimited" => unlimited = self.boolean(file, v, &field).unwrap_or(false),
                "name" => name = self.text(file, v, &field).filter(|n| !n.is_empty()),
                "replaces" => replaces = self.replaces(file, v, &field),
                "algorithm" => {
                    if let Some(text) = self.text(file, v, &field) {
                        match text.parse::<AlgorithmKind>() {
                            Ok(kind) => algorithm = Some(kind),
                            Err(msg) => self.error(file, line(v), &field, msg),
                        }
                    }
                }
                "burst" => match self.integer(file, v, &field, MAX_COST) {
                    Some(0) => self.error(file, line(v), &field, "must be at least 1"),
                    b => burst = b,
                },
                "failure_mode" => match self.text(file, v, &field).as_deref() {
                    Some("open") => failure_mode = FailureMode::Open,
                    Some("closed") => failure_mode = FailureMode::Closed,
                    Some(other) => self.error(
                        file,
                        line(v),
                        &field,
                        format!("unknown value {other:?}; expected open or closed"),
                    ),
                    None => {}
                },
                "overrides" => overrides = self.overrides(file, v, &field),
                other => self.unknown(
                    file,
                    key_line,
                    at,
                    other,
                    &[
                        "unit",
                        "requests_per_unit",
                        "unlimited",
                        "name",
                        "replaces",
                        "algorithm",
                        "burst",
                        "failure_mode",
                        "overrides",
                    ],
                ),
            }
        }
        RateLimitFields {
            unit,
            requests,
            unlimited,
            name,
            replaces,
            algorithm,
            burst,
            failure_mode,
            overrides,
        }
    }

    /// The period of a `rate_limit`'s `unit` (`None` when unlimited, or on an error, pushed).
    fn rate_limit_period(
        &mut self,
        file: usize,
        at: &str,
        unit: Option<&(String, usize)>,
        unlimited: bool,
        line_of: usize,
    ) -> Option<Micros> {
        match (unit, unlimited) {
            (Some((u, l)), true) => {
                if unit_period(u).is_some() {
                    self.error(
                        file,
                        *l,
                        &format!("{at}.unit"),
                        "should not specify rate limit unit when unlimited",
                    );
                }
                None
            }
            (None, true) => None,
            (Some((u, l)), false) => match unit_period(u) {
                Some(p) => Some(p),
                None => {
                    self.error(
                        file,
                        *l,
                        &format!("{at}.unit"),
                        format!(
                            "invalid rate limit unit {u:?}; expected second, minute, hour, day, \
                             week, month or year"
                        ),
                    );
                    None
                }
            },
            (None, false) => {
                self.error(
                    file,
                    line_of,
                    &format!("{at}.unit"),
                    "missing: a rate limit needs a unit (second, minute, hour, day), or \
                     unlimited: true",
                );
                None
            }
        }
    }

    fn policy(
        &self,
        kind: AlgorithmKind,
        limit: u64,
        period: Micros,
        burst: Option<u64>,
    ) -> Result<Policy, String> {
        if kind == AlgorithmKind::SlidingLog && limit > MAX_SLIDING_LOG_LIMIT {
            return Err(format!(
                "the sliding log keeps one entry per admitted unit; its limit must be at most \
                 {MAX_SLIDING_LOG_LIMIT}, got {limit} (use sliding_window for large limits)"
            ));
        }
        let quota =
            Quota::with_burst(limit, period, burst.unwrap_or(limit)).map_err(|e| e.to_string())?;
        Policy::new(kind, quota).map_err(|e| e.to_string())
    }

    fn replaces(&mut self, file: usize, node: &MarkedYaml<'_>, at: &str) -> Vec<String> {
        let YamlData::Sequence(items) = &node.data else {
            self.error(
                file,
                line(node),
                at,
                format!("expected a list of {{name: ...}}, got {}", type_name(node)),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let here = format!("{at}[{i}]");
            let Some(fields) = self.mapping(file, item, &here) else {
                continue;
            };
            let mut name = None;
            for (key, key_line, v) in fields {
                match key.as_str() {
                    "name" => name = self.text(file, v, &format!("{here}.name")),
                    other => self.unknown(file, key_line, &here, other, &["name"]),
                }
            }
            match name.filter(|n| !n.is_empty()) {
                Some(n) => out.push(n),
                None => self.error(
                    file,
                    line(item),
                    &format!("{here}.name"),
                    "should not have an empty replaces entry",
                ),
            }
        }
        out
    }

    /// `overrides: [{requests_per_unit: N, unit: U}, ...]`: the limit overrides Envoy may ask
    /// for on this descriptor.
    fn overrides(
        &mut self,
        file: usize,
        node: &MarkedYaml<'_>,
        at: &str,
    ) -> Vec<((u64, Micros), usize, String)> {
        let YamlData::Sequence(items) = &node.data else {
            self.error(
                file,
                line(node),
                at,
                format!(
                    "expected a list of {{requests_per_unit: N, unit: U}}, got {}",
                    type_name(node)
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let here = format!("{at}[{i}]");
            let Some(fields) = self.mapping(file, item, &here) else {
                continue;
            };
            let (mut requests, mut period) = (None, None);
            for (key, key_line, v) in fields {
                let field = format!("{here}.{key}");
                match key.as_str() {
                    "requests_per_unit" => {
                        requests = self.integer(file, v, &field, u64::from(u32::MAX));
                    }
                    "unit" => {
                        if let Some(u) = self.text(file, v, &field) {
                            match unit_period(&u) {
                                Some(p) => period = Some(p),
                                None => self.error(
                                    file,
                                    line(v),
                                    &field,
                                    format!("invalid rate limit unit {u:?}"),
                                ),
                            }
                        }
                    }
                    other => {
                        self.unknown(file, key_line, &here, other, &["requests_per_unit", "unit"])
                    }
                }
            }
            match (requests, period) {
                (Some(r), Some(p)) if r > 0 => out.push(((r, p), line(item), here)),
                _ => self.error(
                    file,
                    line(item),
                    &here,
                    "an override needs requests_per_unit (at least 1) and unit",
                ),
            }
        }
        out
    }
}
