//! `[server]`.

use std::net::SocketAddr;

use floodgate_tower::{ForwardedHeader, PathParameters};
use http::Uri;
use ipnet::IpNet;

use super::validator::Validator;
use crate::config::raw::{RawConfig, RawServer};
use crate::config::schema::{
    check_admin_token, check_reservation_secret, ServerConfig, MAX_MAX_DELAYED,
    RESERVATION_TTL_RANGE,
};

impl Validator<'_> {
    /// `[server]`: each bad value is an error naming its field (and the default stays in its
    /// place).
    pub(super) fn server(&mut self, raw: &RawConfig) -> ServerConfig {
        let s = &raw.server;
        let mut out = ServerConfig::default();
        self.server_network(s, &mut out);
        self.server_features(s, &mut out);
        out.limits = self.connection_limits(s);
        out
    }

    /// The listen addresses, the tokens and what is believed of clients and proxies.
    fn server_network(&mut self, s: &RawServer, out: &mut ServerConfig) {
        if let Some(listen) = &s.listen {
            match listen.get_ref().parse::<SocketAddr>() {
                Ok(addr) => out.listen = Some(addr),
                Err(_) => self.push(
                    listen,
                    "server.listen".into(),
                    format!(
                        "invalid address {:?}: expected IP:PORT, e.g. \"127.0.0.1:8080\"",
                        listen.get_ref()
                    ),
                ),
            }
        }
        if let Some(listen) = &s.grpc_listen {
            match listen.get_ref().parse::<SocketAddr>() {
                Ok(addr) => out.grpc_listen = Some(addr),
                Err(_) => self.push(
                    listen,
                    "server.grpc_listen".into(),
                    format!(
                        "invalid address {:?}: expected IP:PORT, e.g. \"127.0.0.1:8081\"",
                        listen.get_ref()
                    ),
                ),
            }
        }
        out.grpc_tls = self.grpc_tls(s.grpc_tls.as_ref());
        if let Some(token) = &s.admin_token {
            match check_admin_token(token.get_ref()) {
                Ok(()) => out.admin_token = Some(token.get_ref().clone()),
                Err(msg) => self.push(token, "server.admin_token".into(), msg),
            }
        }
        if let Some(token) = &s.api_token {
            match check_admin_token(token.get_ref()) {
                Ok(()) => out.api_token = Some(token.get_ref().clone()),
                Err(msg) => self.push(token, "server.api_token".into(), msg),
            }
        }
        for (i, p) in s.trusted_proxies.iter().enumerate() {
            match parse_net(p.get_ref()) {
                Ok(net) => out.trusted_proxies.push(net),
                Err(msg) => self.push(p, format!("server.trusted_proxies[{i}]"), msg),
            }
        }
        for (i, name) in s.keep_client_headers.iter().enumerate() {
            match crate::proxy::client_address_header(name.get_ref()) {
                Ok(name) if !out.keep_client_headers.contains(&name) => {
                    out.keep_client_headers.push(name);
                }
                Ok(_) => self.push(
                    name,
                    format!("server.keep_client_headers[{i}]"),
                    format!("{:?} is listed twice", name.get_ref()),
                ),
                Err(msg) => self.push(name, format!("server.keep_client_headers[{i}]"), msg),
            }
        }
        if let Some(h) = &s.forwarded_header {
            match h.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => out.forwarded_header = ForwardedHeader::XForwardedFor,
                "forwarded" => out.forwarded_header = ForwardedHeader::Forwarded,
                _ => self.push(
                    h,
                    "server.forwarded_header".into(),
                    format!(
                        "unknown header {:?}; expected \"x-forwarded-for\" or \"forwarded\"",
                        h.get_ref()
                    ),
                ),
            }
        }
        if let Some(p) = &s.path_parameters {
            match p.get_ref().as_str() {
                "strip" => out.path_parameters = PathParameters::Strip,
                "keep" => out.path_parameters = PathParameters::Keep,
                other => self.push(
                    p,
                    "server.path_parameters".into(),
                    format!("unknown value {other:?}; expected \"strip\" or \"keep\""),
                ),
            }
        }
        if let Some(p) = &s.ipv6_prefix {
            match u8::try_from(*p.get_ref()) {
                Ok(len) if len <= 128 => out.ipv6_prefix = len,
                _ => self.push(
                    p,
                    "server.ipv6_prefix".into(),
                    format!("must be between 0 and 128, got {}", p.get_ref()),
                ),
            }
        }
    }

    /// The web page, the delay mode, reservations and the proxy's upstream.
    fn server_features(&mut self, s: &RawServer, out: &mut ServerConfig) {
        if let Some(ui) = s.ui {
            out.ui = ui;
        }
        if let Some(n) = &s.ui_denied_keys {
            match usize::try_from(*n.get_ref()) {
                Ok(n) if n <= 1_000 => out.ui_denied_keys = n,
                _ => self.push(
                    n,
                    "server.ui_denied_keys".into(),
                    format!("must be between 0 and 1000, got {}", n.get_ref()),
                ),
            }
        }
        if let Some(n) = &s.max_delayed {
            match usize::try_from(*n.get_ref()) {
                Ok(n) if n <= MAX_MAX_DELAYED => out.max_delayed = n,
                _ => self.push(
                    n,
                    "server.max_delayed".into(),
                    format!(
                        "must be between 0 and {MAX_MAX_DELAYED}, got {}",
                        n.get_ref()
                    ),
                ),
            }
        }
        if let Some(secret) = &s.reservation_secret {
            match check_reservation_secret(secret.get_ref()) {
                Ok(()) => out.reservation_secret = Some(secret.get_ref().clone()),
                Err(msg) => self.push(secret, "server.reservation_secret".into(), msg),
            }
        }
        if let Some(ttl) = &s.reservation_ttl {
            match floodgate_core::quota::parse_period(ttl.get_ref()) {
                Ok(us) if RESERVATION_TTL_RANGE.contains(&us) => out.reservation_ttl = us,
                Ok(_) => self.push(
                    ttl,
                    "server.reservation_ttl".into(),
                    format!("must be between 1s and 7day, got {:?}", ttl.get_ref()),
                ),
                Err(msg) => self.push(
                    ttl,
                    "server.reservation_ttl".into(),
                    format!(
                        "invalid duration: {}",
                        msg.replacen("period", "duration", 1)
                    ),
                ),
            }
        }
        if let Some(up) = &s.upstream {
            match parse_upstream(up.get_ref()) {
                Ok(uri) => out.upstream = Some(uri),
                Err(msg) => self.push(up, "server.upstream".into(), msg),
            }
        }
    }
}

/// An address or CIDR: `10.0.0.0/8`, `127.0.0.1` (a single address), `::1`.
///
/// # Errors
/// A message with an example of the accepted form.
fn parse_net(text: &str) -> Result<IpNet, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    text.parse::<std::net::IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("invalid address or CIDR {text:?}, e.g. \"10.0.0.0/8\" or \"::1\""))
}

/// An `http://host:port` upstream (no path, query or TLS).
///
/// # Errors
/// A message saying which part is not accepted.
pub(crate) fn parse_upstream(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("invalid upstream URL {text:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "upstream {text:?} must start with http:// (TLS to the upstream is not supported)"
        ));
    }
    if uri.authority().is_none() {
        return Err(format!("upstream {text:?} has no host"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "upstream {text:?} must not have a path or query: requests keep their own path"
        ));
    }
    Ok(uri)
}
