//! `applies_to`: which traffic a rule applies to, its defaults, its errors and how
//! `check-config` describes it.

use floodgate_tower::{Scope, Traffic};

use super::super::describe::describe_rule;
use super::*;

fn config(text: &str) -> Config {
    parse("rules.toml", text).unwrap()
}

#[test]
fn the_default_is_what_rules_always_applied_to() {
    let c = config(
        "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n\n[[rules]]\nname = \"d\"\nlimit = \"1/s\"\n\
         domain = \"edge\"\ndescriptors = [{ key = \"k\" }]\n",
    );
    assert_eq!(c.rules[0].applies_to, Scope::HTTP_AND_API);
    assert_eq!(c.rules[1].applies_to, Scope::GRPC_AND_API);
    let rules = crate::rules::rule_set(&c);
    assert!(rules.applies(0, Traffic::Http));
    assert!(!rules.applies(1, Traffic::Http));
    assert!(rules.applies(1, Traffic::Grpc));
}

#[test]
fn an_api_only_rule_is_never_an_http_rule_and_says_so() {
    let c = config(
        "[[rules]]\nname = \"per-day\"\nlimit = \"10000/d\"\nalgorithm = \"fixed_window\"\n\
         applies_to = [\"api\"]\n",
    );
    assert_eq!(c.rules[0].applies_to, Scope::of(&[Traffic::Api]));
    let rules = crate::rules::rule_set(&c);
    assert_eq!(rules.find("per-day", Traffic::Api), Ok(0));
    assert!(!rules.applies(0, Traffic::Http));
    assert_eq!(
        describe_rule(&c.rules[0]).applies,
        "applies to /v1/check calls naming it; not to HTTP requests or gRPC"
    );
}

#[test]
fn check_config_names_every_kind_of_traffic() {
    let c = config(
        "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n\n[[rules]]\nname = \"h\"\nlimit = \"1/s\"\n\
         applies_to = [\"http\"]\n[rules.match]\npath_prefix = \"/api\"\n\n[[rules]]\n\
         name = \"d\"\nlimit = \"1/s\"\ndomain = \"edge\"\ndescriptors = [{ key = \"k\" }]\n\n\
         [[rules]]\nname = \"g\"\nlimit = \"1/s\"\ndomain = \"edge\"\n\
         descriptors = [{ key = \"j\" }]\napplies_to = [\"grpc\"]\n",
    );
    let applies: Vec<String> = c.rules.iter().map(|r| describe_rule(r).applies).collect();
    assert_eq!(
        applies,
        [
            "applies to every HTTP request (forward-auth, proxy); and to /v1/check calls naming \
             it; not to gRPC",
            "applies to HTTP requests (forward-auth, proxy) matching path /api (whole segments); \
             not to /v1/check or gRPC",
            "applies to gRPC rate limit requests of domain edge; and to /v1/check calls naming \
             it; not to HTTP requests",
            "applies to gRPC rate limit requests of domain edge; not to HTTP requests or \
             /v1/check",
        ]
    );
}

#[test]
fn a_scope_that_cannot_hold_is_an_error_naming_line_and_field() {
    let base = "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n";
    for (extra, expected) in [
        (
            "applies_to = []\n",
            "rules.toml:4: rules[0].applies_to: must name at least one of",
        ),
        (
            "applies_to = [\"api\", \"HTTP\"]\n",
            "rules.toml:4: rules[0].applies_to[1]: unknown traffic \"HTTP\"; expected \"http\"",
        ),
        (
            "applies_to = [\"api\", \"api\"]\n",
            "rules.toml:4: rules[0].applies_to[1]: \"api\" is named twice",
        ),
        (
            "applies_to = [\"grpc\"]\n",
            "rules.toml:4: rules[0].applies_to: \"grpc\" needs `domain` and `descriptors`",
        ),
        (
            "domain = \"edge\"\ndescriptors = [{ key = \"k\" }]\napplies_to = [\"api\"]\n",
            "rules.toml:4: rules[0].domain: `domain` and `descriptors` select gRPC rate limit \
             requests, and applies_to has no \"grpc\"",
        ),
        (
            "domain = \"edge\"\ndescriptors = [{ key = \"k\" }]\napplies_to = [\"grpc\", \"http\"]\n",
            "rules.toml:6: rules[0].applies_to: a rule with a `domain` is keyed by the \
             descriptors' values",
        ),
        (
            "applies_to = [\"api\"]\nkey = \"user:x-user\"\n",
            "rules.toml:5: rules[0].key: only HTTP requests use it, and applies_to has no \"http\"",
        ),
        (
            "applies_to = [\"api\"]\n[rules.match]\npath_prefix = \"/api\"\n",
            "rules.toml:6: rules[0].match: only HTTP requests use it",
        ),
        (
            "applies_to = [\"api\"]\ndelay = \"1s\"\n",
            "rules.toml:5: rules[0].delay: only HTTP requests use it",
        ),
    ] {
        let e = err(&format!("{base}{extra}"));
        assert!(e.starts_with(expected), "{extra}: {e}");
    }
}
