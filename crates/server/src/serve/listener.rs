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
//!   being read fails with [`BodyIdleTimeout`](super::idle_body::BodyIdleTimeout) (the proxy answers 408; the API its bad-body
//!   error); the time the server itself takes between reads does not count.
//!
//! No timer runs while a request is in flight (a request held by the delay mode, a slow
//! upstream): those have their own bounds. On shutdown, idle connections close at once and
//! busy ones after their response.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use futures_util::future::Either;
use futures_util::task::AtomicWaker;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::connections::{self, Conn, Connections, Expiry, Phase, Slot};
use super::idle_body::IdleBody;
use crate::config::listen::ConnectionLimits;
use crate::http::body_budget;

use super::answers;

/// The accept queue asked of the kernel for every listener (Linux caps it at
/// `net.core.somaxconn`, 4096 by default). Tokio's own default, 1024, is too short for a burst
/// of connections: once the queue is full the kernel drops the client's last handshake packet
/// (or answers with a SYN cookie it then cannot honour), and a client that sends nothing
/// first is left with a connection the server never sees.
pub(crate) const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as the standard
/// library's own `bind` sets it, so a restart can listen while old connections linger).
///
/// # Errors
/// The address cannot be bound (in use, not local, no permission).
pub(crate) fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

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

/// What a listener's request bodies are held to beyond the idle timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bodies {
    /// The API's bounds (`crate::http::body_budget`): each body whole within
    /// `header_read_timeout` of its head, all of them within one budget.
    Api,
    /// Streamed elsewhere (the reverse proxy): the idle timer only.
    Streamed,
}

/// Serves `router` on `listener` until `shutdown` turns true, then closes idle connections
/// and lets in-flight requests finish.
pub(crate) fn spawn_http(
    listener: TcpListener,
    router: axum::Router,
    connections: Arc<Connections>,
    timeouts: HttpTimeouts,
    bodies: Bodies,
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
        let serving = Arc::new(Serving {
            builder,
            timeouts,
            bodies,
        });
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
            // A bulk listener's connection takes a place in the bulk share first (making room
            // among the bulk connections only), so that the rest of the budget stays for the
            // API and admin listeners.
            let bulk = if bodies == Bodies::Streamed {
                tokio::select! {
                    permit = connections.reserve_bulk() => Some(permit),
                    () = stopped(&mut shutdown) => break,
                }
            } else {
                None
            };
            let mut slot = tokio::select! {
                slot = connections.reserve() => slot,
                () = stopped(&mut shutdown) => break,
            };
            slot.hold_bulk(bulk);
            while tasks.try_join_next().is_some() {}
            tasks.spawn(serve_connection(
                stream,
                peer,
                slot,
                router.clone(),
                Arc::clone(&serving),
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

/// What every connection of one listener is served with.
struct Serving {
    builder: auto::Builder<TokioExecutor>,
    timeouts: HttpTimeouts,
    bodies: Bodies,
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    mut slot: Slot,
    router: axum::Router,
    serving: Arc<Serving>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Serving {
        builder,
        timeouts,
        bodies,
    } = &*serving;
    let (timeouts, bodies) = (*timeouts, *bodies);
    slot.accepted();
    let _ = stream.set_nodelay(true);
    let conn = slot
        .connections()
        .track(timeouts.header_read, timeouts.idle, slot.holds_bulk());
    let io = TokioIo::new(Watched {
        inner: stream,
        conn: Arc::clone(&conn),
    });
    let service = ConnService {
        router,
        conn: Arc::clone(&conn),
        peer,
        body_idle: timeouts.body_idle,
        body_deadline: (bodies == Bodies::Api).then_some(timeouts.header_read),
    };
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    // One timer for the connection's life, not one per request: a phase change only writes
    // the connection's deadline; the timer reads it when it fires (at most the shorter of
    // the two timeouts ahead, so never late) and moves itself on (`Conn::expiry`).
    let timer = tokio::time::sleep(conn.check_interval());
    tokio::pin!(timer);
    let changed = conn.changed();
    tokio::pin!(changed);
    let stop = stopped(&mut shutdown);
    tokio::pin!(stop);
    // The timer, `changed` and `stop` are polled with a waker of their own, and only after
    // one of them woke the task: the task wakes for the socket about twice per request, and
    // polling all three each time cost about 1,000 instructions per request (two locks).
    let aside = Arc::new(Aside::default());
    let aside_waker = Waker::from(Arc::clone(&aside));
    let mut closing = false;
    loop {
        let phase = conn.phase();
        if closing && phase != Phase::Busy {
            break;
        }
        if phase == Phase::Evicted {
            if let Some(reason) = conn.shed_reason() {
                // It held the most undelivered answers past the answers budget, or its client
                // stopped taking them when a new connection needed room: closed now, not
                // after its answers (which its client does not read).
                closed(reason);
                break;
            }
        }
        if phase == Phase::Evicted && !closing {
            closed("evicted");
            closing = true;
            conn.closing();
            connection.as_mut().graceful_shutdown();
            continue;
        }
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = connection.as_mut().poll(cx) {
                return Poll::Ready(Event::Ended(result));
            }
            if !aside.woken(cx.waker()) {
                return Poll::Pending;
            }
            let mut cx = Context::from_waker(&aside_waker);
            let event = if changed.as_mut().poll(&mut cx).is_ready() {
                Event::Changed
            } else if timer.as_mut().poll(&mut cx).is_ready() {
                Event::Timer
            } else if !closing && stop.as_mut().poll(&mut cx).is_ready() {
                Event::Stop
            } else {
                return Poll::Pending;
            };
            // The others were not all polled: they are next time.
            aside.again();
            Poll::Ready(event)
        })
        .await;
        match event {
            Event::Ended(result) => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, %peer, "connection error");
                }
                break;
            }
            Event::Changed => changed.set(conn.changed()),
            Event::Timer => {
                if timer_ran_out(&conn, timer.as_mut()) {
                    break;
                }
            }
            Event::Stop => {
                closing = true;
                conn.closing();
                connection.as_mut().graceful_shutdown();
            }
        }
    }
    // Dropping the connection closes it; an in-flight request is cut here only when its
    // client stopped taking its answer (stalled, or shed at the answers budget).
    conn.close();
    drop(slot);
}

