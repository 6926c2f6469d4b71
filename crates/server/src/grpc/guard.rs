//! The bounds of a gRPC call's request body, applied before tonic decodes it:
//!
//! - one message is at most [`MAX_MESSAGE`] bytes (tonic's `max_decoding_message_size`, set
//!   in [`super::spawn`]; a larger one is `OUT_OF_RANGE` as soon as its 5-byte prefix arrives);
//! - the body must be complete within the deadline (`header_read_timeout`) of the call's
//!   start, or the call ends `DEADLINE_EXCEEDED` and its buffer is freed;
//! - all calls of the listener together hold at most [`BUDGET`] bytes of request messages.
//!   Tonic reserves a message's announced length as soon as its prefix arrives, so a call is
//!   charged the announced length (not only the bytes received) until its body is dropped; a
//!   call beyond the budget ends `RESOURCE_EXHAUSTED`;
//! - the calls of one client address (the peer's IP: every connection from one host shares
//!   it) hold at most [`CONNECTION_SHARE`] of it (2 MiB), so that one client cannot take the
//!   whole budget, with one connection or with many (Envoy then fails open for everyone): a
//!   call beyond its address's share ends `RESOURCE_EXHAUSTED` while other clients' calls go
//!   on;
//! - a `ShouldRateLimit` message is scanned as it arrives ([`super::prescan`]): more
//!   descriptors or entries than a request may hold end the call before tonic decodes it.

use std::collections::HashMap;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::{Frame, SizeHint};
use parking_lot::Mutex;
use tonic::body::Body;
use tonic::Status;

use super::prescan::Prescan;

/// Largest request message (64 KiB). A `RateLimitRequest` holds at most 64 descriptors of 32
/// entries; Envoy's are a few hundred bytes. 64 KiB leaves every descriptor 1 KiB (32 bytes
/// an entry at the full 64 x 32), and keys longer than 128 bytes are hashed anyway.
pub(crate) const MAX_MESSAGE: usize = 64 * 1024;

/// Request-message bytes all gRPC calls may hold at once (16 MiB: 256 messages of the largest
/// size; a typical Envoy request is charged a few hundred bytes).
pub(crate) const BUDGET: usize = 16 * 1024 * 1024;

/// What the calls of one connection may hold: an eighth of [`BUDGET`] or 2 MiB, whichever
/// is less (32 messages of the largest size; thousands of Envoy's).
pub(crate) const CONNECTION_SHARE: usize = if BUDGET / 8 < 2 * 1024 * 1024 {
    BUDGET / 8
} else {
    2 * 1024 * 1024
};

/// The gRPC message prefix: a compression flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

/// What the calls in flight hold, shared by the listener's calls: in all and per connection
/// (by the peer's address, which names one connection while it is open).
#[derive(Debug)]
pub(super) struct Budget {
    held: Mutex<Held>,
    cap: usize,
    per_connection: usize,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    /// Only connections holding something (an entry goes when its count is back to 0).
    by_connection: HashMap<SocketAddr, usize>,
}

/// Which bound a charge did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Listener,
    Connection,
}

impl Budget {
    pub(super) fn new(cap: usize, per_connection: usize) -> Arc<Self> {
        Arc::new(Self {
            held: Mutex::new(Held::default()),
            cap,
            per_connection,
        })
    }

    /// Takes `n` bytes for a call of `connection`, or nothing when they do not fit.
    fn take(&self, connection: Option<SocketAddr>, n: usize) -> Result<(), Full> {
        let mut held = self.held.lock();
        let total = held
            .total
            .checked_add(n)
            .filter(|&t| t <= self.cap)
            .ok_or(Full::Listener)?;
        if let Some(peer) = connection {
            let mine = held.by_connection.get(&peer).copied().unwrap_or(0);
            let mine = mine
                .checked_add(n)
                .filter(|&m| m <= self.per_connection)
                .ok_or(Full::Connection)?;
            held.by_connection.insert(peer, mine);
        }
        held.total = total;
        Ok(())
    }

    fn give_back(&self, connection: Option<SocketAddr>, n: usize) {
        if n == 0 {
            return;
        }
        let mut held = self.held.lock();
        held.total -= n;
        if let Some(peer) = connection {
            if let Some(mine) = held.by_connection.get_mut(&peer) {
                *mine -= n;
                if *mine == 0 {
                    held.by_connection.remove(&peer);
                }
            }
        }
    }

    #[cfg(test)]
    fn used(&self) -> usize {
        self.held.lock().total
    }
}

/// A call's request body under the bounds of this module.
pub(super) struct Guarded {
    inner: Body,
    budget: Arc<Budget>,
    /// The peer of the call's connection (charged its share).
    connection: Option<SocketAddr>,
    /// For `ShouldRateLimit`: the scan of the message being read.
    scan: Option<Prescan>,
    /// Bytes charged to the budget, given back on drop.
    held: usize,
    /// The prefix of the message being read, and how many of its bytes have arrived.
    prefix: [u8; PREFIX],
    prefix_len: usize,
    /// Payload bytes of the current message still to come.
    payload_left: usize,
    /// Until the body is complete.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Guarded {
    pub(super) fn new(inner: Body, budget: Arc<Budget>, deadline: Duration) -> Self {
        Self {
            inner,
            budget,
            connection: None,
            scan: None,
            held: 0,
            prefix: [0; PREFIX],
            prefix_len: 0,
            payload_left: 0,
            deadline: Some(Box::pin(tokio::time::sleep(deadline))),
        }
    }

