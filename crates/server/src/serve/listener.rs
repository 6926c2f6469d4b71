//! How an HTTP listener (API, proxy, admin) serves its connections: hyper-util's HTTP/1.1 and
//! HTTP/2 (prior knowledge) server with a timer, inside the process's connection budget
//! ([`Connections`]), with three timers per connection:
//!
//! - **header**: a request's header must be complete within `header_read_timeout` of the
//!   connection opening, or of its first byte after an earlier response; else the connection
//!   is closed (a half-sent header holds nothing for long). A header is at most 64 KiB
//!   ([`MAX_HEADER_BYTES`]; 431 beyond);
//! - **idle**: a connection with no request in flight and nothing received since its last
//!   response is closed after `idle_timeout`;
//! - **body**: a request body from which nothing arrives for `body_idle_timeout` while it is
//!   being read fails with [`BodyIdleTimeout`] (the proxy answers 408; the API its bad-body
//!   error); the time the server itself takes between reads does not count.
//!
//! No timer runs while a request is in flight (a request held by the delay mode, a slow
//! upstream): those have their own bounds. On shutdown, idle connections close at once and
//! busy ones after their response.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use super::connections::{Conn, Connections, Phase, Slot};
use crate::config::listen::ConnectionLimits;

/// The timers of an HTTP listener's connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpTimeouts {
    /// See [`ConnectionLimits::header_read_timeout`].
    pub(crate) header_read: Duration,
    /// See [`ConnectionLimits::idle_timeout`].
    pub(crate) idle: Duration,
    /// See [`ConnectionLimits::body_idle_timeout`].
    pub(crate) body_idle: Duration,
}

impl HttpTimeouts {
    /// The timers `limits` set.
    pub(crate) fn from_limits(limits: &ConnectionLimits) -> Self {
        Self {
            header_read: limits.header_read_timeout,
            idle: limits.idle_timeout,
            body_idle: limits.body_idle_timeout,
        }
    }
}

/// How often an HTTP/2 connection with calls in flight is pinged, and how long the answer may
/// take.
const H2_KEEPALIVE: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(20));

/// Streams at once on one HTTP/2 connection of an HTTP listener: RFC 9113's recommended
/// least (browsers open up to 100); the bodies of all streams share one budget anyway
/// (`crate::http::body_budget`).
const H2_MAX_STREAMS: u32 = 100;

/// The largest HTTP/1 request header, in bytes (hyper's read buffer; a larger header is
/// answered 431). hyper's default, about 400 KiB, would let each half-sent header hold that
/// much; nginx allows 32 KiB by default.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How long accepting pauses after the process ran out of file descriptors (or memory).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` turns true, then closes idle connections
/// and lets in-flight requests finish.
pub(crate) fn spawn_http(
    listener: TcpListener,
    router: axum::Router,
    connections: Arc<Connections>,
    timeouts: HttpTimeouts,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The header timer is ours (it must not run between requests); hyper's is off.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(MAX_HEADER_BYTES);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(H2_KEEPALIVE.0))
            .keep_alive_timeout(H2_KEEPALIVE.1)
            .max_concurrent_streams(H2_MAX_STREAMS);
        let builder = Arc::new(builder);
        let mut tasks = JoinSet::new();
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        accept_failed(&e).await;
                        continue;
                    }
                },
                () = stopped(&mut shutdown) => break,
            };
            // Room is made when a connection is there, not ahead of it (that would close an
            // idle connection for nothing). Until then this one waits, and so does accepting:
            // at most one connection per listener beyond the cap (within the kept descriptors).
            let slot = tokio::select! {
                slot = connections.reserve() => slot,
                () = stopped(&mut shutdown) => break,
            };
            while tasks.try_join_next().is_some() {}
            tasks.spawn(serve_connection(
                stream,
                peer,
                slot,
                router.clone(),
                Arc::clone(&builder),
                timeouts,
                shutdown.clone(),
            ));
        }
        // New connections are refused from here on.
        drop(listener);
        while tasks.join_next().await.is_some() {}
        Ok(())
    })
}

/// Resolves once `shutdown` is true.
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// An accept error: a connection that failed before it was accepted is skipped; running out
/// of file descriptors or memory pauses accepting briefly instead of spinning.
pub(crate) async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted => {}
        _ => {
            tracing::error!(error = %e, "accept failed; pausing accepting for 100 ms");
            tokio::time::sleep(ACCEPT_BACKOFF).await;
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    mut slot: Slot,
    router: axum::Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    timeouts: HttpTimeouts,
    mut shutdown: watch::Receiver<bool>,
) {
    slot.accepted();
    let _ = stream.set_nodelay(true);
    let conn = slot.connections().track();
    let io = TokioIo::new(Watched {
        inner: stream,
        conn: Arc::clone(&conn),
    });
    let service = ConnService {
        router,
        conn: Arc::clone(&conn),
        peer,
        body_idle: timeouts.body_idle,
    };
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        let phase = conn.phase();
        if closing && phase != Phase::Busy {
            break;
        }
        if phase == Phase::Evicted && !closing {
            closed("evicted");
            closing = true;
            connection.as_mut().graceful_shutdown();
            continue;
        }
        let timer = async {
            match phase {
                Phase::Header => tokio::time::sleep(timeouts.header_read).await,
                Phase::Idle => tokio::time::sleep(timeouts.idle).await,
                Phase::Busy | Phase::Evicted => std::future::pending().await,
            }
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, %peer, "connection error");
                }
                break;
            }
            () = conn.changed() => {}
            () = timer => {
                closed(if phase == Phase::Header { "header_timeout" } else { "idle_timeout" });
                break;
            }
            () = stopped(&mut shutdown), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
    // Dropping the connection closes it; an in-flight request is never cut here (only a
    // connection without one leaves the loop before hyper ends it).
    conn.close();
    drop(slot);
}

