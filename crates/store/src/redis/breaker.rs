//! A circuit breaker, so that a dead or saturated Redis costs callers nothing but a branch.
//!
//! # Rule
//! Closed: every call goes to Redis. It opens when **both** hold:
//! - at least `failure_threshold` calls have failed (errors or timeouts) since the last
//!   success, and
//! - Redis has been failing for `window` (default 250 ms): no call has succeeded since the
//!   *start* of the current failure streak, which is the start of its first failed call (or
//!   the last success, if later). Idle time is not failure: after 12 s without traffic, a
//!   100 ms stall is 100 ms of failing, not 12.1 s of "no success" (issue: a short stall
//!   after an idle period opened the breaker and sent 4,000 requests to the failure mode
//!   after Redis was healthy again).
//!
//! Open: calls fail at once with [`StoreError::Unavailable`] for `cool_down`. Then it lets
//! exactly one call through as a probe (half-open): success closes it, failure opens it for
//! another `cool_down`. Besides, while it is open the store keeps one *recovery watch* going
//! (`RedisStore`'s `watch_recovery`): a `PING` (on a cluster, `EXISTS` on a key of the call that
//! failed, since any live node answers `PING`) that waits for the background reconnection, and
//! whose success closes the breaker at once ([`Breaker::recovered`]), so decisions return to
//! Redis as soon as it answers again instead of at the next cool-down's probe (which, sent
//! before the reconnection finished, timed out and cost another whole cool-down). Time comes
//! from the store's [`Clock`], so tests drive it with a `ManualClock`.
//!
//! On a cluster each master has a breaker of its own (`shard_breakers.rs`): a decision call
//! goes through the breakers of its slots' masters, so one dead master fails its own slots'
//! calls fast and never the others'.
//!
//! # Why not "N consecutive failures" alone
//! With many calls in flight on one multiplexed connection, one slow moment (a scheduling
//! stall on a loaded host, a Redis fork) times out every in-flight call at once: 64 callers
//! produce 64 "consecutive" failures from a single hiccup, and a count-only breaker then fails
//! everything for a whole cool-down although Redis is healthy. Counting failures alone cannot
//! tell "many callers saw one stall" from "Redis is dead"; time can. A dead Redis produces no
//! success at all, so the breaker still opens `window` after the first call that failed
//! (about `window` plus one call timeout after Redis died, under traffic). A stall shorter than
//! `window` opens nothing, however long the service was idle before it. Others also ask for a
//! minimum of evidence over time: resilience4j's sliding-window breaker judges a failure rate
//! only after `minimumNumberOfCalls` in its (count or time) window; Envoy's outlier detection
//! judges success rates per `interval` above a minimum request volume (its `consecutive_5xx`
//! ejects at once, like the old rule here). A failure *ratio* would still read a stall's burst
//! (64 failures, few successes) as an outage; "no success for `window`" cannot be met by a
//! healthy Redis, whatever the concurrency. `window = 0` restores the plain
//! consecutive-failures rule.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use floodgate_core::{Clock, Micros, Timestamp};

use crate::StoreError;

/// The breaker's state, shared by every call of one store. Lock-free.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Micros,
    /// Minimum time without any success before failures may open the breaker (µs).
    window: Micros,
    /// Failures since the last success.
    consecutive_failures: AtomicU32,
    /// Time of the last success (0: none yet, so a Redis dead from the start opens at once).
    last_success: AtomicU64,
    /// Start time of the earliest failed call since the last success (0: no failure since).
    streak_start: AtomicU64,
    /// Open or half-open: calls fail fast except the one probe.
    open: AtomicBool,
    /// While open: the time from which a probe may go.
    open_until: AtomicU64,
    /// A probe is in flight (half-open): other calls keep failing fast.
    probing: AtomicBool,
    /// A recovery watch is running (see the module docs).
    watching: AtomicBool,
    /// What the last failed call's error said (at most [`MAX_CAUSE_BYTES`]), until a
    /// success: the open breaker's log line and readiness name it (`CLUSTERDOWN`, a refused
    /// connection, a timeout), where its fail-fast errors do not.
    cause: parking_lot::Mutex<Option<String>>,
    /// A cluster master's breaker: its address (`ip:port`, or `none` for slots without a
    /// master), named in its errors and log lines; `None` for the store's own breaker.
    node: Option<String>,
    /// Cluster: a key of the last failed call, which the recovery watch probes (see
    /// `RedisStore`'s `recovery_probe`); `None`: `PING`.
    pub(crate) probe_key: parking_lot::Mutex<Option<String>>,
}

