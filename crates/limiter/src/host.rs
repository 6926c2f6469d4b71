//! The one spelling of a request's host that host rules compare: [`normalize_authority`] reads
//! an authority (`Host`, `:authority`, the absolute form's, forward-auth's `X-Forwarded-Host`)
//! and [`request_host`] picks the request's one authority the way the proxy forwards it.
//!
//! ```
//! use floodgate_limiter::normalize_authority;
//!
//! let a = normalize_authority(b"API.Example.com.:0080").unwrap();
//! assert_eq!(a.as_str(), "api.example.com:80");
//! assert_eq!(a.host(), "api.example.com");
//! assert!(normalize_authority(b"api.example.com:abc").is_err());
//! assert!(normalize_authority(b"a, b").is_err());
//! ```

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use http::{HeaderMap, Uri};

/// Longest host accepted, in bytes, without its trailing dot (a DNS name's limit, RFC 1035).
pub const MAX_HOST_LEN: usize = 253;

/// A validated authority in its one spelling: the host in lower case without a trailing dot
/// (an IPv6 literal in brackets, in its RFC 5952 form), then `:port` in decimal when a port was
/// given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    text: String,
    host_len: usize,
}

impl Authority {
    /// `host[:port]`, the value to forward as `Host`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host without the port (what host rules compare).
    pub fn host(&self) -> &str {
        &self.text[..self.host_len]
    }
}

/// Why an authority cannot be a host (the problem's `detail`, after the field's name).
pub type HostError = &'static str;

/// Reads `raw` as `host[:port]` (RFC 9110 7.2, RFC 3986 3.2.2): a reg-name of letters, digits,
/// `-`, `_` and `.` in labels of 1 to 63 bytes (at most [`MAX_HOST_LEN`] bytes; one trailing
/// dot is dropped), or an IPv6 literal in brackets, optionally followed by `:` and a decimal
/// port from 1 to 65535 in at most 5 digits (leading zeros dropped: `00080` is `80`; an empty
/// port, which RFC 3986 allows, is no port). ASCII case is folded.
///
/// # Errors
/// [`HostError`] for an empty value, user information (`user@host`), any other byte (a space,
/// a comma, `%`, ...), an empty label, an over-long name or label, an IPv6 literal that does not
/// parse (zone identifiers are refused), or a port that is not a number from 1 to 65535 in at
/// most 5 digits (`0`, `000080`, `65536`).
pub fn normalize_authority(raw: &[u8]) -> Result<Authority, HostError> {
    if raw.is_empty() {
        return Err("is empty: a request names exactly one host");
    }
    if raw.contains(&b'@') {
        return Err("contains user information (user@host), which is not accepted");
    }
    let (host, port) = if let Some(rest) = raw.strip_prefix(b"[") {
        let end = rest
            .iter()
            .position(|&b| b == b']')
            .ok_or("has an IPv6 literal without its closing ]")?;
        let literal = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| s.parse::<Ipv6Addr>().ok())
            .ok_or("has an IPv6 literal that is not an IPv6 address")?;
        let after = &rest[end + 1..];
        let port = match after {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return Err("has bytes after its IPv6 literal that are not :port"),
        };
        (format!("[{literal}]"), port)
    } else {
        let (name, port) = match raw.iter().rposition(|&b| b == b':') {
            Some(i) => (&raw[..i], Some(&raw[i + 1..])),
            None => (raw, None),
        };
        (reg_name(name)?, port)
    };
    let mut text = host;
    let host_len = text.len();
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        if !port.iter().all(u8::is_ascii_digit) {
            return Err("has a port that is not a decimal number");
        }
        // At most 5 digits (leading zeros included), so a port costs no more than it says.
        let value = std::str::from_utf8(port)
            .ok()
            .filter(|d| d.len() <= 5)
            .and_then(|d| d.parse::<u16>().ok())
            .filter(|&p| p != 0)
            .ok_or("has a port that is not 1 to 65535 in at most 5 digits")?;
        // Writing to a String cannot fail.
        let _ = write!(text, ":{value}");
    }
    Ok(Authority { text, host_len })
}

