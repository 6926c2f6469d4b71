//! envoyproxy/ratelimit's YAML configuration, loaded as it is: one domain per file, nested
//! `descriptors`, `rate_limit` blocks (see `docs/envoy.md` for the format and every difference
//! in behaviour).
//!
//! ```yaml
//! domain: messaging
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit:
//!           unit: day
//!           requests_per_unit: 5
//!   - key: to_number
//!     rate_limit:
//!       name: per-number
//!       unit: day
//!       requests_per_unit: 100
//!       algorithm: gcra      # Floodgate's extension: any of the six (default fixed_window)
//!       burst: 20            # Floodgate's extension, for the algorithms with a burst
//! ```
//!
//! Every `rate_limit` with a limit becomes one Floodgate rule, named by its `name` when that
//! name is unique, else by its path (`messaging.message_type_marketing.to_number`), with the
//! fixed window of envoyproxy/ratelimit unless `algorithm` says otherwise. `unlimited: true`
//! and `requests_per_unit: 0` (a block list entry) are answered from the configuration alone.
//! Errors name the file, the line and the field (`descriptors[1].rate_limit.unit`); a field
//! Floodgate does not support is an error, never ignored.

mod limit_headers;
mod rate_limit;
mod settings;
mod walker;
mod yaml;

use std::collections::HashMap;

use floodgate_core::Quota;
use floodgate_tower::KeySource;
use floodgate_tower::{CostSource, Matcher};

use super::descriptors::{path_name, DescriptorIndex, DescriptorRule, Leaf};
use super::error::ConfigErrors;
use super::schema::{
    override_rule, too_many_rules, Config, RuleConfig, ServerConfig, StoreConfig, MAX_RULES,
};
pub(crate) use limit_headers::LimitHeaders;
pub(crate) use rate_limit::unit_period;
pub(crate) use settings::{EnvoyArgs, EnvoySettings, MAX_METRIC_VALUES_PER_RULE};
use walker::{Found, FoundKind, Walker};

/// Longest rule name made from a YAML file, in bytes (a `name`, or a descriptor path).
const MAX_YAML_RULE_NAME_BYTES: usize = 200;

/// Whether `file` names a YAML file (`.yaml` or `.yml`).
pub(crate) fn is_yaml(file: &str) -> bool {
    let lower = file.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml")
}

/// Parses envoyproxy/ratelimit YAML files (`(file name, text)`, one domain each) into one
/// configuration; `display` is the name the configuration is known by (the file, or the
/// directory holding the files), `settings` the service-wide settings (which say whether
/// files may share a domain).
///
/// # Errors
/// Every problem found, each naming its file, line and field.
pub(crate) fn parse(
    display: &str,
    files: &[(String, String)],
    settings: &EnvoySettings,
) -> Result<Config, ConfigErrors> {
    let mut w = Walker {
        errors: Vec::new(),
        found: Vec::new(),
        files,
        merge_domains: settings.merge_domain_config,
    };
    let mut domains: HashMap<String, usize> = HashMap::new();
    let mut index = DescriptorIndex::default();
    for (i, (file, text)) in files.iter().enumerate() {
        w.file(i, file, text, &mut domains, &mut index);
    }
    let found = std::mem::take(&mut w.found);
    let name_uses = name_uses(&found);
    let mut rules: Vec<RuleConfig> = Vec::new();
    let mut names: HashMap<String, (usize, usize)> = HashMap::new();
    let mut base_overrides: Vec<(usize, Vec<Quota>)> = Vec::new();
    for f in &found {
        if rules.len() >= MAX_RULES {
            w.error(f.file, f.line, &f.field, too_many_rules());
            break;
        }
        let path = path_name(&f.domain, &f.entries);
        let name = match &f.limit_name {
            Some(n) if name_uses.get(n.as_str()) == Some(&1) => n.clone(),
            _ => path.clone(),
        };
        let leaf = match &f.kind {
            FoundKind::Rule {
                policy,
                shadow,
                failure_mode,
                overrides,
            } => {
                if !valid_name(&name) {
                    w.error(
                        f.file,
                        f.line,
                        &f.field,
                        format!(
                            "the rule name {name:?} must be 1 to {MAX_YAML_RULE_NAME_BYTES} \
                             printable ASCII characters without '\"' or '\\' (give the \
                             rate_limit a name)"
                        ),
                    );
                    continue;
                }
                // Unique regardless of case, as in the TOML format.
                if let Some(&(file, line)) = names.get(&name.to_ascii_lowercase()) {
                    let message = name_taken(&name, &path, &files[file].0, line);
                    w.error(f.file, f.line, &f.field, message);
                    continue;
                }
                names.insert(name.to_ascii_lowercase(), (f.file, f.line));
                let at = rules.len();
                rules.push(yaml_rule(
                    &name,
                    f,
                    policy,
                    *shadow,
                    *failure_mode,
                    overrides,
                ));
                if !overrides.is_empty() {
                    base_overrides.push((at, overrides.clone()));
                }
                Leaf::Rule(at)
            }
            FoundKind::Unlimited => Leaf::Unlimited {
                replaces: f.replaces.clone(),
            },
            FoundKind::Blocked { period } => Leaf::Blocked {
                name: name.clone(),
                period: *period,
                replaces: f.replaces.clone(),
                limit_name: f.limit_name.clone(),
                quota_mode: f.extras.quota_mode,
            },
        };
        if let Err(dup) = index.insert(&f.domain, &f.entries, leaf) {
            w.error(
                f.file,
                f.line,
                &f.field,
                format!("duplicate descriptor composite key {:?}", dup.path),
            );
        }
    }
    add_overrides(&mut rules, &mut index, base_overrides);
    if w.errors.is_empty() {
        Ok(Config {
            file: display.to_string(),
            server: ServerConfig::default(),
            store: StoreConfig::default(),
            rules,
            descriptors: index,
            envoy: settings.clone(),
        })
    } else {
        w.errors
            .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
        Err(ConfigErrors(w.errors))
    }
}