/// What the connection's timer found when it fired: `true` when it ran out (the connection
/// is closed, its reason counted), else it is set to fire again.
fn timer_ran_out(conn: &Conn, timer: Pin<&mut tokio::time::Sleep>) -> bool {
    let reason = match conn.expiry() {
        Expiry::Header => "header_timeout",
        Expiry::Idle => "idle_timeout",
        // Its answers are cut: their client took nothing of them for the idle timeout (an
        // HTTP/2 window left at 0, an HTTP/1 socket not read).
        Expiry::Stalled => "stalled",
        Expiry::Later(at) => {
            timer.reset(at);
            return false;
        }
    };
    closed(reason);
    true
}

fn closed(reason: &'static str) {
    metrics::counter!("floodgate_connections_closed_total", "reason" => reason).increment(1);
}

/// What woke a connection's task ([`serve_connection`]).
enum Event<E> {
    /// hyper ended the connection.
    Ended(Result<(), E>),
    /// [`Conn::changed`] resolved (eviction; while closing, a request's end).
    Changed,
    /// The connection's timer fired.
    Timer,
    /// The server is shutting down.
    Stop,
}

/// The waker of a connection's timer, [`Conn::changed`] and shutdown: it records that one of
/// them woke the task (so the task polls them only then) and wakes the task.
#[derive(Debug)]
struct Aside {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Default for Aside {
    fn default() -> Self {
        // Woken at first: they are polled once to take this waker.
        Self {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        }
    }
}

impl Aside {
    /// Whether one of them woke the task since the last call (which clears it); `task` is
    /// the task's waker now.
    fn woken(&self, task: &Waker) -> bool {
        self.task.register(task);
        self.woken.swap(false, Ordering::AcqRel)
    }

    /// Has them polled at the task's next poll (without waking it).
    fn again(&self) {
        self.woken.store(true, Ordering::Release);
    }
}

impl Wake for Aside {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.again();
        self.task.wake();
    }
}

/// The per-connection service: marks the request in flight until its response body ends,
/// gives the router the peer address and a request body with the idle timer (and on an API
/// listener the body deadline and budget, `crate::http::body_budget`).
#[derive(Clone)]
struct ConnService {
    router: axum::Router,
    conn: Arc<Conn>,
    peer: SocketAddr,
    body_idle: Duration,
    /// The API's body deadline after the head (`header_read_timeout`); `None`: streamed.
    body_deadline: Option<Duration>,
}

