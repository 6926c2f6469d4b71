//! [`Leases`]: this instance's leases, one slot per rule and key, in shards under short locks
//! (never held across a store call).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use floodgate_core::{Clock, Decision, Micros, Policy, Timestamp};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::Lease;
use crate::reservation::same_policy;

/// The most keys one limiter keeps lease slots for (all rules together). A key that finds
/// no room is decided by the store as without a lease (exact, one round trip), until idle
/// slots are dropped
/// ([`RateLimiter::end_expired_leases`](crate::RateLimiter::end_expired_leases)).
pub const DEFAULT_MAX_LEASED_KEYS: usize = 100_000;

const SHARDS: usize = 16;

/// Leases of one limiter (shared by its clones).
#[derive(Debug)]
pub(crate) struct Leases {
    pub(super) clock: Arc<dyn Clock>,
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
    max_keys: usize,
    keys: AtomicUsize,
}

type Shard = HashMap<Arc<str>, HashMap<String, Slot>>;

#[derive(Debug)]
struct Slot {
    policy: Policy,
    lease: Option<Live>,
    /// A take is on its way to the store (at most one per slot): what its waiters hear when
    /// it ends.
    taking: Option<watch::Sender<Outcome>>,
    /// Units of the requests waiting for the take on its way.
    queued: u64,
    /// Units of the requests that waited for the last take: demand the next take counts.
    backlog: u64,
    /// Units of the live lease kept for the requests that waited for its take: they are woken
    /// after it is installed, and without this the requests that arrive meanwhile could spend
    /// it first, again and again, until a waiter's deadline fails it (a hot key, 64 clients).
    earmarked: u64,
    /// What the store said was left (`remaining`) after the last take, granted or denied: a
    /// key near its limit takes only its cost (one store call, never a denied lease first).
    last_remaining: Option<u64>,
    /// A store denial, repeated locally until its `until` for requests of at least its cost.
    denied: Option<Denial>,
    /// The previous lease: when it was taken and how many units it spent (the rate estimate).
    history: Option<(Timestamp, u64)>,
    /// Bumped by every new lease: a put-back names the lease it drew from.
    generation: u64,
    /// When the slot last held a lease or a take (for dropping idle slots).
    touched: Timestamp,
    /// The rule's lease lifetime when last used.
    lifetime: Micros,
}

/// A live lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Live {
    pub(super) size: u64,
    pub(super) used: u64,
    /// The reservation's scheduled time (what the settle passes back).
    pub(super) scheduled_at: Timestamp,
    /// This instance's clock before the take was sent.
    pub(super) taken_at: Timestamp,
    pub(super) expires_at: Timestamp,
    /// The store's `remaining` and `reset_after` (as a time) right after the take.
    pub(super) store_remaining: u64,
    pub(super) reset_at: Timestamp,
    pub(super) limit: u64,
    /// A renewal was started for this lease (at most one).
    pub(super) renewing: bool,
}

impl Live {
    /// The decision a request spent from this lease reports: admitted, `remaining` what the
    /// store had left after the take plus this lease's balance (an estimate: other instances
    /// spend too), `reset_after` the store's, counted from the take.
    pub(super) fn decision(&self, now: Timestamp) -> Decision {
        Decision {
            allowed: true,
            limit: self.limit,
            remaining: self
                .store_remaining
                .saturating_add(self.size - self.used)
                .min(self.limit),
            reset_after: self.reset_at.saturating_sub(now),
            retry_after: None,
        }
    }
}

/// A store denial of a take, repeated locally: made at `at` (this instance's clock before the
/// take was sent) for `cost` units, until `until`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Denial {
    pub(super) at: Timestamp,
    pub(super) until: Timestamp,
    pub(super) cost: u64,
    pub(super) decision: Decision,
}

/// A lease that ended and may have units to give back.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    pub(super) rule: Arc<str>,
    pub(super) key: String,
    pub(super) policy: Policy,
    pub(super) live: Live,
}

/// How a take ended, for the requests waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// On its way.
    Pending,
    /// Granted (a lease to spend from) or denied (a denial to repeat): begin again.
    Done,
    /// The store failed: the waiters fail too (by the rule's failure mode).
    Failed,
}

/// What [`Leases::begin`] found for one request.
#[derive(Debug)]
pub(super) enum Begin {
    /// Spent from the live lease `generation`.
    Spent(Decision, u64),
    /// Spent from the live lease `generation`, which is late in its life or low: take its
    /// successor of `size` units now (the caller must finish with `Leases::install` or
    /// `Leases::abandon`), while the other requests go on spending it.
    SpentRenew(Decision, u64, u64),
    /// Denied again until the store's `retry_after` (capped at the lifetime).
    Denied(Decision),
    /// Take a lease of `size` units; `ended` is the lease it replaces (to settle first). The
    /// caller must finish with `Leases::install` or `Leases::abandon`.
    Take {
        size: u64,
        ended: Option<Box<Ended>>,
    },
    /// A take of this key is on its way: wait for it to end, then begin again.
    Wait(watch::Receiver<Outcome>),
    /// No slot is free: decide by the store alone.
    Plain,
}

