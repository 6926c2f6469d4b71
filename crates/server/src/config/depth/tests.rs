use super::*;

fn yaml_ok(text: &str) -> bool {
    check_yaml("f.yaml", text).is_ok()
}

fn toml_ok(text: &str) -> bool {
    check_toml("f.toml", text).is_ok()
}

#[test]
fn a_5000_level_yaml_sequence_is_refused_at_its_line() {
    let text = format!("domain: d\ndescriptors:\n{}x\n", "- ".repeat(5_000));
    let e = check_yaml("rules.yaml", &text).unwrap_err();
    assert_eq!(e.line, 3);
    assert_eq!(e.file, "rules.yaml");
    assert!(e.message.contains("64 levels"), "{}", e.message);
    // One level per line, indented.
    let mut text = String::new();
    for depth in 0..200 {
        text.push_str(&" ".repeat(depth * 2));
        text.push_str("- \n");
    }
    assert_eq!(check_yaml("f", &text).unwrap_err().line, 64);
    // Flow style.
    let text = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
    assert!(!yaml_ok(&text));
    let text = format!("a: {}\n", "{b: ".repeat(100));
    assert!(!yaml_ok(&text));
}

#[test]
fn real_yaml_configs_pass() {
    for entry in
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy_examples")).unwrap()
    {
        let path = entry.unwrap().path();
        if super::super::envoy::is_yaml(&path.display().to_string()) {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(yaml_ok(&text), "{}", path.display());
        }
    }
    let text = "domain: d\ndescriptors:\n  - key: a\n    value: \"x: [y\"\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n  - key: c # [[[[\n    note: |\n" ;
    let mut text = text.to_string();
    // A block scalar's text may be indented any way: it is not nesting.
    for depth in 0..100 {
        text.push_str(&" ".repeat(6 + depth));
        text.push_str("- [ {\n");
    }
    text.push_str("  - key: e\n");
    assert!(yaml_ok(&text));
}

#[test]
fn deep_toml_is_refused_and_real_toml_passes() {
    assert!(!toml_ok(&format!("a = {}\n", "[".repeat(100))));
    assert!(!toml_ok(&format!("a = {}\n", "{b = ".repeat(100))));
    assert!(!toml_ok(&format!("{} = 1\n", vec!["a"; 100].join("."))));
    assert!(!toml_ok(&format!("[{}]\n", vec!["a"; 100].join("."))));
    assert!(!toml_ok(&format!("[[{}]]\n", vec!["a"; 100].join("."))));
    let e = check_toml(
        "rules.toml",
        &format!("x = 1\n\na = [\n{}", "[\n".repeat(70)),
    )
    .unwrap_err();
    assert_eq!(e.line, 66);
    // Dots in values, strings and comments are not nesting.
    let floats = vec!["1.5"; 500].join(", ");
    assert!(toml_ok(&format!(
        "a = [{floats}]\nb = \"{}\"\n# {}\n",
        ".".repeat(500),
        "[".repeat(500)
    )));
    assert!(toml_ok(&format!(
        "a = '''\n{}\n'''\nb = 1\n",
        "[{.".repeat(500)
    )));
    assert!(toml_ok(&format!(
        "\"a.b.c.d\" = 1\n[t]\n{}\n",
        (0..500)
            .map(|i| format!("k{i} = {{a = 1, b = [1, 2]}}"))
            .collect::<Vec<_>>()
            .join("\n")
    )));
    assert!(toml_ok(super::super::load::EMBEDDED_DEFAULT));
    // 60 levels pass, 70 do not.
    assert!(toml_ok(&format!(
        "a = {}{}\n",
        "[".repeat(60),
        "]".repeat(60)
    )));
    assert!(!toml_ok(&format!(
        "a = {}{}\n",
        "[".repeat(70),
        "]".repeat(70)
    )));
}

/// Aliases are bounded by the YAML loader itself (100,000 nodes of expansion in all):
/// nine levels of nine aliases would be 387 million nodes.
#[test]
fn a_billion_laughs_yaml_is_an_error_not_an_expansion() {
    let mut text = String::from("domain: d\nx0: &x0 [a, a, a, a, a, a, a, a, a]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "x{i}: &x{i} [{}]\n",
            vec![format!("*x{p}"); 9].join(", ")
        ));
    }
    assert!(yaml_ok(&text));
    let e = super::super::envoy::parse("d", &[("f.yaml".to_string(), text)], &Default::default())
        .unwrap_err();
    assert!(e.to_string().contains("alias expansion"), "{e}");
}

use proptest::prelude::*;

/// Pieces that open levels in TOML or YAML (or look like they do), joined at random.
fn nesting() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec![
            "[",
            "]",
            "{",
            "}",
            "- ",
            "? ",
            "a: ",
            "a.",
            "a = ",
            "\n",
            "  ",
            "\"",
            "'",
            "#",
            ",",
            "|\n",
            "[[a.b]]\n",
            "x = [",
            "{a = ",
        ]),
        0..4_000,
    )
    .prop_map(|pieces| pieces.concat())
}

/// `valid` with up to 8 bytes replaced, inserted or removed (kept UTF-8).
fn mutated(valid: &'static str) -> impl Strategy<Value = String> {
    proptest::collection::vec((any::<prop::sample::Index>(), any::<char>(), 0u8..3), 1..8).prop_map(
        move |edits| {
            let mut chars: Vec<char> = valid.chars().collect();
            for (at, c, kind) in edits {
                let i = at.index(chars.len().max(1)).min(chars.len());
                match kind {
                    0 if i < chars.len() => chars[i] = c,
                    1 => chars.insert(i, c),
                    _ if i < chars.len() => {
                        chars.remove(i);
                    }
                    _ => {}
                }
            }
            chars.into_iter().collect()
        },
    )
}

const YAML: &str = include_str!("../../../tests/envoy_examples/example2_messaging.yaml");

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// On a test thread's 2 MiB stack (a tokio worker's size): an error, never a panic
    /// or an overflow, whatever the nesting.
    #[test]
    fn a_toml_config_is_a_config_or_an_error(text in prop_oneof![
        nesting(),
        ".{0,400}",
        mutated(super::super::load::EMBEDDED_DEFAULT),
    ]) {
        let _ = super::super::parse("f.toml", &text);
    }

    #[test]
    fn a_yaml_config_is_a_config_or_an_error(text in prop_oneof![
        nesting(),
        ".{0,400}",
        mutated(YAML),
    ]) {
        let _ = super::super::envoy::parse("d", &[("f.yaml".to_string(), text)], &Default::default());
    }
}