impl hyper::service::Service<http::Request<Incoming>> for ConnService {
    type Response = http::Response<InFlightBody>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        let head_at = self.conn.start();
        let mut guard = InFlight {
            conn: Arc::clone(&self.conn),
            charge: None,
            answer: 0,
            body_bytes: 0,
            multiplexed: request.version() >= http::Version::HTTP_2,
            waits_for_source: false,
        };
        if guard.multiplexed {
            self.conn.set_multiplexed();
        }
        let head = head_of(&request);
        if head.bytes > MAX_HEADER_BYTES {
            return Answer {
                inner: Either::Right(std::future::ready(Ok(head_too_large(request.version())))),
                guard: Some(guard),
            };
        }
        // A transfer coding hyper does not undo would be read as if it were not there (the
        // proxy refuses it in its own framing check, `proxy::rewrite`).
        if self.body_deadline.is_some()
            && head.transfer_coded
            && !crate::http::body::only_chunked(request.headers())
        {
            return Answer {
                inner: Either::Right(std::future::ready(Ok(
                    crate::http::body::unsupported_coding(),
                ))),
                guard: Some(guard),
            };
        }
        let mut bounds = None;
        if let Some(after) = self.body_deadline {
            if !request.body().is_end_stream() {
                if body_budget::spent() {
                    return Answer {
                        inner: Either::Right(std::future::ready(Ok(body_budget::budget_full()))),
                        guard: Some(guard),
                    };
                }
                // Held by the body while it is read and by the guard until the answer is sent.
                let charge = self.conn.charge();
                guard.charge = Some(Arc::clone(&charge));
                bounds = Some((after, charge));
            }
        }
        let body_idle = self.body_idle;
        let mut request = request.map(|inner| {
            let body = IdleBody::new(inner, body_idle);
            match bounds {
                // From when the head arrived: known without a clock read when it came whole
                // in one read (most heads), at most this poll's time earlier than the head's
                // parse, which is when it was read before.
                Some((after, charge)) => {
                    let head_at = head_at.unwrap_or_else(connections::monotonic_us);
                    body.within(connections::deadline_after(head_at, after), after, charge)
                }
                None => body,
            }
        });
        // A map with room for every extension of a request (ours and the router's), so that
        // none of their inserts has to grow it (a second allocation and a rehash otherwise).
        let extensions = request.extensions_mut();
        let mut sized = request_extensions();
        sized.extend(std::mem::take(extensions));
        *extensions = sized;
        extensions.insert(ConnectInfo(self.peer));
        // The router's future itself, not a boxed one around it (`Router` is always ready),
        // and the body as it is: the router boxes it into its `Body` (once).
        let future = tower::Service::call(&mut self.router.clone(), request);
        Answer {
            inner: Either::Left(future),
            guard: Some(guard),
        }
    }
}

/// What one pass over a request head finds: its size and whether it names a transfer coding.
struct Head {
    /// The head's size as it was sent: the request line and each `name: value` line.
    ///
    /// hyper bounds its read buffer by [`MAX_HEADER_BYTES`], which refuses a longer head only
    /// while it is incomplete: a later request of a keep-alive connection whose head came in
    /// one read of a buffer that had grown was parsed whole up to twice that (131,071 bytes
    /// answered 200). Counted here, every head is held to the same bound.
    bytes: usize,
    /// A `Transfer-Encoding` line is in it (found in the same pass: a map lookup hashes the
    /// name, about 100 instructions a request, where comparing each line's name is a few).
    transfer_coded: bool,
}

/// The [`Head`] of `request`.
fn head_of<B>(request: &http::Request<B>) -> Head {
    // `METHOD target HTTP/1.1\r\n` (two spaces, 8 and 2 bytes) and the blank line that ends
    // the head (2): a head of 65,537 bytes was counted 65,536 and served on a later request.
    let line = request.method().as_str().len()
        + request
            .uri()
            .path_and_query()
            .map_or(1, |p| p.as_str().len())
        + 14;
    let mut head = Head {
        bytes: line,
        transfer_coded: false,
    };
    for (name, value) in request.headers() {
        head.bytes += name.as_str().len() + value.len() + 4;
        head.transfer_coded |= name == http::header::TRANSFER_ENCODING;
    }
    head
}

