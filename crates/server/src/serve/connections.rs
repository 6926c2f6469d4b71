//! The connection budget every listener draws from: at most `max_connections` accepted
//! connections at once (API, proxy, admin and gRPC listeners together, since they share one
//! table of open files), and the list of idle HTTP connections to close, longest idle first,
//! when a new connection needs room.
//!
//! The budget itself is set below the open-file limit (`fd_limit.rs`): at the cap,
//! accepting waits for a connection to close instead of failing with "Too many open files".

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::http::body_budget::Charge;

/// The process's connection budget and its idle HTTP connections.
#[derive(Debug)]
pub(crate) struct Connections {
    permits: Arc<Semaphore>,
    max: usize,
    /// Idle HTTP connections by the order they became idle (the smallest is the longest idle),
    /// each under the number it had when listed. Kept up to date lazily: a request's start and
    /// end do not touch it (no lock per request); [`Connections::evict_one`] skips an entry
    /// whose connection is busy and moves one that went idle again since to its new place.
    idle: Mutex<BTreeMap<u64, Arc<Conn>>>,
    next_idle: AtomicU64,
    /// Set while the cap is reached (so the warning is logged once per episode).
    full: AtomicBool,
    /// Notified when a connection becomes idle (a waiting [`Connections::reserve`] evicts it).
    became_idle: Notify,
    /// [`Connections::reserve`] calls waiting at the cap (`became_idle` is notified only then).
    waiting: AtomicUsize,
    /// The bulk share ([`bulk_share`] of the budget): what the listeners whose connections may
    /// stay busy without end (the reverse proxy's uploads and downloads, gRPC streams) hold
    /// together, so that the rest stays for the API and admin listeners.
    bulk: Arc<Semaphore>,
    /// Every tracked HTTP connection (dead entries dropped as new ones come), for
    /// [`Connections::shed_heaviest`].
    all: Mutex<Vec<Weak<Conn>>>,
}

/// The most connections the bulk listeners (the proxy, gRPC) hold together of a budget of
/// `max`: all but a sixteenth (at least one), which only the API and admin listeners may use.
/// A busy connection is never evicted, so without it 50 proxy uploads trickling a byte every
/// 0.5 s under `max_connections = 50` kept `/healthz` and the API from answering at all.
pub(crate) fn bulk_share(max: usize) -> usize {
    max.saturating_sub((max / 16).max(1)).max(1)
}

/// Why a connection was closed by the server (the `reason` label of
/// `floodgate_connections_closed_total`).
pub(crate) const CLOSE_REASONS: [&str; 5] = [
    "header_timeout",
    "idle_timeout",
    "evicted",
    "answers_held",
    "stalled",
];

