//! `floodgate serve --envoy-ratelimit-env` (also when the binary is called as `ratelimit`,
//! the name of envoyproxy/ratelimit's binary, `/bin/ratelimit` in its image): envoyproxy/
//! ratelimit's environment ([`crate::config::envoy_env`]) turned into what `serve` runs:
//! the runtime directory as `--config` (watched like any configuration), the HTTP listener on
//! `HOST:PORT` with `/json` and `/healthcheck` beside Floodgate's API, gRPC on
//! `GRPC_HOST:GRPC_PORT`, the debug listener on `DEBUG_HOST:DEBUG_PORT`, Prometheus on
//! `PROMETHEUS_ADDR` when `USE_PROMETHEUS`, and the Redis store of `REDIS_*`.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;

use super::args::{LogFormat, ServeArgs};
use super::connections::Connections;
use super::listener::{self, HttpTimeouts};
use crate::config::envoy_env::{self, EnvoyEnv};
use crate::config::Config;
use crate::state::AppState;

/// `true` when the program was started under envoyproxy/ratelimit's binary name.
pub(crate) fn called_as_ratelimit(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "ratelimit")
}

/// Reads the environment into `args` (with `--envoy-ratelimit-env`; a no-op without).
///
/// # Errors
/// Every variable Floodgate cannot honour, named with its value.
pub(super) fn apply(args: &mut ServeArgs) -> anyhow::Result<()> {
    if !args.envoy_ratelimit_env {
        return Ok(());
    }
    let env = envoy_env::from_process_env()?;
    args.config = Some(env.config_dir.clone());
    args.listen = Some(env.http);
    args.grpc_listen = Some(env.grpc);
    if env.log_json {
        args.log_format = LogFormat::Json;
    }
    args.log_filter = Some(env.log_filter.clone());
    envoy_env::set_ignore_dot_files(env.ignore_dot_files);
    env.service.apply(&mut args.envoy);
    args.envoy_env = Some(Box::new(env));
    Ok(())
}

/// Logs what the environment asked for, once logging is set up.
pub(super) fn log_start(args: &ServeArgs) {
    let Some(env) = &args.envoy_env else { return };
    tracing::info!(
        config_dir = %env.config_dir.display(),
        http = %env.http,
        grpc = %env.grpc,
        grpc_tls = env.grpc_tls.is_some(),
        grpc_mutual_tls = env.grpc_tls.as_ref().is_some_and(|t| t.client_ca_file.is_some()),
        debug = %env.debug,
        prometheus = ?env.prometheus,
        redis = %shown_target(&env.redis.target),
        redis_per_second = ?env.redis.per_second.as_ref().map(|r| shown_target(&r.target)),
        shadow_mode = env.service.shadow_mode,
        merge_domain_config = env.service.merge_domain_config,
        response_dynamic_metadata = env.service.response_dynamic_metadata,
        "envoyproxy/ratelimit environment mode"
    );
    for note in &env.notes {
        tracing::info!("{note}");
    }
}

