//! The client: [`Client`], its builder and the answers it returns.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_core::{Clock, Micros, SystemClock, Timestamp};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::retry;
use crate::sleep::{micros_of, Sleeper, TokioSleeper};

/// The longest `max_wait_ms` the server accepts: one day.
pub const MAX_WAIT_MS: u64 = 86_400_000;

/// Why a call failed. A denial (429) is not an error for [`Client::check`]: it is an
/// [`Answer`] with `allowed: false`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The base URL given to [`Client::builder`] is not an `http`/`https` URL.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The request did not get an HTTP answer (connection refused, timeout, TLS).
    #[error("cannot reach Floodgate: {0}")]
    Transport(#[from] reqwest::Error),
    /// Floodgate refused the request with a problem+json answer (400 naming `field`, 401/403
    /// for a missing or wrong token, 400 naming `rule` for an unknown rule, 503 when a rule fails closed).
    #[error("Floodgate answered {status}: {detail}{}", field.as_deref().map(|f| format!(" (field {f})")).unwrap_or_default())]
    Problem {
        /// The HTTP status.
        status: u16,
        /// The request field at fault, when the problem names one.
        field: Option<String>,
        /// The problem's `detail` (or `title`).
        detail: String,
    },
    /// An answer that is not what the API documents (e.g. no `reservation` token from a
    /// server that does not support `"reserve": true`).
    #[error("unexpected answer (status {status}): {detail}")]
    UnexpectedAnswer {
        /// The HTTP status.
        status: u16,
        /// What was wrong, with the body.
        detail: String,
    },
    /// [`Client::acquire`] or [`Client::reserve`] could not be admitted before its deadline.
    /// `retry_after` is the server's last answered wait (microseconds from `at`).
    #[error("not admitted before the deadline ({deadline} µs); the server's last retry_after was {retry_after:?} µs")]
    DeadlineExceeded {
        /// The deadline (microseconds since the Unix epoch, on the client's clock).
        deadline: Timestamp,
        /// The last denial's `retry_after_us`.
        retry_after: Option<Micros>,
        /// When the last denial was received (client clock).
        at: Timestamp,
    },
    /// `POST /v1/settle` answered 409 `reservation-settled`: the reservation was settled
    /// already (settling twice refunds once). A 409 for a reservation made elsewhere (another
    /// instance of a memory store, another secret) is an [`Error::Problem`].
    #[error("reservation already settled")]
    AlreadySettled,
    /// `POST /v1/settle` answered 410: the reservation expired (an unsettled reservation is
    /// simply spent).
    #[error("reservation expired")]
    ReservationExpired,
}

/// One decision of a multi-descriptor answer (`decisions[i]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DecisionEntry {
    /// The rule.
    pub rule: String,
    /// The client key as sent.
    pub key: String,
    /// Whether this rule only observes (its denials do not deny).
    #[serde(default)]
    pub shadow: bool,
    /// Whether this rule admitted the request.
    pub allowed: bool,
    /// The rule's limit (units per period).
    pub limit: u64,
    /// Units left after this request.
    pub remaining: u64,
    /// Microseconds until the key is fresh again.
    pub reset_after_us: u64,
    /// Microseconds until a retry can succeed (denied only).
    #[serde(default)]
    pub retry_after_us: Option<u64>,
}

