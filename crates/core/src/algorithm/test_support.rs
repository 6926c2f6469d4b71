//! Helpers shared by the window algorithms' unit tests (`fixed_window`, `sliding_window`,
//! `sliding_log`): the window-aligned start time, a [`Decision`] builder, the generator that
//! drives the brute-force tests, and the brute-force checks that `retry_after`, `remaining` and
//! `reset_after` are exact.

use crate::algorithm::base::Algorithm;
use crate::decision::Decision;
use crate::error::CheckError;
use crate::time::Timestamp;

/// 2023-11-14T00:00:00Z: a whole day, so every test period used has an edge here.
pub(crate) const T0: Timestamp = 1_699_920_000_000_000;

/// The decision with these fields, in the order `Decision` declares them.
pub(crate) fn decision(
    limit: u64,
    allowed: bool,
    remaining: u64,
    reset_after: u64,
    retry_after: Option<u64>,
) -> Decision {
    Decision {
        allowed,
        limit,
        remaining,
        reset_after,
        retry_after,
    }
}

/// Advances `rng` by one step of Marsaglia's xorshift64 (shifts 13, 7, 17) and returns it: a
/// reproducible sequence, so a failing brute-force case fails the same way every run.
pub(crate) fn xorshift(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Asserts that a denial's `retry` (microseconds) is exact: the request of `cost` units on
/// `before` is admitted at no microsecond of `[from, from + retry)` and is admitted at
/// `from + retry`. `from` is the time `retry_after` counts from (the effective `now`).
pub(crate) fn assert_retry_after_exact<A: Algorithm>(
    a: &A,
    before: &A::State,
    from: Timestamp,
    cost: u64,
    retry: u64,
    ctx: &str,
) {
    let admits = |t| a.peek(before, t, cost).unwrap().allowed;
    assert!((0..retry).all(|dt| !admits(from + dt)), "{ctx}");
    assert!(admits(from + retry), "{ctx}");
}

/// Asserts that `d.remaining` is the largest cost admissible on `after` at `now` (cost 0, a
/// peek, is always admissible) and that `d.reset_after` is the first time, counted from `now`,
/// at which the whole capacity is admissible again.
pub(crate) fn assert_remaining_and_reset_exact<A: Algorithm>(
    a: &A,
    after: &A::State,
    now: Timestamp,
    d: &Decision,
    ctx: &str,
) {
    let max = (0..=a.capacity())
        .filter(|&c| a.peek(after, now, c).unwrap().allowed)
        .max();
    assert_eq!(Some(d.remaining), max, "{ctx}");
    let full = |t| a.peek(after, t, a.capacity()).unwrap().allowed;
    if d.reset_after > 0 {
        assert!(!full(now + d.reset_after - 1), "{ctx}");
    }
    assert!(full(now + d.reset_after), "{ctx}");
}

/// Asserts, for the algorithm `A` on the quota `3/s`, that after one unit admitted at [`T0`] a
/// request of 4 units at `at` is [`CheckError::InsufficientCapacity`] and leaves the state
/// exactly as it was.
pub(crate) fn assert_cost_above_capacity_changes_nothing<A: Algorithm>(at: Timestamp) {
    let a = A::new("3/s".parse().unwrap()).unwrap();
    let mut s = a.initial_state();
    assert!(a.check(&mut s, T0, 1).unwrap().allowed);
    let before = s.clone();
    assert_eq!(
        a.check(&mut s, at, 4),
        Err(CheckError::InsufficientCapacity {
            cost: 4,
            capacity: 3
        })
    );
    assert_eq!(s, before);
}