fn closed(reason: &'static str) {
    metrics::counter!("floodgate_connections_closed_total", "reason" => reason).increment(1);
}

/// The per-connection service: marks the request in flight until its response body ends,
/// gives the router the peer address and a request body with the idle timer.
#[derive(Clone)]
struct ConnService {
    router: axum::Router,
    conn: Arc<Conn>,
    peer: SocketAddr,
    body_idle: Duration,
}

impl hyper::service::Service<http::Request<Incoming>> for ConnService {
    type Response = http::Response<InFlightBody>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<InFlightBody>, Infallible>> + Send>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        self.conn.start();
        let guard = InFlight(Arc::clone(&self.conn));
        let body_idle = self.body_idle;
        let mut request = request.map(|body| Body::new(IdleBody::new(body, body_idle)));
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let router = self.router.clone();
        Box::pin(async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok(response.map(|inner| InFlightBody {
                inner,
                _guard: guard,
            }))
        })
    }
}

/// Ends a request's time in flight when dropped (its response body ended or was dropped).
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A response body that keeps its request in flight until it is dropped.
pub(crate) struct InFlightBody {
    inner: Body,
    _guard: InFlight,
}

impl HttpBody for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body sent nothing for the body idle timeout while it was being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyIdleTimeout(pub(crate) Duration);

impl std::fmt::Display for BodyIdleTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the client sent no body data for {} ms",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyIdleTimeout {}

/// Whether `error` or one of its sources is a [`BodyIdleTimeout`].
pub(crate) fn is_body_idle_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<BodyIdleTimeout>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// A body that fails with [`BodyIdleTimeout`] when its reader waited `timeout` for a frame.
/// The timer starts when a read finds nothing to take, so time spent between reads (the
/// reader's own) never counts.
pub(crate) struct IdleBody<B> {
    inner: B,
    timeout: Duration,
    /// Made at the first read that has to wait (most bodies never need one).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The last read had to wait (the timer runs).
    waiting: bool,
    timed_out: bool,
    /// Called once when the timer fires (to count it).
    on_timeout: Option<fn()>,
}

impl<B> IdleBody<B> {
    /// `inner`, failing when a read waits `timeout` for a frame.
    pub(crate) fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: None,
            waiting: false,
            timed_out: false,
            on_timeout: None,
        }
    }

    /// Calls `hook` once when the timer fires.
    pub(crate) fn on_timeout(mut self, hook: fn()) -> Self {
        self.on_timeout = Some(hook);
        self
    }
}

impl<B> HttpBody for IdleBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(Some(Err(Box::new(BodyIdleTimeout(this.timeout)))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = false;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if !this.waiting {
                    this.waiting = true;
                    sleep.as_mut().reset(tokio::time::Instant::now() + timeout);
                }
                if sleep.as_mut().poll(cx).is_ready() {
                    this.timed_out = true;
                    if let Some(hook) = this.on_timeout {
                        hook();
                    }
                    return Poll::Ready(Some(Err(Box::new(BodyIdleTimeout(timeout)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.timed_out && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's socket, telling [`Conn`] when bytes arrive (a header begins).
struct Watched {
    inner: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.conn.received();
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A body fed by a channel: each `Bytes` sent is one frame.
    fn channel_body() -> (
        tokio::sync::mpsc::Sender<Bytes>,
        impl HttpBody<Data = Bytes, Error = Infallible> + Unpin,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let data = rx.recv().await?;
            Some((Ok::<_, Infallible>(Frame::data(data)), rx))
        });
        (tx, http_body_util::StreamBody::new(Box::pin(frames)))
    }

    // Timeouts show only in real time: 200 ms, with bounded waits.
    #[tokio::test]
    async fn a_body_that_stops_sending_fails_after_the_idle_timeout() {
        let (tx, body) = channel_body();
        let mut body = IdleBody::new(body, Duration::from_millis(200));
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "a");
        // The reader taking its time between reads does not count.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(Bytes::from_static(b"b")).await.unwrap();
            tx
        });
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "b");
        let _tx = sender.await.unwrap();
        let started = tokio::time::Instant::now();
        let error = body.frame().await.unwrap().unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(is_body_idle_timeout(&*error), "{error}");
        assert_eq!(error.to_string(), "the client sent no body data for 200 ms");
    }
}