impl Leases {
    pub(crate) fn new(clock: Arc<dyn Clock>, max_keys: usize) -> Self {
        Self {
            clock,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            max_keys,
            keys: AtomicUsize::new(0),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn shard(&self, rule: &str, key: &str) -> &Mutex<Shard> {
        let mut h = self.hasher.build_hasher();
        rule.hash(&mut h);
        key.hash(&mut h);
        // The modulo of a 64-bit hash by 16 fits any usize.
        #[allow(clippy::cast_possible_truncation)]
        let index = (h.finish() % SHARDS as u64) as usize;
        &self.shards[index]
    }

    /// Keys holding a slot now.
    pub(crate) fn len(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// The first step of a leased request of `cost` units (see `docs/spec/leases.md`).
    /// `waited`: this request waited for a take before (it may spend the units kept for the
    /// waiters).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin(
        &self,
        rule: &Arc<str>,
        policy: &Policy,
        key: &str,
        cost: u64,
        lease: &Lease,
        now: Timestamp,
        waited: bool,
    ) -> Begin {
        let mut shard = self.shard(rule, key).lock();
        let keys = match shard.get_mut(&**rule) {
            Some(keys) => keys,
            None => shard.entry(Arc::clone(rule)).or_default(),
        };
        if !keys.contains_key(key) {
            if self.keys.load(Ordering::Relaxed) >= self.max_keys {
                return Begin::Plain;
            }
            self.keys.fetch_add(1, Ordering::Relaxed);
            keys.insert(key.to_owned(), Slot::cold(policy, now, lease.lifetime));
        }
        let Some(slot) = keys.get_mut(key) else {
            return Begin::Plain;
        };
        if slot.taking.is_some() && same_policy(&slot.policy, policy) {
            // A renewal is on its way: the live lease is spent meanwhile, while it has room
            // (docs/spec/leases.md); no second renewal starts.
            if let Some(decision) = slot.spend(now, cost, waited) {
                return Begin::Spent(decision, slot.generation);
            }
        }
        if let Some(taking) = &slot.taking {
            // The slot's lease is on its way (none is live with room meanwhile): this request
            // waits for it and counts in the next lease's size.
            slot.queued = slot.queued.saturating_add(cost);
            return Begin::Wait(taking.subscribe());
        }
        slot.lifetime = lease.lifetime;
        let mut ended = None;
        if !same_policy(&slot.policy, policy) {
            // A reload gave the rule another quota: the old lease ends, the key starts cold.
            ended = slot.lease.take().map(|live| {
                Box::new(Ended {
                    rule: Arc::clone(rule),
                    key: key.to_owned(),
                    policy: slot.policy.clone(),
                    live,
                })
            });
            slot.policy = policy.clone();
            slot.denied = None;
            slot.history = None;
            slot.last_remaining = None;
        }
        if let Some(decision) = slot.spend(now, cost, waited) {
            let free = slot.taking.is_none();
            if let Some(live) = &mut slot.lease {
                if let Some(size) = renewal(live, free, now, lease, policy) {
                    live.renewing = true;
                    slot.taking = Some(watch::channel(Outcome::Pending).0);
                    let size = slot
                        .last_remaining
                        .map_or(size, |left| size.min(left.max(1)));
                    return Begin::SpentRenew(decision, slot.generation, size);
                }
            }
            return Begin::Spent(decision, slot.generation);
        }
        if let Some(Denial {
            at,
            until,
            cost: denied_cost,
            decision,
        }) = slot.denied
        {
            if now >= at && now < until && cost >= denied_cost {
                return Begin::Denied(Decision {
                    retry_after: decision
                        .retry_after
                        .map(|r| r.saturating_sub(now - at).max(1)),
                    reset_after: decision.reset_after.saturating_sub(now - at),
                    ..decision
                });
            }
            slot.denied = None;
        }
        if ended.is_none() {
            if let Some(live) = slot.lease.take() {
                slot.history = Some((live.taken_at, live.used));
                ended = Some(Box::new(Ended {
                    rule: Arc::clone(rule),
                    key: key.to_owned(),
                    policy: slot.policy.clone(),
                    live,
                }));
            }
        }
        slot.taking = Some(watch::channel(Outcome::Pending).0);
        slot.earmarked = 0;
        slot.touched = now;
        let size = size(slot, now, cost, lease, policy);
        slot.backlog = 0;
        Begin::Take { size, ended }
    }

    /// The take of a [`Begin::Take`] or [`Begin::SpentRenew`] was granted: `live` is the
    /// key's lease now. Returns its generation, and the lease it replaces (a renewal's
    /// predecessor), to settle.
    pub(super) fn install(&self, rule: &str, key: &str, live: Live) -> (u64, Option<Ended>) {
        let mut shard = self.shard(rule, key).lock();
        match shard.get_mut(rule).and_then(|keys| keys.get_mut(key)) {
            Some(slot) => {
                slot.last_remaining = Some(live.store_remaining);
                slot.end_take(Outcome::Done);
                slot.generation += 1;
                let policy = slot.policy.clone();
                // The waiters' demand is kept for them in the new lease.
                slot.earmarked = slot.backlog.min(live.size.saturating_sub(live.used));
                let ended = slot.lease.replace(live).map(|old| {
                    slot.history = Some((old.taken_at, old.used));
                    Ended {
                        rule: Arc::from(rule),
                        key: key.to_owned(),
                        policy,
                        live: old,
                    }
                });
                slot.touched = live.taken_at;
                (slot.generation, ended)
            }
            // Dropped meanwhile (a return of every lease): the units stay spent.
            None => (0, None),
        }
    }

    /// The take of a [`Begin::Take`] was denied (`denial` repeated locally until `until`), or
    /// failed (`failed`: its waiters fail too), or was given up (neither).
    pub(super) fn abandon(&self, rule: &str, key: &str, denial: Option<Denial>, failed: bool) {
        let mut shard = self.shard(rule, key).lock();
        if let Some(slot) = shard.get_mut(rule).and_then(|keys| keys.get_mut(key)) {
            if let Some(denial) = denial {
                slot.last_remaining = Some(denial.decision.remaining);
                slot.denied = Some(denial);
            }
            slot.end_take(if failed {
                Outcome::Failed
            } else {
                Outcome::Done
            });
        }
    }

    /// Puts `cost` units back into lease `generation` of the key (the request was denied by
    /// another rule of its plan). A lease that ended meanwhile keeps them as spent.
    pub(super) fn put_back(&self, rule: &str, key: &str, generation: u64, cost: u64) {
        let mut shard = self.shard(rule, key).lock();
        if let Some(slot) = shard.get_mut(rule).and_then(|keys| keys.get_mut(key)) {
            if slot.generation == generation {
                if let Some(live) = &mut slot.lease {
                    live.used = live.used.saturating_sub(cost);
                }
            }
        }
    }

    /// Ends every lease whose time is up by `now` (all of them with `all`), and drops slots
    /// idle for more than four lifetimes of their rule (every slot with `all`).
    pub(crate) fn end(&self, now: Timestamp, all: bool) -> Vec<Ended> {
        let mut ended = Vec::new();
        for shard in &*self.shards {
            let mut shard = shard.lock();
            for (rule, keys) in shard.iter_mut() {
                keys.retain(|key, slot| {
                    let expired = slot
                        .lease
                        .as_ref()
                        .is_some_and(|l| all || now >= l.expires_at);
                    if expired {
                        if let Some(live) = slot.lease.take() {
                            slot.earmarked = 0;
                            slot.history = Some((live.taken_at, live.used));
                            slot.touched = live.expires_at.min(now);
                            ended.push(Ended {
                                rule: Arc::clone(rule),
                                key: key.clone(),
                                policy: slot.policy.clone(),
                                live,
                            });
                        }
                    }
                    let lifetime = slot.lifetime;
                    let idle = slot.lease.is_none()
                        && slot.taking.is_none()
                        && slot.denied.is_none_or(|d| now >= d.until)
                        && now.saturating_sub(slot.touched) > 4 * lifetime.max(1);
                    let keep = !(all || idle);
                    if !keep {
                        self.keys.fetch_sub(1, Ordering::Relaxed);
                    }
                    keep
                });
            }
            shard.retain(|_, keys| !keys.is_empty());
        }
        ended
    }
}

impl Slot {
    /// A key's slot before its first lease.
    fn cold(policy: &Policy, now: Timestamp, lifetime: Micros) -> Self {
        Slot {
            policy: policy.clone(),
            lease: None,
            taking: None,
            queued: 0,
            backlog: 0,
            earmarked: 0,
            last_remaining: None,
            denied: None,
            history: None,
            generation: 0,
            touched: now,
            lifetime,
        }
    }

    /// Spends `cost` from the live lease when it is in time and has room beyond the units
    /// kept for the waiters of its take (all of it for a request that `waited`): its decision.
    fn spend(&mut self, now: Timestamp, cost: u64, waited: bool) -> Option<Decision> {
        let kept = if waited { 0 } else { self.earmarked };
        let live = self.lease.as_mut()?;
        let fits = now < live.expires_at
            && now >= live.taken_at
            && live.size - live.used >= cost.saturating_add(kept);
        if !fits {
            return None;
        }
        live.used += cost;
        if waited {
            self.earmarked = self.earmarked.saturating_sub(cost);
        }
        Some(live.decision(now))
    }

    /// The take on its way ended with `outcome`: its waiters hear it, and their demand is
    /// the next take's backlog.
    fn end_take(&mut self, outcome: Outcome) {
        if let Some(taking) = self.taking.take() {
            taking.send_replace(outcome);
        }
        self.backlog = std::mem::take(&mut self.queued);
    }
}

/// When the request that just spent from `live` should start its successor: when no take is
/// on its way (`free`), none was started for it, and it is past three quarters of its life or
/// below half of its units. The size: twice its use so far scaled to the lifetime (at least 1;
/// headroom for a rate that grows, so the successor does not run out before its own renewal
/// is back), at most the share minus its balance, so that the units this instance holds for the key,
/// the lease's balance and its successor's together, stay at most `max_units`
/// (`docs/spec/leases.md`, "carry"). `None` when there is no room.
fn renewal(live: &Live, free: bool, now: Timestamp, lease: &Lease, policy: &Policy) -> Option<u64> {
    let life = live.expires_at - live.taken_at;
    let balance = live.size - live.used;
    let late = now.saturating_sub(live.taken_at).saturating_mul(4) >= life.saturating_mul(3);
    let low = balance.saturating_mul(2) < live.size;
    if !free || live.renewing || !(late || low) {
        return None;
    }
    let room = lease
        .max_units
        .min(policy.capacity())
        .saturating_sub(balance);
    let size = estimate(Some((live.taken_at, live.used)), now, 1, lease)
        .saturating_mul(2)
        .min(room);
    (size > 0).then_some(size)
}

/// The size of the next take of `slot` for a request of `cost`: the rate estimate, or the
/// demand that waited for the last take (with this request) when more; at most
/// `max(cost, max_units)`, and at most the policy's capacity (a limit override's rule keeps
/// its base rule's lease settings with a smaller quota; `cost` is within it, the plan refuses
/// more); and at most `cost` plus what the store said was left after the last take, so a key
/// near its limit asks for its cost alone, as without leases.
fn size(slot: &Slot, now: Timestamp, cost: u64, lease: &Lease, policy: &Policy) -> u64 {
    let most = lease.max_units.max(cost);
    let mut size = estimate(slot.history, now, cost, lease)
        .max(slot.backlog.saturating_add(cost).min(most))
        .min(policy.capacity().max(cost));
    if let Some(left) = slot.last_remaining {
        size = size.min(cost.saturating_add(left));
    }
    size
}

/// The size of the next lease: the previous lease's use scaled to the lifetime (units used,
/// times the lifetime, over the time since it was taken), at least `cost` and at most
/// `max(cost, max_units)`. A key without history takes `cost`: one round trip, as without
/// leases.
fn estimate(history: Option<(Timestamp, u64)>, now: Timestamp, cost: u64, lease: &Lease) -> u64 {
    let most = lease.max_units.max(cost);
    let Some((taken_at, used)) = history else {
        return cost;
    };
    let lived: Micros = now.saturating_sub(taken_at).max(1);
    let scaled = (u128::from(used) * u128::from(lease.lifetime)).div_ceil(u128::from(lived));
    u64::try_from(scaled).unwrap_or(u64::MAX).clamp(cost, most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_grows_with_the_rate_and_stays_within_the_share() {
        let lease = Lease {
            lifetime: 20_000,
            max_units: 500,
        };
        assert_eq!(estimate(None, 5, 1, &lease), 1, "a cold key takes its cost");
        // 1 unit in 1 ms: 20 per 20 ms.
        assert_eq!(estimate(Some((0, 1)), 1_000, 1, &lease), 20);
        // 100 units in 10 ms: 200 per 20 ms.
        assert_eq!(estimate(Some((0, 100)), 10_000, 1, &lease), 200);
        assert_eq!(estimate(Some((0, 100)), 1_000, 1, &lease), 500, "the share");
        // Seldom: 1 unit per second.
        assert_eq!(estimate(Some((0, 1)), 1_000_000, 1, &lease), 1);
        assert_eq!(
            estimate(Some((0, 1)), 1_000_000, 700, &lease),
            700,
            "the cost"
        );
        assert_eq!(
            estimate(Some((9, 1)), 3, 2, &lease),
            500,
            "a clock step back"
        );
    }
}