/// The answer to a check (`POST /v1/check`, 200 or 429). The top-level fields repeat the
/// binding decision: the denying rule with the longest wait, or when admitted the enforcing rule
/// with the fewest units left.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Answer {
    /// Admitted (200) or not (429).
    pub allowed: bool,
    /// The binding rule (absent in a degraded answer).
    #[serde(default)]
    pub rule: Option<String>,
    /// The binding rule's limit.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Units left in the binding rule (0 while units are reserved ahead).
    #[serde(default)]
    pub remaining: Option<u64>,
    /// Microseconds until the binding key is fresh again.
    #[serde(default)]
    pub reset_after_us: Option<u64>,
    /// Microseconds until a retry can succeed (denied only).
    #[serde(default)]
    pub retry_after_us: Option<u64>,
    /// A granted wait: microseconds the caller must wait before it acts (with `max_wait_ms`).
    #[serde(default)]
    pub wait_us: Option<u64>,
    /// The reservation token (with `"reserve": true`, admitted only).
    #[serde(default)]
    pub reservation: Option<String>,
    /// Microseconds the reservation token can be settled for, from the answer.
    #[serde(default)]
    pub reservation_expires_in_us: Option<u64>,
    /// A store failure on rules that fail open: admitted without a decision.
    #[serde(default)]
    pub degraded: bool,
    /// One entry per descriptor.
    #[serde(default)]
    pub decisions: Vec<DecisionEntry>,
    /// When the answer arrived (microseconds since the epoch, client clock; not in the JSON).
    #[serde(skip)]
    pub received_at: Timestamp,
}

impl Answer {
    /// When a retry can succeed: `received_at + retry_after_us` (denied only).
    pub fn retry_at(&self) -> Option<Timestamp> {
        self.retry_after_us
            .map(|r| self.received_at.saturating_add(r))
    }
}

/// What [`Client::settle`] answers (`{"settled": true, "decisions": [...]}`): each key's
/// standing after the settlement.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Settled {
    /// One entry per reserved item, in the order of the check's descriptors.
    pub decisions: Vec<SettledEntry>,
}

/// One item of a settle answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SettledEntry {
    /// The rule.
    pub rule: String,
    /// The client key as sent.
    pub key: String,
    /// Units reserved.
    pub reserved: u64,
    /// Units actually used (given back below `reserved`, charged above).
    pub actual: u64,
    /// The rule's limit (units per period).
    pub limit: u64,
    /// Units left now.
    pub remaining: u64,
    /// Microseconds until the key is fresh again.
    pub reset_after_us: u64,
    /// `false` when a reload changed or removed the rule since the reservation: the units
    /// went back to (or were charged on) the old state, which no longer limits anyone.
    pub current: bool,
}

/// A granted reservation from [`Client::reserve`]: the token to settle and what was reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The server's token (opaque; only the server can read or verify it).
    pub token: String,
    /// The rule reserved against.
    pub rule: String,
    /// The client key.
    pub key: String,
    /// Units reserved.
    pub estimate: u64,
    /// The wait the server scheduled (microseconds), already slept by `reserve`.
    pub wait_us: u64,
    /// When the token expires (microseconds since the Unix epoch, client clock: the answer's
    /// arrival plus `reservation_expires_in_us`); a settle after it is
    /// [`Error::ReservationExpired`].
    pub expires_at: Option<Timestamp>,
}

/// Builds a [`Client`]; from [`Client::builder`].
#[derive(Debug)]
pub struct ClientBuilder {
    base: String,
    token: Option<String>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    http: Option<reqwest::Client>,
    seed: Option<u64>,
    jitter_base: Micros,
    jitter_cap: Micros,
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer <token>` (the server's `[server] api_token`).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Reads time from `clock` (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sleeps with `sleeper` (default: [`TokioSleeper`]).
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Uses this HTTP client (timeouts, proxies, TLS roots) instead of a default one.
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// Seeds the jitter's random numbers (reproducible waits); default: from the OS.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The jitter added to a 429's `retry_after` by [`Client::acquire`]: uniform in
    /// `[0, min(cap, base * 2^attempt)]` microseconds (defaults: 10 ms and 1 s).
    pub fn jitter(mut self, base: Duration, cap: Duration) -> Self {
        self.jitter_base = micros_of(base);
        self.jitter_cap = micros_of(cap);
        self
    }

    /// The client.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] when the base URL is not `http://` or `https://` with a host;
    /// [`Error::Transport`] when the default HTTP client cannot be built (TLS roots).
    pub fn build(self) -> Result<Client, Error> {
        let base = self.base.trim_end_matches('/').to_string();
        let url = reqwest::Url::parse(&base).map_err(|e| Error::InvalidUrl {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(Error::InvalidUrl {
                url: self.base,
                reason: "must be http:// or https:// with a host".into(),
            });
        }
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder().build()?,
        };
        let rng = match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                check_url: format!("{base}/v1/check"),
                settle_url: format!("{base}/v1/settle"),
                token: self.token,
                clock: self.clock,
                sleeper: self.sleeper,
                rng: Mutex::new(rng),
                jitter_base: self.jitter_base,
                jitter_cap: self.jitter_cap,
            }),
        })
    }
}

