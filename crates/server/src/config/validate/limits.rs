//! `[server]`'s connection bounds and timeouts ([`ConnectionLimits`]).

use std::time::Duration;

use toml::Spanned;

use super::validator::Validator;
use crate::config::listen::ConnectionLimits;
use crate::config::raw::RawServer;

/// Largest accepted `max_connections` and `upstream_max_connections`.
const MAX_MAX_CONNECTIONS: usize = 1_000_000;

/// Largest accepted `grpc_max_concurrent_streams`.
const MAX_GRPC_STREAMS: usize = 100_000;

/// The bounds of every timeout setting: 1 millisecond to 1 hour (the connection age: to 7 days).
const TIMEOUT_MICROS: std::ops::RangeInclusive<u64> = 1_000..=3_600_000_000;

/// The bounds of `grpc_max_connection_age`: 1 second to 7 days.
const AGE_MICROS: std::ops::RangeInclusive<u64> = 1_000_000..=604_800_000_000;

impl Validator<'_> {
    /// The connection settings of `[server]`; each bad value is an error naming its field
    /// (and the default stays in its place).
    pub(super) fn connection_limits(&mut self, s: &RawServer) -> ConnectionLimits {
        let mut out = ConnectionLimits::default();
        if let Some(n) = &s.max_connections {
            out.max_connections = Some(self.count(n, "max_connections", MAX_MAX_CONNECTIONS, 1));
        }
        if let Some(n) = &s.upstream_max_connections {
            out.upstream_max_connections =
                self.count(n, "upstream_max_connections", MAX_MAX_CONNECTIONS, 256);
        }
        if let Some(n) = &s.grpc_max_concurrent_streams {
            let n = self.count(n, "grpc_max_concurrent_streams", MAX_GRPC_STREAMS, 1024);
            out.grpc_max_concurrent_streams = u32::try_from(n).unwrap_or(1024);
        }
        let timeouts = [
            (
                &s.header_read_timeout,
                "header_read_timeout",
                &mut out.header_read_timeout,
            ),
            (&s.idle_timeout, "idle_timeout", &mut out.idle_timeout),
            (
                &s.body_idle_timeout,
                "body_idle_timeout",
                &mut out.body_idle_timeout,
            ),
            (
                &s.upstream_connect_timeout,
                "upstream_connect_timeout",
                &mut out.upstream_connect_timeout,
            ),
            (
                &s.upstream_response_timeout,
                "upstream_response_timeout",
                &mut out.upstream_response_timeout,
            ),
            (
                &s.upstream_idle_timeout,
                "upstream_idle_timeout",
                &mut out.upstream_idle_timeout,
            ),
        ];
        for (value, field, slot) in timeouts {
            if let Some(d) = self.duration(value, field, &TIMEOUT_MICROS, "1ms and 1h") {
                *slot = d;
            }
        }
        if let Some(d) = self.duration(
            &s.grpc_max_connection_age,
            "grpc_max_connection_age",
            &AGE_MICROS,
            "1s and 7day",
        ) {
            out.grpc_max_connection_age = d;
        }
        out
    }

    /// A whole number `1..=max` at `server.{field}`, or `fallback` with the error pushed.
    fn count(&mut self, n: &Spanned<i64>, field: &str, max: usize, fallback: usize) -> usize {
        match usize::try_from(*n.get_ref()) {
            Ok(v) if (1..=max).contains(&v) => v,
            _ => {
                self.push(
                    n,
                    format!("server.{field}"),
                    format!(
                        "must be a whole number between 1 and {max}, got {}",
                        n.get_ref()
                    ),
                );
                fallback
            }
        }
    }

    /// A duration text (`"10s"`, `"500ms"`) within `range` (microseconds) at
    /// `server.{field}`; `None` when absent or wrong (then the error is pushed).
    fn duration(
        &mut self,
        value: &Option<Spanned<String>>,
        field: &str,
        range: &std::ops::RangeInclusive<u64>,
        bounds: &str,
    ) -> Option<Duration> {
        let v = value.as_ref()?;
        match floodgate_core::quota::parse_period(v.get_ref()) {
            Ok(us) if range.contains(&us) => Some(Duration::from_micros(us)),
            Ok(_) => {
                self.push(
                    v,
                    format!("server.{field}"),
                    format!("must be between {bounds}, got {:?}", v.get_ref()),
                );
                None
            }
            Err(msg) => {
                self.push(
                    v,
                    format!("server.{field}"),
                    format!(
                        "invalid duration: {} (e.g. \"10s\", \"500ms\")",
                        msg.replacen("period", "duration", 1)
                    ),
                );
                None
            }
        }
    }
}
