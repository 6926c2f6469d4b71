//! The simulation engine: traffic -> decisions -> summary, as pure functions.
//!
//! [`simulate`] replays requests in time order through a [`Balancer`] and a [`CounterStore`];
//! [`summarize`] turns the outcomes into totals, per-column counts and the true-rate metric
//! ([`PeakWindow`]); [`run_in_memory`] does both for one algorithm with in-process counters,
//! [`run_with`] with counters from any [`CounterStore`] factory (e.g. Redis).

use std::collections::HashMap;

use floodgate_core::{AlgorithmKind, CheckError, Decision, Micros, Quota, Timestamp};

use super::error::Error;
use super::setup::{Balancer, CounterError, CounterMode, CounterStore, InProcessCounters, Setup};
use super::traffic::Request;

/// The decision for one request of the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Index of the request in the replayed slice.
    pub request: usize,
    /// The instance (0-based) the balancer sent it to.
    pub instance: usize,
    /// The decision, or [`CheckError::InsufficientCapacity`] when the cost can never fit.
    pub result: Result<Decision, CheckError>,
    /// With `--max-wait`, an admitted request's wait: microseconds from its arrival until the
    /// slot it was reserved (0: at once). `None` for a plain check and for a denial.
    pub wait: Option<Micros>,
}

/// The first window edge after the Unix epoch's 1.7 x 10^15 us (November 2023) that is a multiple
/// of `period`: simulation time 0 maps to it, so simulation time `k x period` is a window edge
/// for the clock-aligned fixed and sliding windows.
pub fn epoch_base(period: Micros) -> Timestamp {
    const START: Timestamp = 1_700_000_000_000_000;
    START.div_ceil(period.max(1)) * period.max(1)
}

/// Replays `requests` (sorted by `t_us`) at `base + t_us`, each through the instance `balancer`
/// picks, deciding with `store`. Returns one [`Outcome`] per request, in order.
///
/// # Errors
/// The first [`CounterError::Store`]: a store that failed cannot finish the replay.
pub fn simulate(
    requests: &[Request],
    store: &mut dyn CounterStore,
    balancer: &mut Balancer,
    base: Timestamp,
) -> Result<Vec<Outcome>, Error> {
    simulate_waiting(requests, store, balancer, base, None)
}

/// [`simulate`] where, with `max_wait` (microseconds; `--max-wait`), every request may wait:
/// it is reserved for the earliest slot within `max_wait` ([`CounterStore::reserve`]) and runs
/// then ([`Outcome::wait`]); only a request that would wait longer is denied (a queue with a
/// bounded wait instead of an immediate rejection).
///
/// # Errors
/// As [`simulate`].
pub fn simulate_waiting(
    requests: &[Request],
    store: &mut dyn CounterStore,
    balancer: &mut Balancer,
    base: Timestamp,
    max_wait: Option<Micros>,
) -> Result<Vec<Outcome>, Error> {
    requests
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let instance = balancer.pick();
            let now = base + r.t_us;
            let decided = match max_wait {
                None => store
                    .check(instance, &r.key, now, r.cost)
                    .map(|d| (d, None)),
                Some(max_wait) => store
                    .reserve(instance, &r.key, now, r.cost, max_wait)
                    .map(|reserved| (reserved.decision, reserved.wait)),
            };
            let (result, wait) = match decided {
                Ok((decision, wait)) => (Ok(decision), wait),
                Err(CounterError::Check(e)) => (Err(e), None),
                Err(CounterError::Store(e)) => return Err(Error::Store(e)),
            };
            Ok(Outcome {
                request: index,
                instance,
                result,
                wait,
            })
        })
        .collect()
}

/// The most units admitted for one key within any window `[start, start + period)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeakWindow {
    /// The key.
    pub key: String,
    /// Units admitted in the window.
    pub units: u64,
    /// Simulation time of the first admission in the window, in microseconds.
    pub start_us: Micros,
}

/// Requests in one chart column `[start_us, start_us + column_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Column {
    /// Simulation time the column starts at, in microseconds.
    pub start_us: Micros,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub rejected: u64,
    /// Requests refused as impossible (cost above capacity).
    pub impossible: u64,
    /// Units admitted to run in this column (at their scheduled time with `--max-wait`).
    pub units_admitted: u64,
    /// Of the admitted, those that waited for their slot (`--max-wait`).
    pub queued: u64,
}

