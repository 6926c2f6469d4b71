//! Direct (one key, one thread) check cost of every algorithm, with governor's direct limiter
//! measured in the same run so that results read as ratios.
//!
//! Run: `cargo bench -p floodgate-core --bench direct`
//! (quick look: `-- --warm-up-time 1 --measurement-time 2`).
//!
//! - `mostly_admit`: 1,000,000 per millisecond with burst 1,000,000 (1e9/s), far above what one
//!   thread can ask for, so every check admits and moves the state. governor: 1e9 per second.
//! - `mostly_deny`: 1 per hour; the first check admits, every later one is denied.
//!
//! Floodgate's direct API is `Algorithm::check(&mut state, now, cost)`: the caller owns the
//! state, so no atomic operation is needed. governor's `RateLimiter::direct` is shared (`&self`,
//! a compare-and-swap on an `AtomicU64`). `gcra_mutex` puts Floodgate's state behind a
//! `std::sync::Mutex` to show what sharing costs on one thread.
//!
//! With a time-stamp counter clock both sides are bound by the counter read itself (its
//! throughput, about 9.5 ns on the reference VM: `--bench clock`, where one `QuantaClock` read
//! costs as much as governor's whole check): a few dozen instructions of decision run in its
//! shadow, so the `quanta_clock` ratios sit at 1.0 within noise. The coarse clock shows the
//! decision's own cost.

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use floodgate_core::{
    Algorithm, Clock, CoarseClock, FixedWindow, Gcra, LeakyBucket, QuantaClock, Quota, SlidingLog,
    SlidingWindow, SystemClock, TokenBucket,
};
use governor::clock::QuantaUpkeepClock;
use governor::RateLimiter;

fn admit_quota() -> Quota {
    Quota::with_burst(1_000_000, 1_000, 1_000_000).expect("valid quota")
}

fn deny_quota() -> Quota {
    Quota::per_hour(1).expect("valid quota")
}

fn one<A: Algorithm, C: Clock>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    quota: Quota,
    clock: &C,
) {
    let alg = A::new(quota).expect("quota fits");
    let mut state = alg.initial_state();
    g.bench_function(name, |b| {
        b.iter(|| {
            black_box(
                alg.check(&mut state, clock.now(), 1)
                    .expect("cost 1 fits")
                    .allowed,
            )
        })
    });
}

fn all_algorithms<C: Clock>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    clock_name: &str,
    quota: Quota,
    clock: &C,
) {
    one::<FixedWindow, C>(g, &format!("fixed_window/{clock_name}"), quota, clock);
    one::<SlidingLog, C>(g, &format!("sliding_log/{clock_name}"), quota, clock);
    one::<SlidingWindow, C>(g, &format!("sliding_window/{clock_name}"), quota, clock);
    one::<TokenBucket, C>(g, &format!("token_bucket/{clock_name}"), quota, clock);
    one::<LeakyBucket, C>(g, &format!("leaky_bucket/{clock_name}"), quota, clock);
    one::<Gcra, C>(g, &format!("gcra/{clock_name}"), quota, clock);
}

fn run(c: &mut Criterion, group: &str, quota: Quota, governor_quota: governor::Quota) {
    let quanta = QuantaClock::new();
    let coarse = CoarseClock::new(Duration::from_millis(1));
    let mut g = c.benchmark_group(group);

    // The peer first: governor's default clock (quanta, a TSC read per check) and its coarse
    // QuantaUpkeepClock refreshed every millisecond, as in the research figures.
    let governor_default = RateLimiter::direct(governor_quota);
    g.bench_function("governor/default_clock", |b| {
        b.iter(|| black_box(governor_default.check().is_ok()))
    });
    let upkeep =
        QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep thread starts");
    let governor_coarse = RateLimiter::direct_with_clock(governor_quota, upkeep);
    g.bench_function("governor/quanta_upkeep_1ms", |b| {
        b.iter(|| black_box(governor_coarse.check().is_ok()))
    });

    one::<Gcra, SystemClock>(&mut g, "gcra/system_clock", quota, &SystemClock);
    all_algorithms(&mut g, "quanta_clock", quota, &quanta);
    all_algorithms(&mut g, "coarse_clock_1ms", quota, &coarse);

    let gcra = Gcra::new(quota).expect("quota fits");
    let shared = Mutex::new(gcra.initial_state());
    g.bench_function("gcra_mutex/quanta_clock", |b| {
        b.iter(|| {
            let now = quanta.now();
            let mut state = shared.lock().expect("not poisoned");
            black_box(gcra.check(&mut state, now, 1).expect("cost 1 fits").allowed)
        })
    });
    g.finish();
}

fn direct(c: &mut Criterion) {
    let billion = NonZeroU32::new(1_000_000_000).expect("non-zero");
    run(
        c,
        "direct/mostly_admit",
        admit_quota(),
        governor::Quota::per_second(billion),
    );
    run(
        c,
        "direct/mostly_deny",
        deny_quota(),
        governor::Quota::per_hour(NonZeroU32::MIN),
    );
}

criterion_group!(benches, direct);
criterion_main!(benches);
