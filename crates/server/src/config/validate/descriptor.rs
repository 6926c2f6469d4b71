//! A rule's Envoy descriptors (`domain`, `descriptors`, `replaces`, `limit_overrides`) and the
//! descriptor index of all rules.

use floodgate_core::Quota;
use toml::Spanned;

use super::validator::Validator;
use crate::config::descriptors;
use crate::config::raw::{RawConfig, RawRule};
use crate::config::schema::{override_rule, RuleConfig};

impl Validator<'_> {
    /// `domain`, `descriptors`, `replaces` and `limit_overrides` of a rule.
    pub(super) fn descriptor_rule(
        &mut self,
        at: &str,
        r: &RawRule,
    ) -> Option<descriptors::DescriptorRule> {
        let Some(domain) = &r.domain else {
            if let Some(first) = r.descriptors.first() {
                self.push(
                    &first.key,
                    format!("{at}.descriptors"),
                    "descriptors need a domain (domain = \"...\")".into(),
                );
            }
            for (field, span) in [
                ("replaces", r.replaces.first().map(Spanned::span)),
                (
                    "limit_overrides",
                    r.limit_overrides.first().map(Spanned::span),
                ),
            ] {
                if let Some(span) = span {
                    self.errors.push(self.src.error(
                        span,
                        format!("{at}.{field}"),
                        "only for a rule with a domain and descriptors",
                    ));
                }
            }
            return None;
        };
        let before = self.errors.len();
        if domain.get_ref().is_empty() {
            self.push(domain, format!("{at}.domain"), "must not be empty".into());
        }
        if r.descriptors.is_empty() {
            self.push(
                domain,
                format!("{at}.descriptors"),
                "a rule with a domain needs descriptors = [{ key = \"...\", value = \"...\" }, ...]"
                    .into(),
            );
        }
        // The descriptor's values are the key and the request's hits_addend the cost: the HTTP
        // request settings do not apply.
        let http_only = [
            r.key.as_ref().map(|k| (k.span(), "key")),
            r.matcher.path_prefix.as_ref().map(|p| (p.span(), "match")),
            r.cost.as_ref().map(|c| (c.span(), "cost")),
            r.cost_header.as_ref().map(|c| (c.span(), "cost_header")),
            r.route_costs
                .first()
                .map(|c| (c.path_prefix.span(), "route_costs")),
        ];
        for (span, field) in http_only.into_iter().flatten() {
            self.errors.push(self.src.error(
                span,
                format!("{at}.{field}"),
                "not for a rule with a domain: its key is the descriptor's values and its cost \
                 the request's hits_addend",
            ));
        }
        let mut entries = Vec::with_capacity(r.descriptors.len());
        for (i, d) in r.descriptors.iter().enumerate() {
            if d.key.get_ref().is_empty() {
                self.push(
                    &d.key,
                    format!("{at}.descriptors[{i}].key"),
                    "must not be empty".into(),
                );
            }
            entries.push(descriptors::EntryMatch {
                key: d.key.get_ref().clone(),
                value: descriptors::ValueMatch::parse(
                    d.value.as_ref().map(|v| v.get_ref().as_str()),
                ),
            });
        }
        let mut overrides = Vec::new();
        for (i, o) in r.limit_overrides.iter().enumerate() {
            match o.get_ref().parse::<Quota>() {
                Ok(q) if q.burst() == q.limit() => overrides.push(q),
                Ok(_) => self.push(
                    o,
                    format!("{at}.limit_overrides[{i}]"),
                    "an override is a limit per period, without a burst".into(),
                ),
                Err(e) => self.push(o, format!("{at}.limit_overrides[{i}]"), e.to_string()),
            }
        }
        (self.errors.len() == before).then(|| descriptors::DescriptorRule {
            domain: domain.get_ref().clone(),
            entries,
            limit_name: Some(r.name.get_ref().clone()),
            replaces: r.replaces.iter().map(|n| n.get_ref().clone()).collect(),
            overrides,
            extras: descriptors::DescriptorExtras::default(),
        })
    }

    /// The descriptor tree of the rules with a domain, and the rules of their limit overrides
    /// (appended to `rules`).
    pub(super) fn descriptor_index(
        &mut self,
        raw: &RawConfig,
        raw_of: &[usize],
        rules: &mut Vec<RuleConfig>,
    ) -> descriptors::DescriptorIndex {
        let mut index = descriptors::DescriptorIndex::default();
        let base = rules.len();
        for i in 0..base {
            let Some(d) = rules[i].descriptor.clone() else {
                continue;
            };
            let r = &raw.rules[raw_of[i]];
            if let Err(dup) = index.insert(&d.domain, &d.entries, descriptors::Leaf::Rule(i)) {
                self.push(
                    &r.name,
                    format!("rules[{}].descriptors", raw_of[i]),
                    format!(
                        "another rule has the same domain and descriptors ({})",
                        dup.path
                    ),
                );
            }
            for quota in &d.overrides {
                let at = rules.len();
                let mut rule = override_rule(&rules[i], quota);
                rule.override_of = Some(i);
                rules.push(rule);
                index.allow_override(i, quota, at);
            }
        }
        index
    }
}