impl Connections {
    /// A budget of `max` connections.
    pub(crate) fn new(max: usize) -> Arc<Self> {
        metrics::gauge!("floodgate_connections_max").set(max as f64);
        metrics::gauge!("floodgate_connections").set(0.0);
        for reason in CLOSE_REASONS {
            metrics::counter!("floodgate_connections_closed_total", "reason" => reason)
                .increment(0);
        }
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            idle: Mutex::new(BTreeMap::new()),
            next_idle: AtomicU64::new(0),
            full: AtomicBool::new(false),
            became_idle: Notify::new(),
            waiting: AtomicUsize::new(0),
            bulk: Arc::new(Semaphore::new(bulk_share(max))),
            all: Mutex::new(Vec::new()),
        })
    }

    /// Waits for room for one more connection (the caller has just accepted it). At the cap, the
    /// longest-idle HTTP connection is asked to close; without one, this waits until some
    /// connection closes (it never spins).
    pub(crate) async fn reserve(self: &Arc<Self>) -> Slot {
        let permit = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max_connections = self.max,
                        "connection cap reached: closing idle connections, new ones wait"
                    );
                }
                let _waiting = Waiting::new(&self.waiting);
                self.evict_one();
                let acquire = Arc::clone(&self.permits).acquire_owned();
                tokio::pin!(acquire);
                loop {
                    tokio::select! {
                        permit = &mut acquire => {
                            break permit.expect("the connection budget is never closed");
                        }
                        // A connection went idle while we wait: it makes room.
                        () = self.became_idle.notified() => self.evict_one(),
                    }
                }
            }
        };
        if self.permits.available_permits() > self.max / 10 {
            self.full.store(false, Ordering::Relaxed);
        }
        Slot {
            _permit: permit,
            bulk: None,
            connections: Arc::clone(self),
            accepted: false,
        }
    }

    /// Waits for a place in the bulk share (see [`bulk_share`]) for a connection just accepted
    /// on a bulk HTTP listener (the proxy): while the share is full, the longest-idle
    /// connection holding a place in it is asked to close, or this waits for one to close.
    pub(crate) async fn reserve_bulk(self: &Arc<Self>) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(&self.bulk).try_acquire_owned() {
            return permit;
        }
        let _waiting = Waiting::new(&self.waiting);
        self.evict(true);
        let acquire = Arc::clone(&self.bulk).acquire_owned();
        tokio::pin!(acquire);
        loop {
            tokio::select! {
                permit = &mut acquire => {
                    return permit.expect("the bulk share is never closed");
                }
                () = self.became_idle.notified() => self.evict(true),
            }
        }
    }

    /// The bulk share itself, for the gRPC listener (whose connections are never evicted: it
    /// waits for a place).
    pub(crate) fn bulk(&self) -> Arc<Semaphore> {
        Arc::clone(&self.bulk)
    }

    /// Asks the longest-idle HTTP connection to close.
    fn evict_one(&self) {
        self.evict(false);
    }

    /// Makes room (with `bulk_only`, in the bulk share): closes at once the connection whose
    /// client has taken nothing of its answers the longest (one a client stopped reading
    /// holds its slot without end, and is never idle), else asks the longest-idle HTTP
    /// connection to close.
    fn evict(&self, bulk_only: bool) {
        if self.shed_stalled(bulk_only) {
            return;
        }
        let mut idle = self.idle.lock();
        let mut passed = Vec::new();
        while let Some((key, conn)) = idle.pop_first() {
            if bulk_only && !conn.bulk {
                passed.push((key, conn));
                continue;
            }
            conn.listed.store(NOT_LISTED, Ordering::SeqCst);
            if conn.in_flight.load(Ordering::SeqCst) == 0 {
                let since = conn.idle_since.load(Ordering::SeqCst);
                if since == key {
                    conn.evicted.store(true, Ordering::Relaxed);
                    conn.changed.notify_one();
                    break;
                }
                // Idle again since it was listed: back in its place now.
                conn.listed.store(since, Ordering::SeqCst);
                idle.insert(since, conn);
            }
            // Busy: listed again when it falls idle (`Conn::become_idle`, which sees
            // `NOT_LISTED` or else its request ended before the load above, which then saw
            // it idle).
        }
        // The connections of other listeners stay listed where they were.
        idle.extend(passed);
    }

    /// Closes at once the connection stalled longest ([`Conn::stalled_since_us`]); whether
    /// there was one.
    fn shed_stalled(&self, bulk_only: bool) -> bool {
        let mut oldest: Option<(u64, Arc<Conn>)> = None;
        for conn in self.all.lock().iter().filter_map(Weak::upgrade) {
            let since = conn.stalled_since_us.load(Ordering::Acquire);
            if since == NO_DEADLINE
                || (bulk_only && !conn.bulk)
                || conn.shed.load(Ordering::Acquire) != NOT_SHED
            {
                continue;
            }
            if oldest.as_ref().is_none_or(|(s, _)| since < *s) {
                oldest = Some((since, conn));
            }
        }
        let Some((_, conn)) = oldest else {
            return false;
        };
        conn.shed(SHED_STALLED);
        true
    }

    /// A new HTTP connection's shared state, listed as idle (no request yet), with its
    /// header timer (`header_read`, from now) and the idle timer of its later pauses.
    /// `bulk`: it holds a place in the bulk share (evicted first while that is full).
    pub(crate) fn track(
        self: &Arc<Self>,
        header_read: Duration,
        idle: Duration,
        bulk: bool,
    ) -> Arc<Conn> {
        let conn = Arc::new(Conn {
            bulk,
            in_flight: AtomicUsize::new(0),
            reading_head: AtomicBool::new(false),
            served: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            shed: AtomicU8::new(NOT_SHED),
            answers: AtomicUsize::new(0),
            answer_bytes: AtomicUsize::new(0),
            backlog: super::backlog::Backlog::default(),
            multiplexed: AtomicBool::new(false),
            last_write_us: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            source_waits: AtomicUsize::new(0),
            progress_seen: AtomicU64::new(0),
            stalled_since_us: AtomicU64::new(NO_DEADLINE),
            closing: AtomicBool::new(false),
            changed: Notify::new(),
            deadline_us: AtomicU64::new(NO_DEADLINE),
            head_read_us: AtomicU64::new(NO_DEADLINE),
            header_read,
            idle,
            idle_since: AtomicU64::new(0),
            listed: AtomicU64::new(NOT_LISTED),
            spare_charge: Mutex::new(None),
            connections: Arc::clone(self),
        });
        conn.set_deadline(header_read);
        conn.become_idle();
        let mut all = self.all.lock();
        if all.len() == all.capacity() {
            all.retain(|c| c.strong_count() > 0);
        }
        all.push(Arc::downgrade(&conn));
        drop(all);
        conn
    }

    /// Closes at once the connection that holds the most answers not yet delivered (then
    /// the most bytes of them), of those whose socket took nothing for [`STALLED_US`] first
    /// (a busy client's connection writes all the time; one that reads nothing does not):
    /// `held` answer bytes are past the answers budget `budget` (`answers.rs`). Not while
    /// the connections already closing for it hold the excess (they give it back as they go;
    /// closing more meanwhile closed a client's connection that held one answer).
    pub(crate) fn shed_heaviest(&self, held: usize, budget: usize) {
        let mut closing = 0usize;
        let mut heaviest: Option<Arc<Conn>> = None;
        let now = monotonic_us();
        let key = |c: &Conn| {
            (
                // An HTTP/1 connection holds one answer at most: never first.
                c.multiplexed.load(Ordering::Relaxed)
                    && now.saturating_sub(c.last_write_us.load(Ordering::Relaxed)) >= STALLED_US,
                c.answers.load(Ordering::Acquire),
                c.answer_bytes.load(Ordering::Acquire),
            )
        };
        for conn in self.all.lock().iter().filter_map(Weak::upgrade) {
            if conn.shed.load(Ordering::Acquire) != NOT_SHED {
                closing = closing.saturating_add(conn.answer_bytes.load(Ordering::Acquire));
            } else if heaviest.as_ref().is_none_or(|h| key(&conn) > key(h)) {
                heaviest = Some(conn);
            }
        }
        if held.saturating_sub(closing) <= budget {
            return;
        }
        if let Some(conn) = heaviest {
            if conn.answers.load(Ordering::Acquire) > 0 {
                conn.shed(SHED_ANSWERS_HELD);
            }
        }
    }
}