/// Admissions of one traffic source (`calm`, `spike`, `burst-1` ...).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceCount {
    /// The source name.
    pub source: &'static str,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub rejected: u64,
    /// Requests refused as impossible.
    pub impossible: u64,
}

/// What one run admitted: totals, per source, per instance, per column, and the true rate.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// Requests replayed.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied (a plain denial; the client may retry later).
    pub rejected: u64,
    /// Requests refused because their cost exceeds the capacity (`insufficient_capacity`).
    pub impossible: u64,
    /// Units admitted (sum of the admitted costs).
    pub units_admitted: u64,
    /// Units denied or refused.
    pub units_rejected: u64,
    /// The true rate: the most units admitted for one key in any window of length `period`
    /// (exact, over all decision times); `None` when nothing was admitted.
    pub max_in_period: Option<PeakWindow>,
    /// `max_in_period.units / limit`: 1.0 means the declared limit held, 2.0 twice the limit.
    pub over_admission: f64,
    /// With `--max-wait`: requests admitted after waiting for their slot (a wait above 0).
    pub queued: u64,
    /// With `--max-wait`: the longest wait of an admitted request, microseconds (0 without).
    pub longest_wait_us: Micros,
    /// With `--max-wait`: the sum of the admitted requests' waits, microseconds.
    pub total_wait_us: Micros,
    /// Requests admitted by each instance.
    pub admitted_per_instance: Vec<u64>,
    /// Counts per traffic source, in order of first appearance.
    pub per_source: Vec<SourceCount>,
    /// Width of each chart column, in microseconds.
    pub column_us: Micros,
    /// One entry per column, covering the traffic's span.
    pub columns: Vec<Column>,
}

