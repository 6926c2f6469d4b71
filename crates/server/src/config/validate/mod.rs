//! Validation of a parsed TOML configuration ([`super::raw`]) into a [`Config`]: every
//! semantic error is collected (with its file, line and field), not only the first. One file
//! per section: `[server]` ([`server`], its connection bounds in [`limits`]), `[store]`
//! ([`store`]), `[[rules]]` ([`rule`]) and their Envoy descriptors ([`descriptor`]). Each adds
//! methods to the [`Validator`] (in [`validator`]) and uses no other section's file.

mod calendar;
mod descriptor;
mod grpc_tls;
mod lease;
mod limits;
mod path_params;
mod rule;
mod scope;
mod server;
mod store;
mod validator;

use std::collections::HashMap;

use super::error::{ConfigErrors, Source};
use super::raw::RawConfig;
use super::schema::{Config, DEFAULT_MAX_KEYS, MAX_RULES};

pub(crate) use calendar::keep_calendar;
pub(crate) use server::parse_upstream;
use validator::Validator;

/// Validates `raw`, the TOML configuration `src` holds; `file` is the name errors give.
///
/// # Errors
/// [`ConfigErrors`] with every semantic error (invalid quota, duplicate rule name, cost above
/// capacity, ...), in line order.
pub(super) fn config(
    file: &str,
    src: &Source<'_>,
    raw: &RawConfig,
) -> Result<Config, ConfigErrors> {
    let mut v = Validator {
        src,
        errors: Vec::new(),
        store_kind_redis: false,
        store_max_keys: DEFAULT_MAX_KEYS,
    };
    let server = v.server(raw);
    let store = v.store(raw);
    v.store_kind_redis = raw
        .store
        .kind
        .as_ref()
        .is_some_and(|k| k.get_ref() == "redis");
    v.store_max_keys = store.max_keys;
    let mut rules = Vec::with_capacity(raw.rules.len());
    // The raw rule of each validated rule (the spans of descriptor errors).
    let mut raw_of = Vec::with_capacity(raw.rules.len());
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, r) in raw.rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        if i == MAX_RULES {
            // Validating the rest would only cost time: the file is refused anyway.
            v.push(
                &r.name,
                format!("{at}.name"),
                super::schema::too_many_rules(),
            );
            break;
        }
        // Unique regardless of case: `Search` and `search` would be told apart by nothing a
        // person reads (metric labels, headers, logs) except case.
        let folded = r.name.get_ref().to_ascii_lowercase();
        if let Some(&first) = names.get(&folded) {
            let same = raw.rules[first].name.get_ref() == r.name.get_ref();
            v.push(
                &r.name,
                format!("{at}.name"),
                if same {
                    format!(
                        "duplicate rule name {:?} (also rules[{first}].name); names must be unique",
                        r.name.get_ref()
                    )
                } else {
                    format!(
                        "rule name {:?} differs from rules[{first}].name {:?} only in case; \
                         names must be unique regardless of case",
                        r.name.get_ref(),
                        raw.rules[first].name.get_ref()
                    )
                },
            );
        } else {
            names.insert(folded, i);
        }
        if let Some(rule) = v.rule(&at, r) {
            rules.push(rule);
            raw_of.push(i);
        }
    }
    v.prefixes_without_parameters(raw, server.path_parameters);
    let descriptors = v.descriptor_index(raw, &raw_of, &mut rules);
    if rules.len() > MAX_RULES && raw.rules.len() <= MAX_RULES {
        if let Some(last) = raw.rules.last() {
            v.push(
                &last.name,
                "rules".into(),
                format!(
                    "too many rules with the limit overrides: {} where a configuration holds \
                     at most {MAX_RULES}",
                    rules.len()
                ),
            );
        }
    }
    if v.errors.is_empty() {
        Ok(Config {
            file: file.to_string(),
            server,
            store,
            rules,
            descriptors,
            envoy: super::envoy::EnvoySettings {
                metric_values_per_rule: raw
                    .envoy
                    .metric_values_per_rule
                    .min(super::envoy::MAX_METRIC_VALUES_PER_RULE),
                ..raw.envoy.clone()
            },
        })
    } else {
        // In the order they stand in the file (a stable sort keeps each line's own order).
        v.errors.sort_by_key(|e| e.line);
        Err(ConfigErrors(v.errors))
    }
}
