//! `--what cpu`: nanoseconds per check for every algorithm, direct and through the
//! `MemoryStore` on 1 and 2 threads, beside governor measured the same way in the same run.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::{AlgorithmKind, Clock, Policy, Quota};
use floodgate_store::{MemoryStore, MemoryStoreConfig};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use serde_json::Value;

use super::report::{num, Section};
use super::Progress;

/// Keys in the keyed cases: `user:000000` .. `user:000999`.
const KEYS: usize = 1_000;
/// Length of the replayed key sequence (a power of two).
const SEQUENCE: usize = 1 << 16;

/// A quota no single thread can exhaust (1e9 per second, burst 1e6): every check admits and
/// writes state, the expensive path.
pub fn admit_quota() -> Quota {
    Quota::with_burst(1_000_000, 1_000, 1_000_000).expect("valid quota")
}

/// The keyed cases' quota: 1 per second with a burst of 1,000,000. No key uses up its burst in
/// a run, so every check admits and writes state, and no key expires between two checks.
pub fn keyed_quota() -> Quota {
    Quota::with_burst(1, 1_000_000, 1_000_000).expect("valid quota")
}

/// Calls `f` in batches of 256 until `time` has passed (after a warm-up of a tenth of it);
/// returns nanoseconds per call.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed time
pub fn ns_per_call(time: Duration, mut f: impl FnMut(u64) -> bool) -> f64 {
    let mut i = 0u64;
    let warm = Instant::now();
    while warm.elapsed() < time / 10 {
        for _ in 0..256 {
            black_box(f(i));
            i += 1;
        }
    }
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        for _ in 0..256 {
            black_box(f(i));
            i += 1;
        }
        calls += 256;
        let elapsed = start.elapsed();
        if elapsed >= time {
            return elapsed.as_nanos() as f64 / calls as f64;
        }
    }
}

/// Runs `f` on `threads` threads at once for `time`; returns wall nanoseconds per call over all
/// threads (so 1 / result is the aggregate rate).
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed time
pub fn ns_per_call_threads(
    threads: usize,
    time: Duration,
    f: impl Fn(usize, u64) -> bool + Sync,
) -> f64 {
    let f = &f;
    let start = Instant::now();
    let calls: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut i = (t * SEQUENCE / threads) as u64;
                    let mut calls = 0u64;
                    while start.elapsed() < time {
                        for _ in 0..256 {
                            black_box(f(t, i));
                            i += 1;
                        }
                        calls += 256;
                    }
                    calls
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .sum()
    });
    start.elapsed().as_nanos() as f64 / calls as f64
}

/// A fixed uniform sequence of key indices (splitmix64), replayed by every case.
pub fn key_sequence(keys: usize, len: usize) -> Vec<u32> {
    let mut x = 0x0f10_0d6a_7e00_0001u64;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % keys as u64) as u32
        })
        .collect()
}

