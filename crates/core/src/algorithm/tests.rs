//! Cross-algorithm tests: properties every algorithm must hold, run on all six through
//! [`Policy`], plus the properties of one family (the buckets' rate bound and their equivalence
//! to GCRA, the sliding log's exactness).
//!
//! Each algorithm gets its own module (`tests::gcra::no_drift_7_per_second`, ...), so a filter
//! such as `cargo test -p floodgate-core tests::token_bucket` runs one algorithm.
//!
//! Terms used below:
//! - *Full demand*: a client that, at every microsecond, sends requests of cost 1 until one is
//!   denied. It is simulated without visiting every microsecond: after a denial it jumps to
//!   `now + retry_after`, which is the next microsecond at which anything can be admitted
//!   because `retry_after` is exact (a property tested here too).
//! - *One hour* for the windows is the half-open interval `[t0, t0 + 1 h)` with `t0` on a window
//!   edge: exactly 3,600 whole one-second windows. For the buckets it is the closed interval
//!   `[t0, t0 + 1 h]`: their bound `burst + elapsed x rate` counts both end points (the bucket
//!   starts full at `t0`, and the unit that refills exactly at `t0 + 1 h` is admitted then).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::test_support::T0;
use crate::quota::{MAX_EXACT, MAX_PERIOD};
use crate::{AlgorithmKind, CheckError, Decision, Policy, Quota, QuotaError, State, Timestamp};

mod reservations;

/// The largest timestamp the tests use: below 2^53, the integer limit of a Lua double.
const MAX_TS: Timestamp = (1 << 53) - 1;

const HOUR: u64 = 3_600_000_000;

fn policy(kind: AlgorithmKind, quota: &str) -> Policy {
    Policy::new(kind, quota.parse().unwrap()).unwrap()
}

fn is_bucket(kind: AlgorithmKind) -> bool {
    matches!(
        kind,
        AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra
    )
}

/// Admission times of a full-demand client (see the module docs) from `start` through `end`
/// (inclusive when `inclusive`).
fn full_demand(p: &Policy, start: Timestamp, end: Timestamp, inclusive: bool) -> Vec<Timestamp> {
    let mut state = p.initial_state();
    let mut admitted = Vec::new();
    let mut now = start;
    while now < end || (inclusive && now == end) {
        let d = p.check(&mut state, now, 1).unwrap();
        if d.allowed {
            admitted.push(now);
        } else {
            // A zero retry_after would spin forever; it would also be a bug (denied "now").
            let retry = d.retry_after.expect("a denial carries retry_after");
            assert!(retry >= 1, "{}: denied with retry_after 0", p.kind());
            now += retry;
        }
    }
    admitted
}

/// Units a full-demand client gets over `hours` under `quota`: `limit x hours x (1 h / period)`
/// for the windows, plus `burst` for the buckets (see the module docs for the intervals).
fn assert_no_drift(kind: AlgorithmKind, quota: &str, hours: u64, expected_rate_part: usize) {
    let p = policy(kind, quota);
    let bucket = is_bucket(kind);
    let times = full_demand(&p, T0, T0 + hours * HOUR, bucket);
    let expected = expected_rate_part
        + if bucket {
            p.quota().burst() as usize
        } else {
            0
        };
    assert_eq!(times.len(), expected, "{kind} {quota} over {hours} h");
}

fn no_drift_7_per_second(kind: AlgorithmKind) {
    // 7/s x 3,600 s = 25,200 (+ burst 7 for the buckets = 25,207).
    assert_no_drift(kind, "7/s", 1, 25_200);
    if is_bucket(kind) {
        // After the burst of 7 at t0, unit k (k = 1..=25,200) refills at exactly k x 1e6/7 us,
        // and is admitted at the first whole microsecond at or after it.
        let times = full_demand(&policy(kind, "7/s"), T0, T0 + HOUR, true);
        assert!(times[..7].iter().all(|&t| t == T0));
        for (k, &t) in (1u64..).zip(&times[7..]) {
            assert_eq!(t, T0 + (k * 1_000_000).div_ceil(7), "{kind} unit {k}");
        }
    }
}