/// Counts a [`Connections::reserve`] waiting at the cap, for as long as it waits (also when
/// its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One connection's share of the budget (reserved before accepting it), given back when
/// dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    /// Its place in the bulk share, for a bulk listener's connection ([`bulk_share`]).
    bulk: Option<OwnedSemaphorePermit>,
    connections: Arc<Connections>,
    /// A connection holds it (counted in `floodgate_connections`).
    accepted: bool,
}

impl Slot {
    /// A connection was accepted into this slot.
    pub(crate) fn accepted(&mut self) {
        if !self.accepted {
            self.accepted = true;
            metrics::gauge!("floodgate_connections").increment(1.0);
        }
    }

    /// Holds `bulk`, a place in the bulk share ([`Connections::reserve_bulk`]), with the slot.
    pub(crate) fn hold_bulk(&mut self, bulk: Option<OwnedSemaphorePermit>) {
        self.bulk = bulk;
    }

    /// Whether it holds a place in the bulk share.
    pub(crate) fn holds_bulk(&self) -> bool {
        self.bulk.is_some()
    }

    /// The budget this slot belongs to.
    pub(crate) fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.accepted {
            metrics::gauge!("floodgate_connections").decrement(1.0);
        }
    }
}

/// What one HTTP connection's task, its service and its I/O share.
#[derive(Debug)]
pub(crate) struct Conn {
    /// It holds a place in the bulk share ([`bulk_share`]).
    bulk: bool,
    /// Requests in flight: from the complete header to the end of the response body.
    in_flight: AtomicUsize,
    /// A byte arrived while no request was in flight: a header is being read.
    reading_head: AtomicBool,
    /// At least one request was served (the idle timeout applies, not the header timeout).
    served: AtomicBool,
    /// Asked to close to make room.
    evicted: AtomicBool,
    /// Asked to close at once, and why ([`NOT_SHED`], [`SHED_ANSWERS_HELD`]: it held the most
    /// answers when the answers budget was passed, `answers.rs`; [`SHED_STALLED`]: stalled
    /// at the cap); also `evicted`.
    shed: AtomicU8,
    /// Answers produced and not yet delivered, and their bytes (`answers.rs`).
    answers: AtomicUsize,
    answer_bytes: AtomicUsize,
    backlog: super::backlog::Backlog,
    /// An HTTP/2 connection (set at its first request): its socket's writes are counted for
    /// `backlog`; an HTTP/1 connection's are not (it holds no answer past its body).
    multiplexed: AtomicBool,
    /// When its socket last took bytes ([`monotonic_us`]; HTTP/2 only, 0: never).
    last_write_us: AtomicU64,
    /// Counts each poll of an answer's body, each answer delivered and each HTTP/2 write of
    /// body bytes: what the timer watches for a stall ([`Conn::stalled`]). Not every write
    /// of the socket: an HTTP/2 client that never opens a window has its PINGs answered.
    progress: AtomicU64,
    /// Answers in flight whose body's last poll found nothing ready: each waits for its
    /// source (a proxied long poll, a slow upstream), not for the client.
    source_waits: AtomicUsize,
    /// `progress` when the timer last looked (written by the connection's task only).
    progress_seen: AtomicU64,
    /// When the timer first saw the client take nothing of an answer held (no progress
    /// between two looks, more answers held than wait for their source), [`NO_DEADLINE`]
    /// while it is not stalled. At the cap the longest stalled is closed first.
    stalled_since_us: AtomicU64,
    /// Its task is closing it (shutdown or eviction): a request's end wakes the task.
    closing: AtomicBool,
    /// Wakes the connection's task to look at the state again (eviction, and while closing
    /// the end of a request). Phase changes of a running connection wake nobody: its task's
    /// one timer reads [`Conn::expiry`] when it fires.
    changed: Notify,
    /// When the header or idle timer of the phase now runs out, in microseconds of
    /// [`monotonic_us`]; [`NO_DEADLINE`] while a request is in flight.
    deadline_us: AtomicU64,
    /// When the read that began the header now being read took place, while no other read
    /// brought bytes since (its head is then all in that read); else [`NO_DEADLINE`].
    head_read_us: AtomicU64,
    header_read: Duration,
    idle: Duration,
    /// The number it got when it last fell idle (the order of [`Connections::idle`]).
    idle_since: AtomicU64,
    /// Its key in [`Connections::idle`] while listed there, else [`NOT_LISTED`] (changed
    /// only with that list locked).
    listed: AtomicU64,
    /// A body-budget charge given back by its last request, for the next one.
    spare_charge: Mutex<Option<Arc<Charge>>>,
    connections: Arc<Connections>,
}

