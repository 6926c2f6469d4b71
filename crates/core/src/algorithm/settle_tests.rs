//! Settles never mint capacity (`docs/spec/reservations.md`, "Settle never mints capacity").
//!
//! The property: any interleaving of checks, reservations (with and without a wait) and
//! settles (early, late, less, more, zero, out of order), with time also stepping backwards,
//! admits only what the algorithm admits without reservations: replaying every admitted
//! request in admission order, charged its actual cost (its reserved cost when the settle
//! charged more) at its scheduled time, through a fresh key of the same rule admits every one
//! of them. Plus the two cases of the issue, as regression tests on the three buckets.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::test_support::T0;
use crate::{AlgorithmKind, Policy, Quota, State, Timestamp};

const BUCKETS: [AlgorithmKind; 3] = [
    AlgorithmKind::TokenBucket,
    AlgorithmKind::LeakyBucket,
    AlgorithmKind::Gcra,
];

/// One step of a run: how time moves, then what the client does.
#[derive(Debug, Clone)]
struct Move {
    backwards: bool,
    step_kind: u8,
    step_raw: u64,
    action: Action,
}

#[derive(Debug, Clone)]
enum Action {
    /// A plain check of `cost_raw % (capacity + 1)` units.
    Check { cost_raw: u64 },
    /// A reservation with a wait bound (0 is a check).
    Reserve { cost_raw: u64, max_wait: u64 },
    /// Settles one of the unsettled admissions (`pick` modulo their number): `how` picks
    /// zero, the reserved cost, less, more, or far more.
    Settle { pick: usize, how: u8, raw: u64 },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => any::<u64>().prop_map(|cost_raw| Action::Check { cost_raw }),
        3 => (
            any::<u64>(),
            prop_oneof![Just(0u64), 0u64..3_000_000, any::<u64>()]
        )
            .prop_map(|(cost_raw, max_wait)| Action::Reserve { cost_raw, max_wait }),
        3 => (any::<usize>(), any::<u8>(), any::<u64>())
            .prop_map(|(pick, how, raw)| Action::Settle { pick, how, raw }),
    ]
}

fn moves() -> impl Strategy<Value = Vec<Move>> {
    prop::collection::vec(
        (
            prop::bool::weighted(0.15),
            any::<u8>(),
            any::<u64>(),
            action(),
        )
            .prop_map(|(backwards, step_kind, step_raw, action)| Move {
                backwards,
                step_kind,
                step_raw,
                action,
            }),
        1..80,
    )
}

/// Small quotas with odd periods (fractional emission intervals) and bursts apart from limits.
fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=20,
        prop_oneof![
            1u64..=10,
            Just(1_000_000u64),
            Just(10_000_000u64),
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

/// An admitted request: its scheduled time, the units it reserved and, once settled, what it
/// actually cost.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    at: Timestamp,
    reserved: u64,
    actual: Option<u64>,
}

/// Plays `moves` on one key and returns every admission of cost > 0 in admission order.
fn play(p: &Policy, moves: &[Move]) -> Result<Vec<Admitted>, TestCaseError> {
    let cap = p.capacity();
    let period = p.quota().period();
    let mut state: State = p.initial_state();
    let mut now = T0;
    let mut admitted: Vec<Admitted> = Vec::new();
    for m in moves {
        let step = match m.step_kind % 5 {
            0 => 0,
            1 => m.step_raw % 10,
            2 | 3 => m.step_raw % period.saturating_add(1),
            _ => m.step_raw % period.saturating_mul(3).saturating_add(1),
        };
        now = if m.backwards {
            now.saturating_sub(step)
        } else {
            now + step
        };
        match m.action {
            Action::Check { cost_raw } => {
                let cost = cost_raw % (cap + 1);
                // A check is a reservation with no wait (same decision, same state): the
                // reservation also says at which (effective) time it admitted.
                let mut checked = state.clone();
                let d = p.check(&mut checked, now, cost).unwrap();
                let r = p.reserve(&mut state, now, cost, 0).unwrap();
                prop_assert_eq!(&checked, &state);
                prop_assert_eq!(d, r.decision);
                if let (Some(at), true) = (r.scheduled_at, cost > 0) {
                    admitted.push(Admitted {
                        at,
                        reserved: cost,
                        actual: None,
                    });
                }
            }
            Action::Reserve { cost_raw, max_wait } => {
                let cost = cost_raw % (cap + 1);
                let r = p.reserve(&mut state, now, cost, max_wait).unwrap();
                if let (Some(at), true) = (r.scheduled_at, cost > 0) {
                    admitted.push(Admitted {
                        at,
                        reserved: cost,
                        actual: None,
                    });
                }
            }
            Action::Settle { pick, how, raw } => {
                let open: Vec<usize> = (0..admitted.len())
                    .filter(|&i| admitted[i].actual.is_none())
                    .collect();
                if open.is_empty() {
                    continue;
                }
                let item = &mut admitted[open[pick % open.len()]];
                let reserved = item.reserved;
                let actual = match how % 6 {
                    0 => 0,
                    1 => reserved,
                    2 | 3 => raw % reserved,
                    4 => reserved + 1 + raw % (2 * cap),
                    _ => u64::MAX,
                };
                let d = p
                    .settle(&mut state, now, item.at, reserved, actual)
                    .unwrap();
                prop_assert!(d.allowed && d.remaining <= cap);
                item.actual = Some(actual);
            }
        }
    }
    Ok(admitted)
}