fn fractional_interval_is_exact(kind: AlgorithmKind) {
    // 3 per 20 s: 6,666,666.67 us per unit. 3 x 180 windows = 540 per hour; the buckets add
    // their burst of 3 (their unit 540 refills at exactly 540 x 20/3 s = 3,600 s).
    assert_no_drift(kind, "3/20s", 1, 540);
    // 7 per 1.5 s: 214,285.71 us per unit; 7 x 2,400 = 16,800 per hour.
    assert_no_drift(kind, "7/1500ms", 1, 16_800);
}

fn one_per_hour_never_rounds_to_zero(kind: AlgorithmKind) {
    let p = policy(kind, "1/h");
    let mut s = p.initial_state();
    assert!(p.check(&mut s, T0, 1).unwrap().allowed);
    let d = p.check(&mut s, T0, 1).unwrap();
    assert!(!d.allowed);
    let retry = d.retry_after.unwrap();
    if kind == AlgorithmKind::SlidingWindow {
        // The counter's estimate decays over the next window: not before one hour, not after two.
        assert!((HOUR..=2 * HOUR).contains(&retry), "{retry}");
    } else {
        assert_eq!(retry, HOUR);
    }
    // One second (and one microsecond before the retry) later: still nothing.
    assert!(!p.check(&mut s, T0 + 1_000_000, 1).unwrap().allowed);
    assert!(!p.check(&mut s, T0 + retry - 1, 1).unwrap().allowed);
    assert!(p.check(&mut s, T0 + retry, 1).unwrap().allowed);
    // Ten hours of full demand: exactly 10 (+ 1 burst for the buckets).
    assert_no_drift(kind, "1/h", 10, 10);
}

fn huge_quotas_are_exact_or_rejected(kind: AlgorithmKind) {
    // The bounds themselves are accepted by Quota, one more is rejected.
    let biggest = [
        Quota::new(MAX_EXACT, 1).unwrap(),
        Quota::new(1, MAX_PERIOD).unwrap(),
        Quota::with_burst(1, 1, MAX_EXACT).unwrap(),
    ];
    assert!(matches!(
        Quota::new(MAX_EXACT + 1, 1),
        Err(QuotaError::NotExact { .. })
    ));
    assert!(matches!(
        Quota::new(1, MAX_PERIOD + 1),
        Err(QuotaError::PeriodTooLong { .. })
    ));
    assert!(matches!(
        Quota::with_burst(1, 2, MAX_EXACT),
        Err(QuotaError::NotExact { .. })
    ));
    for quota in biggest {
        match Policy::new(kind, quota) {
            Err(QuotaError::NotExact { .. }) => {}
            Err(e) => panic!("{kind} {quota}: unexpected error {e}"),
            Ok(p) => exercise_exactly(&p, T0).unwrap(),
        }
    }
}

/// A fresh key admits exactly `capacity` units at once and not one more, at any time up to
/// [`MAX_TS`], and reports it exactly.
fn exercise_exactly(p: &Policy, now: Timestamp) -> Result<(), TestCaseError> {
    let cap = p.capacity();
    // A sliding log may keep one entry per unit: take a large but bounded bite of huge limits.
    let cost = if p.kind() == AlgorithmKind::SlidingLog {
        cap.min(4_096)
    } else {
        cap
    };
    let mut s = p.initial_state();
    let fresh = p.peek(&s, now, 0).unwrap();
    prop_assert_eq!((fresh.allowed, fresh.remaining), (true, cap));
    let d = p.check(&mut s, now, cost).unwrap();
    prop_assert!(d.allowed);
    prop_assert_eq!(d.remaining, cap - cost);
    if cost == cap {
        let denied = p.check(&mut s, now, 1).unwrap();
        prop_assert!(!denied.allowed);
        let retry = denied.retry_after.unwrap();
        prop_assert!(retry >= 1);
        prop_assert!(p.peek(&s, now + retry, 1).unwrap().allowed);
    }
    // Far in the future (still below 2^53) the key is fresh again, without overflow.
    let later = p.peek(&s, MAX_TS, 0).unwrap();
    prop_assert_eq!((later.remaining, later.reset_after), (cap, 0));
    Ok(())
}

