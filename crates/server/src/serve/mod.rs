//! `floodgate serve`: the rate-limit service.
//!
//! One process, one store ([`floodgate_store::MemoryStore`] or Redis), rules from a TOML file
//! (or the embedded default), and:
//! - the decision API (`POST /v1/check`, `POST /v1/peek`), the admin API (`/v1/keys/...`),
//!   forward-auth for Traefik, Caddy and nginx (`/v1/forward-auth`), `/metrics`, `/healthz`
//!   and `/readyz` on `--listen` (see [`crate::http`]);
//! - with `--upstream URL`, a streaming reverse proxy on `--listen` that applies the rules to
//!   every request (see [`crate::proxy`]); the API then moves to `--admin-listen`.
//!
//! Reload: on SIGHUP and whenever the config file's contents change (checked every second). A
//! valid file replaces the rules atomically; rules whose name, algorithm and quota are
//! unchanged keep their counters. An invalid file is logged and counted
//! (`floodgate_config_reloads_total{result="error"}`) and the old rules keep serving.
//! Shutdown: on SIGTERM or SIGINT `/readyz` turns 503; the listeners close at once (new
//! connections are refused), or after `--shutdown-delay` of still serving so load balancers can
//! notice; then in-flight requests finish (up to `--drain-timeout`).

pub(crate) mod answers;
mod args;
pub(crate) mod backlog;
pub(crate) mod connections;
pub(crate) mod envoy_env;
pub(crate) mod fd_limit;
pub(crate) mod idle_body;
mod leases;
pub(crate) mod listener;
mod logging;
mod recorder;
mod reload;
pub(crate) mod secret;
mod store;
mod store_per_second;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use floodgate_core::{Clock, ManualClock, SystemClock};
use floodgate_store::Store as _;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{self, Config};
use crate::state::AppState;
pub(crate) use args::ServeArgs;
use args::{LogFormat, DEFAULT_ADMIN_LISTEN, DEFAULT_LISTEN};
use reload::fingerprint;

/// Runs `floodgate serve` until SIGTERM/SIGINT.
///
/// # Errors
/// An invalid configuration (every problem, with file, line and field), an address that cannot
/// be bound, or a failure to install the metrics recorder or signal handlers.
pub(crate) fn run(mut args: ServeArgs) -> anyhow::Result<ExitCode> {
    envoy_env::apply(&mut args)?;
    logging::init(
        matches!(args.log_format, LogFormat::Json),
        args.log_filter.as_deref().unwrap_or("info"),
    );
    envoy_env::log_start(&args);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let code = runtime.block_on(serve(args));
    // A reload still parsing on a blocking thread is abandoned, not awaited: its outcome is
    // of no use to a process that is leaving.
    runtime.shutdown_timeout(SHUTDOWN_BLOCKING_WAIT);
    code
}

/// How long an ending process waits for work on blocking threads (a reload in progress).
const SHUTDOWN_BLOCKING_WAIT: Duration = Duration::from_secs(1);

