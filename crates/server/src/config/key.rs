//! The key-source grammar of `key = ...`: what a rule counts separately, parsed from the file
//! and spelled back for people.

use floodgate_tower::KeySource;
use http::HeaderName;

/// `key = "SOURCE"`, `key = "SOURCE | SOURCE"` (the first present one) or
/// `key = ["SOURCE", "SOURCE"]` (all together), where SOURCE is one of `client_ip`,
/// `user:HEADER`, `api_key:HEADER`, `header:HEADER`, `client_net:V4/V6` (the client address
/// grouped by these prefix lengths), `method`, `path`, `route`, `global`.
pub(super) fn parse_key_value(value: &toml::Value) -> Result<KeySource, String> {
    match value {
        toml::Value::String(text) => parse_key(text),
        toml::Value::Array(items) if !items.is_empty() => {
            let mut all = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    toml::Value::String(text) => all.push(parse_key(text)?),
                    other => {
                        return Err(format!(
                            "expected key source strings in the list, got a {}",
                            other.type_str()
                        ))
                    }
                }
            }
            Ok(if all.len() == 1 {
                all.remove(0)
            } else {
                KeySource::All(all)
            })
        }
        other => Err(format!(
            "expected a key source like \"client_ip\" or a list of them, got {}",
            if matches!(other, toml::Value::Array(_)) {
                "an empty list".to_string()
            } else {
                format!("a {}", other.type_str())
            }
        )),
    }
}

/// One key source, or a fallback chain `a | b | c` (the first present one).
///
/// # Errors
/// A message naming the accepted sources.
fn parse_key(text: &str) -> Result<KeySource, String> {
    let mut chain = Vec::new();
    for part in text.split('|') {
        chain.push(parse_key_source(part.trim())?);
    }
    Ok(if chain.len() == 1 {
        chain.remove(0)
    } else {
        KeySource::FirstOf(chain)
    })
}

fn parse_key_source(text: &str) -> Result<KeySource, String> {
    let header = |name: &str| {
        HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("invalid header name {name:?} in key source {text:?}"))
    };
    Ok(match text {
        "client_ip" => KeySource::ClientIp,
        "global" => KeySource::Constant("global".into()),
        "method" => KeySource::Method,
        "path" => KeySource::Path,
        "route" => KeySource::Route,
        _ => match text.split_once(':') {
            Some(("user", h)) => KeySource::User { header: header(h)? },
            Some(("api_key", h)) => KeySource::ApiKey { header: header(h)? },
            Some(("header", h)) => KeySource::Header { name: header(h)? },
            Some(("client_net", prefixes)) => {
                let parsed = prefixes.split_once('/').and_then(|(v4, v6)| {
                    let v4: u8 = v4.trim().parse().ok().filter(|&p| p <= 32)?;
                    let v6: u8 = v6.trim().parse().ok().filter(|&p| p <= 128)?;
                    Some((v4, v6))
                });
                let (ipv4_prefix, ipv6_prefix) = parsed.ok_or_else(|| {
                    format!(
                        "invalid prefixes in key source {text:?}: expected \
                         client_net:IPV4_PREFIX/IPV6_PREFIX, e.g. client_net:24/48"
                    )
                })?;
                KeySource::ClientNet {
                    ipv4_prefix,
                    ipv6_prefix,
                }
            }
            _ => {
                return Err(format!(
                    "unknown key source {text:?}; expected client_ip, user:HEADER, \
                     api_key:HEADER, header:HEADER, client_net:V4/V6, method, path, route or \
                     global"
                ))
            }
        },
    })
}

/// The configuration spelling of a key source (inverse of [`parse_key`] for one source).
pub(crate) fn describe_key(key: &KeySource) -> String {
    match key {
        KeySource::ClientIp => "client_ip".into(),
        KeySource::User { header } => format!("user:{header}"),
        KeySource::ApiKey { header } => format!("api_key:{header}"),
        KeySource::Header { name } => format!("header:{name}"),
        KeySource::Method => "method".into(),
        KeySource::Path => "path".into(),
        KeySource::Route => "route".into(),
        KeySource::Constant(_) => "global".into(),
        KeySource::ClientNet {
            ipv4_prefix,
            ipv6_prefix,
        } => format!("client_net:{ipv4_prefix}/{ipv6_prefix}"),
        KeySource::FirstOf(chain) => chain
            .iter()
            .map(describe_key)
            .collect::<Vec<_>>()
            .join(" | "),
        KeySource::All(all) => format!(
            "[{}]",
            all.iter().map(describe_key).collect::<Vec<_>>().join(", ")
        ),
        _ => format!("{key:?}"),
    }
}