/// The replay: every admission in the order of its scheduled time (admission order among
/// equal times), charged its actual cost (the reserved one where the settle charged more),
/// checked at its scheduled time on a fresh key, is admitted. (A give-back can let a request
/// in before a reservation scheduled later: then it is admitted before it, yet scheduled
/// earlier.)
fn replay_admits_everything(p: &Policy, admitted: &[Admitted]) -> Result<(), TestCaseError> {
    let mut order: Vec<usize> = (0..admitted.len()).collect();
    order.sort_by_key(|&i| admitted[i].at);
    let mut state = p.initial_state();
    for i in order {
        let a = admitted[i];
        let cost = a.actual.map_or(a.reserved, |actual| actual.min(a.reserved));
        if cost == 0 {
            continue;
        }
        let d = p.check(&mut state, a.at, cost).unwrap();
        prop_assert!(
            d.allowed,
            "admission {} ({} units at +{} us) does not replay: {:?}\nadmitted: {:?}",
            i,
            cost,
            a.at.saturating_sub(T0),
            d,
            admitted
        );
    }
    Ok(())
}

fn settles_never_mint_capacity(kind: AlgorithmKind, quota: Quota, moves: &[Move]) -> TestResult {
    let Ok(p) = Policy::new(kind, quota) else {
        return Ok(());
    };
    let admitted = play(&p, moves)?;
    replay_admits_everything(&p, &admitted)
}

type TestResult = Result<(), TestCaseError>;

/// 512 cases, or `PROPTEST_CASES` when set (`PROPTEST_CASES=5000` for a long run).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

macro_rules! settle_property {
    ($($module:ident => $kind:ident),* $(,)?) => {$(
        mod $module {
            use super::*;

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(cases()))]

                #[test]
                fn settles_never_mint_capacity(quota in quota(), moves in moves()) {
                    super::settles_never_mint_capacity(AlgorithmKind::$kind, quota, &moves)?;
                }
            }
        }
    )*};
}

settle_property! {
    fixed_window => FixedWindow,
    sliding_log => SlidingLog,
    sliding_window => SlidingWindow,
    token_bucket => TokenBucket,
    leaky_bucket => LeakyBucket,
    gcra => Gcra,
}

/// Regression (issue: a late settle mints capacity): reserve the whole burst of `10/10s`, let
/// the burst refill, spend it, then settle the first reservation with 0: nothing comes back,
/// since the bucket refilled that reservation's units long ago.
#[test]
fn late_settle_after_the_burst_refilled_gives_nothing_back() {
    for kind in BUCKETS {
        let p = Policy::parse(kind, "10/10s").unwrap();
        let mut s = p.initial_state();
        let r = p.reserve(&mut s, T0, 10, 0).unwrap();
        assert_eq!(r.scheduled_at, Some(T0), "{kind}");
        assert!(p.check(&mut s, T0 + 10_000_000, 10).unwrap().allowed);
        let d = p.settle(&mut s, T0 + 10_000_000, T0, 10, 0).unwrap();
        assert_eq!(d.remaining, 0, "{kind}");
        assert!(
            !p.check(&mut s, T0 + 10_000_000, 1).unwrap().allowed,
            "{kind}"
        );
        // Three seconds late, three of its units refilled: 7 come back, not 10.
        let mut s = p.initial_state();
        p.reserve(&mut s, T0, 10, 0).unwrap();
        let d = p.settle(&mut s, T0 + 3_000_000, T0, 10, 0).unwrap();
        assert_eq!(d.remaining, 10, "{kind}");
        let mut s = p.initial_state();
        p.reserve(&mut s, T0, 10, 0).unwrap();
        assert!(p.check(&mut s, T0 + 3_000_000, 3).unwrap().allowed);
        let d = p.settle(&mut s, T0 + 3_000_000, T0, 10, 0).unwrap();
        assert_eq!(d.remaining, 7, "{kind}");
    }
}

