//! `floodgate audit`: check a live rate limiter, and the Redis it keeps its counters in, for
//! the failures the source documents warn about.
//!
//! - [`http`] probes a limiter over HTTP within a bounded budget of requests and seconds: the
//!   declared limit (`RateLimit-Policy`/`RateLimit`, the `X-RateLimit-*` forms, or given), a
//!   concurrent burst against it (several instances each with its own counter admit a multiple
//!   of it), bursts on both sides of a window edge (a fixed window admits twice its limit
//!   across one), retries at exactly `Retry-After` and one second before it, and the shape of a
//!   denial (429, `Retry-After`, header syntax, `application/problem+json`).
//! - [`redis`] samples the keys of a Redis or Redis Cluster read-only (`SCAN`, `TYPE`, `PTTL`,
//!   `MEMORY USAGE`, `OBJECT ENCODING`): counts by type and encoding, TTLs, bytes per key, the
//!   projected total, and the dangers (keys without TTL, sorted-set logs, an evicting
//!   `maxmemory-policy`, one user's keys in different cluster slots); Floodgate's own keys are
//!   attributed to rules where that can be told.
//!
//! Both produce a report of [`Verdict`]s, each stating the numbers it rests on, rendered as a
//! table, JSON or (HTTP) SVG; [`Verdict::is_danger`] decides the exit status of the command.
//! No command-line parsing lives here: the `floodgate` binary wires these to `floodgate audit`.
//!
//! ```
//! use floodgate_audit::http::headers::declared_limit;
//!
//! let headers = [
//!     ("ratelimit-policy", "\"per-ip\";q=100;w=10"),
//!     ("ratelimit", "\"per-ip\";r=99;t=10"),
//! ];
//! let declared = declared_limit(headers.iter().copied()).unwrap();
//! assert_eq!((declared.limit, declared.window_us), (100, Some(10_000_000)));
//! ```

pub mod glob;
pub mod http;
pub mod redis;
mod svg;
pub mod timeline;
mod verdict;

pub use verdict::{Level, Verdict};