fn cost_above_capacity_is_an_error(kind: AlgorithmKind) {
    let p = policy(kind, "5/s burst 5");
    let mut s = p.initial_state();
    assert!(p.check(&mut s, T0, 2).unwrap().allowed);
    let before = s.clone();
    let err = CheckError::InsufficientCapacity {
        cost: 6,
        capacity: 5,
    };
    assert_eq!(p.check(&mut s, T0, 6), Err(err));
    assert_eq!(p.peek(&s, T0, 6), Err(err));
    assert_eq!(s, before);
}

// ---------------------------------------------------------------------------------------------
// Random traffic

/// One random request: how far time moves before it, its cost and whether it is a peek.
#[derive(Debug, Clone, Copy)]
struct Op {
    /// Selects the size of the time step (see [`Op::step`]).
    step_kind: u8,
    step_raw: u64,
    cost_raw: u64,
    peek: bool,
}

impl Op {
    /// A time step of 0, a few microseconds, up to one period, or up to three periods.
    fn step(&self, period: u64) -> u64 {
        match self.step_kind % 5 {
            0 => 0,
            1 => self.step_raw % 10,
            2 | 3 => self.step_raw % period.saturating_add(1),
            _ => self.step_raw % period.saturating_mul(3).saturating_add(1),
        }
    }

    /// A cost from 0 to `capacity`, and now and then `capacity + 1`.
    fn cost(&self, capacity: u64) -> u64 {
        self.cost_raw % capacity.saturating_add(2)
    }
}

fn op() -> impl Strategy<Value = Op> {
    (
        any::<u8>(),
        any::<u64>(),
        any::<u64>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(step_kind, step_raw, cost_raw, peek)| Op {
            step_kind,
            step_raw,
            cost_raw,
            peek,
        })
}

/// Small quotas with odd periods (fractional emission intervals) and bursts apart from limits.
fn small_quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=20,
        prop_oneof![
            1u64..=10,
            Just(1_000_000u64),
            Just(20_000_000u64),
            Just(HOUR),
            1u64..=10_000_000
        ],
        1u64..=30,
    )
        .prop_filter_map("not exact", |(limit, period, burst)| {
            Quota::with_burst(limit, period, burst)
                .ok()
                .filter(|q| q.check_bucket_exact().is_ok())
        })
}

/// Large quotas: any limit up to 2^40 and period up to the maximum, with the largest exact burst
/// or a small one.
fn big_quota() -> impl Strategy<Value = Quota> {
    (1u64..=(1 << 40), 1u64..=MAX_PERIOD).prop_flat_map(|(limit, period)| {
        let numerator = period / crate::quota::gcd(limit, period);
        let max_burst = (MAX_EXACT / numerator).max(1);
        prop_oneof![1..=max_burst.min(50), Just(max_burst)]
            .prop_map(move |burst| Quota::with_burst(limit, period, burst).unwrap())
            .prop_filter("bursts the buckets refuse", |q| {
                q.check_bucket_exact().is_ok()
            })
    })
}

/// Up to 80 random requests for the bucket rate bound, each marked `true` (one in five) when
/// time steps backwards before it (see [`bucket_rate_bound`]).
fn moves() -> impl Strategy<Value = Vec<(bool, Op)>> {
    prop::collection::vec((prop::bool::weighted(0.2), op()), 1..80)
}

/// Where a run of random traffic starts: the present day, or close to the end of 2^53.
fn start() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        Just(T0),
        T0..(1u64 << 52),
        Just((1u64 << 53) - (1u64 << 47))
    ]
}

/// One request of a run, as made and answered.
#[derive(Debug, Clone)]
struct Step {
    now: Timestamp,
    cost: u64,
    peek: bool,
    before: State,
    result: Result<Decision, CheckError>,
}

