//! Errors: each names the file, the line and the field, in the file's words; every
//! documented example is valid; arbitrary text is an error, never a panic.

use super::*;

#[test]
fn a_bad_period_names_file_line_and_field() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n\n[[rules]]\nname = \"b\"\nlimit = \"10/fortnight\"\n");
    assert_eq!(
        e,
        "rules.toml:7: rules[1].limit: invalid quota \"10/fortnight\": unknown period unit \
         \"fortnight\" (use us, ms, s, min, h or day)"
    );
}

#[test]
fn unknown_fields_are_rejected_with_their_path_and_line() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nlimt = 3\n");
    assert!(
        e.starts_with("rules.toml:4: rules[0].limt: unknown field `limt`, expected one of `name`"),
        "{e}"
    );
    let e = err("[server]\nlisten = \"127.0.0.1:1\"\nport = 3\n");
    assert!(
        e.starts_with("rules.toml:3: server.port: unknown field `port`"),
        "{e}"
    );
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n[rules.match]\npath = \"/x\"\n");
    assert!(
        e.starts_with("rules.toml:5: rules[0].match.path: unknown field `path`"),
        "{e}"
    );
}

#[test]
fn wrong_types_and_missing_fields_name_the_field() {
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nshadow = \"yes\"\n");
    assert!(e.starts_with("rules.toml:4: rules[0].shadow: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\n");
    assert!(e.contains("rules[0]: missing field `limit`"), "{e}");
    assert!(e.starts_with("rules.toml:1: "), "{e}");
    let e = err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\ncost = 1.5\n");
    assert!(e.starts_with("rules.toml:4: rules[0].cost: "), "{e}");
    let e = err("[server]\nui = \"off\"\n");
    assert!(e.starts_with("rules.toml:2: server.ui: "), "{e}");
}

#[test]
fn syntax_errors_give_the_line() {
    let e = err("[server]\nlisten = \n");
    assert!(e.starts_with("rules.toml:2: invalid TOML: "), "{e}");
}

#[test]
fn duplicate_names_and_cost_above_capacity_are_all_reported() {
    let e = err(r#"
[[rules]]
name = "a"
limit = "10/s"
cost = 11

[[rules]]
name = "a"
limit = "5/s burst 50"
[[rules.route_costs]]
path_prefix = "/search"
cost = 51
"#);
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 3, "{e}");
    assert!(
        lines[0].starts_with(
            "rules.toml:5: rules[0].cost: cost 11 exceeds the rule's capacity of 10 units"
        ),
        "{e}"
    );
    assert_eq!(
        lines[1],
        "rules.toml:8: rules[1].name: duplicate rule name \"a\" (also rules[0].name); names must \
         be unique"
    );
    assert!(
        lines[2].starts_with(
            "rules.toml:12: rules[1].route_costs[0].cost: cost 51 exceeds the rule's capacity of 50"
        ),
        "{e}"
    );
}

#[test]
fn other_semantic_errors_name_their_fields() {
    let cases = [
        (
            "[server]\nlisten = \"localhost\"\n",
            "rules.toml:2: server.listen: ",
        ),
        (
            "[server]\nadmin_token = \"short\"\n",
            "rules.toml:2: server.admin_token: ",
        ),
        (
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"nope\"]\n",
            "rules.toml:2: server.trusted_proxies[1]: ",
        ),
        (
            "[server]\nupstream = \"https://x\"\n",
            "rules.toml:2: server.upstream: ",
        ),
        (
            "[server]\nupstream = \"http://x/api\"\n",
            "rules.toml:2: server.upstream: ",
        ),
        ("[store]\nmax_keys = 0\n", "rules.toml:2: store.max_keys: "),
        (
            "[store]\nmax_keys = 50\n[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nmax_keys = 51\n",
            "rules.toml:6: rules[0].max_keys: must be a whole number between 1 and [store] \
             max_keys (50), got 51",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nmax_keys = 0\n",
            "rules.toml:4: rules[0].max_keys: must be a whole number between 1 and [store] \
             max_keys (100000), got 0",
        ),
        (
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n[[rules]]\nname = \"a\"\n\
             limit = \"1/s\"\nmax_keys = 10\n",
            "rules.toml:7: rules[0].max_keys: only for the memory store",
        ),
        (
            "[server]\nipv6_prefix = 129\n",
            "rules.toml:2: server.ipv6_prefix: ",
        ),
        (
            "[server]\nforwarded_header = \"x-real-ip\"\n",
            "rules.toml:2: server.forwarded_header: unknown header",
        ),
        (
            "[store]\non_full = \"panic\"\n",
            "rules.toml:2: store.on_full: ",
        ),
        (
            "[[rules]]\nname = \"has space\"\nlimit = \"1/s\"\n",
            "rules.toml:2: rules[0].name: ",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nalgorithm = \"magic\"\n",
            "rules.toml:4: rules[0].algorithm: unknown algorithm",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nkey = \"cookie\"\n",
            "rules.toml:4: rules[0].key: unknown key source",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\ncost = -1\n",
            "rules.toml:4: rules[0].cost: must be a whole number between 0 and 1000000",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nfailure_mode = \"maybe\"\n",
            "rules.toml:4: rules[0].failure_mode: ",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"100000/s\"\nalgorithm = \"sliding_log\"\n",
            "rules.toml:3: rules[0].limit: the sliding log keeps one entry per admitted unit",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n[rules.match]\nmethods = [\"G T\"]\n",
            "rules.toml:5: rules[0].match.methods[0]: invalid HTTP method",
        ),
        (
            "[[rules]]\nname = \"a\"\nlimit = \"1/s\"\n[rules.match]\npath_prefix = \"api\"\n",
            "rules.toml:5: rules[0].match.path_prefix: must start with '/'",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with(want), "{text:?}\n got: {e}\nwant: {want}");
    }
}

/// A wrong type is named in the file's words, not serde's (`i64`).
#[test]
fn a_wrong_type_says_what_the_field_takes() {
    assert_eq!(
        err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nburst = \"3\"\n"),
        "rules.toml:4: rules[0].burst: invalid type: string \"3\", expected a whole number"
    );
    assert_eq!(
        err("[[rules]]\nname = \"a\"\nlimit = \"1/s\"\nshadow = \"yes\"\n"),
        "rules.toml:4: rules[0].shadow: invalid type: string \"yes\", expected true or false"
    );
}

