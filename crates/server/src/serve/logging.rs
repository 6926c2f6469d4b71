//! The service's log: the subscriber (text or JSON on stderr, `RUST_LOG` / `--log-filter`)
//! and a throttle on the lines of the libraries it uses (every target that is not Floodgate's).
//!
//! # Why the throttle
//! The `redis` crate logs through `log` at `warn` every failed connection attempt and every
//! slot refresh it begins; while one cluster master was down, two processes wrote 23,900
//! such lines in 10 s (issue 30), which drowns every other line and costs a log pipeline
//! real money. The HTTP/2 library does the same for a client: `h2` warns once per connection
//! that resets too many streams, so one client opening and resetting connections wrote 1,400
//! lines a second. [`Throttle`] lets through at most [`BURST`] lines per [`WINDOW`] from each
//! module of every library (each target that is not Floodgate's own: `redis::*`, `h2::*`,
//! `hyper::*`, `tonic::*`, `rustls::*`, ...) and counts the rest; once a window, a summary
//! line (target `floodgate::log_throttle`) says how many were suppressed, from which module.
//! Floodgate's own store-failure line (once a second, `rate-limit store failed`) names the
//! cluster slot and its master, so nothing an operator needs is in the suppressed lines.
//! Floodgate's own lines written once per request (the proxy's upstream failures,
//! [`PER_REQUEST_TARGETS`]) are throttled the same way; the upstream's failures are also
//! counted in the metrics.

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::{Clock, SystemClock};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::layer::{Context, Layer};

/// Lines per [`WINDOW`] let through from each module of the Redis client library.
pub(crate) const BURST: u64 = 5;
/// The throttle's window, and how often the summary of suppressed lines is written.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Most modules counted apart (the libraries have a few dozen each); the rest count under
/// `other`.
const MAX_TARGETS: usize = 64;

/// Counts per module in the current window: `(let through, suppressed)`.
#[derive(Default)]
struct Counts {
    window: u64,
    targets: HashMap<String, (u64, u64)>,
}

static COUNTS: parking_lot::Mutex<Option<Counts>> = parking_lot::Mutex::new(None);

/// The throttle (see the [module docs](self)): a layer that drops a library's line over its
/// module's allowance in the window, for every layer after it.
pub(crate) struct Throttle;

impl<S: Subscriber> Layer<S> for Throttle {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let normalized = event.normalized_metadata();
        let target = normalized
            .as_ref()
            .map_or_else(|| event.metadata().target(), |m| m.target());
        if !throttled(target) {
            return true;
        }
        admit(target, window_of(SystemClock.now()))
    }
}

/// Floodgate's own modules whose lines are written per request, so a client decides how many:
/// the proxy's upstream failures (a dead upstream and one client's 3,000 requests wrote 3,000
/// `upstream request failed` lines, about 1,900 a second). Throttled as a library's lines are.
const PER_REQUEST_TARGETS: [&str; 1] = ["floodgate::proxy::upstream"];

/// `true` for a line of a library (any target but Floodgate's own: `floodgate`,
/// `floodgate::...`, `floodgate_<crate>...`) and of [`PER_REQUEST_TARGETS`].
fn throttled(target: &str) -> bool {
    PER_REQUEST_TARGETS.contains(&target)
        || !(target == "floodgate"
            || target.starts_with("floodgate::")
            || target.starts_with("floodgate_"))
}

fn window_of(now_us: u64) -> u64 {
    now_us / u64::try_from(WINDOW.as_micros()).unwrap_or(u64::MAX)
}

/// Whether a line of `target` in `window` is let through (counted either way).
fn admit(target: &str, window: u64) -> bool {
    let mut counts = COUNTS.lock();
    let counts = counts.get_or_insert_with(Counts::default);
    if counts.window != window {
        // A new window: the previous one's suppressed lines were summarised (or are now).
        let previous = std::mem::take(&mut counts.targets);
        counts.window = window;
        report(&previous);
    }
    let key = if counts.targets.contains_key(target) || counts.targets.len() < MAX_TARGETS {
        target
    } else {
        "other"
    };
    let entry = match counts.targets.get_mut(key) {
        Some(e) => e,
        None => counts.targets.entry(key.to_string()).or_default(),
    };
    if entry.0 < BURST {
        entry.0 += 1;
        true
    } else {
        entry.1 += 1;
        false
    }
}

/// Writes the summary of a finished window's suppressed lines, if any.
fn report(targets: &HashMap<String, (u64, u64)>) {
    let suppressed: u64 = targets.values().map(|(_, s)| s).sum();
    if suppressed == 0 {
        return;
    }
    let mut by_module: Vec<(&String, u64)> = targets
        .iter()
        .filter(|(_, (_, s))| *s > 0)
        .map(|(t, (_, s))| (t, *s))
        .collect();
    by_module.sort();
    let modules: Vec<String> = by_module.iter().map(|(t, s)| format!("{t}: {s}")).collect();
    tracing::warn!(
        target: "floodgate::log_throttle",
        suppressed,
        modules = %modules.join(", "),
        "client libraries: {suppressed} log lines suppressed in {} s (at most {BURST} per \
         module per {} s are written)",
        WINDOW.as_secs(),
        WINDOW.as_secs()
    );
}

/// Ends the current window if it is over and writes its summary: run once per [`WINDOW`]
/// by [`summaries`], so the last window of an outage is summarised even when no line follows.
fn flush(now_us: u64) {
    let window = window_of(now_us);
    let previous = {
        let mut counts = COUNTS.lock();
        let Some(counts) = counts.as_mut() else {
            return;
        };
        if counts.window == window {
            return;
        }
        counts.window = window;
        std::mem::take(&mut counts.targets)
    };
    report(&previous);
}

/// The task that writes each window's summary (until the process ends).
pub(crate) async fn summaries() {
    let mut tick = tokio::time::interval(WINDOW);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        flush(SystemClock.now());
    }
}

/// Installs the subscriber: `RUST_LOG`, else `default`, as the filter; the throttle; text
/// (or with `json`, JSON) lines on stderr.
pub(crate) fn init(json: bool, default: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = if json {
        lines.json().flatten_event(true).boxed()
    } else {
        lines.with_ansi(false).boxed()
    };
    // A second init (e.g. in tests) is harmless: the first subscriber stays.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(Throttle)
        .with(lines)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_libraries_are_throttled_and_floodgate_is_not() {
        assert!(throttled("redis"));
        assert!(throttled("redis::cluster_handling::async_connection"));
        assert!(throttled("h2::proto::streams::recv"));
        assert!(throttled("hyper_util::server"));
        assert!(throttled("tonic::transport"));
        assert!(!throttled("floodgate"));
        assert!(!throttled("floodgate_store::redis"));
        assert!(!throttled("floodgate::log_throttle"));
        assert!(!throttled("floodgate::serve::reload"));
        // Written per proxied request: a client decides how many.
        assert!(throttled("floodgate::proxy::upstream"));
        assert!(!throttled("floodgate::proxy"));
    }

    #[test]
    fn a_burst_per_module_per_window_then_suppressed() {
        // Windows far from any real one, so the test owns them.
        let target = "redis::test_module";
        let admitted = (0..100).filter(|_| admit(target, 7)).count();
        assert_eq!(admitted as u64, BURST);
        assert!(
            admit("redis::other_test_module", 7),
            "each module has its own"
        );
        let suppressed = COUNTS.lock().as_ref().map(|c| c.targets[target].1);
        assert_eq!(suppressed, Some(100 - BURST));
        // The next window lets a burst through again.
        assert_eq!((0..10).filter(|_| admit(target, 8)).count() as u64, BURST);
    }
}
