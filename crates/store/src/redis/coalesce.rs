//! Coalescing: the batches that are already waiting for Redis go out together, as ONE call of
//! the coalescing script (`lua/multi.lua`), which decides each of them all-or-nothing on its
//! own, in arrival order.
//!
//! Why: Redis runs scripts on one core, and a script call has a fixed cost (finding the script,
//! running its chunk, converting arguments) of about 10 us here, more than deciding one item.
//! Sending the waiting batches in one call pays it once for all of them.
//!
//! How, without adding latency: at most [`RedisStoreConfig::coalesce`](super::RedisStoreConfig)
//! calls are in flight at once. A batch that finds a free slot is sent at once (a lone request
//! waits for nothing: no timer, no yield; and when no call is out, its caller sends it from its
//! own task, without a hand-off to a sending task and back). A batch that finds every slot taken waits
//! in a queue; when a call's reply arrives, the task that sent it takes *everything* waiting (up
//! to [`MAX_BATCHES`]) as its next call. So the busier Redis is, the more decisions each call
//! carries. Standalone Redis only: a cluster call must stay within one slot.
//!
//! Per-request outcomes: each batch gets its own slice of the reply. A batch that raises an
//! error inside the script (`pcall` in `multi.lua`: nothing of it is written) is marked, and its
//! caller runs it alone to get its own error; its neighbours are decided normally. A failed call
//! (connection lost, timeout) fails the batches it carried, as it would have failed them one by
//! one on the shared connection. Every caller still waits under its own timeout and circuit
//! breaker (the store's `guarded`); a caller that gave up is dropped from the queue unsent.

use std::collections::VecDeque;
use std::sync::Arc;

use floodgate_core::{AlgorithmKind, Timestamp};
use parking_lot::Mutex;
use redis::RedisError;
use tokio::sync::oneshot;

use super::connection::{Conn, ScriptCall};
use super::scripts;

/// Most batches one coalesced call carries.
pub(crate) const MAX_BATCHES: usize = 256;

/// A batch's reply slice, laid out like `batch.lua`'s reply (`[all, now, 9 integers per
/// item]`): status (1 admitted, 0 denied, -1 raised an error in the script), 0, then per item
/// the reported decision twice and mark 0.
pub(crate) type Reply = Result<Vec<i64>, RedisError>;

/// One batch waiting to be sent.
pub(crate) struct Pending {
    /// The batch's distinct keys.
    pub(crate) keys: Vec<String>,
    /// 8 values per item (`batch.lua`'s layout), key indices 1-based into `keys`.
    pub(crate) item_args: Vec<u64>,
    /// `true` for a check, `false` for a peek.
    pub(crate) commit: bool,
    /// The caller's time, or `None` for the server clock.
    pub(crate) now: Option<Timestamp>,
    /// The one algorithm of every item, if they share one.
    pub(crate) kind: Option<AlgorithmKind>,
    /// Where the reply slice goes.
    pub(crate) tx: oneshot::Sender<Reply>,
}

struct Queue {
    /// Batches in arrival order, each with its arrival number.
    waiting: VecDeque<(u64, Pending)>,
    in_flight: usize,
    /// The next arrival number.
    arrivals: u64,
}

/// The queue and its sending tasks (one per call in flight).
pub(crate) struct Coalescer {
    conn: Conn,
    ttl_extra_ms: u64,
    max_in_flight: usize,
    queue: Mutex<Queue>,
}

/// A sending task's in-flight slot. Released by `drain` when the queue is empty; released on
/// drop if the task is cancelled mid-call (its runtime shutting down), so that the store never
/// wedges with every slot taken by a task that no longer runs (the next batch starts a sender,
/// which also takes whatever was left waiting).
struct Slot<'a> {
    coalescer: &'a Coalescer,
    held: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.held {
            self.coalescer.queue.lock().in_flight -= 1;
        }
    }
}

/// The in-flight slot of a caller sending its own batch (the fast path). On drop, after the
/// call or when the caller gives up mid-call, the slot passes to a new sending task if
/// batches queued meanwhile, else it is released.
struct InlineSlot<'a>(&'a Arc<Coalescer>);

impl Drop for InlineSlot<'_> {
    fn drop(&mut self) {
        let coalescer = self.0;
        let hand_off = {
            let mut q = coalescer.queue.lock();
            if q.waiting.is_empty() {
                q.in_flight -= 1;
            }
            !q.waiting.is_empty()
        };
        if hand_off {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(Arc::clone(coalescer).drain());
                }
                // No runtime to send on (dropped outside one): release the slot; the next
                // batch starts a sender that takes what waits.
                Err(_) => coalescer.queue.lock().in_flight -= 1,
            }
        }
    }
}