/// The answer to a head above [`MAX_HEADER_BYTES`]: 431 with no body and, over HTTP/1, the
/// connection closed, as hyper answers one it could not parse whole.
fn head_too_large(version: http::Version) -> axum::response::Response {
    let mut response = axum::response::Response::new(axum::body::Body::empty());
    *response.status_mut() = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    if version < http::Version::HTTP_2 {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// An empty extension map for a request, allocated with room for 7 entries.
///
/// hashbrown gives a new map room for 3 entries and grows it (a new table, the entries moved)
/// at the 4th; a request gets 5 on the way to a handler (`ConnectInfo`, and the router's
/// `OriginalUri`, `MatchedPath`, path parameters, body limit), more behind some layers. A
/// clone of a map keeps its capacity, so each request's map is a clone of one made once.
fn request_extensions() -> http::Extensions {
    static SIZED: std::sync::OnceLock<http::Extensions> = std::sync::OnceLock::new();
    SIZED
        .get_or_init(|| {
            // Four entries grow it to room for 7; emptied, it keeps that room.
            #[derive(Clone, Copy)]
            struct Room<const N: usize>;
            let mut map = http::Extensions::new();
            map.insert(Room::<0>);
            map.insert(Room::<1>);
            map.insert(Room::<2>);
            map.insert(Room::<3>);
            map.clear();
            map
        })
        .clone()
}

/// The answer of [`ConnService`]: the router's answer (or the 503 of a spent body budget),
/// whose body keeps the request in flight.
pub(crate) struct Answer {
    inner: Either<RouteFuture<Infallible>, std::future::Ready<Result<Response, Infallible>>>,
    /// Taken when the answer is ready.
    guard: Option<InFlight>,
}

impl Future for Answer {
    type Output = Result<http::Response<InFlightBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = match std::task::ready!(Pin::new(&mut self.inner).poll(cx)) {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let mut guard = self
            .guard
            .take()
            .expect("an answer is polled until it is ready, not after");
        let mut body = http_body::Body::size_hint(response.body()).lower();
        // Looked up only for a long body (the map lookup costs about 100 instructions).
        if body > answers::STREAMED_CHARGE
            && response.extensions().get::<answers::Streamed>().is_some()
        {
            body = answers::STREAMED_CHARGE;
        }
        guard.answer = answers::charge(&guard.conn, body);
        Poll::Ready(Ok(response.map(|inner| InFlightBody { inner, guard })))
    }
}

/// Ends a request's time in flight when dropped (its response body ended or was dropped),
/// and with it what its body holds of the API's budget.
struct InFlight {
    conn: Arc<Conn>,
    charge: Option<Arc<body_budget::Charge>>,
    /// What its answer holds of the answers budget (`answers.rs`), from when it is ready.
    answer: usize,
    /// The bytes of its answer's body yielded so far.
    body_bytes: u64,
    /// An HTTP/2 request: its answer's frames may wait in the connection after its body
    /// ended (see `backlog::Backlog`).
    multiplexed: bool,
    /// Its body's last poll found nothing ready: it waits for its source, not its client
    /// (counted in the connection's stall watch, `Conn::stalled`).
    waits_for_source: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.waits_for_source {
            self.conn.waits_for_source(false);
        }
        if self.answer > 0 {
            if self.multiplexed {
                answers::ended(&self.conn, self.body_bytes, self.answer);
            } else {
                // HTTP/1 takes a body only while its write buffer has room (64 KiB): one
                // answer per connection waits for its socket, nothing more.
                answers::release_freed(
                    &self.conn,
                    crate::serve::backlog::Freed {
                        answers: 1,
                        bytes: self.answer,
                    },
                );
            }
        }
        if let Some(mut charge) = self.charge.take() {
            // The body is gone too (the usual case): its charge is given back now, and the
            // connection keeps it for its next request (no allocation per request). Else the
            // body gives it back when it is dropped.
            if let Some(unique) = Arc::get_mut(&mut charge) {
                unique.give_back();
                self.conn.keep_charge(charge);
            }
        }
        self.conn.finish();
    }
}

/// A response body that keeps its request in flight until it is dropped.
pub(crate) struct InFlightBody {
    inner: Body,
    guard: InFlight,
}

impl HttpBody for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        let guard = &mut this.guard;
        // Polled: the client took room for more (`Conn::stalled`).
        guard.conn.progressed();
        let waits = frame.is_pending();
        if waits != guard.waits_for_source {
            guard.waits_for_source = waits;
            guard.conn.waits_for_source(waits);
        }
        if let Poll::Ready(Some(Ok(frame))) = &frame {
            if let Some(data) = frame.data_ref() {
                guard.body_bytes += data.len() as u64;
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
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
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            if self.conn.is_multiplexed() {
                self.conn.wrote_now(n);
                answers::release_freed(&self.conn, self.conn.backlog().wrote(n));
            }
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result {
            if self.conn.is_multiplexed() {
                self.conn.wrote_now(n);
                answers::release_freed(&self.conn, self.conn.backlog().wrote(n));
            }
        }
        result
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