/// A Floodgate client. `Clone` (cheap: one shared connection pool).
///
/// # Examples
///
/// One rule, `per-user`, checked for `alice`: here against an in-process stand-in for
/// `floodgate serve` that grants 3 units a day (for a real one, the URL of its API, e.g.
/// `http://127.0.0.1:8080`):
///
/// ```
/// # use std::sync::atomic::{AtomicU64, Ordering};
/// # use std::sync::Arc;
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
/// use floodgate_client::Client;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let url = floodgate(3).await;
/// let client = Client::new(url)?;
/// let answer = client.check("per-user", "alice", 2).await?;
/// assert!(answer.allowed);
/// assert_eq!(answer.remaining, Some(1));
///
/// // A denial is an answer, not an error: when to come back is in it.
/// let answer = client.check("per-user", "alice", 2).await?;
/// assert!(!answer.allowed);
/// assert_eq!(answer.retry_at(), Some(answer.received_at + 86_400_000_000));
/// # Ok::<(), floodgate_client::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    check_url: String,
    settle_url: String,
    token: Option<String>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    rng: Mutex<fastrand::Rng>,
    jitter_base: Micros,
    jitter_cap: Micros,
}

impl Client {
    /// A client of the Floodgate at `base_url` (e.g. `http://127.0.0.1:8080`) with the defaults.
    ///
    /// # Errors
    /// As [`ClientBuilder::build`].
    pub fn new(base_url: impl Into<String>) -> Result<Self, Error> {
        Self::builder(base_url).build()
    }