/// Regression (issue: six full-burst reservations taken 10 s apart and settled together
/// admitted 70 against a burst of 10): the first five, settled at the sixth's time, hold
/// nothing any more (each refilled before the next was taken), so they give nothing back; only
/// the sixth's units come back. 60 units in 50 s, as the rule allows, not 70.
#[test]
fn full_burst_reservations_settled_together_admit_one_burst() {
    for kind in BUCKETS {
        let p = Policy::parse(kind, "10/10s").unwrap();
        let mut s = p.initial_state();
        let last = T0 + 50_000_000;
        for i in 0..6 {
            let r = p.reserve(&mut s, T0 + i * 10_000_000, 10, 0).unwrap();
            assert!(r.granted(), "{kind}");
        }
        for i in 0..5 {
            let d = p.settle(&mut s, last, T0 + i * 10_000_000, 10, 0).unwrap();
            assert_eq!(d.remaining, 0, "{kind}");
        }
        assert!(!p.check(&mut s, last, 1).unwrap().allowed, "{kind}");
        let d = p.settle(&mut s, last, last, 10, 0).unwrap();
        assert_eq!(d.remaining, 10, "{kind}");
    }
}

/// Regression (issue: a give-back frees room a later reservation is already scheduled
/// behind): `5/s`, reserve 3, reserve 3 with a wait (scheduled 200 ms ahead), settle the first
/// with 0, reserve 3 with a wait: scheduled 400 ms ahead, not 200 (6 units at 0.2 s against a
/// burst of 5).
#[test]
fn give_back_keeps_room_a_later_reservation_is_scheduled_behind() {
    for kind in BUCKETS {
        let p = Policy::parse(kind, "5/s").unwrap();
        let mut s = p.initial_state();
        assert_eq!(p.reserve(&mut s, T0, 3, 0).unwrap().scheduled_at, Some(T0));
        let second = p.reserve(&mut s, T0, 3, 1_000_000).unwrap();
        assert_eq!(second.scheduled_at, Some(T0 + 200_000), "{kind}");
        let d = p.settle(&mut s, T0, T0, 3, 0).unwrap();
        // Two of the first reservation's units lie before the second's scheduled time: those
        // come back (one unit is free now: the second then still fits at its time); the third
        // is what the second stands on.
        assert_eq!(d.remaining, 1, "{kind}");
        let third = p.reserve(&mut s, T0, 3, 1_000_000).unwrap();
        assert_eq!(third.scheduled_at, Some(T0 + 400_000), "{kind}");
    }
}

/// The latest scheduled time is kept only while it lies ahead: a settle after it passed gives
/// back as if there were no reservation for later.
#[test]
fn latest_scheduled_time_is_dropped_once_it_passed() {
    let p = Policy::parse(AlgorithmKind::Gcra, "5/s").unwrap();
    let mut s = p.initial_state();
    p.reserve(&mut s, T0, 3, 0).unwrap();
    p.reserve(&mut s, T0, 3, 1_000_000).unwrap();
    let State::Gcra(g) = &s else { unreachable!() };
    assert_eq!(g.last_scheduled_at, T0 + 200_000);
    p.settle(&mut s, T0 + 300_000, T0 + 200_000, 3, 3).unwrap();
    let State::Gcra(g) = &s else { unreachable!() };
    assert_eq!(g.last_scheduled_at, 0);
}

/// Every algorithm: a settle of a reservation scheduled far in the past or future, or at the
/// ends of time, never panics and never reports more than the capacity.
#[test]
fn settle_at_extreme_times_is_bounded() {
    for kind in AlgorithmKind::ALL {
        let p = Policy::parse(kind, "10/10s").unwrap();
        for at in [0, 1, T0 - 1, T0 + 1, (1 << 53) - 1, u64::MAX] {
            for now in [T0, (1 << 53) - 1] {
                let mut s = p.initial_state();
                p.reserve(&mut s, T0, 10, 10_000_000).unwrap();
                for actual in [0, 5, 10, 11, u64::MAX] {
                    let d = p.settle(&mut s, now, at, 10, actual).unwrap();
                    assert!(d.remaining <= 10, "{kind}");
                }
            }
        }
    }
}