/// Plays `ops` (time only moves forward) and checks, at every step, the rules every
/// algorithm obeys: a denial, a peek or an error leaves the state unchanged; `remaining <=
/// capacity`; cost 0 is always allowed; `retry_after` is `Some` exactly on denials;
/// `cost > capacity` is `InsufficientCapacity`.
fn play(p: &Policy, start: Timestamp, ops: &[Op]) -> Result<(Vec<Step>, State), TestCaseError> {
    let mut state = p.initial_state();
    let mut now = start;
    let mut steps = Vec::with_capacity(ops.len());
    let cap = p.capacity();
    for o in ops {
        now = now.saturating_add(o.step(p.quota().period())).min(MAX_TS);
        let cost = o.cost(cap);
        let before = state.clone();
        let result = if o.peek {
            p.peek(&state, now, cost)
        } else {
            p.check(&mut state, now, cost)
        };
        match &result {
            Err(e) => {
                prop_assert!(cost > cap);
                prop_assert_eq!(
                    *e,
                    CheckError::InsufficientCapacity {
                        cost,
                        capacity: cap
                    }
                );
                prop_assert_eq!(&state, &before);
            }
            Ok(d) => {
                prop_assert!(cost <= cap);
                prop_assert!(d.remaining <= cap, "remaining {} > {}", d.remaining, cap);
                prop_assert_eq!(d.limit, cap);
                prop_assert_eq!(d.allowed, d.retry_after.is_none());
                if cost == 0 {
                    prop_assert!(d.allowed, "cost 0 denied");
                }
                if !d.allowed || o.peek || cost == 0 {
                    prop_assert_eq!(&state, &before, "state moved without consuming");
                }
                if d.allowed && !o.peek && cost > 0 {
                    prop_assert_ne!(&state, &before, "admitted without consuming");
                }
            }
        }
        steps.push(Step {
            now,
            cost,
            peek: o.peek,
            before,
            result,
        });
    }
    Ok((steps, state))
}

fn invariants_hold(kind: AlgorithmKind, quota: Quota, start: Timestamp, ops: &[Op]) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    play(&p, start, ops)?;
    Ok(())
}

type TestResult = Result<(), TestCaseError>;

fn retry_after_is_exact(
    kind: AlgorithmKind,
    quota: Quota,
    start: Timestamp,
    ops: &[Op],
) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    let (steps, _) = play(&p, start, ops)?;
    for step in &steps {
        let Ok(d) = step.result else { continue };
        let Some(retry) = d.retry_after else { continue };
        prop_assert!(retry >= 1);
        let early = p
            .peek(&step.before, step.now + retry - 1, step.cost)
            .unwrap();
        prop_assert!(!early.allowed, "admitted 1 us before retry_after {}", retry);
        let on_time = p.peek(&step.before, step.now + retry, step.cost).unwrap();
        prop_assert!(on_time.allowed, "denied at retry_after {}", retry);
    }
    Ok(())
}

/// From any state, an earlier `now` than the latest one seen is never more generous than the
/// latest: fewer or equal `remaining`, and no admission the latest time would deny.
fn backwards_time_never_mints(
    kind: AlgorithmKind,
    quota: Quota,
    start: Timestamp,
    ops: &[Op],
    back: u64,
    cost_raw: u64,
) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    let (steps, state) = play(&p, start, ops)?;
    let latest = steps.last().map_or(start, |s| s.now);
    let earlier = latest.saturating_sub(back);
    let cost = cost_raw % (p.capacity() + 1);
    let at_latest = p.peek(&state, latest, cost).unwrap();
    let at_earlier = p.peek(&state, earlier, cost).unwrap();
    prop_assert!(at_earlier.remaining <= at_latest.remaining);
    prop_assert!(!at_earlier.allowed || at_latest.allowed);
    // And consuming at the earlier time leaves the key no better off at the latest time.
    let mut s = state.clone();
    if p.check(&mut s, earlier, cost).unwrap().allowed {
        let after = p.peek(&s, latest, 0).unwrap();
        prop_assert!(after.remaining <= p.peek(&state, latest, 0).unwrap().remaining);
    }
    Ok(())
}

