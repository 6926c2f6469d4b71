//! Deployment setups: how many instances, where their counters live, how a load balancer spreads
//! requests over them.
//!
//! [`CounterStore`] is the extension point for "where the counter lives": the simulator talks to
//! counters only through it. [`InProcessCounters`] keeps them in this process for the three
//! layouts of [`CounterMode`]; [`RedisCounters`](super::redis::RedisCounters)
//! (`--store redis://...`) keeps the same layouts in Redis. Both lay the counters out with
//! [`counter_policies`] and [`counter_index`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use floodgate_core::{
    AlgorithmKind, CheckError, Decision, Micros, Policy, Quota, QuotaError, Reservation, State,
    Timestamp,
};

/// Where each instance's counter lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterMode {
    /// Every instance keeps its own counter with the full limit: N instances admit up to N times
    /// the declared limit (the multi-instance trap).
    Local,
    /// All instances share one counter (one authority, as a shared store gives): exact.
    Shared,
    /// Every instance keeps its own counter with the limit (and burst) divided by N, the
    /// remainder going to the first instances: exact only while the balancer is fair.
    Split,
}

/// How the load balancer assigns requests to instances (in arrival order, regardless of key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Request `i` goes to instance `i mod N`.
    RoundRobin,
    /// Smooth weighted round-robin (as nginx does it) with weight N for instance 0 and weight 1
    /// for every other instance: instance 0 receives N of every 2N - 1 requests (3 of 5 with
    /// 3 instances, 8 of 15 with 8), interleaved, e.g. 0, 1, 0, 2, 0, 0, 1, 0, 2, 0 ...
    Skewed,
}

impl Balance {
    /// `round-robin` or `skewed`.
    pub fn as_str(self) -> &'static str {
        crate::choice::Choice::name(self)
    }
}

impl crate::choice::Choice for Balance {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            Balance::RoundRobin,
            "round-robin",
            "Request `i` goes to instance `i mod N`",
        ),
        (
            Balance::Skewed,
            "skewed",
            "Smooth weighted round-robin (as nginx does it) with weight N for instance 0 and \
             weight 1 for every other instance: instance 0 receives N of every 2N - 1 requests \
             (3 of 5 with 3 instances, 8 of 15 with 8), interleaved",
        ),
    ];
}

impl crate::choice::Choice for CounterMode {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            CounterMode::Local,
            "local",
            "Every instance keeps its own counter with the full limit: N instances admit up to \
             N times the declared limit (the multi-instance trap)",
        ),
        (
            CounterMode::Shared,
            "shared",
            "All instances share one counter (one authority, as a shared store gives): exact",
        ),
        (
            CounterMode::Split,
            "split",
            "Every instance keeps its own counter with the limit (and burst) divided by N, the \
             remainder going to the first instances: exact only while the balancer is fair",
        ),
    ];
}

/// A deployment: `instances` copies of a service, each deciding with a counter placed by
/// `counter`, fed by a `balance` load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Setup {
    /// Number of service instances (at least 1).
    pub instances: usize,
    /// Where the counters live.
    pub counter: CounterMode,
    /// How requests are spread over the instances.
    pub balance: Balance,
}

impl Setup {
    /// For people: `1 instance`, `3 instances, local counters, round-robin` ...
    pub fn describe(&self) -> String {
        if self.instances == 1 {
            return "1 instance".into();
        }
        let counter = match self.counter {
            CounterMode::Local => "each with its own counter (local)",
            CounterMode::Shared => "sharing one counter",
            CounterMode::Split => "each with limit / N (split)",
        };
        format!(
            "{} instances {counter}, {} balancing",
            self.instances,
            self.balance.as_str()
        )
    }

    /// The same instances with one shared counter: the exact reference for this setup.
    pub fn shared(self) -> Setup {
        Setup {
            counter: CounterMode::Shared,
            ..self
        }
    }
}

