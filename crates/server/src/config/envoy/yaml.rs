//! Reading envoyproxy/ratelimit's YAML: the walk over each file's nodes (the domain, the
//! nested `descriptors`) that checks every field and collects each `rate_limit` found (see
//! [`super::rate_limit`]), for [`super::parse`] to turn into rules.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use super::walker::{line, type_name, Walker};
use crate::config::depth;
use crate::config::descriptors::{
    path_name, DescriptorExtras, DescriptorIndex, EntryMatch, ValueMatch,
};

impl Walker<'_> {
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
        if let Some(&first) = domains.get(&domain).filter(|_| !self.merge_domains) {
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
        domains.entry(domain.clone()).or_insert(file);
        index.add_domain(&domain);
        let _ = name;
        if let Some(list) = descriptors {
            self.descriptors(file, &domain, list, "descriptors", (&[], &[]), index);
        }
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
        (parent, parent_flags): (&[EntryMatch], &[(bool, bool)]),
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
            let d = self.descriptor_fields(file, fields, &here);
            let Some((key, key_line)) = d.key.filter(|(k, _)| !k.is_empty()) else {
                self.error(
                    file,
                    line(item),
                    &format!("{here}.key"),
                    "descriptor has empty key",
                );
                continue;
            };
            let value = d.value.filter(|v| !v.is_empty());
            let entry = EntryMatch {
                key: key.clone(),
                value: ValueMatch::parse(value.as_deref()),
            };
            if let Some(&first) = siblings.get(&(key.clone(), value.clone())) {
                let path = path_name(domain, &[parent, &[entry]].concat());
                self.error(
                    file,
                    key_line,
                    &format!("{here}.key"),
                    format!("duplicate descriptor composite key {path:?} (also {at}[{first}])"),
                );
                continue;
            }
            siblings.insert((key, value), i);
            let mut entries = parent.to_vec();
            entries.push(entry);
            let mut flags = parent_flags.to_vec();
            flags.push((d.share_threshold, d.value_to_metric));
            // The node exists even without a limit: the look-up stops at the most specific
            // node, whether or not it limits anything (as envoyproxy/ratelimit's tree does).
            index.touch(domain, &entries);
            if let Some(rl) = d.rate_limit {
                let extras = DescriptorExtras {
                    share: flags.iter().map(|f| f.0).collect(),
                    value_to_metric: flags.iter().map(|f| f.1).collect(),
                    detailed_metric: d.detailed_metric,
                    metadata: d.metadata,
                    quota_mode: d.quota_mode,
                };
                let at = format!("{here}.rate_limit");
                self.rate_limit(file, domain, rl, &at, &entries, (d.shadow, extras));
            }
            if let Some(children) = d.children {
                let at = format!("{here}.descriptors");
                self.descriptors(file, domain, children, &at, (&entries, &flags), index);
            }
        }
    }

    /// The fields of one descriptor mapping, each checked on its own (errors pushed).
    fn descriptor_fields<'n, 'i>(
        &mut self,
        file: usize,
        fields: Vec<(String, usize, &'n MarkedYaml<'i>)>,
        here: &str,
    ) -> DescriptorFields<'n, 'i> {
        let mut d = DescriptorFields::default();
        for (name, key_line, v) in fields {
            let field = format!("{here}.{name}");
            let flag = |w: &mut Self| w.boolean(file, v, &field).unwrap_or(false);
            match name.as_str() {
                "key" => d.key = self.text(file, v, &field).map(|k| (k, line(v))),
                "value" => d.value = self.text(file, v, &field),
                "rate_limit" => d.rate_limit = Some(v),
                "descriptors" => d.children = Some(v),
                "shadow_mode" => d.shadow = flag(self),
                "detailed_metric" => d.detailed_metric = flag(self),
                "value_to_metric" => d.value_to_metric = flag(self),
                "share_threshold" => d.share_threshold = flag(self),
                "quota_mode" => d.quota_mode = flag(self),
                "metadata" => d.metadata = self.metadata(file, v, &field),
                other => self.unknown(
                    file,
                    key_line,
                    here,
                    other,
                    &[
                        "key",
                        "value",
                        "rate_limit",
                        "descriptors",
                        "shadow_mode",
                        "detailed_metric",
                        "value_to_metric",
                        "share_threshold",
                        "quota_mode",
                        "metadata",
                    ],
                ),
            }
        }
        d
    }

    /// A descriptor's `metadata`: a mapping, kept as JSON for the response's dynamic metadata.
    fn metadata(
        &mut self,
        file: usize,
        node: &MarkedYaml<'_>,
        field: &str,
    ) -> Option<serde_json::Value> {
        if !matches!(node.data, YamlData::Mapping(_)) {
            self.error(
                file,
                line(node),
                field,
                format!("expected a mapping, got {}", type_name(node)),
            );
            return None;
        }
        self.json(file, node, field)
    }

    /// A YAML node as JSON (mappings with string keys, lists, strings, numbers, booleans).
    fn json(
        &mut self,
        file: usize,
        node: &MarkedYaml<'_>,
        field: &str,
    ) -> Option<serde_json::Value> {
        use serde_json::Value;
        Some(match &node.data {
            YamlData::Value(Scalar::Null) => Value::Null,
            YamlData::Value(Scalar::Boolean(b)) => Value::Bool(*b),
            YamlData::Value(Scalar::Integer(n)) => Value::from(*n),
            YamlData::Value(Scalar::FloatingPoint(f)) => {
                serde_json::Number::from_f64(f.into_inner()).map_or(Value::Null, Value::Number)
            }
            YamlData::Value(Scalar::String(s)) => Value::String(s.to_string()),
            YamlData::Sequence(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.json(file, v, &format!("{field}[{i}]")))
                    .collect::<Option<Vec<_>>>()?,
            ),
            YamlData::Mapping(_) => {
                let mut map = serde_json::Map::new();
                for (k, _, v) in self.mapping(file, node, field)? {
                    let value = self.json(file, v, &format!("{field}.{k}"))?;
                    map.insert(k, value);
                }
                Value::Object(map)
            }
            _ => {
                self.error(file, line(node), field, "expected a plain value");
                return None;
            }
        })
    }
}

/// The fields of one descriptor, as read (see [`Walker::descriptor_fields`]).
#[derive(Default)]
struct DescriptorFields<'n, 'i> {
    key: Option<(String, usize)>,
    value: Option<String>,
    rate_limit: Option<&'n MarkedYaml<'i>>,
    children: Option<&'n MarkedYaml<'i>>,
    shadow: bool,
    detailed_metric: bool,
    value_to_metric: bool,
    share_threshold: bool,
    quota_mode: bool,
    metadata: Option<serde_json::Value>,
}