/// The longest cause kept (bytes): an error's text is the server's or the client library's.
pub(crate) const MAX_CAUSE_BYTES: usize = 200;

/// Permission to call Redis; report the outcome with [`Breaker::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Permit {
    /// `true` for the one probe of a half-open breaker, `false` while it is closed.
    pub(crate) probe: bool,
    /// When the call was permitted (store clock, µs): a failure means Redis was failing from
    /// this time on.
    pub(crate) started: Timestamp,
}

impl Breaker {
    /// `threshold` failures (at least 1) with no success for `window` µs open it for
    /// `cool_down` µs.
    pub(crate) fn new(threshold: u32, cool_down: Micros, window: Micros) -> Self {
        Self::for_node(threshold, cool_down, window, None)
    }

    /// [`Breaker::new`] for the calls to one cluster master (`node`), when `Some`.
    pub(crate) fn for_node(
        threshold: u32,
        cool_down: Micros,
        window: Micros,
        node: Option<String>,
    ) -> Self {
        Self {
            threshold: threshold.max(1),
            cool_down,
            window,
            consecutive_failures: AtomicU32::new(0),
            last_success: AtomicU64::new(0),
            streak_start: AtomicU64::new(0),
            open: AtomicBool::new(false),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            cause: parking_lot::Mutex::new(None),
            node,
            probe_key: parking_lot::Mutex::new(None),
        }
    }

    /// The cluster master this breaker guards, if it is one master's.
    pub(crate) fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// Remembers `key` as the recovery watch's probe (allocates only when it changes).
    pub(crate) fn note_probe_key(&self, key: &str) {
        let mut probe = self.probe_key.lock();
        if probe.as_deref() != Some(key) {
            *probe = Some(key.to_string());
        }
    }

