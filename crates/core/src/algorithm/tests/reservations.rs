//! Reservations (issue 11): reserve with a wait bound, settle; on every algorithm, and the
//! buckets' and GCRA's identical answers.

use super::*;

/// One random reservation: time step, cost, wait bound, and whether it is a plain check.
fn reservations() -> impl Strategy<Value = Vec<(Op, u64, bool)>> {
    prop::collection::vec(
        (
            op(),
            prop_oneof![Just(0u64), 0u64..2_000_000, any::<u64>()],
            prop::bool::weighted(0.3),
        ),
        1..60,
    )
}

/// Plays reservations (time only moves forward) and returns the granted `(scheduled_at, cost)`
/// of cost > 0, in grant order, checking each answer's shape on the way.
fn play_reservations(
    p: &Policy,
    steps: &[(Op, u64, bool)],
) -> Result<Vec<(Timestamp, u64)>, TestCaseError> {
    let cap = p.capacity();
    let mut state = p.initial_state();
    let mut now = T0;
    let mut granted = Vec::new();
    for (o, max_wait, plain) in steps {
        now += o.step(p.quota().period());
        let cost = o.cost(cap).min(cap);
        let max_wait = if *plain { 0 } else { *max_wait };
        let before = state.clone();
        let r = p.reserve(&mut state, now, cost, max_wait).unwrap();
        // max_wait 0 is exactly a check.
        if max_wait == 0 {
            let mut again = before.clone();
            let d = p.check(&mut again, now, cost).unwrap();
            prop_assert_eq!(r.decision, d);
            prop_assert_eq!(&again, &state);
        }
        match (r.wait, r.scheduled_at) {
            (Some(wait), Some(at)) => {
                prop_assert!(r.decision.allowed && r.decision.retry_after.is_none());
                prop_assert!(
                    wait <= max_wait.min(p.max_wait()),
                    "wait {} > {}",
                    wait,
                    max_wait
                );
                prop_assert!(at >= now && at - now == wait);
                if cost > 0 {
                    granted.push((at, cost));
                }
            }
            (None, None) => {
                prop_assert!(!r.decision.allowed);
                prop_assert_eq!(&state, &before, "a denied reservation consumed");
                // Denied exactly when the check's wait is beyond the bound (the sliding window
                // also denies what fits only in its next window).
                let retry = r.decision.retry_after.unwrap();
                prop_assert!(
                    retry > max_wait.min(p.max_wait()) || p.kind() == AlgorithmKind::SlidingWindow,
                    "denied with retry_after {} within max_wait {}",
                    retry,
                    max_wait
                );
            }
            other => prop_assert!(false, "wait and scheduled_at disagree: {:?}", other),
        }
    }
    Ok(granted)
}

/// Requests executed at their scheduled times never exceed what the algorithm admits without
/// waiting: replayed as plain checks at their scheduled times on a fresh key, every granted
/// reservation is admitted. (Grants are first come, first served, so their scheduled times
/// never decrease.)
fn scheduled_times_are_admitted_without_waiting(
    kind: AlgorithmKind,
    quota: Quota,
    steps: &[(Op, u64, bool)],
) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    let granted = play_reservations(&p, steps)?;
    let mut state = p.initial_state();
    let mut last = 0;
    for (i, &(at, cost)) in granted.iter().enumerate() {
        prop_assert!(at >= last, "grant {} scheduled before an earlier grant", i);
        last = at;
        let d = p.check(&mut state, at, cost).unwrap();
        prop_assert!(
            d.allowed,
            "grant {} ({} at +{}) not admitted: {:?}",
            i,
            cost,
            at - T0,
            d
        );
    }
    Ok(())
}