/// The Redis target for the log, without passwords (`REDIS_AUTH`, `REDIS_SENTINEL_AUTH`
/// are in its URLs): `redis://user:***@host`, `redis+unix:///path?pass=***`.
fn shown_target(target: &floodgate_store::redis::RedisTarget) -> String {
    use floodgate_store::redis::RedisTarget;
    let hide = |url: &String| -> String {
        let mut out = url.clone();
        if let Some((scheme, rest)) = url.split_once("://") {
            if let Some((userinfo, host)) = rest.split_once('@') {
                let user = userinfo.split_once(':').map_or("", |(u, _)| u);
                out = format!("{scheme}://{user}:***@{host}");
            }
        }
        if let Some((path, query)) = out.clone().split_once('?') {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some(("pass", _)) => "pass=***".to_string(),
                    _ => kv.to_string(),
                })
                .collect();
            out = format!("{path}?{}", query.join("&"));
        }
        out
    };
    match target {
        RedisTarget::Standalone(url) => hide(url),
        RedisTarget::Cluster(nodes) => {
            format!(
                "cluster [{}]",
                nodes.iter().map(hide).collect::<Vec<_>>().join(", ")
            )
        }
        RedisTarget::Sentinel {
            sentinels,
            master_name,
        } => format!(
            "sentinel {master_name:?} via [{}]",
            sentinels.iter().map(hide).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The settings of the environment that live in the configuration (the store, the gRPC
/// connection age and TLS; [`EnvoyEnv::apply_to`]); reloads apply them again (`AppState`'s
/// `envoy_env`), so a reload of the runtime directory changes none of them.
pub(super) fn adjust_config(args: &ServeArgs, config: &mut Config) {
    let Some(env) = &args.envoy_env else { return };
    env.apply_to(config);
}

/// The HTTP listener's router: `base` with `/json` and `/healthcheck` in this mode.
pub(super) fn router(args: &ServeArgs, state: &Arc<AppState>, base: axum::Router) -> axum::Router {
    if args.envoy_env.is_some() {
        base.merge(crate::http::envoy_json::routes(Arc::clone(state)))
    } else {
        base
    }
}

/// The debug and Prometheus listeners of this mode (none without it).
///
/// # Errors
/// An address that cannot be bound.
pub(super) async fn spawn_listeners(
    args: &ServeArgs,
    state: &Arc<AppState>,
    connections: &Arc<Connections>,
    timeouts: HttpTimeouts,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<std::io::Result<()>>>> {
    let Some(env) = &args.envoy_env else {
        return Ok(Vec::new());
    };
    let EnvoyEnv {
        debug, prometheus, ..
    } = &**env;
    let mut servers = Vec::new();
    let mut serve = |listener: tokio::net::TcpListener, router: axum::Router| {
        servers.push(listener::spawn_http(
            listener,
            router,
            Arc::clone(connections),
            timeouts,
            listener::Bodies::Api,
            shutdown.clone(),
        ));
    };
    let debug_listener = bind(*debug, "DEBUG_HOST:DEBUG_PORT")?;
    println!(
        "floodgate: listening on {} (debug)",
        debug_listener.local_addr()?
    );
    serve(
        debug_listener,
        crate::http::envoy_json::debug(Arc::clone(state)),
    );
    if let Some((addr, path)) = prometheus {
        let listener = bind(*addr, "PROMETHEUS_ADDR")?;
        println!(
            "floodgate: listening on {} (Prometheus {path})",
            listener.local_addr()?
        );
        serve(
            listener,
            crate::http::envoy_json::prometheus(Arc::clone(state), path),
        );
    }
    Ok(servers)
}

fn bind(addr: std::net::SocketAddr, variables: &str) -> anyhow::Result<tokio::net::TcpListener> {
    super::listener::listen(addr).with_context(|| format!("cannot listen on {addr} ({variables})"))
}

#[cfg(test)]
mod tests {
    use floodgate_store::redis::RedisTarget;

    use super::shown_target;

    #[test]
    fn the_logged_redis_target_shows_no_password() {
        let shown = |t| shown_target(&t);
        assert_eq!(
            shown(RedisTarget::Standalone(
                "redis://user:p%40ss@redis:6379".into()
            )),
            "redis://user:***@redis:6379"
        );
        assert_eq!(
            shown(RedisTarget::Standalone(
                "redis+unix:///run/r.sock?user=u&pass=pw".into()
            )),
            "redis+unix:///run/r.sock?user=u&pass=***"
        );
        assert_eq!(
            shown(RedisTarget::Cluster(vec![
                "rediss://:secret@10.0.0.1:7000".into()
            ])),
            "cluster [rediss://:***@10.0.0.1:7000]"
        );
        let sentinel = shown(RedisTarget::Sentinel {
            sentinels: vec!["redis://:s3@10.0.0.1:26379".into()],
            master_name: "mymaster".into(),
        });
        assert_eq!(
            sentinel,
            "sentinel \"mymaster\" via [redis://:***@10.0.0.1:26379]"
        );
        assert_eq!(
            shown(RedisTarget::Standalone("redis://redis:6379".into())),
            "redis://redis:6379"
        );
    }
}