/// Assigns each request to an instance according to a [`Balance`]. Deterministic.
#[derive(Debug, Clone)]
pub struct Balancer {
    balance: Balance,
    instances: usize,
    next: usize,
    /// Smooth weighted round-robin: current weights.
    current: Vec<i64>,
}

impl Balancer {
    /// A balancer over `instances` (at least 1) instances.
    pub fn new(instances: usize, balance: Balance) -> Self {
        Self {
            balance,
            instances: instances.max(1),
            next: 0,
            current: vec![0; instances.max(1)],
        }
    }

    /// The instance (0-based) that receives the next request.
    pub fn pick(&mut self) -> usize {
        match self.balance {
            Balance::RoundRobin => {
                let chosen = self.next;
                self.next = (self.next + 1) % self.instances;
                chosen
            }
            Balance::Skewed => {
                let n = self.instances as i64;
                let total = 2 * n - 1;
                let mut chosen = 0;
                for (i, current) in self.current.iter_mut().enumerate() {
                    *current += if i == 0 { n } else { 1 };
                }
                for i in 1..self.current.len() {
                    if self.current[i] > self.current[chosen] {
                        chosen = i;
                    }
                }
                self.current[chosen] -= total;
                chosen
            }
        }
    }
}

/// Where the counters live: one decision for a request of `cost` units on `key`, received by
/// `instance` at `now` (microseconds since the Unix epoch).
///
/// The simulator calls it in time order. Implementations decide where the state of
/// `(instance, key)` is kept: per instance, shared, or in an external store.
pub trait CounterStore {
    /// Checks and, when admitted, consumes `cost` units.
    ///
    /// # Errors
    /// [`CounterError::Check`] ([`CheckError::InsufficientCapacity`]) when `cost` exceeds what
    /// the instance's policy can ever admit; nothing is consumed. [`CounterError::Store`] when
    /// the store itself failed (e.g. Redis unreachable): the simulation stops.
    fn check(
        &mut self,
        instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CounterError>;

    /// A check that may wait (`--max-wait`): reserves `cost` units for the earliest time within
    /// `max_wait` microseconds that they fit, consuming them now for that time; beyond it
    /// denies as [`CounterStore::check`] does, consuming nothing (see
    /// [`floodgate_core::Policy::reserve`]).
    ///
    /// The default (counters that cannot reserve) is a [`CounterError::Store`] saying so.
    ///
    /// # Errors
    /// As [`CounterStore::check`].
    fn reserve(
        &mut self,
        instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
        max_wait: Micros,
    ) -> Result<Reservation, CounterError> {
        let _ = (instance, key, now, cost, max_wait);
        Err(CounterError::Store(
            "these counters cannot reserve: --max-wait needs --store memory".into(),
        ))
    }
}

/// Why a [`CounterStore`] gave no decision.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// The request can never be admitted: an outcome of the simulation, recorded per request.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The store failed: the simulation cannot go on.
    #[error("{0}")]
    Store(String),
}

/// The policy of each counter of `setup`, each running `kind` on `quota` (or its split share):
/// 1 for `shared`, N (the full quota) for `local`, N (the shares of [`split_quota`]) for `split`.
///
/// # Errors
/// [`SetupError`] when the setup has no instances, the split leaves an instance with 0, or
/// the algorithm rejects the quota.
pub fn counter_policies(
    kind: AlgorithmKind,
    quota: Quota,
    setup: &Setup,
) -> Result<Vec<Policy>, SetupError> {
    let n = setup.instances;
    if n == 0 {
        return Err(SetupError::NoInstances);
    }
    Ok(match setup.counter {
        CounterMode::Shared => vec![Policy::new(kind, quota)?],
        CounterMode::Local => vec![Policy::new(kind, quota)?; n],
        CounterMode::Split => split_quota(quota, n)?
            .into_iter()
            .map(|q| Policy::new(kind, q))
            .collect::<Result<_, _>>()?,
    })
}

