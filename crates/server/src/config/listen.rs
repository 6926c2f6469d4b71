//! The `[server]` settings that bound connections: how many the listeners hold at once, how
//! long a client may take to send a request's header or its body, how long an idle keep-alive
//! connection stays open, the gRPC listener's HTTP/2 limits, and the reverse proxy's upstream
//! client (connect, response and idle timeouts, connections per upstream).
//!
//! ```toml
//! [server]
//! max_connections = 4096               # all listeners together (default: 4096, less when the open-file limit is lower)
//! header_read_timeout = "10s"          # from the connection (or the first byte after a response) to a complete header
//! idle_timeout = "60s"                 # a keep-alive connection with no request is closed after this
//! body_idle_timeout = "30s"            # a request body that sends nothing for this long is cut (proxy: 408)
//! grpc_max_connection_age = "30min"    # a gRPC connection is asked to go away (GOAWAY) after this
//! grpc_max_concurrent_streams = 1024   # calls at once on one gRPC connection
//! upstream_connect_timeout = "5s"      # proxy: TCP connect to the upstream (then 504)
//! upstream_response_timeout = "60s"    # proxy: from sending to the upstream's response header (then 504)
//! upstream_idle_timeout = "60s"        # proxy: a pooled idle upstream connection is closed after this
//! upstream_max_connections = 256       # proxy: upstream connections open at once (more requests wait)
//! ```

use std::time::Duration;