/// The rule of a YAML descriptor `f` with a limit, named `name`.
fn yaml_rule(
    name: &str,
    f: &Found,
    policy: &floodgate_core::Policy,
    shadow: bool,
    failure_mode: floodgate_tower::FailureMode,
    overrides: &[Quota],
) -> RuleConfig {
    RuleConfig {
        name: name.to_string(),
        matcher: Matcher::default(),
        key: KeySource::Constant("descriptor".into()),
        policy: policy.clone(),
        cost: CostSource::Fixed(1),
        shadow,
        failure_mode,
        delay: None,
        lease: None,
        descriptor: Some(DescriptorRule {
            domain: f.domain.clone(),
            entries: f.entries.clone(),
            limit_name: f.limit_name.clone(),
            replaces: f.replaces.clone(),
            overrides: overrides.to_vec(),
            extras: f.extras.clone(),
        }),
        override_of: None,
        max_keys: None,
        applies_to: floodgate_tower::Scope::GRPC_AND_API,
    }
}

/// The error of a rule name already given to the rate_limit at `file`:`line`: a duplicate
/// descriptor when both are named by the same path (two files of one merged domain).
fn name_taken(name: &str, path: &str, file: &str, line: usize) -> String {
    if name == path {
        format!("duplicate descriptor composite key {path:?} (also at {file}:{line})")
    } else {
        format!(
            "rule name {name:?} is also (regardless of case) the name of the rate_limit at \
             {file}:{line}; names must be unique regardless of case"
        )
    }
}

/// How many rules each `name` is given to. A `name` used by one rate_limit only names its
/// rule; a shared one (envoyproxy/ratelimit allows it, for `replaces`) leaves each rule named
/// by its path.
fn name_uses(found: &[Found]) -> HashMap<&str, usize> {
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for f in found {
        if let (Some(name), FoundKind::Rule { .. }) = (&f.limit_name, &f.kind) {
            *uses.entry(name.as_str()).or_default() += 1;
        }
    }
    uses
}

/// Appends the rules of the limit overrides (`(base rule, quotas)`) and lets the index
/// select them.
fn add_overrides(
    rules: &mut Vec<RuleConfig>,
    index: &mut DescriptorIndex,
    base_overrides: Vec<(usize, Vec<Quota>)>,
) {
    for (base, quotas) in base_overrides {
        for quota in quotas {
            let at = rules.len();
            let mut rule = override_rule(&rules[base], &quota);
            rule.override_of = Some(base);
            rules.push(rule);
            index.allow_override(base, &quota, at);
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_YAML_RULE_NAME_BYTES
        && name
            .bytes()
            .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
}

#[cfg(test)]
mod tests;