    /// This body charged to the share of the connection of `peer`.
    pub(super) fn of_connection(mut self, peer: Option<SocketAddr>) -> Self {
        // By the IP alone: a client opening more connections gets no larger share.
        self.connection = peer.map(|p| SocketAddr::new(p.ip(), 0));
        self
    }

    /// This body's messages scanned as `RateLimitRequest`s ([`Prescan`]).
    pub(super) fn scanned(mut self) -> Self {
        self.scan = Some(Prescan::new());
        self
    }

    /// Follows the message framing through `data`; charges each message's announced size
    /// (the largest one so far: tonic's buffer keeps its capacity).
    fn charge(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(data.len());
                self.payload_left -= n;
                if let Some(scan) = &mut self.scan {
                    scan.feed(&data[..n])?;
                    if self.payload_left == 0 {
                        scan.finish()?;
                    }
                }
                data.advance(n);
                continue;
            }
            let n = (PREFIX - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
            self.prefix_len += n;
            data.advance(n);
            if self.prefix_len < PREFIX {
                break;
            }
            self.prefix_len = 0;
            let [_, a, b, c, d] = self.prefix;
            let announced = usize::try_from(u32::from_be_bytes([a, b, c, d])).unwrap_or(usize::MAX);
            self.payload_left = announced;
            if let Some(scan) = &mut self.scan {
                *scan = Prescan::new();
                if announced == 0 {
                    scan.finish()?;
                }
            }
            // Above the message bound tonic refuses it before reserving anything.
            let size = PREFIX + announced.min(MAX_MESSAGE);
            if size > self.held {
                match self.budget.take(self.connection, size - self.held) {
                    Ok(()) => {}
                    Err(Full::Listener) => {
                        return Err(Status::resource_exhausted(
                            "the gRPC listener holds as many request bytes as it may; retry",
                        ))
                    }
                    Err(Full::Connection) => {
                        return Err(Status::resource_exhausted(format!(
                            "this connection's calls (with those of every other connection from \
                             its address) hold as many request bytes as one \
                             connection may ({CONNECTION_SHARE}); retry when they finish"
                        )))
                    }
                }
                self.held = size;
            }
        }
        Ok(())
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.budget.give_back(self.connection, self.held);
    }
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if let Err(status) = this.charge(data) {
                        return Poll::Ready(Some(Err(status)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(status))) => Poll::Ready(Some(Err(status))),
            Poll::Ready(None) => {
                this.deadline = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                this.deadline = None;
                Poll::Ready(Some(Err(Status::deadline_exceeded(
                    "the request message did not arrive within header_read_timeout",
                ))))
            }
        }
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

    fn prefix(len: u32) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&len.to_be_bytes());
        v
    }

    #[tokio::test]
    async fn a_call_is_charged_its_announced_size_until_dropped() {
        let budget = Budget::new(2 * (PREFIX + 1000), usize::MAX);
        let mut a = Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1));
        // The prefix split over two frames, then part of the payload.
        a.charge(&prefix(1000)[..2]).unwrap();
        assert_eq!(budget.used(), 0);
        a.charge(&prefix(1000)[2..]).unwrap();
        a.charge(&[7; 400]).unwrap();
        assert_eq!(budget.used(), PREFIX + 1000);
        let mut b = Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1));
        b.charge(&prefix(1000)).unwrap();
        let mut c = Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1));
        assert_eq!(
            c.charge(&prefix(10)).unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );
        drop(a);
        c.charge(&prefix(10)).unwrap();
        drop((b, c));
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn an_oversized_announcement_is_charged_the_message_bound() {
        let budget = Budget::new(BUDGET, CONNECTION_SHARE);
        let mut a = Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1));
        a.charge(&prefix(u32::MAX)).unwrap();
        assert_eq!(budget.used(), PREFIX + MAX_MESSAGE);
    }

    #[tokio::test]
    async fn one_connection_holds_at_most_its_share() {
        let budget = Budget::new(4 * (PREFIX + 1000), 2 * (PREFIX + 1000));
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        // Another connection of the same host shares its share.
        let a_again: SocketAddr = "127.0.0.1:1002".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:1001".parse().unwrap();
        let call = |peer| {
            Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1))
                .of_connection(Some(peer))
        };
        let (mut a1, mut a2, mut a3) = (call(a), call(a_again), call(a));
        a1.charge(&prefix(1000)).unwrap();
        a2.charge(&prefix(1000)).unwrap();
        let e = a3.charge(&prefix(1000)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("this connection's calls"), "{e:?}");
        // Another connection still has room.
        let mut b1 = call(b);
        b1.charge(&prefix(1000)).unwrap();
        drop(a1);
        a3.charge(&prefix(1000)).unwrap();
        drop((a2, a3, b1));
        assert_eq!(budget.used(), 0);
        assert!(budget.held.lock().by_connection.is_empty());
    }

    #[tokio::test]
    async fn a_scanned_message_of_too_many_entries_ends_before_it_is_complete() {
        let budget = Budget::new(BUDGET, CONNECTION_SHARE);
        let mut a =
            Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1)).scanned();
        // One descriptor of 30,000 empty entries, announced whole, sent in part.
        let mut data = prefix(60_004);
        data.extend([0x12, 0xe0, 0xd4, 0x03]);
        data.extend([0x0a, 0x00].repeat(40));
        let e = a.charge(&data).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            e.message(),
            "descriptors[0].entries: must hold at most 32 entries"
        );
    }
}