/// Summarizes `outcomes` of `requests` for `quota` (its limit and period define the true-rate
/// window), with chart columns of `column_us` covering `[0, span_us)` and, with waits, up to
/// the latest admitted request's run time: `(span_us + longest wait) / column_us` columns,
/// counted before they are allocated (the caller bounds that, as [`crate::build_report`] does
/// with [`crate::MAX_COLUMNS`]).
// Over 120 lines: one pass over the outcomes fills every total, column and true-rate window at
// once; split, the pass would be repeated or its accumulators passed from piece to piece.
pub fn summarize(
    requests: &[Request],
    outcomes: &[Outcome],
    quota: &Quota,
    instances: usize,
    column_us: Micros,
    span_us: Micros,
) -> Summary {
    let column_us = column_us.max(1);
    let last = requests.last().map_or(0, |r| r.t_us + 1);
    // An admitted request is counted in the column it runs in, after its wait: the columns
    // are counted from the latest run time once, before any is allocated.
    let latest_run = outcomes
        .iter()
        .filter(|o| matches!(o.result, Ok(d) if d.allowed))
        .map(|o| {
            requests[o.request]
                .t_us
                .saturating_add(o.wait.unwrap_or(0))
                .saturating_add(1)
        })
        .max()
        .unwrap_or(0);
    let n_columns = span_us.max(last).max(latest_run).div_ceil(column_us).max(1) as usize;
    let mut columns: Vec<Column> = (0..n_columns)
        .map(|i| Column {
            start_us: i as u64 * column_us,
            ..Column::default()
        })
        .collect();
    let mut summary = Summary {
        requests: requests.len() as u64,
        admitted: 0,
        rejected: 0,
        impossible: 0,
        units_admitted: 0,
        units_rejected: 0,
        max_in_period: None,
        over_admission: 0.0,
        queued: 0,
        longest_wait_us: 0,
        total_wait_us: 0,
        admitted_per_instance: vec![0; instances.max(1)],
        per_source: Vec::new(),
        column_us,
        columns: Vec::new(),
    };
    // Admitted (time, cost) per key, in time order, for the true-rate window.
    let mut admitted_by_key: HashMap<&str, Vec<(Micros, u64)>> = HashMap::new();
    for outcome in outcomes {
        let request = &requests[outcome.request];
        let arrival = (request.t_us / column_us) as usize;
        let source = match summary
            .per_source
            .iter()
            .position(|s| s.source == request.source)
        {
            Some(i) => &mut summary.per_source[i],
            None => {
                summary.per_source.push(SourceCount {
                    source: request.source,
                    admitted: 0,
                    rejected: 0,
                    impossible: 0,
                });
                summary.per_source.last_mut().expect("just pushed")
            }
        };
        match outcome.result {
            Ok(d) if d.allowed => {
                // An admitted request runs at its scheduled time: counted in that column.
                let wait = outcome.wait.unwrap_or(0);
                let runs_at = request.t_us.saturating_add(wait);
                let index = (runs_at / column_us) as usize;
                // Counted above: `index < n_columns`.
                let Some(column) = columns.get_mut(index) else {
                    continue;
                };
                summary.admitted += 1;
                summary.units_admitted += request.cost;
                column.admitted += 1;
                column.units_admitted += request.cost;
                if wait > 0 {
                    summary.queued += 1;
                    column.queued += 1;
                    summary.longest_wait_us = summary.longest_wait_us.max(wait);
                    summary.total_wait_us += wait;
                }
                source.admitted += 1;
                if let Some(count) = summary.admitted_per_instance.get_mut(outcome.instance) {
                    *count += 1;
                }
                admitted_by_key
                    .entry(request.key.as_str())
                    .or_default()
                    .push((runs_at, request.cost));
            }
            Ok(_) => {
                summary.rejected += 1;
                summary.units_rejected += request.cost;
                columns[arrival].rejected += 1;
                source.rejected += 1;
            }
            // Cost above capacity (or any future refusal): an error, not a denial.
            Err(_) => {
                summary.impossible += 1;
                summary.units_rejected += request.cost;
                columns[arrival].impossible += 1;
                source.impossible += 1;
            }
        }
    }
    let mut keys: Vec<_> = admitted_by_key.into_iter().collect();
    // Deterministic tie-breaking between keys: alphabetical.
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, mut admissions) in keys {
        // In time order (scheduled times of separate counters can interleave).
        admissions.sort_by_key(|a| a.0);
        let (units, start_us) = max_in_window(&admissions, quota.period());
        if summary
            .max_in_period
            .as_ref()
            .is_none_or(|p| units > p.units)
        {
            summary.max_in_period = Some(PeakWindow {
                key: key.to_string(),
                units,
                start_us,
            });
        }
    }
    summary.over_admission = summary
        .max_in_period
        .as_ref()
        .map_or(0.0, |p| p.units as f64 / quota.limit() as f64);
    summary.columns = columns;
    summary
}

/// The most units in any half-open window `[t, t + period)` over `admissions` (sorted by time),
/// with the time of the window's first admission. Two pointers, O(n). `(0, 0)` when empty.
pub fn max_in_window(admissions: &[(Micros, u64)], period: Micros) -> (u64, Micros) {
    let (mut best, mut best_start) = (0, 0);
    let (mut head, mut sum) = (0, 0);
    for &(t, cost) in admissions {
        sum += cost;
        while t - admissions[head].0 >= period {
            sum -= admissions[head].1;
            head += 1;
        }
        if sum > best {
            best = sum;
            best_start = admissions[head].0;
        }
    }
    (best, best_start)
}

/// One algorithm run over one traffic and setup.
#[derive(Debug, Clone)]
pub struct Run {
    /// The algorithm.
    pub kind: AlgorithmKind,
    /// One outcome per request.
    pub outcomes: Vec<Outcome>,
    /// The summary.
    pub summary: Summary,
    /// For several instances without a shared counter: what one shared counter admits on the
    /// same traffic (requests, most units in any period), the exact reference.
    pub shared_reference: Option<(u64, u64)>,
    /// With `--max-wait`: the same traffic and counters without waiting, every request that
    /// does not fit at once rejected (queue vs reject).
    pub reject_reference: Option<RejectReference>,
}

/// What the same run admits when nothing waits ([`Run::reject_reference`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RejectReference {
    /// Requests admitted.
    pub admitted: u64,
    /// Requests rejected (denied or impossible).
    pub rejected: u64,
    /// Units admitted.
    pub units_admitted: u64,
    /// The most units admitted for one key in any period.
    pub max_in_period: u64,
}