/// Default `max_connections` (before the open-file limit lowers it; see
/// `crate::serve::connections`).
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The connection bounds of `[server]`, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// `max_connections`: connections held at once by all listeners together (API, proxy,
    /// admin, gRPC). `None`: [`DEFAULT_MAX_CONNECTIONS`], lowered to what the open-file limit
    /// allows. When reached, accepting waits; an idle HTTP connection (no request in flight)
    /// is closed to make room, the longest idle first.
    pub(crate) max_connections: Option<usize>,
    /// `header_read_timeout`: a request's header must be complete within this time of the
    /// connection opening, or of its first byte after an earlier response (default 10 s).
    pub(crate) header_read_timeout: Duration,
    /// `idle_timeout`: an HTTP connection with no request in flight and no byte received
    /// since its last response is closed after this (default 60 s).
    pub(crate) idle_timeout: Duration,
    /// `body_idle_timeout`: a request body from which nothing arrives for this long while it
    /// is being read fails (the proxy answers 408; default 30 s).
    pub(crate) body_idle_timeout: Duration,
    /// `grpc_max_connection_age`: after this, a gRPC connection gets GOAWAY; its calls in
    /// flight finish (default 30 min).
    pub(crate) grpc_max_connection_age: Duration,
    /// `grpc_max_concurrent_streams`: calls at once on one gRPC connection (HTTP/2
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`, and tonic's concurrency limit; default 1024).
    pub(crate) grpc_max_concurrent_streams: u32,
    /// `upstream_connect_timeout`: proxy mode, TCP connect to the upstream (default 5 s;
    /// then 504).
    pub(crate) upstream_connect_timeout: Duration,
    /// `upstream_response_timeout`: proxy mode, from handing the request to the upstream
    /// client (waiting for a free connection included) to the upstream's response header
    /// (default 60 s; then 504).
    pub(crate) upstream_response_timeout: Duration,
    /// `upstream_idle_timeout`: proxy mode, a pooled upstream connection unused for this
    /// long is closed (default 60 s).
    pub(crate) upstream_idle_timeout: Duration,
    /// `upstream_max_connections`: proxy mode, upstream connections open at once; requests
    /// beyond wait for one to free up (default 256).
    pub(crate) upstream_max_connections: usize,
}

/// How often the gRPC listener pings an idle HTTP/2 connection, and how long it waits for the
/// answer before closing it.
pub(crate) const GRPC_KEEPALIVE: (Duration, Duration) =
    (Duration::from_secs(60), Duration::from_secs(20));

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: None,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_idle_timeout: Duration::from_secs(30),
            grpc_max_connection_age: Duration::from_secs(30 * 60),
            grpc_max_concurrent_streams: 1024,
            upstream_connect_timeout: Duration::from_secs(5),
            upstream_response_timeout: Duration::from_secs(60),
            upstream_idle_timeout: Duration::from_secs(60),
            upstream_max_connections: 256,
        }
    }
}

/// `max 4096 connections, header 10s, idle 60s, body idle 30s, ...`: the connection settings,
/// for `check-config`.
pub(crate) fn describe(limits: &ConnectionLimits) -> String {
    let secs =
        |d: Duration| super::units::format_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let max = limits.max_connections.map_or_else(
        || format!("{DEFAULT_MAX_CONNECTIONS} (or fewer by the open-file limit)"),
        |n| n.to_string(),
    );
    format!(
        "connections: at most {max}, header {}, idle {}, body idle {}; gRPC age {}, {} streams \
         each; upstream connect {}, response {}, idle {}, at most {} connections",
        secs(limits.header_read_timeout),
        secs(limits.idle_timeout),
        secs(limits.body_idle_timeout),
        secs(limits.grpc_max_connection_age),
        limits.grpc_max_concurrent_streams,
        secs(limits.upstream_connect_timeout),
        secs(limits.upstream_response_timeout),
        secs(limits.upstream_idle_timeout),
        limits.upstream_max_connections,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(text: &str) -> ConnectionLimits {
        super::super::parse("rules.toml", text)
            .unwrap_or_else(|e| panic!("{e}"))
            .server
            .limits
    }

    fn err(text: &str) -> String {
        super::super::parse("rules.toml", text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn connection_settings_default_and_parse() {
        assert_eq!(limits(""), ConnectionLimits::default());
        let l = limits(
            r#"
[server]
max_connections = 100
header_read_timeout = "250ms"
idle_timeout = "5s"
body_idle_timeout = "2s"
grpc_max_connection_age = "10min"
grpc_max_concurrent_streams = 64
upstream_connect_timeout = "1s"
upstream_response_timeout = "30s"
upstream_idle_timeout = "1min"
upstream_max_connections = 8
"#,
        );
        assert_eq!(l.max_connections, Some(100));
        assert_eq!(l.header_read_timeout, Duration::from_millis(250));
        assert_eq!(l.idle_timeout, Duration::from_secs(5));
        assert_eq!(l.body_idle_timeout, Duration::from_secs(2));
        assert_eq!(l.grpc_max_connection_age, Duration::from_secs(600));
        assert_eq!(l.grpc_max_concurrent_streams, 64);
        assert_eq!(l.upstream_connect_timeout, Duration::from_secs(1));
        assert_eq!(l.upstream_response_timeout, Duration::from_secs(30));
        assert_eq!(l.upstream_idle_timeout, Duration::from_secs(60));
        assert_eq!(l.upstream_max_connections, 8);
        assert!(describe(&l).starts_with("connections: at most 100, header 250ms, idle 5s"));
    }

    #[test]
    fn bad_connection_settings_name_file_line_and_field() {
        let e = err("[server]\nmax_connections = 0\n");
        assert!(
            e.contains("rules.toml:2: server.max_connections: must be a whole number between 1 and 1000000, got 0"),
            "{e}"
        );
        let e = err("[server]\nheader_read_timeout = \"10\"\n");
        assert!(
            e.contains("rules.toml:2: server.header_read_timeout: invalid duration"),
            "{e}"
        );
        let e = err("[server]\nidle_timeout = \"2h\"\n");
        assert!(
            e.contains("server.idle_timeout: must be between 1ms and 1h, got \"2h\""),
            "{e}"
        );
        let e = err("[server]\nupstream_max_connections = -1\n");
        assert!(e.contains("server.upstream_max_connections"), "{e}");
        let e = err("[server]\ngrpc_max_connection_age = \"10ms\"\n");
        assert!(
            e.contains("server.grpc_max_connection_age: must be between 1s and 7day"),
            "{e}"
        );
        // A number where a duration text belongs is a type error naming the field.
        let e = err("[server]\nbody_idle_timeout = 30\n");
        assert!(e.contains("server.body_idle_timeout"), "{e}");
        // All at once.
        let e = err("[server]\nmax_connections = 0\nidle_timeout = \"x\"\n");
        assert!(
            e.contains("max_connections") && e.contains("idle_timeout"),
            "{e}"
        );
    }
}