/// After `reset_after` the key is fresh again (all capacity back, nothing to reset) at any
/// later time up to [`MAX_TS`], however long the gap; for the buckets not one microsecond
/// earlier.
fn long_idle_is_fresh(
    kind: AlgorithmKind,
    quota: Quota,
    start: Timestamp,
    ops: &[Op],
    gap_raw: u64,
) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    let (steps, state) = play(&p, start, ops)?;
    let latest = steps.last().map_or(start, |s| s.now);
    let reset = p.peek(&state, latest, 0).unwrap().reset_after;
    let fresh_at = latest + reset;
    prop_assert!(fresh_at <= MAX_TS);
    let gap = gap_raw % (MAX_TS - fresh_at + 1);
    let cap = p.capacity();
    for at in [fresh_at, fresh_at + gap, MAX_TS] {
        let d = p.peek(&state, at, 0).unwrap();
        prop_assert_eq!(
            (d.remaining, d.reset_after),
            (cap, 0),
            "at latest + {}",
            at - latest
        );
        let mut s = state.clone();
        prop_assert!(p.check(&mut s, at, cap).unwrap().allowed);
    }
    if is_bucket(kind) && reset > 0 {
        prop_assert!(p.peek(&state, fresh_at - 1, 0).unwrap().remaining < cap);
    }
    Ok(())
}

/// Buckets: over any run of requests `i..=j`, the units admitted are at most
/// `burst + (M - m) x limit / period`, where `m` is the earliest `now` in the run and `M` the
/// latest `now` seen up to `j`. Time may jump backwards here (`now` earlier than before): a stale
/// `now` counts as the time the bucket last moved to, so it never mints units. Compared exactly
/// in integers: `(admitted - burst) x period <= (M - m) x limit`.
fn bucket_rate_bound(kind: AlgorithmKind, quota: Quota, moves: &[(bool, Op)]) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    let cap = p.capacity();
    let mut state = p.initial_state();
    let mut now = T0;
    // (now, admitted units) per request.
    let mut log: Vec<(Timestamp, u64)> = Vec::new();
    for (backwards, o) in moves {
        let step = o.step(quota.period());
        now = if *backwards {
            now.saturating_sub(step)
        } else {
            now + step
        };
        let cost = o.cost(cap).min(cap);
        let d = p.check(&mut state, now, cost).unwrap();
        log.push((now, if d.allowed { cost } else { 0 }));
    }
    let (limit, period, burst) = (
        i128::from(quota.limit()),
        i128::from(quota.period()),
        i128::from(quota.burst()),
    );
    let mut latest = 0;
    for j in 0..log.len() {
        latest = latest.max(log[j].0);
        let (mut earliest, mut admitted) = (u64::MAX, 0u64);
        for i in (0..=j).rev() {
            earliest = earliest.min(log[i].0);
            admitted += log[i].1;
            let elapsed = i128::from(latest - earliest);
            prop_assert!(
                (i128::from(admitted) - burst) * period <= elapsed * limit,
                "requests {}..={}: {} admitted in {} us",
                i,
                j,
                admitted,
                elapsed
            );
        }
    }
    Ok(())
}

