//! `lease` and `lease_share` of `[[rules]]`: parsed, refused with file, line and field, and
//! described with the rule's bound.

use super::*;

#[test]
fn a_leased_rule_carries_its_lease_and_its_bound_is_described() {
    let c = parse(
        "rules.toml",
        r#"
[[rules]]
name = "hot"
limit = "50000/s"
algorithm = "fixed_window"
lease = "20ms"

[[rules]]
name = "bucket"
limit = "1000/s"
lease = "10ms"
lease_share = 0.5

[[rules]]
name = "plain"
limit = "10/s"
"#,
    )
    .unwrap();
    let hot = c.rules[0].lease.unwrap();
    assert_eq!((hot.lifetime, hot.max_units), (20_000, 5_000));
    let bucket = c.rules[1].lease.unwrap();
    assert_eq!((bucket.lifetime, bucket.max_units), (10_000, 500));
    assert_eq!(c.rules[2].lease, None);
    assert!(
        describe::describe_rule(&c.rules[0]).mode.ends_with(
            "; lease 20ms, at most 5000 units per lease; beyond the exact count at most 5000 \
             units per window (one instance), min(N x 5000, 50000) for N instances"
        ),
        "{:?}",
        describe::describe_rule(&c.rules[0]).mode
    );
    // 1000/s over 10 ms refills 10: the bound whatever the number of instances.
    assert!(describe::describe_rule(&c.rules[1])
        .mode
        .ends_with("at most 10 units at once or over any span (one instance), min(N x 500, 10) for N instances"));
    assert!(!describe::describe_rule(&c.rules[2]).mode.contains("lease"));
}

#[test]
fn bad_leases_are_refused_naming_file_line_and_field() {
    let rule = |extra: &str| format!("[[rules]]\nname = \"r\"\nlimit = \"10/s\"\n{extra}\n");
    assert_eq!(
        err(&rule("lease = \"0ms\"")),
        "rules.toml:4: rules[0].lease: must be more than 0 (leave `lease` out to ask the store \
         every time)"
    );
    assert_eq!(
        err(&rule("lease = \"1s\"")),
        "rules.toml:4: rules[0].lease: 1s is not shorter than the period (1s): a lease must end \
         within one window"
    );
    assert_eq!(
        err(&rule("lease = \"soon\"")),
        "rules.toml:4: rules[0].lease: must be a whole number and a unit, such as \"20ms\" or \
         \"1s\", got \"soon\""
    );
    assert_eq!(
        err(&rule("lease = \"20ms\"\nlease_share = 1.5")),
        "rules.toml:5: rules[0].lease_share: the lease share must be a number above 0 and at \
         most 1; got 1.5"
    );
    assert_eq!(
        err(&rule("lease = \"20ms\"\nlease_share = \"half\"")),
        "rules.toml:5: rules[0].lease_share: must be a number above 0 and at most 1, got \"half\""
    );
    assert_eq!(
        err(&rule("lease_share = 0.5")),
        "rules.toml:4: rules[0].lease_share: only applies with `lease`: add `lease = \"20ms\"` \
         or remove it"
    );
    assert_eq!(
        err(&rule("shadow = true\nlease = \"20ms\"")),
        "rules.toml:5: rules[0].lease: a shadow rule only observes and is never leased: remove \
         `lease` or `shadow`"
    );
    // A whole 1 is the whole capacity.
    let c = parse("rules.toml", &rule("lease = \"20ms\"\nlease_share = 1")).unwrap();
    assert_eq!(c.rules[0].lease.unwrap().max_units, 10);
}