#[test]
fn type_errors_name_the_files_words_not_the_parsers_types() {
    let e = err("server = 5\n");
    assert_eq!(
        e,
        "rules.toml:1: server: invalid type: integer `5`, expected a table"
    );
    let e = err("[rules]\nname = \"a\"\nlimit = \"1/s\"\n");
    assert!(
        e.starts_with("rules.toml:1: rules: invalid type: table, expected a list"),
        "{e}"
    );
    assert!(e.contains("`[[rules]]`"), "{e}");
}

/// Every ```toml block of the README and of docs/configuration.md is a complete, valid
/// configuration, so the documented examples cannot drift from what `check-config` accepts.
#[test]
fn every_toml_block_of_the_readme_and_the_configuration_guide_is_a_valid_configuration() {
    let pages = [
        ("README.md", include_str!("../../../../../README.md")),
        (
            "docs/configuration.md",
            include_str!("../../../../../docs/configuration.md"),
        ),
    ];
    for (name, page) in pages {
        let mut blocks = 0;
        let mut lines = page.lines().enumerate();
        while let Some((start, line)) = lines.next() {
            if line.trim_end() != "```toml" {
                continue;
            }
            let body: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| l.trim_end() != "```")
                .collect();
            // Blank lines in place of the text before the block, so errors give page lines.
            let text = "\n".repeat(start + 1) + &body.join("\n") + "\n";
            if let Err(e) = parse(name, &text) {
                panic!("{e}");
            }
            blocks += 1;
        }
        assert!(
            blocks >= 1 || name == "README.md",
            "no ```toml block found in {name}"
        );
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const VALID: &str = r#"[server]
listen = "127.0.0.1:9000"
trusted_proxies = ["10.0.0.0/8"]
[store]
max_keys = 50
[[rules]]
name = "a"
limit = "10/10s burst 20"
key = ["header:x-api-key", "user:x-user | client_ip"]
cost_header = "x-cost"
[rules.match]
path_prefix = "/api"
methods = ["GET"]
[[rules.route_costs]]
path_prefix = "/api/search"
cost = 5
"#;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Arbitrary text never panics the parser, and every error names the file and a line
        /// inside the document.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            if let Err(errors) = parse("f.toml", &text) {
                for e in errors.0 {
                    prop_assert_eq!(&e.file, "f.toml");
                    prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1) + 1, "{}", e);
                }
            }
        }

        /// A valid document with one byte replaced, removed or duplicated: no panic; an error
        /// always names a line within the document.
        #[test]
        fn mutated_valid_config_never_panics(at in 0..VALID.len(), byte in any::<u8>(), op in 0..3u8) {
            let mut bytes = VALID.as_bytes().to_vec();
            match op {
                0 => bytes[at] = byte,
                1 => { bytes.remove(at); }
                _ => bytes.insert(at, bytes[at]),
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Err(errors) = parse("f.toml", &text) {
                prop_assert!(!errors.0.is_empty());
                for e in errors.0 {
                    prop_assert!(e.line >= 1 && e.line <= text.lines().count() + 1, "{}", e);
                    // Only a syntax error names no field.
                    prop_assert!(
                        !e.field.is_empty() || e.message.starts_with("invalid TOML: "),
                        "{}",
                        e
                    );
                }
            }
        }
    }
}
