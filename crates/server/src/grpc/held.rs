//! What gRPC calls hold until their answers are delivered, bounded together: the gRPC side of
//! the answers budget (`serve/answers.rs` bounds the HTTP listeners').
//!
//! A call holds its stream, its decoded request and its answer from its start until the
//! answer's last frame is written to the socket: HTTP/2 keeps a stream whose frames wait to
//! be sent. A client that opens no flow-control window, or that does not read its socket
//! (and answers pings), never lets them go: an attacker's review held 1,024
//! `ShouldRateLimit` calls on each of 40 connections and took the process from 34 MB to 312
//! MB, about 6.8 KB a call, for as long as it liked (3,840 connections of the bulk share
//! would be 26 GB), with no token. So each call is charged [`CALL_COST`] to its connection
//! and to one count for the listener, from its start until its answer has ended *and* the
//! connection has written at least the answer's bytes since (each answer adds at least its
//! messages and three frame headers to the socket: a lower bound, so a connection that
//! writes everything is never held up); when the count passes [`GRPC_ANSWER_BUDGET`], the
//! connection holding the most calls is closed at once (its socket reads fail, hyper drops
//! it, every call freed), counted in `floodgate_connections_closed_total{reason=
//! "answers_held"}`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Frame, SizeHint};
use parking_lot::Mutex;
use tonic::transport::server::TcpConnectInfo;

use crate::serve::backlog::{Backlog, Freed};
use crate::serve::connections::{monotonic_us, STALLED_US};

/// What the calls of all gRPC connections may hold at once before the connection with the
/// most is closed: 64 MiB (8,192 calls held unanswered; Envoy's own calls end in
/// milliseconds).
pub(super) const GRPC_ANSWER_BUDGET: usize = 64 * 1024 * 1024;

/// What one call held costs, in bytes: measured 6.8 KB (its stream, its decoded request, its
/// answer and their tasks), rounded up.
pub(super) const CALL_COST: usize = 8 * 1024;

/// The fewest bytes an answer adds to the socket beyond its messages: its HEADERS, DATA and
/// trailers frames' 9-byte headers.
const FRAME_HEADERS: u64 = 27;

/// One gRPC connection's held calls, and whether it was asked to close.
#[derive(Debug)]
pub(super) struct Held {
    registry: Arc<Registry>,
    /// Calls held: running, or ended and not yet written out.
    calls: AtomicUsize,
    shed: AtomicBool,
    /// The connection's reader, woken to fail once `shed` is set.
    reader: AtomicWaker,
    /// Its ended answers the socket has not taken yet.
    backlog: Backlog,
    /// When its socket last took bytes (`monotonic_us`; 0: never).
    last_write_us: std::sync::atomic::AtomicU64,
}

impl Held {
    /// Whether the connection must close now; registers the reader's waker first.
    pub(super) fn is_shed(&self, cx: &Context<'_>) -> bool {
        self.reader.register(cx.waker());
        self.shed.load(Ordering::Acquire)
    }

    /// `n` bytes were written to the socket: the answers they complete are no longer held.
    pub(super) fn wrote(&self, n: usize) {
        self.last_write_us.store(monotonic_us(), Ordering::Relaxed);
        self.release(self.backlog.wrote(n));
    }

    /// Its socket took nothing for [`STALLED_US`]: shed before a connection that writes.
    fn stalled(&self, now: u64) -> bool {
        now.saturating_sub(self.last_write_us.load(Ordering::Relaxed)) >= STALLED_US
    }

    /// A call's answer ended after `bytes` of messages: held until the socket took them.
    fn ended(&self, bytes: u64) {
        let freed = self
            .backlog
            .ended(bytes.saturating_add(FRAME_HEADERS), CALL_COST);
        self.release(freed);
    }

    fn release(&self, freed: Freed) {
        if freed.answers > 0 {
            self.calls.fetch_sub(freed.answers, Ordering::AcqRel);
            self.registry.held.fetch_sub(freed.bytes, Ordering::AcqRel);
        }
    }
}

impl Drop for Held {
    /// The connection is gone: so is everything its calls held.
    fn drop(&mut self) {
        let freed = self.backlog.drain();
        self.registry.held.fetch_sub(freed.bytes, Ordering::AcqRel);
    }
}

/// Every gRPC connection of a listener by its client's address, and what they hold.
#[derive(Debug, Default)]
pub(super) struct Registry {
    conns: Mutex<HashMap<SocketAddr, Weak<Held>>>,
    held: AtomicUsize,
}

impl Registry {
    /// A new connection from `peer` (an address of a connection gone replaced).
    pub(super) fn register(self: &Arc<Self>, peer: Option<SocketAddr>) -> Arc<Held> {
        let held = Arc::new(Held {
            registry: Arc::clone(self),
            calls: AtomicUsize::new(0),
            shed: AtomicBool::new(false),
            reader: AtomicWaker::new(),
            backlog: Backlog::default(),
            last_write_us: std::sync::atomic::AtomicU64::new(0),
        });
        if let Some(peer) = peer {
            let mut conns = self.conns.lock();
            if conns.len() == conns.capacity() {
                conns.retain(|_, c| c.strong_count() > 0);
            }
            conns.insert(peer, Arc::downgrade(&held));
        }
        held
    }

    /// Charges one call of the connection from `peer`, given back once its answer ended (the
    /// returned charge dropped) and was written out; `None` for an unknown peer.
    fn charge(self: &Arc<Self>, peer: SocketAddr) -> Option<Charge> {
        let conn = self.conns.lock().get(&peer).and_then(Weak::upgrade)?;
        conn.calls.fetch_add(1, Ordering::Relaxed);
        let held = self
            .held
            .fetch_add(CALL_COST, Ordering::AcqRel)
            .saturating_add(CALL_COST);
        if held > GRPC_ANSWER_BUDGET {
            self.shed_heaviest(held);
        }
        Some(Charge { conn, bytes: 0 })
    }

