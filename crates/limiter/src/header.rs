//! The structured-field text of a rule's quota: the `RateLimit-Policy` list member a
//! [`RuleSet`](crate::RuleSet) keeps per rule, and the string escaping the HTTP mapping
//! (`floodgate_tower::response`) builds the `RateLimit` header with.

use floodgate_core::Quota;
use http::HeaderValue;

/// The `RateLimit-Policy` list member of a rule: `"<rule>";q=<limit>;w=<window>`, the window
/// being the quota's period in whole seconds (rounded up, at least 1), the name escaped as a
/// structured-field string.
///
/// ```
/// let item = floodgate_limiter::policy_item("per-ip", &"10/min".parse().unwrap());
/// assert_eq!(item, "\"per-ip\";q=10;w=60");
/// ```
pub fn policy_item(rule: &str, quota: &Quota) -> HeaderValue {
    let mut out = Vec::with_capacity(rule.len() + 32);
    push_policy_item(&mut out, rule, quota);
    // Built only from integers and escaped printable ASCII, so always a valid header value.
    HeaderValue::from_bytes(&out).expect("escaped printable ASCII")
}

/// Appends [`policy_item`]'s text to `out`.
pub fn push_policy_item(out: &mut Vec<u8>, rule: &str, quota: &Quota) {
    let mut numbers = itoa::Buffer::new();
    let window = quota.period().div_ceil(1_000_000).max(1);
    push_sf_string(out, rule);
    out.extend_from_slice(b";q=");
    out.extend_from_slice(numbers.format(quota.limit()).as_bytes());
    out.extend_from_slice(b";w=");
    out.extend_from_slice(numbers.format(window).as_bytes());
}

/// Appends `text` as a structured-field string (RFC 8941 section 3.3.3): `"` and `\` escaped,
/// anything outside printable ASCII replaced by `?` (rule names are configuration, never client
/// data).
pub fn push_sf_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    // The usual name needs no escape: copied whole.
    if text
        .bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        return;
    }
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push(b'\\');
                out.push(c as u8);
            }
            ' '..='~' => out.push(c as u8),
            _ => out.push(b'?'),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_are_escaped() {
        let mut out = Vec::new();
        push_sf_string(&mut out, "a\"b\\c\u{7}é");
        assert_eq!(out, b"\"a\\\"b\\\\c??\"");
        out.clear();
        push_sf_string(&mut out, "per-ip (v2)");
        assert_eq!(out, b"\"per-ip (v2)\"");
    }
}
