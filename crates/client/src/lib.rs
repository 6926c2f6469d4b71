//! # floodgate-client
//!
//! An async client for Floodgate's HTTP API (`POST /v1/check`, `POST /v1/settle`), for jobs and
//! services that ask before they act:
//!
//! - [`Client::check`]: one decision, admitted or not (a denial is a value, [`Answer::allowed`]);
//! - [`Client::acquire`]: wait until admitted, never past a deadline: the server reserves the
//!   slot (`max_wait_ms`) and the client sleeps the answered `wait_us`; a 429 is retried at its
//!   `retry_after` plus full jitter;
//! - [`Client::reserve`] / [`Client::settle`]: reserve an estimate, then charge the actual cost;
//! - [`Budget`]: spend a daily (or any) quota until it is exhausted, then stop with the exact
//!   time it frees ([`Exhausted::until`]);
//! - [`retry`]: a tower retry policy for calling any third-party API, honouring `Retry-After`
//!   and the `RateLimit` headers, else full-jitter exponential backoff.
//!
//! Times are microseconds since the Unix epoch ([`Timestamp`]) read from the client's
//! [`Clock`] (the system clock unless [`ClientBuilder::clock`] gives another), and waits are
//! microseconds ([`Micros`]) slept by its [`Sleeper`] (tokio's timer unless
//! [`ClientBuilder::sleeper`] gives another). The guide is `docs/client.md`.
//!
//! ```no_run
//! # async fn job() -> Result<(), Box<dyn std::error::Error>> {
//! use floodgate_client::{Budget, Client};
//!
//! let client = Client::builder("http://127.0.0.1:8080").bearer_token("s3cret").build()?;
//! let budget = Budget::new(client, "per-day", "search-api");
//! loop {
//!     match budget.spend(100).await {
//!         Ok(()) => { /* call the paid API */ }
//!         Err(floodgate_client::SpendError::Exhausted(e)) => {
//!             println!("quota spent; it frees at {} µs since the epoch", e.until);
//!             break;
//!         }
//!         Err(other) => return Err(other.into()),
//!     }
//! }
//! # Ok(()) }
//! ```

mod budget;
mod client;
pub mod retry;
mod sleep;

pub use budget::{Budget, Exhausted, SpendError};
pub use client::{
    Answer, Client, ClientBuilder, DecisionEntry, Error, Reservation, Settled, SettledEntry,
    MAX_WAIT_MS,
};
pub use floodgate_core::{Clock, ManualClock, Micros, SystemClock, Timestamp};
pub use sleep::{Sleeper, TokioSleeper};