/// Which of the [`counter_policies`] decides for `instance` (0-based): 0 for `shared`, the
/// instance itself for `local` and `split`.
pub fn counter_index(mode: CounterMode, instance: usize) -> usize {
    match mode {
        CounterMode::Shared => 0,
        CounterMode::Local | CounterMode::Split => instance,
    }
}

/// Counters kept in this process, laid out per [`CounterMode`].
#[derive(Debug, Clone)]
pub struct InProcessCounters {
    mode: CounterMode,
    /// One policy per counter: 1 for `shared`, N for `local` and `split`.
    policies: Vec<Policy>,
    /// Per key, the state of each counter (`None` until the counter first sees the key).
    states: HashMap<String, Vec<Option<State>>>,
}

/// A setup that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// `instances` was 0.
    #[error("--instances must be at least 1")]
    NoInstances,
    /// The limit or burst is smaller than the number of instances it is split over.
    #[error("cannot split {what} {value} over {instances} instances: some would get 0")]
    SplitTooSmall {
        /// `limit` or `burst`.
        what: &'static str,
        /// Its value.
        value: u64,
        /// Number of instances.
        instances: usize,
    },
    /// The (per-instance) quota is invalid for the algorithm.
    #[error(transparent)]
    Quota(#[from] QuotaError),
}

impl InProcessCounters {
    /// Counters for `setup`, each running `kind` on `quota` (or its split share).
    ///
    /// # Errors
    /// [`SetupError`] when the setup has no instances, the split leaves an instance with 0, or
    /// the algorithm rejects the quota.
    pub fn new(kind: AlgorithmKind, quota: Quota, setup: &Setup) -> Result<Self, SetupError> {
        Ok(Self {
            mode: setup.counter,
            policies: counter_policies(kind, quota, setup)?,
            states: HashMap::new(),
        })
    }
}

/// The quota of each of `n` instances when `quota` is split: `limit / n` and `burst / n`, the
/// remainders going one unit each to the first instances, so the shares add up exactly.
///
/// # Errors
/// [`SetupError::SplitTooSmall`] when `limit` or `burst` is smaller than `n`.
pub fn split_quota(quota: Quota, n: usize) -> Result<Vec<Quota>, SetupError> {
    let n64 = n as u64;
    for (what, value) in [("limit", quota.limit()), ("burst", quota.burst())] {
        if value < n64 {
            return Err(SetupError::SplitTooSmall {
                what,
                value,
                instances: n,
            });
        }
    }
    let share = |total: u64, i: u64| total / n64 + u64::from(i < total % n64);
    (0..n64)
        .map(|i| {
            Quota::with_burst(
                share(quota.limit(), i),
                quota.period(),
                share(quota.burst(), i),
            )
            .map_err(SetupError::from)
        })
        .collect()
}

impl InProcessCounters {
    /// The policy and state (created fresh when new) of the counter `instance` uses for `key`,
    /// once `cost` is known to fit the policy.
    fn counter(
        &mut self,
        instance: usize,
        key: &str,
        cost: u64,
    ) -> Result<(&Policy, &mut State), CounterError> {
        let counter = counter_index(self.mode, instance);
        let policy = &self.policies[counter];
        policy.validate_cost(cost)?;
        // Look up by &str first: no allocation per check once the key is known.
        if !self.states.contains_key(key) {
            self.states
                .insert(key.to_string(), vec![None; self.policies.len()]);
        }
        let counters = self.states.get_mut(key).expect("just inserted");
        let state = counters[counter].get_or_insert_with(|| policy.initial_state());
        Ok((policy, state))
    }
}

impl CounterStore for InProcessCounters {
    fn check(
        &mut self,
        instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
    ) -> Result<Decision, CounterError> {
        let (policy, state) = self.counter(instance, key, cost)?;
        Ok(policy.check(state, now, cost)?)
    }