macro_rules! every_algorithm {
    ($($module:ident => $kind:ident),* $(,)?) => {$(
        mod $module {
            use super::*;
            const KIND: AlgorithmKind = AlgorithmKind::$kind;

            #[test]
            fn no_drift_7_per_second() {
                super::no_drift_7_per_second(KIND);
            }

            #[test]
            fn fractional_interval_is_exact() {
                super::fractional_interval_is_exact(KIND);
            }

            #[test]
            fn one_per_hour_never_rounds_to_zero() {
                super::one_per_hour_never_rounds_to_zero(KIND);
            }

            #[test]
            fn huge_quotas_are_exact_or_rejected() {
                super::huge_quotas_are_exact_or_rejected(KIND);
            }

            #[test]
            fn cost_above_capacity_is_an_error() {
                super::cost_above_capacity_is_an_error(KIND);
            }

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(256))]

                #[test]
                fn invariants_hold(
                    quota in small_quota(),
                    start in start(),
                    ops in prop::collection::vec(op(), 1..60),
                ) {
                    super::invariants_hold(KIND, quota, start, &ops)?;
                }

                #[test]
                fn retry_after_is_exact(
                    quota in small_quota(),
                    start in start(),
                    ops in prop::collection::vec(op(), 1..60),
                ) {
                    super::retry_after_is_exact(KIND, quota, start, &ops)?;
                }

                #[test]
                fn backwards_time_never_mints(
                    quota in small_quota(),
                    start in start(),
                    ops in prop::collection::vec(op(), 1..40),
                    back in prop_oneof![1u64..10, any::<u64>()],
                    cost_raw in any::<u64>(),
                ) {
                    super::backwards_time_never_mints(KIND, quota, start, &ops, back, cost_raw)?;
                }

                #[test]
                fn long_idle_is_fresh(
                    quota in small_quota(),
                    start in start(),
                    ops in prop::collection::vec(op(), 1..40),
                    gap_raw in any::<u64>(),
                ) {
                    super::long_idle_is_fresh(KIND, quota, start, &ops, gap_raw)?;
                }

                #[test]
                fn huge_quotas_are_exact_or_rejected_at_random(
                    limit in prop_oneof![1u64..=1_000, 1u64..=(1 << 52)],
                    period in prop_oneof![1u64..=1_000_000, 1u64..=(MAX_PERIOD + 10)],
                    burst in prop_oneof![1u64..=1_000, 1u64..=(1 << 52)],
                    now in T0..(1u64 << 52),
                ) {
                    if let Ok(quota) = Quota::with_burst(limit, period, burst) {
                        match Policy::new(KIND, quota) {
                            Ok(p) => exercise_exactly(&p, now)?,
                            Err(e) => {
                                let not_exact = matches!(e, QuotaError::NotExact { .. })
                                    || (is_bucket(KIND)
                                        && matches!(e, QuotaError::BurstTooSmall { .. }));
                                prop_assert!(not_exact, "{}", e);
                            }
                        }
                    }
                }
            }
        }
    )*};
}

