//! The service's future and response body types, and the delay mode's hold-then-pass
//! ([`RateLimiter::admit`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use floodgate_core::Clock;
use floodgate_store::Store;

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

use crate::limiter::{Action, Mode, Plan, RateLimiter, Reservation, Verdict};

/// The future of [`RateLimit`](crate::RateLimit): boxed, because it awaits the store and then
/// the inner service.
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;

pin_project! {
    /// A response body that is either the inner service's body or the middleware's own
    /// (problem+json for 429/503/400). Data is [`Bytes`]; errors are the inner body's.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { #[pin] body: Full<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// Wraps the inner service's body.
    pub fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A body of the middleware's own.
    pub fn full(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                body: Full::new(bytes),
            },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { body } => body
                .poll_frame(cx)
                .map_err(|never: Infallible| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { body } => body.size_hint(),
        }
    }
}

/// Default of [`RateLimiter::with_max_delayed`](crate::RateLimiter::with_max_delayed): 1,024
/// requests held at once.
pub const DEFAULT_MAX_DELAYED: usize = 1024;

/// How held requests wait for their slot.
#[derive(Debug, Clone)]
pub(crate) enum DelayTimer {
    /// `tokio::time::sleep` for the wait (the real clock).
    Tokio,
    /// Until this clock reads the scheduled time, looked at every [`CLOCK_POLL`].
    Clock(Arc<dyn Clock>),
}

/// How often a [`DelayTimer::Clock`] is read.
const CLOCK_POLL: Duration = Duration::from_millis(5);

/// The delay mode of one limiter and its clones: at most `max` requests hold a slot at once.
#[derive(Debug)]
pub(crate) struct Delays {
    pub(crate) max: usize,
    /// Slots taken: requests being decided in the delay mode or held.
    slots: AtomicUsize,
    /// Requests held now (waiting for their scheduled time).
    holding: AtomicUsize,
    pub(crate) timer: DelayTimer,
}

impl Delays {
    pub(crate) fn new(max: usize, timer: DelayTimer) -> Self {
        Self {
            max,
            slots: AtomicUsize::new(0),
            holding: AtomicUsize::new(0),
            timer,
        }
    }

    pub(crate) fn holding(&self) -> usize {
        self.holding.load(Ordering::Relaxed)
    }

    /// A slot, unless `max` are taken.
    fn take(self: &Arc<Self>) -> Option<Slot> {
        self.slots
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                delays: Arc::clone(self),
                holding: false,
            })
    }
}

/// One taken slot of [`Delays`], given back on drop.
#[derive(Debug)]
struct Slot {
    delays: Arc<Delays>,
    /// Counted in `holding` and the `floodgate_requests_waiting` gauge.
    holding: bool,
}

impl Slot {
    fn hold(&mut self) {
        self.holding = true;
        self.delays.holding.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("floodgate_requests_waiting").increment(1.0);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.holding {
            self.delays.holding.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("floodgate_requests_waiting").decrement(1.0);
        }
        self.delays.slots.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Adds 1 to `floodgate_requests_delayed_total{outcome}`.
fn count_delayed(outcome: &'static str) {
    metrics::counter!("floodgate_requests_delayed_total", "outcome" => outcome).increment(1);
}

/// A held request's reservation: given back (settled with actual cost 0) when the request is
/// dropped before its slot (the client went away).
struct Held<S: Store> {
    limiter: RateLimiter<S>,
    /// `None` once the slot came (the units are used).
    reservation: Option<Reservation>,
    /// Given back (the gauge and the bound) when this is dropped.
    _slot: Slot,
}

impl<S: Store> Held<S> {
    /// The slot came: the reservation is used.
    fn pass(mut self) {
        self.reservation = None;
        count_delayed("passed");
    }
}

impl<S: Store> Drop for Held<S> {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        count_delayed("cancelled");
        // Settled on the runtime the request ran on, through the one settle path (counted
        // there in floodgate_settles_total). Without a runtime (the process is going away)
        // the reservation simply stands, spent.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = self.limiter.clone();
            runtime.spawn(async move {
                // A failure is counted and logged by settle; the units then stay spent.
                let _ = limiter
                    .settle(&reservation, &reservation.nothing_used())
                    .await;
            });
        }
    }
}

impl<S: Store> RateLimiter<S> {
    /// Decides `plan` for a request that is passed on when admitted, the way every front end
    /// that forwards requests does (the [`RateLimit`](crate::RateLimit) service, and in the
    /// `floodgate` service forward-auth and the reverse proxy).
    ///
    /// Without a delay ([`Plan::delay`] 0) it is [`RateLimiter::evaluate`] with
    /// [`Mode::Check`]. In the delay mode the enforcing items are reserved
    /// ([`Mode::Reserve`] with the plan's delay as `max_wait`) and the returned future
    /// completes at the reservation's scheduled time (tokio's timer, or the clock given to
    /// [`RateLimiter::with_delay_clock`]) with an admitting verdict; a request that would not
    /// fit within the delay is refused at once, consuming nothing, as a check refuses it.
    /// Dropping the future while it waits (the client went away) gives the reservation back
    /// (settled with actual cost 0, on a task of the current tokio runtime).
    ///
    /// At most [`RateLimiter::with_max_delayed`] requests are in the delay mode at once; one
    /// more is decided as a plain check (admitted when it fits now, else refused with the
    /// check's 429).
    ///
    /// Counted: `floodgate_requests_delayed_total{outcome}` (`passed`: held, then admitted at
    /// its slot; `cancelled`: dropped while held, its slot given back; `queue_full`: refused
    /// because the bound was reached, where its check's `retry_after` was within the delay)
    /// and the `floodgate_requests_waiting` gauge (requests held now), beside the decisions
    /// [`RateLimiter::evaluate`] counts.
    pub async fn admit(&self, plan: Plan) -> Verdict {
        let delay = plan.delay();
        if delay == 0 {
            return self.evaluate(&plan, Mode::Check).await;
        }
        let Some(mut slot) = self.delays().take() else {
            let verdict = self.evaluate(&plan, Mode::Check).await;
            if verdict.action == Action::Deny && verdict.store_full.is_none() {
                let retry = crate::response::most_restrictive(&verdict.outcomes)
                    .and_then(|o| o.decision.retry_after);
                if retry.is_some_and(|r| r <= delay) {
                    count_delayed("queue_full");
                }
            }
            return verdict;
        };
        let verdict = self
            .evaluate(&plan, Mode::Reserve { max_wait: delay })
            .await;
        let wait = match verdict.wait {
            Some(wait) if wait > 0 => wait,
            // Admitted at once, refused, or failed: nothing to hold.
            _ => return verdict,
        };
        slot.hold();
        let scheduled = verdict.outcomes.iter().filter_map(|o| o.scheduled_at).max();
        let held = Held {
            limiter: self.clone(),
            reservation: Reservation::from_verdict(&plan, &verdict),
            _slot: slot,
        };
        drop(plan);
        match &self.delays().timer {
            DelayTimer::Tokio => tokio::time::sleep(Duration::from_micros(wait)).await,
            DelayTimer::Clock(clock) => {
                let until = scheduled.unwrap_or_else(|| clock.now().saturating_add(wait));
                while clock.now() < until {
                    tokio::time::sleep(CLOCK_POLL).await;
                }
            }
        }
        held.pass();
        verdict
    }
}