    /// A builder for a client of the Floodgate at `base_url`.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base_url.into(),
            token: None,
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            http: None,
            seed: None,
            jitter_base: 10_000,
            jitter_cap: 1_000_000,
        }
    }

    /// The client's current time (microseconds since the epoch).
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Checks `cost` units of `rule` for `key`, consuming them if admitted. A denial is an
    /// [`Answer`] with `allowed: false` and `retry_after_us`.
    ///
    /// # Errors
    /// [`Error::Problem`] for a refused request (unknown rule, cost above the rule's capacity,
    /// bad token, a rule failing closed); [`Error::Transport`].
    pub async fn check(&self, rule: &str, key: &str, cost: u64) -> Result<Answer, Error> {
        self.post_check(&check_body(rule, key, cost, None, false))
            .await
    }

    /// Waits until `cost` units of `rule` for `key` are admitted, never past `deadline`
    /// (microseconds since the epoch, client clock). Each round asks the server to reserve the
    /// slot within the time left (`max_wait_ms`, rounded down to whole milliseconds) and sleeps
    /// the answered `wait_us`; a 429 (the slot is further away) is retried at its
    /// `retry_after_us` plus full jitter (`random(0, min(cap, base * 2^attempt))`), unless that
    /// is past the deadline. Returns the admitting answer after its wait was slept.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when the units cannot be admitted by `deadline` (returned as
    /// soon as that is known, without sleeping to the deadline); otherwise as [`Client::check`].
    pub async fn acquire(
        &self,
        rule: &str,
        key: &str,
        cost: u64,
        deadline: Timestamp,
    ) -> Result<Answer, Error> {
        let mut attempt = 0u32;
        let mut last_retry = None;
        loop {
            let now = self.now();
            let exceeded = |retry_after, at| Error::DeadlineExceeded {
                deadline,
                retry_after,
                at,
            };
            if now > deadline {
                return Err(exceeded(last_retry, now));
            }
            let max_wait_ms = ((deadline - now) / 1_000).min(MAX_WAIT_MS);
            let answer = self
                .post_check(&check_body(rule, key, cost, Some(max_wait_ms), false))
                .await?;
            if answer.allowed {
                self.sleep(answer.wait_us.unwrap_or(0)).await;
                return Ok(answer);
            }
            let retry_after = answer.retry_after_us.unwrap_or(0);
            last_retry = answer.retry_after_us;
            let jitter = self.jitter(attempt, deadline.saturating_sub(answer.received_at));
            let wake = answer.received_at.saturating_add(retry_after);
            if wake > deadline {
                return Err(exceeded(last_retry, answer.received_at));
            }
            let sleep = retry_after
                .saturating_add(jitter)
                .min(deadline - answer.received_at);
            self.sleep(sleep).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// Reserves `estimate` units of `rule` for `key`, waiting up to `max_wait` for the slot
    /// (`"reserve": true` with `max_wait_ms`); sleeps the answered wait and returns the
    /// [`Reservation`] to [`Client::settle`] with the actual cost.
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when not admitted within `max_wait`;
    /// [`Error::UnexpectedAnswer`] when an admitting answer carries no `reservation` token (a
    /// server without reservation tokens); otherwise as [`Client::check`].
    pub async fn reserve(
        &self,
        rule: &str,
        key: &str,
        estimate: u64,
        max_wait: Duration,
    ) -> Result<Reservation, Error> {
        let start = self.now();
        let max_wait_ms = u64::try_from(max_wait.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_WAIT_MS);
        let body = check_body(rule, key, estimate, Some(max_wait_ms), true);
        let answer = self.post_check(&body).await?;
        let reservation = reservation_of(rule, key, estimate, &answer, start, max_wait_ms)?;
        self.sleep(reservation.wait_us).await;
        Ok(reservation)
    }

    /// Settles `reservation` with the `actual` cost (`POST /v1/settle`): less than the estimate
    /// gives the rest back, more charges the difference.
    ///
    /// # Errors
    /// [`Error::AlreadySettled`] (409), [`Error::ReservationExpired`] (410), [`Error::Problem`]
    /// for a refused token or cost (400 naming `reservation` or `cost`); [`Error::Transport`].
    pub async fn settle(&self, reservation: &Reservation, actual: u64) -> Result<Settled, Error> {
        let body = settle_body(&reservation.token, actual);
        let response = self.post(&self.inner.settle_url, &body).await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        parse_settled(status, &text)
    }

    async fn post(&self, url: &str, body: &Value) -> Result<reqwest::Response, Error> {
        let mut request = self.inner.http.post(url).json(body);
        if let Some(token) = &self.inner.token {
            request = request.bearer_auth(token);
        }
        Ok(request.send().await?)
    }

    async fn post_check(&self, body: &Value) -> Result<Answer, Error> {
        let response = self.post(&self.inner.check_url, body).await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        parse_answer(status, &text, self.now())
    }

    async fn sleep(&self, micros: Micros) {
        if micros > 0 {
            self.inner.sleeper.sleep(micros).await;
        }
    }

    /// Full jitter for retry `attempt`, at most `room` microseconds.
    fn jitter(&self, attempt: u32, room: Micros) -> Micros {
        let bound =
            retry::full_jitter_bound(self.inner.jitter_base, self.inner.jitter_cap, attempt)
                .min(room);
        let mut rng = match self.inner.rng.lock() {
            Ok(rng) => rng,
            Err(poisoned) => poisoned.into_inner(),
        };
        rng.u64(0..=bound)
    }
}

/// The `/v1/check` body.
fn check_body(rule: &str, key: &str, cost: u64, max_wait_ms: Option<u64>, reserve: bool) -> Value {
    let mut body = json!({"rule": rule, "key": key, "cost": cost});
    if let Some(ms) = max_wait_ms {
        body["max_wait_ms"] = ms.into();
    }
    if reserve {
        body["reserve"] = true.into();
    }
    body
}

/// The `/v1/settle` body.
fn settle_body(token: &str, actual: u64) -> Value {
    json!({"reservation": token, "cost": actual})
}

/// A problem+json body's `field` and `detail`.
fn problem(status: u16, text: &str) -> Error {
    let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let detail = value["detail"]
        .as_str()
        .or(value["title"].as_str())
        .map_or_else(|| text.to_string(), str::to_string);
    Error::Problem {
        status,
        field: value["field"].as_str().map(str::to_string),
        detail,
    }
}

/// A `/v1/check` answer: 200 and 429 are decisions, anything else a problem.
fn parse_answer(status: u16, text: &str, received_at: Timestamp) -> Result<Answer, Error> {
    if status != 200 && status != 429 {
        return Err(problem(status, text));
    }
    let mut answer: Answer = serde_json::from_str(text).map_err(|e| Error::UnexpectedAnswer {
        status,
        detail: format!("{e}: {text}"),
    })?;
    if answer.allowed != (status == 200) {
        return Err(Error::UnexpectedAnswer {
            status,
            detail: format!("allowed is {} with status {status}: {text}", answer.allowed),
        });
    }
    answer.received_at = received_at;
    Ok(answer)
}

/// The reservation in an answer to a reserving check.
fn reservation_of(
    rule: &str,
    key: &str,
    estimate: u64,
    answer: &Answer,
    start: Timestamp,
    max_wait_ms: u64,
) -> Result<Reservation, Error> {
    if !answer.allowed {
        return Err(Error::DeadlineExceeded {
            deadline: start.saturating_add(max_wait_ms.saturating_mul(1_000)),
            retry_after: answer.retry_after_us,
            at: answer.received_at,
        });
    }
    let token = answer
        .reservation
        .clone()
        .ok_or_else(|| Error::UnexpectedAnswer {
            status: 200,
            detail: "admitted without a \"reservation\" token: the server does not support \
                     \"reserve\": true"
                .into(),
        })?;
    Ok(Reservation {
        token,
        rule: rule.to_string(),
        key: key.to_string(),
        estimate,
        wait_us: answer.wait_us.unwrap_or(0),
        expires_at: answer
            .reservation_expires_in_us
            .map(|e| answer.received_at.saturating_add(e)),
    })
}

/// A `/v1/settle` answer.
fn parse_settled(status: u16, text: &str) -> Result<Settled, Error> {
    match status {
        200 => serde_json::from_str(text).map_err(|e| Error::UnexpectedAnswer {
            status,
            detail: format!("{e}: {text}"),
        }),
        // A 409 of another problem type (a reservation made elsewhere: another instance, or
        // another secret) is that problem, not a settle made before.
        409 if !names_another_problem(text, "urn:floodgate:problem:reservation-settled") => {
            Err(Error::AlreadySettled)
        }
        410 => Err(Error::ReservationExpired),
        _ => Err(problem(status, text)),
    }
}

/// Whether `text` is a problem whose `type` is not `expected`.
fn names_another_problem(text: &str, expected: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["type"].as_str().map(|t| t != expected))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bodies_have_the_documented_shapes() {
        assert_eq!(
            check_body("per-day", "job", 100, None, false),
            json!({"rule": "per-day", "key": "job", "cost": 100})
        );
        assert_eq!(
            check_body("per-day", "job", 5, Some(250), true),
            json!({"rule": "per-day", "key": "job", "cost": 5, "max_wait_ms": 250, "reserve": true})
        );
        assert_eq!(
            settle_body("tok", 3),
            json!({"reservation": "tok", "cost": 3})
        );
    }

    #[test]
    fn answers_parse_and_a_mismatched_status_is_refused() {
        let text = r#"{"allowed": false, "rule": "a", "limit": 10, "remaining": 0,
            "reset_after_us": 1000000, "retry_after_us": 100000, "retry_after_s": 1,
            "decisions": [{"rule": "a", "key": "k", "shadow": false, "allowed": false,
            "limit": 10, "remaining": 0, "reset_after_us": 1000000, "retry_after_us": 100000}]}"#;
        let a = parse_answer(429, text, 5).unwrap();
        assert!(!a.allowed);
        assert_eq!(a.retry_at(), Some(100_005));
        assert_eq!(a.decisions[0].key, "k");
        assert!(matches!(
            parse_answer(200, text, 5),
            Err(Error::UnexpectedAnswer { status: 200, .. })
        ));
        let degraded = parse_answer(
            200,
            r#"{"allowed": true, "degraded": true, "decisions": []}"#,
            1,
        )
        .unwrap();
        assert!(degraded.degraded);
        let p = parse_answer(
            400,
            r#"{"type": "x", "title": "invalid request", "status": 400, "detail": "bad", "field": "cost"}"#,
            0,
        )
        .unwrap_err();
        assert!(
            matches!(&p, Error::Problem { status: 400, field: Some(f), detail } if f == "cost" && detail == "bad"),
            "{p:?}"
        );
    }

    #[test]
    fn reservations_and_settlements_parse() {
        let text = r#"{"allowed": true, "rule": "a", "limit": 10, "remaining": 0,
            "reset_after_us": 1, "wait_us": 2000, "reservation": "v1.abc", "decisions": []}"#;
        let a = parse_answer(200, text, 0).unwrap();
        let r = reservation_of("a", "k", 7, &a, 0, 10).unwrap();
        assert_eq!(
            (r.token.as_str(), r.estimate, r.wait_us),
            ("v1.abc", 7, 2000)
        );
        let no_token = parse_answer(200, r#"{"allowed": true, "decisions": []}"#, 0).unwrap();
        assert!(matches!(
            reservation_of("a", "k", 7, &no_token, 0, 10),
            Err(Error::UnexpectedAnswer { .. })
        ));
        let denied = parse_answer(429, r#"{"allowed": false, "retry_after_us": 9}"#, 3).unwrap();
        assert!(matches!(
            reservation_of("a", "k", 7, &denied, 0, 10),
            Err(Error::DeadlineExceeded {
                deadline: 10_000,
                retry_after: Some(9),
                at: 3
            })
        ));
        let settled = parse_settled(
            200,
            r#"{"settled": true, "decisions": [{"rule": "a", "key": "k", "reserved": 7,
               "actual": 3, "limit": 10, "remaining": 4, "reset_after_us": 5, "current": true}]}"#,
        )
        .unwrap();
        assert_eq!(settled.decisions[0].remaining, 4);
        assert!(matches!(parse_settled(409, ""), Err(Error::AlreadySettled)));
        assert!(matches!(
            parse_settled(
                409,
                r#"{"type": "urn:floodgate:problem:reservation-settled", "field": "reservation"}"#
            ),
            Err(Error::AlreadySettled)
        ));
        assert!(matches!(
            parse_settled(
                409,
                r#"{"type": "urn:floodgate:problem:reservation-elsewhere", "field": "reservation", "detail": "made by another instance"}"#
            ),
            Err(Error::Problem { status: 409, .. })
        ));
        assert!(matches!(
            parse_settled(410, ""),
            Err(Error::ReservationExpired)
        ));
        assert!(matches!(
            parse_settled(400, r#"{"detail": "forged", "field": "reservation"}"#),
            Err(Error::Problem { field: Some(f), .. }) if f == "reservation"
        ));
    }

    #[test]
    fn base_urls_are_checked() {
        assert!(Client::new("http://127.0.0.1:8080/").is_ok());
        assert!(matches!(
            Client::new("ftp://x"),
            Err(Error::InvalidUrl { .. })
        ));
        assert!(matches!(Client::new("nope"), Err(Error::InvalidUrl { .. })));
    }
}
