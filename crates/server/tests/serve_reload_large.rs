//! A reload of a large configuration (the attacker's review: 50,000 rules took minutes, on a
//! request worker, because the old and new rules were compared pair by pair, and SIGTERM then
//! did not end the process). The comparison is linear, the reload runs on a blocking thread,
//! and a process asked to stop during a reload stops.

mod serve_support;

use std::time::Duration;

use serve_support::{client, metric, write_atomically, Floodgate};

/// `n` rules; every rule has a key cap (each reload sets every rule's cap), the odd ones
/// `odd_limit`.
fn rules(n: usize, odd_limit: &str) -> String {
    let mut text = String::with_capacity(n * 64);
    for i in 0..n {
        let limit = if i % 2 == 1 { odd_limit } else { "10/s" };
        text.push_str(&format!(
            "[[rules]]\nname = \"r{i}\"\nlimit = \"{limit}\"\nmax_keys = 100\n"
        ));
    }
    text
}

fn start(n: usize) -> (Floodgate, std::path::PathBuf) {
    let fg = Floodgate::with_config(&rules(n, "10/s"), &["--watch-interval", "0"]);
    let path = fg.dir().join("floodgate.toml");
    (fg, path)
}

#[tokio::test]
async fn a_reload_of_50_000_rules_lands_while_healthz_answers() {
    let (fg, path) = start(50_000);
    let c = client();
    write_atomically(&path, &rules(50_000, "20/s"));
    fg.signal("HUP");
    let mut answered_during = 0;
    let mut landed = false;
    // Bounded: 2,400 rounds of at most 5 s (the client's own time-out) and 50 ms.
    for _ in 0..2_400 {
        let health = c
            .get(fg.url("/healthz"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect("/healthz answers during the reload");
        assert_eq!(health.status(), 200);
        if metric(&c, &fg, "floodgate_config_reloads_total{result=\"ok\"}").await >= Some(1.0) {
            landed = true;
            break;
        }
        answered_during += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(landed, "the reload did not land");
    assert!(
        answered_during > 0,
        "/healthz was never asked while the reload ran"
    );
    let logs = fg.logs();
    assert!(logs.contains("configuration reloaded"), "no reload logged");
}

#[tokio::test]
async fn sigterm_during_a_reload_ends_the_process() {
    let (mut fg, path) = start(50_000);
    let c = client();
    write_atomically(&path, &rules(50_000, "30/s"));
    fg.signal("HUP");
    // The process still answers, then is asked to stop while the reload (seconds of parsing
    // 50,000 rules) runs.
    let health = c.get(fg.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    fg.signal("TERM");
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let status = fg.wait();
        let _ = done.send((status, fg.logs()));
    });
    let (status, logs) = exited
        .recv_timeout(Duration::from_secs(60))
        .expect("the process ended within a minute of SIGTERM");
    assert!(
        status.success(),
        "{status:?}\n{}",
        &logs[logs.len().saturating_sub(2_000)..]
    );
    assert!(logs.contains("SIGTERM received"));
}
