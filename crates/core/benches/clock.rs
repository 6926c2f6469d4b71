//! The cost of one clock read, which is most of a direct check's cost.
//!
//! Run: `cargo bench -p floodgate-core --bench clock`.
//! Floodgate's `SystemClock` (`SystemTime::now`, converted to epoch microseconds), its
//! `QuantaClock` (time-stamp counter) and `CoarseClock` (one atomic load), beside
//! `std::time::Instant::now` and governor's default and upkeep clocks.

// criterion_group! generates an undocumented `pub fn benches`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate_core::{Clock, CoarseClock, QuantaClock, SystemClock};
use governor::clock::{Clock as _, DefaultClock, QuantaUpkeepClock};

fn clock(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");
    g.bench_function("floodgate/system_clock", |b| {
        b.iter(|| black_box(SystemClock.now()))
    });
    let quanta = QuantaClock::new();
    g.bench_function("floodgate/quanta_clock", |b| {
        b.iter(|| black_box(quanta.now()))
    });
    let coarse = CoarseClock::new(Duration::from_millis(1));
    g.bench_function("floodgate/coarse_clock_1ms", |b| {
        b.iter(|| black_box(coarse.now()))
    });
    #[allow(clippy::disallowed_methods)] // measuring the std clock itself
    g.bench_function("std/instant_now", |b| {
        b.iter(|| black_box(std::time::Instant::now()))
    });
    let governor_default = DefaultClock::default();
    g.bench_function("governor/default_clock", |b| {
        b.iter(|| black_box(governor_default.now()))
    });
    let upkeep =
        QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep thread starts");
    g.bench_function("governor/quanta_upkeep_1ms", |b| {
        b.iter(|| black_box(upkeep.now()))
    });
    g.finish();
}

criterion_group!(benches, clock);
criterion_main!(benches);