    /// Closes the connection holding the most calls (of those whose socket took nothing for
    /// [`STALLED_US`] first: a busy Envoy's connection writes all the time), unless the connections already closing
    /// for it hold the excess of `held` over the budget (they give it back as they go).
    fn shed_heaviest(&self, held: usize) {
        let mut closing = 0usize;
        let mut heaviest: Option<(Arc<Held>, (bool, usize))> = None;
        let now = monotonic_us();
        for conn in self.conns.lock().values().filter_map(Weak::upgrade) {
            let calls = conn.calls.load(Ordering::Acquire);
            let key = (conn.stalled(now), calls);
            if conn.shed.load(Ordering::Acquire) {
                closing = closing.saturating_add(calls.saturating_mul(CALL_COST));
            } else if heaviest.as_ref().is_none_or(|(_, k)| key > *k) {
                heaviest = Some((conn, key));
            }
        }
        let heaviest = heaviest.map(|(conn, _)| conn);
        if held.saturating_sub(closing) <= GRPC_ANSWER_BUDGET {
            return;
        }
        if let Some(conn) = heaviest {
            if !conn.shed.swap(true, Ordering::AcqRel) {
                metrics::counter!(
                    "floodgate_connections_closed_total",
                    "reason" => "answers_held"
                )
                .increment(1);
                conn.reader.wake();
            }
        }
    }
}

/// One call's share of the budget: its answer ended when dropped (see [`Held::ended`]).
#[derive(Debug)]
pub(super) struct Charge {
    conn: Arc<Held>,
    /// Message bytes its answer has yielded.
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.conn.ended(self.bytes);
    }
}

/// The layer that charges every call (around tonic's routes).
#[derive(Debug, Clone)]
pub(super) struct HeldLayer(pub(super) Arc<Registry>);

impl<S> tower::Layer<S> for HeldLayer {
    type Service = HeldService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HeldService {
            inner,
            registry: Arc::clone(&self.0),
        }
    }
}

/// See [`HeldLayer`].
#[derive(Debug, Clone)]
pub(super) struct HeldService<S> {
    inner: S,
    registry: Arc<Registry>,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for HeldService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<HeldBody<ResBody>>;
    type Error = S::Error;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let charge = request
            .extensions()
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .and_then(|peer| self.registry.charge(peer));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| HeldBody { inner, charge }))
        })
    }
}

/// An answer's body that holds its call's charge until it is dropped.
pub(super) struct HeldBody<B> {
    inner: B,
    charge: Option<Charge>,
}

impl<B> http_body::Body for HeldBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(charge)) = (&frame, &mut this.charge) {
            if let Some(data) = frame.data_ref() {
                charge.bytes = charge.bytes.saturating_add(data.len() as u64);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_budget_the_connection_with_the_most_calls_is_shed() {
        let registry = Arc::new(Registry::default());
        let a: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:1000".parse().unwrap();
        let (held_a, held_b) = (registry.register(Some(a)), registry.register(Some(b)));
        let few: Vec<Charge> = (0..10).map(|_| registry.charge(a).unwrap()).collect();
        // Ended answers stay held until their bytes are written.
        let ten = registry.held.load(Ordering::Acquire);
        drop(registry.charge(a).unwrap());
        assert_eq!(registry.held.load(Ordering::Acquire), ten + CALL_COST);
        held_a.wrote(26);
        assert_eq!(registry.held.load(Ordering::Acquire), ten + CALL_COST);
        held_a.wrote(1);
        assert_eq!(registry.held.load(Ordering::Acquire), ten);
        let mut many = Vec::new();
        while registry.held.load(Ordering::Acquire) + CALL_COST <= GRPC_ANSWER_BUDGET {
            many.push(registry.charge(b).unwrap());
        }
        let cx = Context::from_waker(futures_util::task::noop_waker_ref());
        assert!(!held_a.is_shed(&cx) && !held_b.is_shed(&cx));
        many.push(registry.charge(b).unwrap());
        assert!(held_b.is_shed(&cx), "the heaviest holder");
        assert!(!held_a.is_shed(&cx));
        drop((few, many));
        held_a.wrote(1 << 30);
        held_b.wrote(1 << 30);
        assert_eq!(registry.held.load(Ordering::Acquire), 0);
        assert!(registry.charge("192.0.2.3:1".parse().unwrap()).is_none());
    }

    /// A connection that writes is shed after one that does not, though it holds more.
    #[test]
    fn a_connection_that_writes_is_shed_after_one_that_does_not() {
        let registry = Arc::new(Registry::default());
        let (a, b): (SocketAddr, SocketAddr) = (
            "192.0.2.4:1".parse().unwrap(),
            "192.0.2.5:1".parse().unwrap(),
        );
        let (held_a, held_b) = (registry.register(Some(a)), registry.register(Some(b)));
        let few: Vec<Charge> = (0..10).map(|_| registry.charge(a).unwrap()).collect();
        let mut many = Vec::new();
        while registry.held.load(Ordering::Acquire) + CALL_COST <= GRPC_ANSWER_BUDGET {
            many.push(registry.charge(b).unwrap());
        }
        held_b.wrote(0);
        many.push(registry.charge(b).unwrap());
        let cx = Context::from_waker(futures_util::task::noop_waker_ref());
        assert!(held_a.is_shed(&cx), "the one that wrote nothing");
        assert!(!held_b.is_shed(&cx));
        drop((few, many));
    }
}
