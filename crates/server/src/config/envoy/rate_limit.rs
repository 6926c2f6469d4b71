//! One `rate_limit` of envoyproxy/ratelimit's YAML: its fields (`unit`, `requests_per_unit`,
//! `unlimited`, `name`, `replaces` and Floodgate's `algorithm`, `burst`, `failure_mode`,
//! `overrides`) checked and turned into a found rule, an unlimited entry or a block list entry.

use floodgate_core::{AlgorithmKind, Micros, Policy, Quota};
use floodgate_tower::FailureMode;
use saphyr::{MarkedYaml, YamlData};

use super::walker::{line, type_name, Found, FoundKind, Walker};
use crate::config::descriptors::{DescriptorExtras, EntryMatch};
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

impl Walker<'_> {
    pub(super) fn rate_limit(
        &mut self,
        file: usize,
        domain: &str,
        node: &MarkedYaml<'_>,
        at: &str,
        entries: &[EntryMatch],
        (shadow, extras): (bool, DescriptorExtras),
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
            extras: extras.clone(),
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