    /// Keeps what a failed call's error said, as the breaker's cause (see `cause`).
    pub(crate) fn note_cause(&self, error: &StoreError) {
        let mut text = error.to_string();
        if text.len() > MAX_CAUSE_BYTES {
            let mut end = MAX_CAUSE_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        *self.cause.lock() = Some(text);
    }

    /// What the last failed call since the last success said, if any.
    pub(crate) fn cause(&self) -> Option<String> {
        self.cause.lock().clone()
    }

    /// `Ok` when a call may go to Redis now, else the fail-fast error.
    pub(crate) fn permit(&self, clock: &dyn Clock) -> Result<Permit, StoreError> {
        let now: Timestamp = clock.now();
        if !self.open.load(Ordering::Acquire) {
            return Ok(Permit {
                probe: false,
                started: now,
            });
        }
        if now >= self.open_until.load(Ordering::Acquire)
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Permit {
                probe: true,
                started: now,
            });
        }
        Err(StoreError::Unavailable {
            reason: match &self.node {
                None => "redis circuit breaker open (repeated failures and no success \
                         recently); failing fast"
                    .into(),
                Some(node) => format!(
                    "redis circuit breaker open for cluster master {node} (repeated failures \
                     and no success recently); failing fast"
                ),
            },
        })
    }

    /// Records the outcome of a permitted call.
    pub(crate) fn record(&self, permit: Permit, ok: bool, clock: &dyn Clock) {
        let now: Timestamp = clock.now();
        if ok {
            self.probing.store(false, Ordering::Release);
            self.succeeded(now, "a call succeeded");
            return;
        }
        let failures = self
            .consecutive_failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        // The streak starts with the earliest start among its failed calls (at least 1, since
        // 0 means "no streak").
        let started = permit.started.max(1);
        let streak_start =
            match self
                .streak_start
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                    (s == 0 || started < s).then_some(started)
                }) {
                Ok(_) => started,
                Err(s) => s,
            };
        if permit.probe {
            // A failed probe: another full cool-down.
            self.open_until
                .store(now.saturating_add(self.cool_down), Ordering::Release);
            self.probing.store(false, Ordering::Release);
            return;
        }
        let last_success = self.last_success.load(Ordering::Acquire);
        // Never succeeded (Redis down from the start): the threshold alone opens it.
        let failing_since = if last_success == 0 {
            0
        } else {
            last_success.max(streak_start)
        };
        let quiet_for = now.saturating_sub(failing_since);
        if failures >= self.threshold
            && quiet_for >= self.window
            && !self.open.load(Ordering::Acquire)
        {
            // Set the cool-down before opening, so that no caller sees "open" with a stale
            // `open_until` and probes at once.
            self.open_until
                .store(now.saturating_add(self.cool_down), Ordering::Release);
            if self
                .open
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let cause = self.cause().unwrap_or_default();
                tracing::warn!(
                    failures,
                    failing_for_ms = quiet_for / 1000,
                    cool_down_ms = self.cool_down / 1000,
                    cause,
                    node = self.node.as_deref().unwrap_or("every"),
                    "redis store failing: circuit breaker open"
                );
                metrics::gauge!("floodgate_store_breaker_open").increment(1.0);
            }
        }
    }

    /// Redis answered the recovery watch's probe at `clock`'s now: close the breaker (a
    /// probe still in flight keeps its slot and reports its own outcome).
    pub(crate) fn recovered(&self, clock: &dyn Clock) {
        self.succeeded(clock.now(), "redis answered the recovery probe");
    }

    fn succeeded(&self, now: Timestamp, how: &'static str) {
        self.consecutive_failures.store(0, Ordering::Release);
        if self.streak_start.swap(0, Ordering::AcqRel) != 0 {
            *self.cause.lock() = None;
        }
        self.last_success.fetch_max(now, Ordering::AcqRel);
        if self.open.swap(false, Ordering::AcqRel) {
            tracing::info!(
                how,
                node = self.node.as_deref().unwrap_or("every"),
                "redis store recovered: circuit breaker closed"
            );
            metrics::gauge!("floodgate_store_breaker_open").decrement(1.0);
        }
    }

    /// `true` when the caller should start the recovery watch: the breaker is open and no
    /// watch runs. The caller must call [`Breaker::watch_ended`] when its watch ends.
    pub(crate) fn start_watch(&self) -> bool {
        self.is_open()
            && self
                .watching
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The recovery watch ended. `true` when it must go on after all: the breaker opened again
    /// meanwhile and no other watch started.
    pub(crate) fn watch_ended(&self) -> bool {
        self.watching.store(false, Ordering::Release);
        self.start_watch()
    }

    /// A permitted call ended without an outcome (its future was dropped: the caller gave up,
    /// e.g. the HTTP client disconnected). A probe that never reports would leave the breaker
    /// half-open with "a probe in flight" for ever, failing every call: let the next one probe.
    pub(crate) fn abandon(&self, permit: Permit) {
        if permit.probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    /// `true` while calls fail fast (open, or half-open with a probe in flight).
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for Breaker {
    fn drop(&mut self) {
        // A store dropped (a reload's new store) with this breaker open.
        if *self.open.get_mut() {
            metrics::gauge!("floodgate_store_breaker_open").decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::ManualClock;

    /// One call that starts and ends now (a connection refused at once).
    fn call(b: &Breaker, clock: &ManualClock, ok: bool) {
        let p = b.permit(clock).unwrap();
        b.record(p, ok, clock);
    }

    /// One call that starts now and fails `took` µs later (a timeout).
    fn slow_failure(b: &Breaker, clock: &ManualClock, took: u64) {
        let p = b.permit(clock).unwrap();
        clock.advance(took);
        b.record(p, false, clock);
    }

    #[test]
    fn opens_after_threshold_fails_fast_then_probes_once() {
        let clock = ManualClock::new(1_000_000);
        let b = Breaker::new(3, 500_000, 0);
        for _ in 0..2 {
            call(&b, &clock, false);
        }
        assert!(!b.is_open());
        call(&b, &clock, false);
        assert!(b.is_open());
        assert!(b.permit(&clock).is_err());
        clock.advance(499_999);
        assert!(b.permit(&clock).is_err());
        clock.advance(1);
        let probe = b.permit(&clock).unwrap();
        assert!(probe.probe);
        // only one probe at a time
        assert!(b.permit(&clock).is_err());
        // failed probe: another full cool-down
        b.record(probe, false, &clock);
        clock.advance(499_999);
        assert!(b.permit(&clock).is_err());
        clock.advance(1);
        let p = b.permit(&clock).unwrap();
        assert!(p.probe);
        b.record(p, true, &clock);
        assert!(!b.is_open());
        assert!(!b.permit(&clock).unwrap().probe);
    }

    #[test]
    fn a_success_resets_the_count() {
        let clock = ManualClock::new(1);
        let b = Breaker::new(2, 1, 0);
        call(&b, &clock, false);
        call(&b, &clock, true);
        call(&b, &clock, false);
        assert!(!b.is_open());
    }

    /// 64 calls in flight when Redis stalls for 60 ms: every one times out at about the same
    /// moment (64 "consecutive" failures), then Redis answers again. A count-only breaker
    /// would open for a whole cool-down; this one does not, because Redis succeeded 60 ms ago.
    #[test]
    fn a_burst_of_simultaneous_timeouts_then_successes_does_not_open() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        call(&b, &clock, true);
        let permits: Vec<Permit> = (0..64).map(|_| b.permit(&clock).unwrap()).collect();
        clock.advance(60_000);
        for p in permits {
            b.record(p, false, &clock);
        }
        assert!(!b.is_open());
        assert!(!b.permit(&clock).unwrap().probe);
        call(&b, &clock, true);
        // Another stall 200 ms later: still well within the window.
        clock.advance(200_000);
        let permits: Vec<Permit> = (0..64).map(|_| b.permit(&clock).unwrap()).collect();
        clock.advance(50_000);
        for p in permits {
            b.record(p, false, &clock);
        }
        assert!(!b.is_open());
    }

    /// A dead Redis: every call fails. The breaker stays closed while the first failed call
    /// started less than the window ago, and opens at the first failure once it did.
    #[test]
    fn a_dead_redis_opens_once_failing_for_the_window() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        call(&b, &clock, true);
        // The first failing call started right after the success, 20 ms per timeout.
        for _ in 0..10 {
            slow_failure(&b, &clock, 20_000);
        }
        // 200 ms of failures only.
        assert!(!b.is_open());
        clock.advance(49_999);
        call(&b, &clock, false);
        assert!(!b.is_open());
        clock.advance(1);
        call(&b, &clock, false);
        assert!(b.is_open());
        assert!(b.permit(&clock).is_err());
        clock.advance(1_000_000);
        let p = b.permit(&clock).unwrap();
        assert!(p.probe);
        b.record(p, true, &clock);
        assert!(!b.is_open());
    }

    /// The regression of issue 10 (item 2): after 12 s without traffic, a 100 ms stall (every
    /// call times out for 100 ms) must not open the breaker: measured from the last success,
    /// "no success for the window" held at the fifth failure. A stall longer than the window
    /// after the same idle time does open it, a window after its first failed call started.
    #[test]
    fn a_short_stall_after_idle_time_does_not_open() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        call(&b, &clock, true);
        clock.advance(12_000_000);
        // 100 ms of stall: ten calls failing 10 ms apart (all 5+ failures, none succeeding).
        for _ in 0..10 {
            slow_failure(&b, &clock, 10_000);
        }
        assert!(!b.is_open());
        call(&b, &clock, true);
        assert!(!b.is_open());

        // Idle again, then a stall longer than the window.
        clock.advance(12_000_000);
        for _ in 0..24 {
            slow_failure(&b, &clock, 10_000);
        }
        assert!(!b.is_open(), "240 ms of failing");
        slow_failure(&b, &clock, 10_000);
        assert!(b.is_open(), "250 ms of failing");
    }

    /// Fewer failures than the threshold never open it, however long Redis has been failing.
    #[test]
    fn the_threshold_still_applies_after_the_window() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        call(&b, &clock, true);
        for _ in 0..4 {
            slow_failure(&b, &clock, 10_000_000);
        }
        assert!(!b.is_open());
        call(&b, &clock, false);
        assert!(b.is_open());
    }

    /// A Redis that never answered (down at startup) has no last success: the threshold alone
    /// opens the breaker.
    #[test]
    fn no_success_yet_opens_at_the_threshold() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(5, 1_000_000, 250_000);
        for _ in 0..5 {
            call(&b, &clock, false);
        }
        assert!(b.is_open());
    }

    /// The recovery watch's PING closes an open breaker at once (no cool-down), and a probe
    /// in flight then fails without reopening it. One watch at a time.
    #[test]
    fn a_recovery_ping_closes_the_breaker_at_once() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(1, 1_000_000, 0);
        assert!(!b.start_watch(), "closed: nothing to watch");
        call(&b, &clock, false);
        assert!(b.is_open());
        assert!(b.start_watch());
        assert!(!b.start_watch(), "one watch at a time");
        clock.advance(1_000_000);
        let probe = b.permit(&clock).unwrap();
        assert!(probe.probe);
        b.recovered(&clock);
        assert!(!b.is_open());
        assert!(!b.watch_ended());
        b.record(probe, false, &clock);
        assert!(!b.is_open());
        assert!(!b.permit(&clock).unwrap().probe);
    }

    /// A probe whose caller went away (future dropped) must not block every later probe.
    #[test]
    fn an_abandoned_probe_lets_the_next_call_probe() {
        let clock = ManualClock::new(10_000_000);
        let b = Breaker::new(1, 1_000_000, 0);
        call(&b, &clock, false);
        clock.advance(1_000_000);
        let p = b.permit(&clock).unwrap();
        assert!(p.probe);
        assert!(b.permit(&clock).is_err());
        b.abandon(p);
        assert!(b.permit(&clock).unwrap().probe);
    }
}
