//! `[server] path_parameters`: its values and the prefixes it refuses.

use floodgate_tower::PathParameters;

use super::*;

#[test]
fn path_parameters_are_stripped_unless_kept() {
    let c = parse("rules.toml", "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n").unwrap();
    assert_eq!(c.server.path_parameters, PathParameters::Strip);
    assert_eq!(
        crate::rules::rule_set(&c).path_parameters,
        PathParameters::Strip
    );
    let c = parse(
        "rules.toml",
        "[server]\npath_parameters = \"keep\"\n[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n\
         [rules.match]\npath_prefix = \"/a;v=1\"\n",
    )
    .unwrap();
    assert_eq!(
        crate::rules::rule_set(&c).path_parameters,
        PathParameters::Keep
    );
    assert_eq!(
        err("[server]\npath_parameters = \"Strip\"\n"),
        "rules.toml:2: server.path_parameters: unknown value \"Strip\"; expected \"strip\" or \
         \"keep\""
    );
}

#[test]
fn a_prefix_that_could_never_match_is_refused() {
    let e = err(
        "[[rules]]\nname = \"a\"\nlimit = \"10/s\"\n[rules.match]\npath_prefix = \"/a;v=1\"\n\
         [[rules.route_costs]]\npath_prefix = \"/a;b\"\ncost = 2\n",
    );
    assert!(
        e.starts_with(
            "rules.toml:5: rules[0].match.path_prefix: \"/a;v=1\" holds a `;`, and request paths \
             are matched without their ;parameters"
        ),
        "{e}"
    );
    assert!(
        e.contains("rules.toml:7: rules[0].route_costs[0].path_prefix: \"/a;b\" holds a `;`"),
        "{e}"
    );
}
