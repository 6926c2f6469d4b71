//! A request body with an idle timer ([`IdleBody`]): it fails when its reader waited
//! `body_idle_timeout` for a frame, and on an API listener also holds the body's deadline and
//! its charge of the body budget (`crate::http::body_budget`). Used by the listener for every
//! request body and by the proxy for upstream answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::connections;
use crate::http::body_budget;

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
/// reader's own) never counts. With [`IdleBody::within`] it also holds an API body's bounds
/// (`crate::http::body_budget`): whole by a deadline, charged to the budget; the one timer
/// then runs to whichever comes first.
pub(crate) struct IdleBody<B> {
    inner: B,
    timeout: Duration,
    /// Made at the first read that has to wait (most bodies never need one).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the idle timer runs out, while the last read had to wait (the timer runs).
    idle_at: Option<tokio::time::Instant>,
    /// The body deadline ([`connections::monotonic_us`]) and its length
    /// (`header_read_timeout`), for an API body.
    deadline: Option<(u64, Duration)>,
    /// The body deadline as an instant of tokio's timers, once a read had to wait.
    deadline_at: Option<tokio::time::Instant>,
    /// What this body has taken of the API's budget.
    charge: Option<Arc<body_budget::Charge>>,
    /// Why the body failed, once it has: every later read fails the same way.
    failed: Option<Failure>,
    /// Called once when the idle timer fires (to count it).
    on_timeout: Option<fn()>,
}

/// How an [`IdleBody`] failed.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Idle,
    Deadline,
    Budget,
}

impl<B> IdleBody<B> {
    /// `inner`, failing when a read waits `timeout` for a frame.
    pub(crate) fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: None,
            idle_at: None,
            deadline: None,
            deadline_at: None,
            charge: None,
            failed: None,
            on_timeout: None,
        }
    }

    /// Calls `hook` once when the idle timer fires.
    pub(crate) fn on_timeout(mut self, hook: fn()) -> Self {
        self.on_timeout = Some(hook);
        self
    }

    /// Also fails with [`body_budget::BodyDeadline`] unless the body is whole by `deadline`
    /// ([`connections::monotonic_us`], `after` from its head), and with
    /// [`body_budget::BodyBudgetFull`] when a frame does not fit the budget (what it read is
    /// charged to `charge`).
    pub(crate) fn within(
        mut self,
        deadline: u64,
        after: Duration,
        charge: Arc<body_budget::Charge>,
    ) -> Self {
        self.deadline = Some((deadline, after));
        self.charge = Some(charge);
        self
    }

    fn error(&self, failure: Failure) -> Box<dyn std::error::Error + Send + Sync> {
        match failure {
            Failure::Idle => Box::new(BodyIdleTimeout(self.timeout)),
            Failure::Deadline => Box::new(body_budget::BodyDeadline(
                self.deadline.map_or(Duration::ZERO, |(_, after)| after),
            )),
            Failure::Budget => Box::new(body_budget::BodyBudgetFull),
        }
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
        if let Some(failure) = this.failed {
            return Poll::Ready(Some(Err(this.error(failure))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.idle_at = None;
                let n = frame.data_ref().map_or(0, Bytes::len);
                if let Some(charge) = &this.charge {
                    if n > 0 && !charge.take(n) {
                        this.failed = Some(Failure::Budget);
                        return Poll::Ready(Some(Err(this.error(Failure::Budget))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(frame) => {
                this.idle_at = None;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let now = tokio::time::Instant::now();
                let idle_at = *this.idle_at.get_or_insert(now + this.timeout);
                let deadline = match (this.deadline, this.deadline_at) {
                    (_, Some(at)) => Some(at),
                    (Some((us, _)), None) => {
                        let at = connections::timer_instant(us);
                        this.deadline_at = Some(at);
                        Some(at)
                    }
                    (None, None) => None,
                };
                let at = deadline.map_or(idle_at, |deadline| idle_at.min(deadline));
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                if sleep.as_mut().poll(cx).is_ready() {
                    let failure = match deadline {
                        Some(deadline) if deadline <= idle_at => Failure::Deadline,
                        _ => {
                            if let Some(hook) = this.on_timeout {
                                hook();
                            }
                            Failure::Idle
                        }
                    };
                    this.failed = Some(failure);
                    return Poll::Ready(Some(Err(this.error(failure))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;
    use std::convert::Infallible;

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