/// Runs `kind` on `quota` over `requests` with in-process counters laid out by `setup`.
///
/// # Errors
/// [`SetupError`](super::setup::SetupError) when the setup cannot be built (see
/// [`InProcessCounters::new`]).
pub fn run_in_memory(
    requests: &[Request],
    kind: AlgorithmKind,
    quota: Quota,
    setup: Setup,
    column_us: Micros,
    span_us: Micros,
) -> Result<Run, Error> {
    run_in_memory_waiting(requests, kind, quota, setup, column_us, span_us, None)
}

/// [`run_in_memory`] with `max_wait` ([`simulate_waiting`]).
///
/// # Errors
/// As [`run_in_memory`].
pub fn run_in_memory_waiting(
    requests: &[Request],
    kind: AlgorithmKind,
    quota: Quota,
    setup: Setup,
    column_us: Micros,
    span_us: Micros,
    max_wait: Option<Micros>,
) -> Result<Run, Error> {
    let shape = RunShape {
        quota,
        setup,
        column_us,
        span_us,
        max_wait,
    };
    run_shaped(requests, kind, shape, |setup| {
        Ok(Box::new(InProcessCounters::new(kind, quota, setup)?))
    })
}

/// The parameters of one run besides the traffic, the algorithm and the counters.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    /// The declared quota.
    pub quota: Quota,
    /// The deployment.
    pub setup: Setup,
    /// Chart column width, microseconds.
    pub column_us: Micros,
    /// The traffic's span, microseconds.
    pub span_us: Micros,
    /// `--max-wait`, microseconds: requests wait up to it instead of being rejected.
    pub max_wait: Option<Micros>,
}

/// Runs `kind` on `quota` over `requests` with the counters `new_store` builds for a setup:
/// once for `setup` and, when it has several instances without a shared counter, once more
/// for [`Setup::shared`] (the exact reference). Every call must return fresh counters.
///
/// # Errors
/// What `new_store` returns, and the first store failure of a replay (see [`simulate`]).
pub fn run_with(
    requests: &[Request],
    kind: AlgorithmKind,
    quota: Quota,
    setup: Setup,
    column_us: Micros,
    span_us: Micros,
    new_store: impl FnMut(&Setup) -> Result<Box<dyn CounterStore>, Error>,
) -> Result<Run, Error> {
    let shape = RunShape {
        quota,
        setup,
        column_us,
        span_us,
        max_wait: None,
    };
    run_shaped(requests, kind, shape, new_store)
}

