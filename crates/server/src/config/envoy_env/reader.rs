//! Reading envoyproxy/ratelimit's environment variables: each value parsed as upstream does
//! (Go booleans and durations), every problem kept with the variable's name.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// The variables read so far and the problems found.
pub(super) struct Reader<'a> {
    pub(super) vars: &'a BTreeMap<String, String>,
    pub(super) errors: Vec<String>,
}

impl Reader<'_> {
    /// The variable's value, else `default` (upstream's).
    pub(super) fn text(&self, name: &str, default: &str) -> String {
        self.vars
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    pub(super) fn fail(&mut self, name: &str, value: &str, why: impl std::fmt::Display) {
        self.errors.push(format!("{name}={value:?}: {why}"));
    }

    /// A Go `strconv.ParseBool` value.
    pub(super) fn bool(&mut self, name: &str, default: bool) -> bool {
        let Some(v) = self.vars.get(name) else {
            return default;
        };
        match v.as_str() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => {
                let v = v.clone();
                self.fail(name, &v, "expected true or false");
                default
            }
        }
    }

    pub(super) fn port(&mut self, name: &str, default: u16) -> u16 {
        let v = self.text(name, &default.to_string());
        v.trim().parse().unwrap_or_else(|_| {
            self.fail(name, &v, "expected a port number, 0 to 65535");
            default
        })
    }

    /// `host` and `port` resolved (an IP address or a name such as `localhost`).
    pub(super) fn addr(&mut self, host_var: &str, host: &str, port: u16) -> Option<SocketAddr> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match (host, port).to_socket_addrs() {
            Ok(mut addrs) => addrs.next(),
            Err(e) => {
                self.fail(host_var, host, format!("cannot resolve this host: {e}"));
                None
            }
        }
    }

    pub(super) fn duration(&mut self, name: &str, default: &str) -> Duration {
        let v = self.text(name, default);
        go_duration(&v).unwrap_or_else(|why| {
            self.fail(name, &v, why);
            go_duration(default).unwrap_or_default()
        })
    }

    pub(super) fn positive(&mut self, name: &str, default: &str) {
        let v = self.text(name, default);
        if v.trim().parse::<u64>().is_err() {
            self.fail(name, &v, "expected a whole number, 0 or more");
        }
    }
}

/// A Go `time.ParseDuration` text: `0`, or numbers with units (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`), e.g. `24h`, `1m30s`, `500ms`, `1.5s`; no sign.
pub(super) fn go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("expected a duration such as 10s, 500ms, 1m30s or 24h, got {text:?}");
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() {
        return Err(bad());
    }
    let mut rest = t;
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[u..];
        total += value * scale;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}