/// A reg-name in lower case without its trailing dot.
fn reg_name(name: &[u8]) -> Result<String, HostError> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() {
        return Err("has no host name");
    }
    if name.len() > MAX_HOST_LEN {
        return Err("has a host name longer than 253 bytes");
    }
    if !name
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("is not a host name (letters, digits, -, _ and . only) or an IPv6 literal");
    }
    for label in name.split(|&b| b == b'.') {
        if label.is_empty() {
            return Err("has an empty label (two dots, or a leading dot)");
        }
        if label.len() > 63 {
            return Err("has a label longer than 63 bytes");
        }
    }
    // All ASCII, checked above.
    Ok(String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// The host a request names, for host rules: the URI's authority when it has one (the absolute
/// form, HTTP/2's `:authority`), else its one `Host` header; normalised by
/// [`normalize_authority`]. `None` when there is none, `Host` is sent more than once, or it
/// cannot be a host: such a request matches no host rule, so a front end that forwards it
/// (the proxy, forward-auth) refuses it first.
pub fn request_host(uri: &Uri, headers: &HeaderMap) -> Option<Authority> {
    if let Some(authority) = uri.authority() {
        return normalize_authority(authority.as_str().as_bytes()).ok();
    }
    let mut values = headers.get_all(http::header::HOST).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    normalize_authority(value.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_host_normalise_to_it() {
        for raw in [
            "api.example.com",
            "API.example.COM",
            "api.example.com.",
            "api.example.com:",
        ] {
            let a = normalize_authority(raw.as_bytes()).unwrap();
            assert_eq!(a.as_str(), "api.example.com", "{raw}");
            assert_eq!(a.host(), "api.example.com");
        }
        let a = normalize_authority(b"api.example.com.:00080").unwrap();
        assert_eq!(a.as_str(), "api.example.com:80");
        assert_eq!(a.host(), "api.example.com");
        let a = normalize_authority(b"[0:0:0:0:0:0:0:1]:8080").unwrap();
        assert_eq!(a.as_str(), "[::1]:8080");
        assert_eq!(a.host(), "[::1]");
        assert_eq!(
            normalize_authority(b"127.0.0.1:65535").unwrap().as_str(),
            "127.0.0.1:65535"
        );
        assert_eq!(normalize_authority(b"x:00001").unwrap().as_str(), "x:1");
        assert_eq!(normalize_authority(b"my_host").unwrap().as_str(), "my_host");
    }

    #[test]
    fn what_cannot_be_a_host_is_refused() {
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = format!("{}a", "a.".repeat(127));
        for raw in [
            "",
            ".",
            "api.example.com:abc",
            "api.example.com:65536",
            "api.example.com:99999999999999999999",
            "api.example.com:-1",
            "x:0",
            "x:00000",
            "x:000080",
            "[::1]:000080",
            "[::1]:0",
            "a, b",
            "a b",
            "user@api.example.com",
            "api..example.com",
            ".api.example.com",
            "api.example.com..",
            "api%2eexample.com",
            "[::1",
            "[::1]x",
            "[fe80::1%25eth0]",
            "[not-v6]",
            "::1",
            long_label.as_str(),
            long_name.as_str(),
        ] {
            assert!(normalize_authority(raw.as_bytes()).is_err(), "{raw:?}");
        }
        assert!(normalize_authority("bücher.example".as_bytes()).is_err());
        let zeros = format!("x:{}80", "0".repeat(1000));
        assert!(normalize_authority(zeros.as_bytes()).is_err());
    }

    #[test]
    fn the_uri_authority_wins_and_two_host_lines_name_none() {
        let mut h = HeaderMap::new();
        h.insert("host", "API.example.com.".parse().unwrap());
        let origin: Uri = "/x".parse().unwrap();
        assert_eq!(request_host(&origin, &h).unwrap().host(), "api.example.com");
        let absolute: Uri = "http://other.example/x".parse().unwrap();
        assert_eq!(request_host(&absolute, &h).unwrap().host(), "other.example");
        h.append("host", "api.example.com".parse().unwrap());
        assert_eq!(request_host(&origin, &h), None);
        assert_eq!(request_host(&origin, &HeaderMap::new()), None);
    }
}