impl Drop for Conn {
    /// The connection is gone, and with it every answer its socket had not taken.
    fn drop(&mut self) {
        super::backlog::release_gone(self.backlog.drain());
    }
}

/// Microseconds of the monotonic clock (`CLOCK_MONOTONIC`), what the connections' deadlines
/// are kept in: one read and integer arithmetic, twice per request (a header begins, an answer
/// ends). `tokio::time::Instant::elapsed` and `Duration::as_micros` took about 100
/// instructions per read (a `Duration` subtraction, its normalisation, 128-bit arithmetic).
pub(crate) fn monotonic_us() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let micros = u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000;
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

/// `after` from `now` (microseconds of [`monotonic_us`]), below [`NO_DEADLINE`].
pub(crate) fn deadline_after(now: u64, after: Duration) -> u64 {
    let after = u64::try_from(after.as_micros()).unwrap_or(NO_DEADLINE);
    now.saturating_add(after).min(NO_DEADLINE - 1)
}

/// An instant of tokio's timers for `at` (microseconds of [`monotonic_us`]): the same
/// distance ahead of their clock as `at` is of [`monotonic_us`] (never before now).
pub(crate) fn timer_instant(at: u64) -> tokio::time::Instant {
    let now = monotonic_us();
    tokio::time::Instant::now() + Duration::from_micros(at.saturating_sub(now))
}