/// Reads the configuration named by `--config`, or the embedded default, with its text (for
/// change detection).
fn initial_config(args: &ServeArgs) -> anyhow::Result<(Config, Option<String>)> {
    match &args.config {
        None => Ok((config::embedded_default(), None)),
        Some(path) => {
            let file = path.display().to_string();
            let sources = config::read_sources(path).map_err(|e| anyhow::anyhow!("{e}"))?;
            let config = config::parse_sources(&file, &sources, &args.envoy)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok((config, Some(fingerprint(&sources))))
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let (mut config, text) = initial_config(&args)?;
    envoy_env::adjust_config(&args, &mut config);
    // Signal handlers go in before anything listens: a SIGTERM or SIGHUP that arrives once we
    // are reachable must be handled, not kill the process with the default action.
    let signals = Signals::install()?;
    let prometheus = recorder::install()?;
    tokio::spawn(logging::summaries());

    let (clock, manual_clock) = clock(args.manual_clock);
    let store = store::build_store(
        &config.store,
        args.store.as_deref(),
        &clock,
        manual_clock.is_some(),
    )
    .await?;

    let upstream = match &args.upstream {
        Some(text) => {
            Some(config::parse_upstream(text).map_err(|e| anyhow::anyhow!("--upstream: {e}"))?)
        }
        None => config.server.upstream.clone(),
    };
    let listen = args
        .listen
        .or(config.server.listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default address"));

    // The open-file limit first: the connection cap is derived from it.
    let limits = config.server.limits.clone();
    let fd = fd_limit::raise_nofile_limit();
    let upstream_fds = if upstream.is_some() {
        limits.upstream_max_connections
    } else {
        0
    };
    let cap = fd_limit::connection_cap(limits.max_connections, fd, upstream_fds)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    tracing::info!(
        max_connections = cap,
        header_read_timeout_ms = millis(limits.header_read_timeout),
        idle_timeout_ms = millis(limits.idle_timeout),
        body_idle_timeout_ms = millis(limits.body_idle_timeout),
        "connection limits"
    );
    let connections = connections::Connections::new(cap);
    let timeouts = listener::HttpTimeouts::from_limits(&limits);

    let ui = config.server.ui && !args.no_ui;
    // Opt-in: the busiest denied keys, fed by the limiter.
    let denied_keys = (ui && config.server.ui_denied_keys > 0).then(|| {
        Arc::new(crate::ui::denied_keys::DeniedKeys::new(
            config.server.ui_denied_keys,
        ))
    });
    let state = AppState::new(
        config,
        args.config.clone(),
        args.admin_token.clone(),
        store,
        clock,
        manual_clock,
        prometheus,
        upstream.clone(),
    );
    let state = configure(state, &args, ui, denied_keys).await;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let listening = Listening {
        state: &state,
        connections: &connections,
        timeouts,
        shutdown: &shutdown_rx,
    };
    let servers = listening.spawn(&args, listen, upstream.as_ref()).await?;
    tracing::info!(
        rules = state.config().rules.len(),
        file = %state.config().file,
        proxy = upstream.is_some(),
        ui = state.ui.is_some(),
        "floodgate serving"
    );
    config::describe::log_rules(&state.config());

    let background = spawn_background(&state, signals.hup, text, &args, &shutdown_rx);

    let code = shut_down(
        &state,
        &args,
        signals.term,
        signals.int,
        shutdown_tx,
        servers,
    )
    .await;
    // Drained: what this process's quota leases did not spend goes back to the store.
    state.limiter.return_leases().await;
    for task in background {
        task.abort();
    }
    Ok(code)
}

/// The tasks that run beside the listeners until shutdown: the reload watcher, the store's
/// housekeeping, the quota leases' keeper, the shared secret's refresh and the page's sampler.
fn spawn_background(
    state: &Arc<AppState>,
    hup: tokio::signal::unix::Signal,
    text: Option<String>,
    args: &ServeArgs,
    shutdown_rx: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut background = vec![
        tokio::spawn(reload::watch(
            Arc::clone(state),
            hup,
            text,
            args.watch_interval,
            shutdown_rx.clone(),
        )),
        tokio::spawn(store::housekeeping(Arc::clone(state), shutdown_rx.clone())),
        tokio::spawn(leases::keep(Arc::clone(state), shutdown_rx.clone())),
    ];
    background.extend(secret::spawn_refresh(state, shutdown_rx));
    if let Some(live) = &state.ui {
        background.push(tokio::spawn(crate::ui::live::sample(
            Arc::clone(state),
            Arc::clone(live),
            shutdown_rx.clone(),
        )));
    }
    background
}

/// The system clock, or with `--manual-clock START_US` (tests only) a manual clock, also
/// returned for `POST /v1/debug/clock/advance`.
fn clock(manual_start: Option<u64>) -> (Arc<dyn Clock>, Option<ManualClock>) {
    match manual_start {
        Some(start) => {
            tracing::warn!(
                start_us = start,
                "TEST ONLY: running on a manual clock; POST /v1/debug/clock/advance is enabled"
            );
            let m = ManualClock::new(start);
            (Arc::new(m.clone()), Some(m))
        }
        None => (Arc::new(SystemClock), None),
    }
}

/// The settings the command line, the reservation secret, the web page (`ui`, with the
/// busiest `denied_keys` when asked) and the delay mode add to a new [`AppState`]; with a secret to share through a store that does
/// not answer yet, a task that retries every second.
async fn configure(
    mut state: AppState,
    args: &ServeArgs,
    ui: bool,
    denied_keys: Option<Arc<crate::ui::denied_keys::DeniedKeys>>,
) -> Arc<AppState> {
    state.bench_baseline = args.bench_baseline;
    state.api_token_override = args.api_token.clone().filter(|t| !t.is_empty());
    state.envoy_flags = args.envoy.clone();
    state.envoy_env = args.envoy_env.as_deref().cloned().map(Arc::new);
    if let Some(secret) = args.reservation_secret.as_deref().filter(|s| !s.is_empty()) {
        state.reservations =
            crate::http::settle::Signer::new(Some(secret), state.reservations.ttl());
    }
    let mut share_secret_later = false;
    if !state.store().is_shared() {
        // The memory store's claims are this process's: its tokens settle only here.
        state.reservations = state.reservations.clone().bound_to_this_process();
    }
    if state.reservations.source() == crate::http::settle::SecretSource::Process {
        if state.store().is_shared() {
            // Every process on one store signs with one secret, shared through it.
            state.reservations = crate::http::settle::Signer::shared(state.reservations.ttl());
            share_secret_later = !secret::share_reservation_secret(&state, false).await;
        } else {
            tracing::info!(
                "no [server] reservation_secret (or FLOODGATE_RESERVATION_SECRET): reservation \
                 tokens are signed with a random secret of this process (the memory store is \
                 one process's too), so they settle only here and not after a restart"
            );
        }
    }
    if let Some(keys) = &denied_keys {
        state.limiter = state.limiter.clone().with_denial_observer(keys.clone());
    }
    // The delay mode: its bound is read once at start, as the rest of `[server]`; on the
    // test-only manual clock a held request waits until that clock passes its slot.
    state.limiter = state
        .limiter
        .clone()
        .with_max_delayed(state.config_now().server.max_delayed);
    if let Some(manual) = &state.manual_clock {
        state.limiter = state
            .limiter
            .clone()
            .with_delay_clock(Arc::new(manual.clone()))
            .with_lease_clock(Arc::new(manual.clone()));
    }
    state.ui = ui.then(|| Arc::new(crate::ui::live::Live::new(denied_keys)));
    let state = Arc::new(state);
    if share_secret_later {
        // Until the store answers, reservations and settles are a 503 naming the cause.
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            while !secret::share_reservation_secret(&state, true).await {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    state
}

/// What every listener shares.
struct Listening<'a> {
    state: &'a Arc<AppState>,
    connections: &'a Arc<connections::Connections>,
    timeouts: listener::HttpTimeouts,
    shutdown: &'a watch::Receiver<bool>,
}

/// A listener's task.
type Server = tokio::task::JoinHandle<std::io::Result<()>>;

impl Listening<'_> {
    /// Binds and serves the API on `listen` (or, with an upstream, the proxy there and the API
    /// on `--admin-listen`) and gRPC when asked, printing each address on stdout.
    async fn spawn(
        &self,
        args: &ServeArgs,
        listen: SocketAddr,
        upstream: Option<&http::Uri>,
    ) -> anyhow::Result<Vec<Server>> {
        let mut servers = Vec::new();
        match upstream {
            None => {
                let listener = bind(listen)?;
                println!("floodgate: listening on {} (API)", listener.local_addr()?);
                let api = crate::http::router(Arc::clone(self.state));
                let router = envoy_env::router(args, self.state, api);
                servers.push(self.http(listener, router, listener::Bodies::Api));
            }
            Some(up) => {
                let listener = bind(listen)?;
                let admin_addr = args.admin_listen.unwrap_or_else(|| {
                    DEFAULT_ADMIN_LISTEN.parse().expect("valid default address")
                });
                // Binding the same address twice would only say "Address already in use".
                if admin_addr == listen && listen.port() != 0 {
                    anyhow::bail!(
                        "--listen and --admin-listen name the same address ({listen}): the \
                         proxy and the API need one each"
                    );
                }
                let admin = bind(admin_addr)?;
                println!(
                    "floodgate: listening on {} (proxy to {up})",
                    listener.local_addr()?
                );
                println!("floodgate: listening on {} (API)", admin.local_addr()?);
                let proxy = crate::proxy::router(Arc::clone(self.state));
                servers.push(self.http(listener, proxy, listener::Bodies::Streamed));
                let api = crate::http::router(Arc::clone(self.state));
                servers.push(self.http(admin, api, listener::Bodies::Api));
            }
        }
        if let Some(addr) = args.grpc_listen.or(self.state.config().server.grpc_listen) {
            let listener = bind(addr)?;
            println!("floodgate: listening on {} (gRPC)", listener.local_addr()?);
            servers.push(crate::grpc::spawn(
                listener,
                Arc::clone(self.state),
                Arc::clone(self.connections),
                self.shutdown.clone(),
            )?);
        }
        servers.extend(
            envoy_env::spawn_listeners(
                args,
                self.state,
                self.connections,
                self.timeouts,
                self.shutdown,
            )
            .await?,
        );
        Ok(servers)
    }

    fn http(
        &self,
        listener: TcpListener,
        router: axum::Router,
        bodies: listener::Bodies,
    ) -> Server {
        listener::spawn_http(
            listener,
            router,
            Arc::clone(self.connections),
            self.timeouts,
            bodies,
            self.shutdown.clone(),
        )
    }
}

/// Waits for SIGTERM or SIGINT, keeps serving `--shutdown-delay` with `/readyz` answering 503
/// (a second signal ends the wait), then closes the listeners and drains in-flight requests
/// for up to `--drain-timeout`.
async fn shut_down(
    state: &AppState,
    args: &ServeArgs,
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    shutdown_tx: watch::Sender<bool>,
    servers: Vec<Server>,
) -> ExitCode {
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    state.shutting_down.store(true, Ordering::SeqCst);
    if !args.shutdown_delay.is_zero() {
        // Load balancers poll /readyz: give them time to see the 503 and stop sending before
        // the listeners close. A second signal means "now".
        tracing::info!(
            shutdown_delay_ms = millis(args.shutdown_delay),
            "shutting down: /readyz answers 503; still serving until the delay ends or a second \
             SIGTERM/SIGINT"
        );
        tokio::select! {
            () = tokio::time::sleep(args.shutdown_delay) => {}
            _ = term.recv() => tracing::info!("second SIGTERM: closing the listeners now"),
            _ = int.recv() => tracing::info!("second SIGINT: closing the listeners now"),
        }
    }
    tracing::info!(
        drain_timeout_ms = millis(args.drain_timeout),
        "shutting down: listeners closed, draining in-flight requests"
    );
    let _ = shutdown_tx.send(true);
    let drain = async {
        for server in servers {
            if let Ok(Err(e)) = server.await {
                tracing::error!(error = %e, "server error");
            }
        }
    };
    match tokio::time::timeout(args.drain_timeout, drain).await {
        Ok(()) => {
            tracing::info!("drained; bye");
            ExitCode::SUCCESS
        }
        Err(_) => {
            tracing::warn!("drain timeout reached; closing remaining connections");
            ExitCode::SUCCESS
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    listener::listen(addr).with_context(|| format!("cannot listen on {addr}"))
}

/// The signals `serve` handles, registered up front.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            hup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::args::parse_duration;
    use super::*;

    #[test]
    fn durations_are_seconds_or_counts_with_units() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1 fortnight")
            .unwrap_err()
            .contains("e.g. 1s"));
        assert!(parse_duration("-1").is_err());
    }
}
