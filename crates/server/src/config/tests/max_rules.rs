//! The bound on the number of rules ([`super::super::schema::MAX_RULES`]).

use super::*;
use crate::config::schema::MAX_RULES;

fn toml_rules(n: usize) -> String {
    let mut text = String::with_capacity(n * 40);
    for i in 0..n {
        text.push_str(&format!("[[rules]]\nname = \"r{i}\"\nlimit = \"10/s\"\n"));
    }
    text
}

#[test]
fn a_configuration_of_more_than_100_000_rules_is_refused_naming_the_first_too_many() {
    let e = err(&toml_rules(MAX_RULES + 2));
    let line = MAX_RULES * 3 + 2;
    assert_eq!(
        e,
        format!(
            "rules.toml:{line}: rules[{MAX_RULES}].name: too many rules: a configuration holds \
             at most {MAX_RULES}"
        )
    );
    assert_eq!(
        parse("rules.toml", &toml_rules(MAX_RULES))
            .unwrap()
            .rules
            .len(),
        MAX_RULES
    );
}

#[test]
fn a_yaml_configuration_of_more_than_100_000_rules_is_refused() {
    // Three files (one domain each) within the 4 MiB bound of a file.
    let sources: Vec<(String, String)> = (0..3)
        .map(|f| {
            let mut text = format!("domain: d{f}\ndescriptors:\n");
            for i in 0..=MAX_RULES / 3 {
                text.push_str(&format!(
                    "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
                ));
            }
            (format!("d{f}.yaml"), text)
        })
        .collect();
    let e = parse_sources("dir", &sources, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "too many rules: a configuration holds at most {MAX_RULES}"
        )),
        "{e}"
    );
}
