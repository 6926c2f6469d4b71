//! Hot reload: on SIGHUP, and whenever the config file's contents change.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::Signal;
use tokio::sync::watch;

use crate::state::AppState;

/// Reloads the configuration on SIGHUP (always) and when the file's contents differ from the
/// last contents tried (every `interval`; zero disables polling). `last_text` is the text of the
/// configuration in force at start. Without a config file there is nothing to reload: SIGHUP is
/// logged and ignored.
pub(super) async fn watch(
    state: Arc<AppState>,
    mut hup: Signal,
    mut last_text: Option<String>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let poll = !interval.is_zero();
    let mut tick = tokio::time::interval(if poll {
        interval
    } else {
        Duration::from_secs(3600)
    });
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = hup.recv() => true,
            _ = tick.tick() => false,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        if !forced && !poll {
            continue;
        }
        let Some(path) = state.config_path().cloned() else {
            if forced {
                tracing::info!("SIGHUP: running the embedded default, nothing to reload");
            }
            continue;
        };
        let file = path.display().to_string();
        // Reading is blocking I/O, but of small files; a blocking task keeps it off the
        // request workers anyway. A directory (YAML, one domain per file) is read whole.
        let read = tokio::task::spawn_blocking(move || crate::config::read_sources(&path)).await;
        let (sources, text) = match read {
            Ok(Ok(sources)) => {
                let text = fingerprint(&sources);
                (sources, text)
            }
            Ok(Err(e)) => {
                if forced || last_text.is_some() {
                    metrics::counter!("floodgate_config_reloads_total", "result" => "error")
                        .increment(1);
                    tracing::error!(file, error = %e, "cannot read the configuration; the previous one stays in force");
                }
                // Count a missing file once, not every second.
                last_text = None;
                continue;
            }
            Err(_) => continue,
        };
        if !forced && last_text.as_deref() == Some(text.as_str()) {
            continue;
        }
        if forced {
            tracing::info!(file, "SIGHUP: reloading the configuration");
        } else {
            tracing::info!(file, "configuration file changed: reloading");
        }
        // Parsing, validating and comparing 100,000 rules takes a while: on a blocking thread,
        // so that no request worker waits for it, and given up on at shutdown (the process
        // does not wait for it either: see `run`).
        let reload = {
            let state = Arc::clone(&state);
            tokio::task::spawn_blocking(move || {
                let _ = state.reload_from_sources(&file, &sources);
            })
        };
        tokio::select! {
            _ = reload => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        last_text = Some(text);
    }
}

/// The text a reload compares to see whether the configuration changed: the one file's text,
/// or every file's name and text.
pub(super) fn fingerprint(sources: &[(String, String)]) -> String {
    match sources {
        [(_, text)] => text.clone(),
        _ => sources
            .iter()
            .map(|(name, text)| format!("{name}\0{text}\0"))
            .collect(),
    }
}