/// [`run_with`] for a [`RunShape`]: with `max_wait`, requests wait ([`simulate_waiting`]) and
/// the run carries the [`RejectReference`] of the same traffic without waiting.
///
/// # Errors
/// As [`run_with`].
pub fn run_shaped(
    requests: &[Request],
    kind: AlgorithmKind,
    shape: RunShape,
    mut new_store: impl FnMut(&Setup) -> Result<Box<dyn CounterStore>, Error>,
) -> Result<Run, Error> {
    let RunShape {
        quota,
        setup,
        column_us,
        span_us,
        max_wait,
    } = shape;
    // Replays the traffic on counters laid out by `setup` and summarizes the decisions.
    let mut replay =
        |setup: &Setup, max_wait: Option<Micros>| -> Result<(Vec<Outcome>, Summary), Error> {
            let mut store = new_store(setup)?;
            let mut balancer = Balancer::new(setup.instances, setup.balance);
            let outcomes = simulate_waiting(
                requests,
                store.as_mut(),
                &mut balancer,
                epoch_base(quota.period()),
                max_wait,
            )?;
            let summary = summarize(
                requests,
                &outcomes,
                &quota,
                setup.instances,
                column_us,
                span_us,
            );
            Ok((outcomes, summary))
        };
    let (outcomes, summary) = replay(&setup, max_wait)?;
    let shared_reference = if setup.instances > 1 && setup.counter != CounterMode::Shared {
        let (_, s) = replay(&setup.shared(), max_wait)?;
        Some((s.admitted, s.max_in_period.map_or(0, |p| p.units)))
    } else {
        None
    };
    let reject_reference = match max_wait {
        Some(_) => {
            let (_, s) = replay(&setup, None)?;
            Some(RejectReference {
                admitted: s.admitted,
                rejected: s.rejected + s.impossible,
                units_admitted: s.units_admitted,
                max_in_period: s.max_in_period.map_or(0, |p| p.units),
            })
        }
        None => None,
    };
    Ok(Run {
        kind,
        outcomes,
        summary,
        shared_reference,
        reject_reference,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::Balance;
    use crate::traffic::{Boundary, Flood};

    const SINGLE: Setup = Setup {
        instances: 1,
        counter: CounterMode::Local,
        balance: Balance::RoundRobin,
    };

    #[test]
    fn epoch_base_is_period_aligned() {
        assert_eq!(epoch_base(1_000_000), 1_700_000_000_000_000);
        let minute = 60_000_000;
        assert_eq!(epoch_base(minute) % minute, 0);
        assert!(epoch_base(minute) >= 1_700_000_000_000_000);
        assert!(epoch_base(minute) - 1_700_000_000_000_000 < minute);
    }

    #[test]
    fn max_in_window_is_half_open_and_exact() {
        // 100 at 0.95 s and 100 at 1.05 s are 0.1 s apart: one 1 s window holds all 200.
        let a = [(950_000, 100), (1_050_000, 100)];
        assert_eq!(max_in_window(&a, 1_000_000), (200, 950_000));
        // Exactly one period apart: never in the same half-open window.
        let b = [(0, 5), (1_000_000, 5), (1_500_000, 1)];
        assert_eq!(max_in_window(&b, 1_000_000), (6, 1_000_000));
        assert_eq!(max_in_window(&[], 1_000_000), (0, 0));
    }

    fn request(t_us: Micros, cost: u64) -> Request {
        Request {
            t_us,
            key: "k".into(),
            cost,
            source: "trace",
        }
    }

    #[test]
    fn gcra_boundary_admits_limit_plus_refill() {
        // GCRA 100/s (burst 100): 100 at 0.95 s, then 0.1 s refills 10 more.
        let quota: Quota = "100/s".parse().unwrap();
        let traffic = Boundary::for_quota(&quota).traffic().unwrap();
        let run = run_in_memory(
            &traffic.requests,
            AlgorithmKind::Gcra,
            quota,
            SINGLE,
            1_000_000,
            traffic.span_us,
        )
        .unwrap();
        let s = &run.summary;
        assert_eq!((s.admitted, s.rejected, s.impossible), (110, 90, 0));
        assert_eq!(s.max_in_period.as_ref().unwrap().units, 110);
        assert_eq!(s.max_in_period.as_ref().unwrap().start_us, 950_000);
        assert!((s.over_admission - 1.1).abs() < 1e-12);
        let cols: Vec<_> = s.columns.iter().map(|c| (c.admitted, c.rejected)).collect();
        assert_eq!(cols, [(100, 0), (10, 90)]);
        assert_eq!(s.per_source[0].source, "burst-1");
        assert_eq!(
            (s.per_source[1].admitted, s.per_source[1].rejected),
            (10, 90)
        );
        assert!(run.shared_reference.is_none());
    }

    #[test]
    fn gcra_local_counters_multiply_and_shared_does_not() {
        // 10/10s (T = 1 s, tau = 10 s), flood of one request per 0.1 s for 10 s. Shared: after k
        // admissions tat = k s, so request k at 0.1k s is admitted while k + 1 - 0.1k <= 10,
        // i.e. k = 0..=10 (11), then one each time now reaches tat - 9 s: 2 s .. 9 s (8): 19.
        // Local: instance 0 sees one request per 0.3 s: k + 1 - 0.3k <= 10 gives 13, then
        // 4.2, 5.1, 6.0, 7.2, 8.1, 9.0 s: 19 again (instances 1 and 2 likewise).
        let quota: Quota = "10/10s".parse().unwrap();
        let traffic = Flood::for_quota(&quota).traffic().unwrap();
        let setup = Setup {
            instances: 3,
            counter: CounterMode::Local,
            balance: Balance::RoundRobin,
        };
        let run = run_in_memory(
            &traffic.requests,
            AlgorithmKind::Gcra,
            quota,
            setup,
            1_000_000,
            traffic.span_us,
        )
        .unwrap();
        assert_eq!(run.shared_reference, Some((19, 19)));
        assert_eq!(run.summary.admitted, 3 * 19);
        assert_eq!(run.summary.admitted_per_instance, [19, 19, 19]);
    }

    #[test]
    fn impossible_cost_is_not_a_denial() {
        let quota: Quota = "10/s".parse().unwrap();
        let requests = [request(0, 11), request(1, 10), request(2, 1)];
        let run =
            run_in_memory(&requests, AlgorithmKind::Gcra, quota, SINGLE, 1_000_000, 3).unwrap();
        assert!(matches!(
            run.outcomes[0].result,
            Err(CheckError::InsufficientCapacity {
                cost: 11,
                capacity: 10
            })
        ));
        assert!(matches!(run.outcomes[1].result, Ok(d) if d.allowed));
        assert!(matches!(run.outcomes[2].result, Ok(d) if !d.allowed));
        let s = &run.summary;
        assert_eq!((s.admitted, s.rejected, s.impossible), (1, 1, 1));
        assert_eq!((s.units_admitted, s.units_rejected), (10, 12));
        assert_eq!(s.columns[0].impossible, 1);
    }
}

#[cfg(test)]
mod properties {
    use floodgate_core::{AlgorithmKind, Quota};
    use proptest::prelude::*;

    use super::*;
    use crate::setup::Balance;

    fn traffic() -> impl Strategy<Value = Vec<Request>> {
        prop::collection::vec((0u64..3_000_000, 0usize..3, 1u64..4), 1..120).prop_map(|mut v| {
            v.sort_by_key(|r| r.0);
            v.into_iter()
                .map(|(t_us, key, cost)| Request {
                    t_us,
                    key: format!("k{key}"),
                    cost,
                    source: "trace",
                })
                .collect()
        })
    }

    fn setup(instances: usize, counter: CounterMode, balance: Balance) -> Setup {
        Setup {
            instances,
            counter,
            balance,
        }
    }

    proptest! {
        /// A shared counter behind any number of instances decides exactly like one instance,
        /// and the sliding log never admits more than the limit in any period.
        #[test]
        fn shared_counter_equals_one_instance(
            requests in traffic(),
            limit in 1u64..8,
            instances in 1usize..5,
            kind_index in 0usize..6,
            skewed in any::<bool>(),
        ) {
            let quota = Quota::new(limit, 1_000_000).unwrap();
            let kind = AlgorithmKind::ALL[kind_index];
            let balance = if skewed { Balance::Skewed } else { Balance::RoundRobin };
            let one = run_in_memory(&requests, kind, quota, setup(1, CounterMode::Local, balance), 1_000_000, 3_000_000).unwrap();
            let shared = run_in_memory(&requests, kind, quota, setup(instances, CounterMode::Shared, balance), 1_000_000, 3_000_000).unwrap();
            let results = |run: &Run| run.outcomes.iter().map(|o| o.result).collect::<Vec<_>>();
            prop_assert_eq!(results(&one), results(&shared));
            prop_assert_eq!(shared.summary.admitted, one.summary.admitted);
            if kind == AlgorithmKind::SlidingLog {
                prop_assert!(one.summary.max_in_period.map_or(0, |p| p.units) <= limit);
            }
            // Local counters report the shared reference, and per-instance counts add up.
            let local = run_in_memory(&requests, kind, quota, setup(instances, CounterMode::Local, balance), 1_000_000, 3_000_000).unwrap();
            prop_assert_eq!(local.shared_reference.map(|r| r.0), (instances > 1).then_some(shared.summary.admitted));
            let total: u64 = local.summary.admitted_per_instance.iter().sum();
            prop_assert_eq!(total, local.summary.admitted);
        }

        /// The two-pointer true rate equals a brute-force maximum over every window start.
        #[test]
        fn max_in_window_matches_brute_force(
            mut admissions in prop::collection::vec((0u64..5_000, 1u64..5), 0..60),
            period in 1u64..2_000,
        ) {
            admissions.sort_by_key(|a| a.0);
            let brute = admissions
                .iter()
                .map(|&(start, _)| {
                    admissions
                        .iter()
                        .filter(|&&(t, _)| t >= start && t - start < period)
                        .map(|&(_, c)| c)
                        .sum::<u64>()
                })
                .max()
                .unwrap_or(0);
            prop_assert_eq!(max_in_window(&admissions, period).0, brute);
        }
    }
}
