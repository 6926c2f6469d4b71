//! The bounds of a gRPC call's request body, applied before tonic decodes it:
//!
//! - one message is at most [`MAX_MESSAGE`] bytes (tonic's `max_decoding_message_size`, set
//!   in [`super::spawn`]; a larger one is `OUT_OF_RANGE` as soon as its 5-byte prefix arrives);
//! - the body must be complete within the deadline (`header_read_timeout`) of the call's
//!   start, or the call ends `DEADLINE_EXCEEDED` and its buffer is freed;
//! - all calls of the listener together hold at most [`BUDGET`] bytes of request messages.
//!   Tonic reserves a message's announced length as soon as its prefix arrives, so a call is
//!   charged the announced length (not only the bytes received) until its body is dropped; a
//!   call beyond the budget ends `RESOURCE_EXHAUSTED`.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::Status;

/// Largest request message (64 KiB). A `RateLimitRequest` holds at most 64 descriptors of 32
/// entries; Envoy's are a few hundred bytes. 64 KiB leaves every descriptor 1 KiB (32 bytes
/// an entry at the full 64 x 32), and keys longer than 128 bytes are hashed anyway.
pub(crate) const MAX_MESSAGE: usize = 64 * 1024;

/// Request-message bytes all gRPC calls may hold at once (16 MiB: 256 messages of the largest
/// size; a typical Envoy request is charged a few hundred bytes).
pub(crate) const BUDGET: usize = 16 * 1024 * 1024;

/// The gRPC message prefix: a compression flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

/// What the calls in flight hold, shared by the listener's calls.
#[derive(Debug)]
pub(super) struct Budget {
    used: AtomicUsize,
    cap: usize,
}

impl Budget {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            cap,
        })
    }

    /// Takes `n` bytes, or nothing when they do not fit.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.cap)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// A call's request body under the bounds of this module.
pub(super) struct Guarded {
    inner: Body,
    budget: Arc<Budget>,
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
            held: 0,
            prefix: [0; PREFIX],
            prefix_len: 0,
            payload_left: 0,
            deadline: Some(Box::pin(tokio::time::sleep(deadline))),
        }
    }

    /// Follows the message framing through `data`; charges each message's announced size
    /// (the largest one so far: tonic's buffer keeps its capacity).
    fn charge(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(data.len());
                self.payload_left -= n;
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
            // Above the message bound tonic refuses it before reserving anything.
            let size = PREFIX + announced.min(MAX_MESSAGE);
            if size > self.held {
                if !self.budget.take(size - self.held) {
                    return Err(Status::resource_exhausted(
                        "the gRPC listener holds as many request bytes as it may; retry",
                    ));
                }
                self.held = size;
            }
        }
        Ok(())
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
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
        let budget = Budget::new(2 * (PREFIX + 1000));
        let mut a = Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1));
        // The prefix split over two frames, then part of the payload.
        a.charge(&prefix(1000)[..2]).unwrap();
        assert_eq!(budget.used.load(Ordering::Acquire), 0);
        a.charge(&prefix(1000)[2..]).unwrap();
        a.charge(&[7; 400]).unwrap();
        assert_eq!(budget.used.load(Ordering::Acquire), PREFIX + 1000);
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
        assert_eq!(budget.used.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn an_oversized_announcement_is_charged_the_message_bound() {
        let budget = Budget::new(BUDGET);
        let mut a = Guarded::new(Body::empty(), Arc::clone(&budget), Duration::from_secs(1));
        a.charge(&prefix(u32::MAX)).unwrap();
        assert_eq!(budget.used.load(Ordering::Acquire), PREFIX + MAX_MESSAGE);
    }
}
