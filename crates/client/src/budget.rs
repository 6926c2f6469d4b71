//! [`Budget`]: a job's quota (e.g. a paid API's 10,000 units a day), spent until it is gone.

use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_core::{Micros, Timestamp};

use crate::client::{Client, Error};

/// A quota a job spends: one rule and key on a Floodgate (or several Floodgates sharing Redis,
/// which then count one budget). Each [`Budget::spend`] is one check of `cost` units: granted
/// units are consumed; a refusal says exactly when the quota frees, so the job stops cleanly
/// instead of learning it from the provider's errors.
///
/// For a daily quota that frees at once, configure the rule as a fixed window (`limit =
/// "10000/d"`, `algorithm = "fixed_window"`): [`Exhausted::until`] is then the window's end.
/// With GCRA or a bucket it is when enough units have refilled for the refused cost.
///
/// # Examples
///
/// A job spending a paid API's 10 units a day (here against an in-process stand-in for
/// `floodgate serve`), on a manual clock so the time it frees is exact:
///
/// ```
/// # use std::sync::atomic::{AtomicU64, Ordering};
/// # use axum::{http::StatusCode, routing::post, Json, Router};
/// # use serde_json::{json, Value};
/// # // A stand-in for `floodgate serve` on a free loopback port: one rule of `limit` units a
/// # // day for every key, answered as `POST /v1/check` answers.
/// # async fn floodgate(limit: u64) -> String {
/// #     let used = Arc::new(AtomicU64::new(0));
/// #     let check = move |Json(body): Json<Value>| {
/// #         let used = Arc::clone(&used);
/// #         async move {
/// #             let cost = body["cost"].as_u64().unwrap_or(1);
/// #             let granted = used
/// #                 .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
/// #                     (u + cost <= limit).then_some(u + cost)
/// #                 })
/// #                 .is_ok();
/// #             let day = 86_400_000_000u64;
/// #             let mut answer = json!({
/// #                 "allowed": granted, "rule": body["rule"], "limit": limit,
/// #                 "remaining": limit - used.load(Ordering::SeqCst), "reset_after_us": day,
/// #             });
/// #             if !granted {
/// #                 answer["retry_after_us"] = day.into();
/// #             }
/// #             let status = if granted { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
/// #             (status, Json(answer))
/// #         }
/// #     };
/// #     let app = Router::new().route("/v1/check", post(check));
/// #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// #     let url = format!("http://{}", listener.local_addr().unwrap());
/// #     tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
/// #     url
/// # }
/// use std::sync::Arc;
/// use floodgate_client::{Budget, Client, ManualClock, SpendError};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let url = floodgate(10).await;
/// let now = 1_800_000_000_000_000; // µs since the Unix epoch
/// let client = Client::builder(url).clock(Arc::new(ManualClock::new(now))).build()?;
/// let budget = Budget::new(client, "per-day", "search-api");
/// budget.spend(4).await?;
/// budget.spend(4).await?;
/// match budget.spend(4).await {
///     Err(SpendError::Exhausted(e)) => {
///         assert_eq!((e.remaining, e.until), (2, now + 86_400_000_000));
///     }
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(budget.spent(), 8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Budget {
    client: Client,
    rule: String,
    key: String,
    spent: AtomicU64,
}

/// The quota cannot grant the units now. Times on the client's clock.
///
/// Shown as `budget "per-day" exhausted: 1 unit refused, 0 left; frees at
/// 2026-12-02T00:00:00.001984Z` (RFC 3339, UTC).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "budget {rule:?} exhausted: {cost} {} refused, {remaining} left; frees at {}",
    units(*.cost),
    Rfc3339(*.until)
)]
pub struct Exhausted {
    /// The rule.
    pub rule: String,
    /// The refused cost.
    pub cost: u64,
    /// Units left (less than `cost`).
    pub remaining: u64,
    /// Microseconds from the answer until the cost can be granted (`retry_after_us`).
    pub retry_after_us: Micros,
    /// When the cost can be granted: microseconds since the Unix epoch (the answer's arrival
    /// plus `retry_after_us`).
    ///
    /// Not the window's edge to the microsecond: the server measures `retry_after_us` from the
    /// moment it decided, and the answer carries no time of the server's, so the client adds
    /// it to the answer's arrival on its own clock. `until` is therefore later than the edge
    /// by the time the answer took to come back (a millisecond or two on a network; plus any
    /// difference between the two hosts' clocks), never earlier: a job that waits until
    /// `until` is not refused for coming back too soon.
    pub until: Timestamp,
}