/// Measures every algorithm in `kinds` with the clock `C` (statically dispatched in the direct
/// case; the store holds it as `Arc<dyn Clock>`); `time` per case.
pub fn run<C: Clock + Clone + 'static>(
    kinds: &[AlgorithmKind],
    clock: C,
    clock_name: &str,
    time: Duration,
    progress: &Progress,
) -> Section {
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let mut section = Section::new(
        "cpu",
        format!("CPU: nanoseconds per check ({clock_name} clock, every check admits)"),
        &[
            "algorithm",
            "direct, 1 thread (ns)",
            "store 1k keys, 1 thread (ns)",
            "store 1k keys, 2 threads (ns, aggregate)",
            "2-thread speedup",
        ],
    );
    let quota = admit_quota();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i:06}")).collect();
    let seq = key_sequence(KEYS, SEQUENCE);
    let key_of = |i: u64| keys[seq[(i as usize) & (SEQUENCE - 1)] as usize].as_str();

    for &kind in kinds {
        let policy = Policy::new(kind, quota).expect("the bench quota fits every algorithm");
        // The sliding log's limit is its memory: 1,000,000 remembered requests per key would
        // be 8 MB a key, so its keyed case allows 1,000 per 10 ms (100,000/s per key, more than
        // checks spread over 1,000 keys reach; a few hundred words per key).
        let keyed_policy = match kind {
            AlgorithmKind::SlidingLog => {
                Policy::new(kind, Quota::new(1_000, 10_000).expect("valid"))
            }
            _ => Policy::new(kind, keyed_quota()),
        }
        .expect("the bench quota fits every algorithm");
        progress.step(format!("cpu: {kind} direct"));
        let mut state = policy.initial_state();
        let direct = ns_per_call(time, |_| {
            policy
                .check(&mut state, clock.now(), 1)
                .is_ok_and(|d| d.allowed)
        });

        let store = MemoryStore::new(
            MemoryStoreConfig {
                max_keys: 2 * KEYS,
                ..MemoryStoreConfig::default()
            },
            shared.clone(),
        );
        // The rule resolved once, as a service holding its rules would.
        let limiter = store.limiter("bench", &keyed_policy);
        let check = |i: u64| limiter.check(key_of(i), 1).is_ok_and(|d| d.allowed);
        progress.step(format!("cpu: {kind} store, 1 thread"));
        let one = ns_per_call(time, check);
        progress.step(format!("cpu: {kind} store, 2 threads"));
        let two = ns_per_call_threads(2, time, |_, i| check(i));
        section.row(vec![
            kind.as_str().into(),
            num(direct, 1),
            num(one, 1),
            num(two, 1),
            num(one / two, 2),
        ]);
    }

    // The peer, measured the same way: governor is GCRA only, with its own default clock
    // (quanta, a TSC read per check, like `--clock quanta`).
    let billion = NonZeroU32::new(1_000_000_000).expect("non-zero");
    let governor_quota = governor::Quota::per_second(billion);
    progress.step("cpu: governor direct".to_string());
    let direct_limiter = RateLimiter::direct(governor_quota);
    let direct = ns_per_call(time, |_| direct_limiter.check().is_ok());
    let keyed_quota = governor::Quota::per_second(NonZeroU32::MIN)
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero"));
    let keyed: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(keyed_quota);
    let check = |i: u64| {
        keyed
            .check_key(&keys[seq[(i as usize) & (SEQUENCE - 1)] as usize])
            .is_ok()
    };
    progress.step("cpu: governor keyed, 1 thread".to_string());
    let one = ns_per_call(time, check);
    progress.step("cpu: governor keyed, 2 threads".to_string());
    let two = ns_per_call_threads(2, time, |_, i| check(i));
    section.row(vec![
        Value::from("governor 0.10 (GCRA, peer)"),
        num(direct, 1),
        num(one, 1),
        num(two, 1),
        num(one / two, 2),
    ]);

    section.note(format!(
        "Direct: quota 1,000,000 per ms, burst 1,000,000 (governor: 1e9/s), so every check \
         admits and writes state; the algorithm on caller-owned state (`Policy::check`), while \
         governor's direct limiter is shared (`&self`, one atomic). Store: \
         `KeyedLimiter::check` (from `MemoryStore::limiter`: the rule resolved once; \
         allocation-free) over {KEYS} String keys `user:000000`.. in a \
         fixed uniform random order, quota 1/s with burst 1,000,000 (sliding log: 1,000 per 10 ms), so \
         every check admits and no key expires; governor: its keyed DashMap limiter, same keys \
         and quota. 2 threads share one store; the time is wall time per \
         check over both threads. {} per case after a {} ms warm-up.",
        format_duration(time),
        (time / 10).as_millis()
    ));
    section
}

/// `1.5 s` / `300 ms`.
pub fn format_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sequence_is_fixed_and_in_range() {
        let a = key_sequence(1_000, 4_096);
        assert_eq!(a, key_sequence(1_000, 4_096));
        assert!(a.iter().all(|&k| k < 1_000));
        // Uniform enough that every key shows up in 4 draws per key on average... at least
        // 900 of the 1,000 (expected about 982).
        let mut seen = vec![false; 1_000];
        for &k in &a {
            seen[k as usize] = true;
        }
        assert!(seen.iter().filter(|&&s| s).count() > 900);
    }

    #[test]
    fn ns_per_call_counts_calls() {
        let mut calls = 0u64;
        let ns = ns_per_call(Duration::from_millis(5), |i| {
            calls += 1;
            i % 2 == 0
        });
        assert!(ns > 0.0 && calls >= 256);
    }
}