/// [`Expiry::Later`] at `at` (microseconds of [`monotonic_us`]), read at `now`: as an instant
/// of tokio's timers, the same distance ahead of their clock (never before now).
fn later(now: u64, at: u64) -> Expiry {
    Expiry::Later(tokio::time::Instant::now() + Duration::from_micros(at.saturating_sub(now)))
}

/// A connection whose socket took nothing for this long (µs) is shed before any that did
/// ([`Connections::shed_heaviest`]).
pub(crate) const STALLED_US: u64 = 1_000_000;

/// The least write of an HTTP/2 connection's socket that counts as taking an answer's body
/// ([`Conn::wrote_now`]).
const DATA_WRITE: usize = 1024;

/// [`Conn::deadline_us`] while no timer runs.
const NO_DEADLINE: u64 = u64::MAX;

/// [`Conn::listed`] while the connection is not in [`Connections::idle`].
const NOT_LISTED: u64 = u64::MAX;

/// [`Conn::shed`]: not asked to close at once.
const NOT_SHED: u8 = 0;
/// [`Conn::shed`]: it held the most answers past the answers budget.
const SHED_ANSWERS_HELD: u8 = 1;
/// [`Conn::shed`]: its client stopped taking its answers, and a new connection needed room.
const SHED_STALLED: u8 = 2;

/// What a connection's timer found when it fired ([`Conn::expiry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// The header timer ran out.
    Header,
    /// The idle timer ran out.
    Idle,
    /// A request is in flight and its client took nothing of what it holds (its answers'
    /// bodies not polled, none delivered) for the idle timeout.
    Stalled,
    /// Not yet: fire again at this instant.
    Later(tokio::time::Instant),
}

/// What a connection's task should wait for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A request is in flight: no timer.
    Busy,
    /// Waiting for (the rest of) a header: the header timeout.
    Header,
    /// Between requests, nothing received: the idle timeout.
    Idle,
    /// Asked to close to make room.
    Evicted,
}

impl Conn {
    /// The phase now.
    pub(crate) fn phase(&self) -> Phase {
        if self.evicted.load(Ordering::Relaxed) {
            Phase::Evicted
        } else if self.in_flight.load(Ordering::Acquire) > 0 {
            Phase::Busy
        } else if self.reading_head.load(Ordering::Acquire) || !self.served.load(Ordering::Acquire)
        {
            Phase::Header
        } else {
            Phase::Idle
        }
    }