every_algorithm! {
    fixed_window => FixedWindow,
    sliding_log => SlidingLog,
    sliding_window => SlidingWindow,
    token_bucket => TokenBucket,
    leaky_bucket => LeakyBucket,
    gcra => Gcra,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Token bucket, leaky bucket and GCRA give identical decisions (every field) for identical
    /// inputs: the same quota and the same (time step, cost, peek) sequence.
    #[test]
    fn buckets_and_gcra_decide_identically(
        quota in prop_oneof![small_quota(), big_quota()],
        start in start(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let kinds = [AlgorithmKind::Gcra, AlgorithmKind::TokenBucket, AlgorithmKind::LeakyBucket];
        let runs = kinds
            .iter()
            .map(|&k| play(&Policy::new(k, quota).unwrap(), start, &ops))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, gcra_step) in runs[0].0.iter().enumerate() {
            for (k, run) in kinds.iter().zip(&runs).skip(1) {
                prop_assert_eq!(
                    &run.0[i].result,
                    &gcra_step.result,
                    "{} differs from gcra at request {} (now {}, cost {}, peek {})",
                    k, i, gcra_step.now, gcra_step.cost, gcra_step.peek
                );
            }
        }
    }

    /// The same with time that also steps backwards (a stale `now`, issue 17): all three read
    /// a `now` before their last admission as that time, so they still decide identically.
    #[test]
    fn buckets_and_gcra_decide_identically_with_backwards_time(
        quota in prop_oneof![small_quota(), big_quota()],
        moves in moves(),
    ) {
        let kinds = [AlgorithmKind::Gcra, AlgorithmKind::TokenBucket, AlgorithmKind::LeakyBucket];
        let policies: Vec<Policy> =
            kinds.iter().map(|&k| Policy::new(k, quota).unwrap()).collect();
        let mut states: Vec<State> = policies.iter().map(Policy::initial_state).collect();
        let mut now = T0;
        for (i, (backwards, o)) in moves.iter().enumerate() {
            let step = o.step(quota.period());
            now = if *backwards { now.saturating_sub(step) } else { now + step };
            let cost = o.cost(quota.burst());
            let results: Vec<_> = policies
                .iter()
                .zip(&mut states)
                .map(|(p, s)| if o.peek { p.peek(s, now, cost) } else { p.check(s, now, cost) })
                .collect();
            for (k, r) in kinds.iter().zip(&results).skip(1) {
                prop_assert_eq!(r, &results[0], "{} differs from gcra at request {}", k, i);
            }
        }
    }

    #[test]
    fn token_bucket_never_exceeds_burst_plus_rate(
        quota in small_quota(),
        moves in moves(),
    ) {
        bucket_rate_bound(AlgorithmKind::TokenBucket, quota, &moves)?;
    }

    #[test]
    fn leaky_bucket_never_exceeds_burst_plus_rate(
        quota in small_quota(),
        moves in moves(),
    ) {
        bucket_rate_bound(AlgorithmKind::LeakyBucket, quota, &moves)?;
    }

    #[test]
    fn gcra_never_exceeds_burst_plus_rate(
        quota in small_quota(),
        moves in moves(),
    ) {
        bucket_rate_bound(AlgorithmKind::Gcra, quota, &moves)?;
    }

    /// The sliding log never admits more than `limit` units in any half-open window
    /// `[t, t + period)` (the busiest such window starts at an admission).
    #[test]
    fn sliding_log_never_exceeds_limit_in_any_period(
        quota in small_quota(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let p = Policy::new(AlgorithmKind::SlidingLog, quota).unwrap();
        let (steps, _) = play(&p, T0, &ops)?;
        let admitted: Vec<(Timestamp, u64)> = steps
            .iter()
            .filter(|s| !s.peek && matches!(s.result, Ok(d) if d.allowed))
            .map(|s| (s.now, s.cost))
            .collect();
        for &(t, _) in &admitted {
            let in_window: u64 = admitted
                .iter()
                .filter(|&&(u, _)| u >= t && u - t < quota.period())
                .map(|&(_, c)| c)
                .sum();
            prop_assert!(
                in_window <= quota.limit(),
                "{} units in [{}, {} + period)", in_window, t, t
            );
        }
    }
}

/// Issue 17, case 1: a caller whose time lags the stored state (a node whose clock was stepped
/// back 1 h, or 10 ms) must not be refused by GCRA with free capacity: with 4 of 5 cells free
/// GCRA admits exactly what the token and leaky buckets admit (4 more), as "no time passed".
#[test]
fn gcra_stale_now_admits_what_the_buckets_admit() {
    for lag in [HOUR, 10_000, 1] {
        for kind in [
            AlgorithmKind::Gcra,
            AlgorithmKind::TokenBucket,
            AlgorithmKind::LeakyBucket,
        ] {
            let p = policy(kind, "5/s");
            let mut s = p.initial_state();
            assert!(p.check(&mut s, T0, 1).unwrap().allowed);
            let admitted: Vec<Decision> = (0..5)
                .map(|_| p.check(&mut s, T0 - lag, 1).unwrap())
                .collect();
            let allowed = admitted.iter().filter(|d| d.allowed).count();
            assert_eq!(allowed, 4, "{kind} lag {lag}: {admitted:?}");
            // The fifth is refused exactly as at T0 itself: one cell frees 200 ms after T0.
            assert_eq!(admitted[4].retry_after, Some(200_000), "{kind} lag {lag}");
        }
    }
}

/// Issue 17, case 3: `2000000/s burst 1` admits at most one unit per microsecond, half its
/// rate, so the bucket algorithms refuse it naming the smallest exact burst (2); with that
/// burst a full-demand client gets exactly `burst + t x rate`. The windows ignore the burst
/// and count any number of units per microsecond.
#[test]
fn sub_microsecond_rates_are_refused_or_exact() {
    let quota: Quota = "2000000/s burst 1".parse().unwrap();
    for kind in AlgorithmKind::ALL {
        let result = Policy::new(kind, quota);
        if is_bucket(kind) {
            assert!(
                matches!(
                    result,
                    Err(QuotaError::BurstTooSmall {
                        burst: 1,
                        min_burst: 2,
                        ..
                    })
                ),
                "{kind}: {result:?}"
            );
            let p = Policy::new(kind, quota.burst_of(2).unwrap()).unwrap();
            // [T0, T0 + 1 ms]: the burst of 2 plus 2 per microsecond.
            assert_eq!(
                full_demand(&p, T0, T0 + 1_000, true).len(),
                2 + 2_000,
                "{kind}"
            );
        } else {
            let p = result.unwrap();
            let mut s = p.initial_state();
            assert!(p.check(&mut s, T0, 2_000_000).unwrap().allowed, "{kind}");
        }
    }
}