/// "unit" or "units".
fn units(n: u64) -> &'static str {
    if n == 1 {
        "unit"
    } else {
        "units"
    }
}

/// A [`Timestamp`] shown in RFC 3339 (UTC, fractional seconds only when there are some), or
/// as microseconds since the epoch when it is beyond the year 9999.
struct Rfc3339(Timestamp);

impl std::fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match i64::try_from(self.0)
            .ok()
            .and_then(|us| jiff::Timestamp::from_microsecond(us).ok())
        {
            Some(t) => write!(f, "{t}"),
            None => write!(f, "{} µs since the epoch", self.0),
        }
    }
}

impl Exhausted {
    /// [`Exhausted::until`] as a `SystemTime`.
    pub fn until_system_time(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_micros(self.until)
    }
}

/// Why [`Budget::spend`] did not grant the units.
#[derive(Debug, thiserror::Error)]
pub enum SpendError {
    /// The quota is spent until [`Exhausted::until`]: stop.
    #[error(transparent)]
    Exhausted(#[from] Exhausted),
    /// The request failed (see [`Error`]).
    #[error(transparent)]
    Client(#[from] Error),
}

impl Budget {
    /// The budget of `rule` for `key` on `client`'s Floodgate.
    pub fn new(client: Client, rule: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            client,
            rule: rule.into(),
            key: key.into(),
            spent: AtomicU64::new(0),
        }
    }

    /// Spends `cost` units: `Ok(())` when granted (consumed now), or
    /// [`SpendError::Exhausted`] with the exact time the quota frees, consuming nothing.
    ///
    /// # Errors
    /// [`SpendError::Exhausted`]; [`SpendError::Client`] when the request failed (e.g. a cost
    /// above the rule's limit is a 400 naming `cost`).
    pub async fn spend(&self, cost: u64) -> Result<(), SpendError> {
        let answer = self.client.check(&self.rule, &self.key, cost).await?;
        if answer.allowed {
            self.spent.fetch_add(cost, Ordering::Relaxed);
            return Ok(());
        }
        let retry_after_us = answer.retry_after_us.unwrap_or(0);
        Err(Exhausted {
            rule: self.rule.clone(),
            cost,
            remaining: answer.remaining.unwrap_or(0),
            retry_after_us,
            until: answer.received_at.saturating_add(retry_after_us),
        }
        .into())
    }

    /// Units this `Budget` was granted so far (by this process; others sharing the quota
    /// spend from the same count on the server).
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::Relaxed)
    }

    /// The rule.
    pub fn rule(&self) -> &str {
        &self.rule
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exhausted(cost: u64, until: Timestamp) -> Exhausted {
        Exhausted {
            rule: "per-day".into(),
            cost,
            remaining: 0,
            retry_after_us: 1_984,
            until,
        }
    }

    #[test]
    fn exhausted_reads_an_rfc3339_time_and_one_unit() {
        assert_eq!(
            exhausted(1, 1_796_169_600_001_984).to_string(),
            "budget \"per-day\" exhausted: 1 unit refused, 0 left; frees at \
             2026-12-02T00:00:00.001984Z"
        );
        assert_eq!(
            exhausted(4, 1_796_169_600_000_000).to_string(),
            "budget \"per-day\" exhausted: 4 units refused, 0 left; frees at 2026-12-02T00:00:00Z"
        );
        assert_eq!(
            exhausted(0, 0).to_string(),
            "budget \"per-day\" exhausted: 0 units refused, 0 left; frees at 1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn exhausted_beyond_the_year_9999_falls_back_to_microseconds() {
        assert!(exhausted(2, u64::MAX)
            .to_string()
            .ends_with(&format!("frees at {} µs since the epoch", u64::MAX)));
    }
}