    /// Resolves when the task should look at the state again (eviction; while closing, a
    /// request's end or a header's start).
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The connection's task is closing it: wake it when no request is in flight any more.
    pub(crate) fn closing(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// Microseconds of [`monotonic_us`].
    fn now_us(&self) -> u64 {
        monotonic_us()
    }

    /// The timer of the phase now runs out `after` from now.
    fn set_deadline(&self, after: Duration) {
        self.set_deadline_from(self.now_us(), after);
    }

    /// The timer of the phase now runs out `after` from `now`.
    fn set_deadline_from(&self, now: u64, after: Duration) {
        self.deadline_us
            .store(deadline_after(now, after), Ordering::Release);
    }

    /// Wakes the task while it is closing (it waits for the connection to fall idle).
    fn wake_if_closing(&self) {
        if self.closing.load(Ordering::Acquire) {
            self.changed.notify_one();
        }
    }

    /// The longest the task's timer may wait before it looks again: no phase change can
    /// set a deadline earlier than that from now, so a timer armed at most this far ahead
    /// never fires late, and no phase change needs to wake the task.
    pub(crate) fn check_interval(&self) -> Duration {
        self.header_read.min(self.idle)
    }

    /// What the task's timer finds when it fires: a timer of the phase now ran out, or when
    /// to look again (at the phase's deadline, at most [`Conn::check_interval`] ahead).
    pub(crate) fn expiry(&self) -> Expiry {
        let now = self.now_us();
        let phase = self.phase();
        let check = u64::try_from(self.check_interval().as_micros()).unwrap_or(NO_DEADLINE);
        let next = now.saturating_add(check);
        let (after, ran_out) = match phase {
            Phase::Header => (self.header_read, Expiry::Header),
            Phase::Idle => (self.idle, Expiry::Idle),
            // No deadline in flight (a request's is read at the next phase change); only the
            // stall's, looked at each time.
            Phase::Busy | Phase::Evicted => {
                return if self.stalled(now) {
                    Expiry::Stalled
                } else {
                    later(now, next)
                };
            }
        };
        self.stalled_since_us.store(NO_DEADLINE, Ordering::Release);
        let mut deadline = self.deadline_us.load(Ordering::Acquire);
        if deadline == NO_DEADLINE {
            // A request ended as another began (HTTP/2): the timer starts now.
            self.set_deadline(after);
            deadline = self.deadline_us.load(Ordering::Acquire);
        }
        if deadline <= now {
            return ran_out;
        }
        later(now, next.min(deadline))
    }

    /// Whether its client has taken nothing of the answers it holds for the idle timeout, as
    /// the timer sees it at `now` (it looks at most [`Conn::check_interval`] apart, so a
    /// stall is closed between one and about two of them past the idle timeout, never
    /// sooner). Held: more answers produced and not delivered than bodies waiting for
    /// their source; taken nothing: no body polled and no answer delivered since the last
    /// look. A proxied long poll with nothing to send waits for its source; a client that
    /// reads slowly has its body polled each time its socket or window frees room, or (one
    /// large frame over HTTP/2) its socket takes the frame's bytes.
    fn stalled(&self, now: u64) -> bool {
        let progress = self.progress.load(Ordering::Acquire);
        let moved = self.progress_seen.swap(progress, Ordering::Relaxed) != progress;
        let held = self.answers.load(Ordering::Acquire) > self.source_waits.load(Ordering::Acquire);
        if moved || !held {
            self.stalled_since_us.store(NO_DEADLINE, Ordering::Release);
            return false;
        }
        let since = self.stalled_since_us.load(Ordering::Acquire);
        if since == NO_DEADLINE {
            self.stalled_since_us.store(now, Ordering::Release);
            // A connection waiting at the cap may close it now.
            if self.connections.waiting.load(Ordering::Acquire) > 0 {
                self.connections.became_idle.notify_waiters();
            }
            return self.idle.is_zero();
        }
        now.saturating_sub(since) >= u64::try_from(self.idle.as_micros()).unwrap_or(u64::MAX)
    }

    /// An answer's body was polled, or an answer delivered (see [`Conn::stalled`]).
    #[inline]
    pub(crate) fn progressed(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// An answer's body found nothing ready (`true`) or yielded or ended (`false`) after the
    /// other: it waits for its source, not for the client, or no longer.
    pub(crate) fn waits_for_source(&self, waits: bool) {
        if waits {
            self.source_waits.fetch_add(1, Ordering::AcqRel);
        } else {
            self.source_waits.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Asks it to close at once, for `why` ([`Conn::shed`]).
    fn shed(&self, why: u8) {
        self.shed.store(why, Ordering::Release);
        self.evicted.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// Bytes arrived from the client: with no request in flight, a header began (its timer
    /// starts).
    pub(crate) fn received(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && !self.reading_head.swap(true, Ordering::AcqRel)
        {
            let now = self.now_us();
            self.set_deadline_from(now, self.header_read);
            self.head_read_us.store(now, Ordering::Release);
            self.wake_if_closing();
        } else {
            // The head (if one is being read) did not come whole in the read that began it.
            self.head_read_us.store(NO_DEADLINE, Ordering::Release);
        }
    }

    /// A request's header is complete: it is in flight until [`Conn::finish`] (no timer).
    /// Returns when its head arrived ([`monotonic_us`]) if that is known without reading the
    /// clock: the head came whole in the read that began it (no other read since), which
    /// took place at most the time this poll of the connection took before.
    pub(crate) fn start(&self) -> Option<u64> {
        let head = self.head_read_us.swap(NO_DEADLINE, Ordering::AcqRel);
        self.reading_head.store(false, Ordering::Release);
        self.served.store(true, Ordering::Release);
        if self.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            self.deadline_us.store(NO_DEADLINE, Ordering::Release);
        }
        (head != NO_DEADLINE).then_some(head)
    }

    /// An answer of `n` bytes (with its stream's cost) is held until delivered.
    pub(crate) fn hold(&self, n: usize) {
        self.answers.fetch_add(1, Ordering::Relaxed);
        self.answer_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// `count` answers [`held`](Self::hold), `n` bytes together, were delivered or dropped.
    pub(crate) fn unhold_many(&self, count: usize, n: usize) {
        self.progressed();
        self.answers.fetch_sub(count, Ordering::Relaxed);
        self.answer_bytes.fetch_sub(n, Ordering::Relaxed);
    }

    /// Its answers that ended and are not yet written out.
    pub(crate) fn backlog(&self) -> &super::backlog::Backlog {
        &self.backlog
    }

    /// It serves HTTP/2: count its socket's writes from now on (before its first answer).
    pub(crate) fn set_multiplexed(&self) {
        self.multiplexed.store(true, Ordering::Relaxed);
    }

    /// Its socket took `n` bytes now (HTTP/2: what [`Connections::shed_heaviest`] reads). A
    /// write of [`DATA_WRITE`] or more carries an answer's body (a stream's one frame of a
    /// large body is sent as the client's window opens, with no poll of the body meanwhile):
    /// progress for [`Conn::stalled`]. Control frames (a PING's answer, a SETTINGS
    /// acknowledgement) are smaller, and HTTP/2 keeps at most one PING answer pending.
    pub(crate) fn wrote_now(&self, n: usize) {
        self.last_write_us.store(monotonic_us(), Ordering::Relaxed);
        if n >= DATA_WRITE {
            self.progressed();
        }
    }

    /// See [`Conn::set_multiplexed`].
    pub(crate) fn is_multiplexed(&self) -> bool {
        self.multiplexed.load(Ordering::Relaxed)
    }

    /// Why it was asked to close at once (the close reason), if it was: it held the most
    /// answers past the budget ([`Connections::shed_heaviest`]) or it was stalled when a
    /// new connection needed room.
    pub(crate) fn shed_reason(&self) -> Option<&'static str> {
        match self.shed.load(Ordering::Acquire) {
            SHED_ANSWERS_HELD => Some("answers_held"),
            SHED_STALLED => Some("stalled"),
            _ => None,
        }
    }

    /// Its budget (for [`answers::charge`](super::answers::charge)).
    pub(crate) fn connections(&self) -> &Connections {
        &self.connections
    }

    /// A request's response ended (its body was sent or dropped): the idle timer starts
    /// when it was the last in flight.
    pub(crate) fn finish(self: &Arc<Self>) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.set_deadline(self.idle);
            self.become_idle();
            self.wake_if_closing();
        }
    }

    fn become_idle(self: &Arc<Self>) {
        if self.evicted.load(Ordering::Relaxed) {
            return;
        }
        let since = self.connections.next_idle.fetch_add(1, Ordering::Relaxed);
        self.idle_since.store(since, Ordering::SeqCst);
        // Already listed (under an older number): `evict_one` moves it when it gets there.
        if self.listed.load(Ordering::SeqCst) == NOT_LISTED {
            let mut idle = self.connections.idle.lock();
            if self.listed.load(Ordering::SeqCst) == NOT_LISTED
                && !self.evicted.load(Ordering::SeqCst)
            {
                let since = self.idle_since.load(Ordering::SeqCst);
                self.listed.store(since, Ordering::SeqCst);
                idle.insert(since, Arc::clone(self));
            }
        }
        // Only a `reserve` at the cap waits for it (it counts itself in `waiting` first).
        if self.connections.waiting.load(Ordering::Acquire) > 0 {
            self.connections.became_idle.notify_waiters();
        }
    }

    /// A charge of the API's body budget for a request's body, holding nothing: the one its
    /// last request gave back ([`Conn::keep_charge`]), or a new one.
    pub(crate) fn charge(&self) -> Arc<Charge> {
        self.spare_charge.lock().take().unwrap_or_default()
    }

    /// Keeps `charge` (given back, held by nobody else) for the next request.
    pub(crate) fn keep_charge(&self, charge: Arc<Charge>) {
        *self.spare_charge.lock() = Some(charge);
    }

    /// The connection ended: it is no longer listed.
    pub(crate) fn close(&self) {
        let mut idle = self.connections.idle.lock();
        // Never listed again: a request still open when the connection is dropped after this
        // ends (and would fall idle) then. An HTTP/2 connection its client closed with a
        // stream open came back as idle, for ever: eviction at the cap picked it, closed
        // nothing and left new clients waiting (59 s), and it kept its answers' charges.
        self.evicted.store(true, Ordering::SeqCst);
        let key = self.listed.swap(NOT_LISTED, Ordering::SeqCst);
        if key != NOT_LISTED {
            idle.remove(&key);
        }
    }
}

#[cfg(test)]
#[path = "connections_tests.rs"]
mod tests;