/// Settling at once with the reserved cost changes no decision; with a smaller actual cost a
/// bucket algorithm ends exactly where reserving the actual cost would have; nothing ever
/// reports more than the capacity.
fn settle_gives_back_exactly(
    kind: AlgorithmKind,
    quota: Quota,
    steps: &[(Op, u64, bool)],
    actual_raw: u64,
) -> TestResult {
    let p = Policy::new(kind, quota).unwrap();
    let cap = p.capacity();
    let mut state = p.initial_state();
    let mut now = T0;
    for (o, max_wait, _) in steps {
        now += o.step(p.quota().period());
        let cost = o.cost(cap).min(cap);
        let before = state.clone();
        let r = p.reserve(&mut state, now, cost, *max_wait).unwrap();
        let Some(at) = r.scheduled_at else { continue };
        let probe = |s: &State| p.peek(s, now, 0).unwrap();
        let mut same = state.clone();
        let d = p.settle(&mut same, now, at, cost, cost).unwrap();
        prop_assert!(d.remaining <= cap);
        prop_assert_eq!(
            probe(&same),
            probe(&state),
            "settling the reserved cost moved"
        );
        let actual = actual_raw % (cost + 1);
        let mut settled = state.clone();
        p.settle(&mut settled, now, at, cost, actual).unwrap();
        // Giving back never takes.
        prop_assert!(probe(&settled).remaining >= probe(&state).remaining);
        // Granted at once, a bucket ends exactly where the actual cost would have. (Scheduled
        // later, the reservation also kept the scheduled time's fraction of a microsecond.)
        if is_bucket(kind) && actual > 0 && r.wait == Some(0) {
            let mut direct = before.clone();
            let rd = p.reserve(&mut direct, now, actual, *max_wait).unwrap();
            prop_assert!(rd.decision.allowed);
            prop_assert_eq!(probe(&settled), probe(&direct));
        }
        // Over-charging never panics and is bounded: twice the capacity at most.
        let mut over = state.clone();
        let d = p.settle(&mut over, now, at, cost, u64::MAX).unwrap();
        prop_assert!(d.remaining <= cap);
        state = if actual_raw.is_multiple_of(3) {
            over
        } else {
            state
        };
    }
    Ok(())
}

macro_rules! reservation_tests {
    ($($module:ident => $kind:ident),* $(,)?) => {$(
        mod $module {
            use super::*;
            const KIND: AlgorithmKind = AlgorithmKind::$kind;

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(256))]

                #[test]
                fn scheduled_times_are_admitted_without_waiting(
                    quota in small_quota(),
                    steps in reservations(),
                ) {
                    super::scheduled_times_are_admitted_without_waiting(KIND, quota, &steps)?;
                }

                #[test]
                fn settle_gives_back_exactly(
                    quota in small_quota(),
                    steps in reservations(),
                    actual_raw in any::<u64>(),
                ) {
                    super::settle_gives_back_exactly(KIND, quota, &steps, actual_raw)?;
                }
            }
        }
    )*};
}

reservation_tests! {
    fixed_window => FixedWindow,
    sliding_log => SlidingLog,
    sliding_window => SlidingWindow,
    token_bucket => TokenBucket,
    leaky_bucket => LeakyBucket,
    gcra => Gcra,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Token bucket, leaky bucket and GCRA answer every reservation and settle identically
    /// (with time stepping backwards too).
    #[test]
    fn buckets_and_gcra_reserve_and_settle_identically(
        quota in prop_oneof![small_quota(), big_quota()],
        moves in moves(),
        waits in prop::collection::vec(prop_oneof![Just(0u64), 0u64..3_000_000, any::<u64>()], 80),
        actuals in prop::collection::vec(any::<u64>(), 80),
    ) {
        let kinds = [AlgorithmKind::Gcra, AlgorithmKind::TokenBucket, AlgorithmKind::LeakyBucket];
        let policies: Vec<Policy> =
            kinds.iter().map(|&k| Policy::new(k, quota).unwrap()).collect();
        let mut states: Vec<State> = policies.iter().map(Policy::initial_state).collect();
        let mut now = T0;
        for (i, (backwards, o)) in moves.iter().enumerate() {
            let step = o.step(quota.period());
            now = if *backwards { now.saturating_sub(step) } else { now + step };
            let cost = o.cost(quota.burst()).min(quota.burst());
            let answers: Vec<_> = policies
                .iter()
                .zip(&mut states)
                .map(|(p, s)| {
                    let r = p.reserve(s, now, cost, waits[i]).unwrap();
                    let settled = (o.peek && r.granted()).then(|| {
                        let actual = actuals[i] % (2 * quota.burst() + 1);
                        p.settle(s, now, r.scheduled_at.unwrap(), cost, actual).unwrap()
                    });
                    (r, settled)
                })
                .collect();
            for (k, a) in kinds.iter().zip(&answers).skip(1) {
                prop_assert_eq!(a, &answers[0], "{} differs from gcra at step {}", k, i);
            }
        }
    }
}
