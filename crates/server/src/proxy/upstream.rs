//! The reverse proxy's upstream client and how its failures are answered.
//!
//! - **Connections**: at most `[server] upstream_max_connections` open to the upstream at
//!   once (busy and pooled together); a request that finds none free waits for one. Pooled
//!   connections are closed after `upstream_idle_timeout` unused (hyper's pool timer).
//! - **Timeouts**: TCP connect within `upstream_connect_timeout`, else 504; the response
//!   header within `upstream_response_timeout` of handing the request over (waiting for a free
//!   connection included), else 504; a response body that then sends nothing for
//!   `upstream_response_timeout` is cut (the client's connection is closed, as the status was
//!   already sent). A client whose request body sends nothing for `body_idle_timeout` gets 408
//!   and its connection closed.
//! - **Counted** in `floodgate_proxy_upstream_errors_total{reason}`: `connect_timeout`,
//!   `connect_error` (refused, unreachable: 502), `response_timeout` (504),
//!   `response_body_timeout`, `client_body_timeout` (408), `upstream_error` (reset or closed
//!   before answering: 502). The rate-limit decision was counted before, as admitted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, Uri};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::listen::ConnectionLimits;
use crate::serve::idle_body::{is_body_idle_timeout, IdleBody};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every `reason` of `floodgate_proxy_upstream_errors_total`.
pub(crate) const UPSTREAM_ERRORS: [&str; 6] = [
    "connect_timeout",
    "connect_error",
    "response_timeout",
    "response_body_timeout",
    "client_body_timeout",
    "upstream_error",
];

/// The upstream client with its timeouts.
#[derive(Debug, Clone)]
pub(super) struct Upstream {
    client: Client<CappedConnector, Body>,
    response_timeout: Duration,
}

impl Upstream {
    /// A client bounded by `limits` (see the module doc).
    pub(super) fn new(limits: &ConnectionLimits) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(limits.upstream_connect_timeout));
        let connector = CappedConnector {
            inner: http,
            permits: Arc::new(Semaphore::new(limits.upstream_max_connections)),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(limits.upstream_idle_timeout)
            .pool_max_idle_per_host(limits.upstream_max_connections)
            .build(connector);
        for reason in UPSTREAM_ERRORS {
            metrics::counter!("floodgate_proxy_upstream_errors_total", "reason" => reason)
                .increment(0);
        }
        metrics::gauge!("floodgate_proxy_upstream_connections").set(0.0);
        Self {
            client,
            response_timeout: limits.upstream_response_timeout,
        }
    }

    /// Sends `request` and returns the upstream's response (its body bounded by the response
    /// timeout between frames), or the answer for the client when the upstream failed.
    /// `client_body_failed` is set when the client's own body failed to read (malformed
    /// chunking): that failure is the client's 400, neither logged nor counted as the
    /// upstream's.
    pub(super) async fn send(
        &self,
        request: http::Request<Body>,
        client_body_failed: &std::sync::atomic::AtomicBool,
    ) -> Result<Response, Response> {
        let upstream = request.uri().authority().map(ToString::to_string);
        let timeout = self.response_timeout;
        match tokio::time::timeout(timeout, self.client.request(request)).await {
            Ok(Ok(response)) => {
                let mut response = response.map(|body| {
                    Body::new(IdleBody::new(body, timeout).on_timeout(response_body_timed_out))
                });
                // Streamed through, a chunk at a time: charged as such by the answers budget.
                response
                    .extensions_mut()
                    .insert(crate::serve::answers::Streamed);
                Ok(response)
            }
            // A body that stalled is the 408 of `failed`; one that failed otherwise (its
            // framing) is the client's 400.
            Ok(Err(e))
                if client_body_failed.load(std::sync::atomic::Ordering::Relaxed)
                    && !is_body_idle_timeout(&e) =>
            {
                tracing::debug!(error = %e, "the client's request body could not be read");
                Err(super::rewrite::unreadable_body())
            }
            Ok(Err(e)) => Err(failed(&e, upstream.as_deref())),
            Err(_) => {
                count("response_timeout");
                tracing::warn!(
                    upstream,
                    timeout_ms = timeout.as_millis(),
                    "upstream response timeout"
                );
                Err(crate::http::problem::problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    "urn:floodgate:problem:gateway-timeout",
                    "Gateway Timeout",
                    format!(
                        "the upstream did not answer within {} ms",
                        timeout.as_millis()
                    ),
                    None,
                )
                .into_response())
            }
        }
    }
}

fn count(reason: &'static str) {
    metrics::counter!("floodgate_proxy_upstream_errors_total", "reason" => reason).increment(1);
}

fn response_body_timed_out() {
    count("response_body_timeout");
    tracing::warn!("upstream response body idle timeout: the response is cut");
}

/// The answer for a failed upstream request.
fn failed(e: &hyper_util::client::legacy::Error, upstream: Option<&str>) -> Response {
    if is_body_idle_timeout(e) {
        count("client_body_timeout");
        let mut response = crate::http::problem::problem(
            StatusCode::REQUEST_TIMEOUT,
            "urn:floodgate:problem:request-timeout",
            "Request Timeout",
            "the request body sent nothing for too long",
            None,
        )
        .into_response();
        // The rest of that body may still come: the connection cannot be reused.
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    if e.is_connect() {
        if timed_out(e) {
            count("connect_timeout");
            tracing::warn!(upstream, error = %chain(e), "upstream connect timeout");
            return crate::http::problem::problem(
                StatusCode::GATEWAY_TIMEOUT,
                "urn:floodgate:problem:gateway-timeout",
                "Gateway Timeout",
                "cannot connect to the upstream in time",
                None,
            )
            .into_response();
        }
        count("connect_error");
    } else {
        count("upstream_error");
    }
    tracing::warn!(upstream, error = %chain(e), "upstream request failed");
    bad_gateway("the upstream did not answer")
}

/// Whether an I/O error in `e`'s sources timed out (the connector's connect timeout).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// `e` and its sources, for the log.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

/// An [`HttpConnector`] that holds one permit of the upstream connection cap per connection,
/// waiting for one when all are taken.
#[derive(Debug, Clone)]
struct CappedConnector {
    inner: HttpConnector,
    permits: Arc<Semaphore>,
}

impl tower::Service<Uri> for CappedConnector {
    type Response = Capped;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Capped, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut inner = self.inner.clone();
        let permits = Arc::clone(&self.permits);
        Box::pin(async move {
            let permit = permits.acquire_owned().await?;
            let io = tower::Service::<Uri>::call(&mut inner, uri).await?;
            metrics::gauge!("floodgate_proxy_upstream_connections").increment(1.0);
            Ok(Capped {
                io,
                _permit: permit,
            })
        })
    }
}

/// An upstream connection and its permit.
#[derive(Debug)]
struct Capped {
    io: TokioIo<TcpStream>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Capped {
    fn drop(&mut self) {
        metrics::gauge!("floodgate_proxy_upstream_connections").decrement(1.0);
    }
}

impl Connection for Capped {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl hyper::rt::Read for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A 502 problem: the upstream could not be asked or did not answer.
pub(super) fn bad_gateway(detail: &str) -> Response {
    crate::http::problem::problem(
        StatusCode::BAD_GATEWAY,
        "urn:floodgate:problem:bad-gateway",
        "Bad Gateway",
        detail,
        None,
    )
    .into_response()
}