impl Coalescer {
    pub(crate) fn new(conn: Conn, ttl_extra_ms: u64, max_in_flight: usize) -> Self {
        Self {
            conn,
            ttl_extra_ms,
            max_in_flight: max_in_flight.max(1),
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                in_flight: 0,
                arrivals: 0,
            }),
        }
    }

    /// Queues `p` (its reply goes to `p.tx`) and makes sure a sender will take it.
    ///
    /// Fast path: when no call is in flight and its own batch is the only one waiting, the
    /// caller sends it from its own task at once and returns when the reply is out. This
    /// spares a lone client the hand-off to a sending task and back (two wake-ups, often
    /// across threads, per decision), and it does not yield first: a yield to let batches
    /// submitted in the same instant join cost every lone check one more `epoll_wait` and, on
    /// a multi-thread runtime, a wake-up of another worker (measured: 6.1 system calls and 1.9
    /// voluntary context switches per lone check on two workers with the yield, 3.0 and 0.8
    /// without; BENCHMARKS.md, "Weakness 2"). Batches submitted while it is out (e.g. the other
    /// checks of one `join_all`) wait and go together in the next call. When the call returns
    /// (or the caller gives up mid-call), its slot goes to a sending task that takes whatever
    /// waits, as without the fast path: a caller never carries another caller's batch, so its
    /// timeout (which drops its future) never fails anyone else. Otherwise a sending task is
    /// started when fewer than `max_in_flight` calls are out, and the caller waits on its
    /// receiver.
    pub(crate) async fn submit(self: &Arc<Self>, p: Pending) {
        let (start, inline, mine) = {
            let mut q = self.queue.lock();
            let mine = q.arrivals;
            q.arrivals += 1;
            q.waiting.push_back((mine, p));
            let inline = q.in_flight == 0;
            let start = q.in_flight < self.max_in_flight;
            if start {
                q.in_flight += 1;
            }
            (start, inline, mine)
        };
        if !start {
            return;
        }
        if !inline {
            tokio::spawn(Arc::clone(self).drain());
            return;
        }
        // Given back, or handed to a sending task when batches wait, when this returns, and
        // also if this future is dropped mid-call (its caller timed out).
        let _slot = InlineSlot(self);
        // Normally just this batch; more only after a slot was released with batches waiting
        // (outside a runtime, see `InlineSlot`): then the sending task takes them all.
        let alone = {
            let mut q = self.queue.lock();
            match q.waiting.front() {
                Some((seq, _)) if *seq == mine && q.waiting.len() == 1 => q.waiting.pop_front(),
                _ => None,
            }
        };
        if let Some((_, p)) = alone {
            self.send(vec![p]).await;
        }
    }

    /// Sends everything waiting, call after call, until the queue is empty. Runs in a slot
    /// already counted in `in_flight`.
    async fn drain(self: Arc<Self>) {
        let mut slot = Slot {
            coalescer: &self,
            held: true,
        };
        loop {
            let batches: Vec<Pending> = {
                let mut q = self.queue.lock();
                if q.waiting.is_empty() {
                    // Released under the lock that saw the queue empty: a batch queued after
                    // this finds the slot free and starts a sender.
                    q.in_flight -= 1;
                    slot.held = false;
                    return;
                }
                let n = q.waiting.len().min(MAX_BATCHES);
                q.waiting.drain(..n).map(|(_, p)| p).collect()
            };
            self.send(batches).await;
        }
    }

    async fn send(&self, batches: Vec<Pending>) {
        // A caller that timed out meanwhile no longer waits: do not apply its batch.
        let batches: Vec<Pending> = batches.into_iter().filter(|p| !p.tx.is_closed()).collect();
        let Some(first) = batches.first() else {
            return;
        };
        let kind = first
            .kind
            .filter(|&k| batches.iter().all(|p| p.kind == Some(k)));
        let mut keys: Vec<String> = Vec::new();
        // Each distinct policy (algorithm, limit, period, burst, num, den) goes once.
        let mut policies: Vec<[u64; 6]> = Vec::new();
        let mut batch_args: Vec<u64> = Vec::new();
        let mut server_clock = false;
        let mut txs = Vec::with_capacity(batches.len());
        for p in batches {
            let offset = keys.len() as u64;
            let n = p.item_args.len() / 8;
            batch_args.extend([
                u64::from(p.commit),
                u64::from(p.now.is_some()),
                p.now.unwrap_or(0),
                n as u64,
            ]);
            for item in p.item_args.chunks_exact(8) {
                let policy: [u64; 6] = item[1..7].try_into().expect("6 policy values");
                let index = match policies.iter().position(|q| *q == policy) {
                    Some(i) => i,
                    None => {
                        policies.push(policy);
                        policies.len() - 1
                    }
                };
                batch_args.extend([item[0] + offset, index as u64 + 1, item[7]]);
            }
            keys.extend(p.keys);
            server_clock |= p.now.is_none();
            txs.push((n, p.tx));
        }
        let mut args = Vec::with_capacity(2 + 6 * policies.len() + batch_args.len());
        args.extend([self.ttl_extra_ms, policies.len() as u64]);
        args.extend(policies.iter().flatten());
        args.extend(batch_args);
        let (script, source) = scripts::multi_script(kind);
        let call = ScriptCall {
            script,
            source,
            keys: &keys,
            args,
            // ARGV[1]: '' makes the script read TIME once; '0' skips it.
            now: if server_clock { None } else { Some(0) },
        };
        match self.conn.invoke::<Vec<i64>>(&call).await {
            Ok(reply) => {
                let mut at = 0;
                for (n, tx) in txs {
                    let len = 1 + 4 * n;
                    let slice = match reply.get(at..at + len) {
                        Some(s) => {
                            // batch.lua's layout: the reported decision as both the peek and
                            // the decision after consumption (the caller picks by status and
                            // commit, which select this very one), mark 0 (no refunds here).
                            let mut v = Vec::with_capacity(2 + 9 * n);
                            v.extend([s[0], 0]);
                            for d in s[1..].chunks_exact(4) {
                                v.extend_from_slice(d);
                                v.extend_from_slice(d);
                                v.push(0);
                            }
                            Ok(v)
                        }
                        None => Err(RedisError::from((
                            redis::ErrorKind::Parse,
                            "unexpected reply length from the coalescing script",
                        ))),
                    };
                    at += len;
                    // The caller may have given up meanwhile; nothing to do then.
                    let _ = tx.send(slice);
                }
            }
            Err(e) => {
                for (_, tx) in txs {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