    fn reserve(
        &mut self,
        instance: usize,
        key: &str,
        now: Timestamp,
        cost: u64,
        max_wait: Micros,
    ) -> Result<Reservation, CounterError> {
        let (policy, state) = self.counter(instance, key, cost)?;
        Ok(policy.reserve(state, now, cost, max_wait)?)
    }
}

/// Which counter store `--store` selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// [`InProcessCounters`] (the default, `memory`).
    Memory,
    /// [`RedisCounters`](super::redis::RedisCounters) on the Redis server at this URL
    /// (`redis://host:port[/db]` or `rediss://...`).
    Redis(String),
}

impl FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "memory" => Ok(StoreSpec::Memory),
            url if url.starts_with("redis://") || url.starts_with("rediss://") => {
                Ok(StoreSpec::Redis(url.to_string()))
            }
            other => Err(format!(
                "unknown store {other:?}; expected `memory` or `redis://HOST:PORT`"
            )),
        }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(url) => f.write_str(url),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(instances: usize, balance: Balance, n: usize) -> Vec<usize> {
        let mut b = Balancer::new(instances, balance);
        (0..n).map(|_| b.pick()).collect()
    }

    #[test]
    fn round_robin_cycles() {
        assert_eq!(picks(3, Balance::RoundRobin, 7), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(picks(1, Balance::RoundRobin, 3), [0, 0, 0]);
    }

    #[test]
    fn skewed_gives_instance_zero_n_of_every_2n_minus_1() {
        assert_eq!(
            picks(3, Balance::Skewed, 10),
            [0, 1, 0, 2, 0, 0, 1, 0, 2, 0]
        );
        assert_eq!(picks(2, Balance::Skewed, 6), [0, 1, 0, 0, 1, 0]);
        let eight = picks(8, Balance::Skewed, 15);
        assert_eq!(eight.iter().filter(|&&i| i == 0).count(), 8);
        for i in 1..8 {
            assert_eq!(eight.iter().filter(|&&x| x == i).count(), 1);
        }
        assert_eq!(picks(1, Balance::Skewed, 3), [0, 0, 0]);
    }

    #[test]
    fn split_shares_add_up() {
        let q: Quota = "10/10s burst 7".parse().unwrap();
        let shares = split_quota(q, 3).unwrap();
        let limits: Vec<_> = shares.iter().map(Quota::limit).collect();
        let bursts: Vec<_> = shares.iter().map(Quota::burst).collect();
        assert_eq!(limits, [4, 3, 3]);
        assert_eq!(bursts, [3, 2, 2]);
        assert!(shares.iter().all(|s| s.period() == 10_000_000));
        assert_eq!(
            split_quota(q, 8),
            Err(SetupError::SplitTooSmall {
                what: "burst",
                value: 7,
                instances: 8
            })
        );
    }

    #[test]
    fn store_spec_parses_memory_and_redis_urls() {
        assert_eq!("memory".parse::<StoreSpec>(), Ok(StoreSpec::Memory));
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreSpec>(),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379".into()))
        );
        assert!("mongo".parse::<StoreSpec>().is_err());
    }

    #[test]
    fn local_counters_are_per_instance_and_shared_is_one() {
        let quota: Quota = "2/s".parse().unwrap();
        let now = 1_700_000_000_000_000;
        let local = Setup {
            instances: 2,
            counter: CounterMode::Local,
            balance: Balance::RoundRobin,
        };
        let mut store = InProcessCounters::new(AlgorithmKind::Gcra, quota, &local).unwrap();
        let admitted = (0..6)
            .filter(|i| store.check(i % 2, "k", now, 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 4);
        let mut shared =
            InProcessCounters::new(AlgorithmKind::Gcra, quota, &local.shared()).unwrap();
        let admitted = (0..6)
            .filter(|i| shared.check(i % 2, "k", now, 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 2);
        assert!(matches!(
            shared.check(0, "k", now, 3),
            Err(CounterError::Check(CheckError::InsufficientCapacity {
                cost: 3,
                capacity: 2
            }))
        ));
    }
}
