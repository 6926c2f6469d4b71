//! `[server] path_parameters = "strip"` (the default) and the prefixes that could then never
//! match: a `path_prefix` holding a literal `;` is compared with request paths whose
//! `;parameters` are gone.

use floodgate_tower::PathParameters;

use super::validator::Validator;
use crate::config::raw::RawConfig;

impl Validator<'_> {
    /// Refuses every `path_prefix` (of `[rules.match]` and of `route_costs`) with a literal
    /// `;` while path parameters are stripped.
    pub(super) fn prefixes_without_parameters(&mut self, raw: &RawConfig, mode: PathParameters) {
        if mode == PathParameters::Keep {
            return;
        }
        for (i, r) in raw.rules.iter().enumerate() {
            let prefixes = r
                .matcher
                .path_prefix
                .iter()
                .map(|p| (p, format!("rules[{i}].match.path_prefix")))
                .chain(r.route_costs.iter().enumerate().map(|(j, c)| {
                    (
                        &c.path_prefix,
                        format!("rules[{i}].route_costs[{j}].path_prefix"),
                    )
                }));
            let bad: Vec<_> = prefixes
                .filter(|(p, _)| p.get_ref().contains(';'))
                .collect();
            for (prefix, field) in bad {
                self.push(
                    prefix,
                    field,
                    format!(
                        "{:?} holds a `;`, and request paths are matched without their \
                         ;parameters ([server] path_parameters = \"strip\", the default), so \
                         it would never match: remove the parameter, or set path_parameters = \
                         \"keep\"",
                        prefix.get_ref()
                    ),
                );
            }
        }
    }
}
