//! `QUOTA_MODE` in the envoyproxy/ratelimit environment: read as upstream's Go boolean.

use std::collections::BTreeMap;

use super::from_vars;

fn with(value: Option<&str>) -> Result<bool, String> {
    let mut vars = BTreeMap::new();
    if let Some(v) = value {
        vars.insert("QUOTA_MODE".to_string(), v.to_string());
    }
    from_vars(&vars)
        .map(|env| env.service.quota_mode)
        .map_err(|e| e.to_string())
}

#[test]
fn quota_mode_is_off_by_default_and_read_as_a_go_boolean() {
    assert_eq!(with(None), Ok(false));
    for on in ["true", "1", "T", "TRUE"] {
        assert_eq!(with(Some(on)), Ok(true), "{on}");
    }
    for off in ["false", "0", "F"] {
        assert_eq!(with(Some(off)), Ok(false), "{off}");
    }
}

#[test]
fn a_quota_mode_that_is_not_a_boolean_is_refused_naming_the_variable() {
    let err = with(Some("sometimes")).unwrap_err();
    assert!(
        err.contains("QUOTA_MODE=\"sometimes\": expected true or false"),
        "{err}"
    );
}
