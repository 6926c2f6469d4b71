//! Reading envoyproxy/ratelimit's YAML: the walk over each file's nodes (the domain, the
//! nested `descriptors`) that checks every field and collects each `rate_limit` found (see
//! [`super::rate_limit`]), for [`super::parse`] to turn into rules.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use super::walker::{line, type_name, Walker};
use crate::config::depth;
use crate::config::descriptors::{path_name, DescriptorIndex, EntryMatch, ValueMatch};

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
}
